"""Typed, validated training configuration.

Every section is a pydantic v2 model with ``extra="forbid"`` (an unknown key is an error naming the
key), and every field has a type, a default and a one-line description. The seed's
``config/sat_seq.yaml`` (sections ``algorithm`` and ``sat_seq``) loads into :class:`TrainConfig`
unchanged; every other section is optional and falls back to the defaults below.

Load from YAML with overrides through :func:`satseq.config.load_config`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

KLEstimator = Literal["exact", "k1", "k3"]


class _Section(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are re-validated."""

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        validate_default=True,
        coerce_numbers_to_str=True,  # `run_name: 2024` is the string "2024", not an error
    )


# --------------------------------------------------------------------------------------- model
class LoraConfig(_Section):
    enabled: Union[Literal["auto"], bool] = Field(
        "auto", description="auto: LoRA for HF models, full fine-tuning for the embedded tiny model")
    r: int = Field(16, ge=1, description="LoRA rank")
    alpha: int = Field(32, ge=1, description="LoRA scaling alpha (scale = alpha / r)")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="dropout on the LoRA input")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="names of the linear modules that get adapters")


class ModelConfig(_Section):
    path: str = Field(
        "embedded", description='"embedded" = built-in tiny warm-start model; else a HF model dir or hub id')
    gguf_file: Optional[str] = Field(None, description="GGUF file inside `path` to load (dequantized) instead of safetensors")
    tokenizer: Optional[str] = Field(None, description="tokenizer dir or hub id (None = the model's own)")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="parameter dtype")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapter settings")
    chat_template: Literal["auto", "never", "always"] = Field(
        "auto", description="wrap prompts in the tokenizer's chat template (auto: if it has one)")


# ---------------------------------------------------------------------------------------- data
class DataConfig(_Section):
    train: str = Field("embedded", description="training set: embedded synthetic task, a file path, or a dataset name")
    eval: str = Field("embedded", description="evaluation set: embedded synthetic task, a file path, or a dataset name")
    train_size: int = Field(4096, ge=1, description="number of training problems used (or generated)")
    eval_size: int = Field(200, ge=1, description="number of evaluation problems used (or generated)")
    data_dir: Optional[str] = Field(None, description="local directory searched for named datasets (None = default cache)")


# ------------------------------------------------------------------------------------- rollout
MLMT_MAX_NEW_TOKENS = 96  # the embedded coach's two-stage demonstration is ~70 characters


class RolloutConfig(_Section):
    max_new_tokens: int = Field(48, ge=1, description="maximum tokens generated per agent turn (unset: 96 for method=mlmt)")
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature (0 = greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    stop: list[str] = Field(default_factory=list, description="extra stop strings ending a response")
    batch_size: int = Field(128, ge=1, description="generation micro-batch (sequences per forward)")
    engine: Literal["hf", "vllm"] = Field("hf", description="generation backend")


# ----------------------------------------------------------------------------------- algorithm
class KLCtrlConfig(_Section):
    kl_coef: float = Field(0.001, ge=0.0, description="initial KL penalty coefficient beta")
    target_kl: float = Field(0.05, gt=0.0, description="target KL divergence threshold delta")
    quantile: float = Field(0.99, gt=0.0, lt=1.0, description="quantile level for the KL check (1 - alpha), 0<q<1")
    estimator: KLEstimator = Field("exact", description="per-state KL used by the quantile check")


class AlgorithmConfig(_Section):
    gamma: float = Field(0.99, ge=0.0, le=1.0, description="discount factor for return computation")
    lam: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda")
    kl_ctrl: KLCtrlConfig = Field(default_factory=KLCtrlConfig, description="quantile-KL trust-region control")


# ------------------------------------------------------------------------------------- sat_seq
class AgentConfig(_Section):
    name: str = Field(..., min_length=1, description="agent name (unique; used in checkpoint and metric names)")
    path: Optional[str] = Field(None, description="this agent's initial model (None or empty = model.path)")
    trainable: bool = Field(True, description="update this agent (False = frozen teammate)")


def _default_agents() -> list[AgentConfig]:
    return [AgentConfig(name=f"agent_{k}") for k in (1, 2, 3)]


class CertificateConfig(_Section):
    delta: float = Field(0.05, gt=0.0, lt=1.0, description="failure probability of the improvement certificate")
    w_max: float = Field(2.0, gt=0.0, description="truncation level of the importance weights in the certificate")


class SatSeqConfig(_Section):
    epsilon: float = Field(0.2, gt=0.0, description="PPO clipping parameter epsilon")
    A_clip: float = Field(5.0, gt=0.0, description="advantage clipping threshold")
    group_size: int = Field(4, ge=1, description="responses per prompt for aggregation")
    max_backtracks: int = Field(5, ge=0, description="maximum backtracking iterations per update")
    agents: list[AgentConfig] = Field(default_factory=_default_agents, description="the K agents, in turn order")
    scheduler: Literal["fixed", "random", "round_robin", "greedy"] = Field(
        "random", description="order in which agents are updated within a stage")
    ppo_epochs: int = Field(1, ge=1, description="passes over the stage's rollouts per agent update")
    mini_batch_size: int = Field(64, ge=1, description="sequences per optimizer step")
    ratio: Literal["seq_mean", "token", "product"] = Field(
        "seq_mean", description="importance ratio form: mean log-ratio per sequence, per token, or sequence product")
    lr: float = Field(3e-5, gt=0.0, description="learning rate (AdamW)")
    certificate: CertificateConfig = Field(default_factory=CertificateConfig, description="improvement certificate settings")
    show_previous: Literal["answers", "responses"] = Field(
        "answers", description="what later agents see of earlier turns: extracted answers or full responses")
    previous_budget: int = Field(200, ge=0, description="characters of each earlier response shown")
    kl_penalty: KLEstimator = Field("k3", description="KL estimator inside the loss")

    @field_validator("agents")
    @classmethod
    def _check_agents(cls, agents: list[AgentConfig]) -> list[AgentConfig]:
        if not agents:
            raise ValueError("at least one agent is required")
        seen: set[str] = set()
        for a in agents:
            if a.name in seen:
                raise ValueError(f"agent names must be unique ({a.name!r} repeated)")
            seen.add(a.name)
        return agents


# ----------------------------------------------------------------------------------------- apo
class APOConfig(_Section):
    n_samples: int = Field(8, ge=1, description="stage 1: reference samples per training prompt for V*")
    beta1: float = Field(0.5, description="stage 1: V* temperature (0 = mean reward, < 0 = V* is 0)")
    beta2: float = Field(1e-3, gt=0.0, description="stage 2: scale of log(pi/pi_ref) regressed onto r - V*")
    entropy_coef: float = Field(0.001, ge=0.0, description="stage 2: entropy bonus coefficient")
    filter_unsolvable: bool = Field(False, description="drop training prompts whose N reference samples all fail")
    vstar_cache: Optional[str] = Field(None, description="V* cache file (None = <run_dir>/vstar.json; made by `satseq vstar` or on first use)")
    mini_batch_size: int = Field(64, ge=1, description="sequences per optimizer step")
    epochs: int = Field(1, ge=1, description="stage 2: passes over each batch (the regression is valid off-policy: its targets do not depend on pi_theta)")
    lr: float = Field(1e-6, gt=0.0, description="learning rate (AdamW; the official default for 1.5B-7B models)")


# ---------------------------------------------------------------------------------------- grpo
class GRPOConfig(_Section):
    group_size: int = Field(4, ge=1, description="responses sampled per prompt")
    epsilon_low: float = Field(0.2, ge=0.0, description="lower clip range of the ratio (1 - eps_low)")
    epsilon_high: float = Field(0.2, ge=0.0, description="upper clip range of the ratio (1 + eps_high)")
    kl_coef: float = Field(0.0, ge=0.0, description="KL-to-reference penalty coefficient (0 = none)")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = Field(
        "seq-mean-token-mean", description="how token losses are aggregated into the batch loss")
    adv_estimator: str = Field("grpo", description="advantage estimator name")
    ppo_epochs: int = Field(1, ge=1, description="passes over the rollouts per update")
    mini_batch_size: int = Field(64, ge=1, description="sequences per optimizer step")
    lr: float = Field(3e-5, gt=0.0, description="learning rate (AdamW)")


# ----------------------------------------------------------------------------------------- pag
class PAGConfig(_Section):
    max_policy_turns: int = Field(2, ge=1, description="most policy turns per episode (solve + revisions)")
    alpha: float = Field(1.0, description="revision bonus alpha * (R(y_t) - R(y_{t-1})) on policy turns t >= 2")
    verify_last: bool = Field(True, description="also verify the last policy turn (a verifier training turn; changes nothing in the episode)")
    adv_group_by: Literal["group_role_turn", "group_role", "role"] = Field(
        "role", description="baseline group of a turn's advantage: role = the whole batch per role (the paper's RoleAdvNorm; measured best), or per prompt group x role (x turn)")
    update: Literal["grpo", "apo"] = Field(
        "grpo", description="grpo: clipped policy gradient (grpo section); apo: A*-PO regression of every turn (apo section, V* from stage 1)")
    collapse_threshold: float = Field(0.5, ge=0.0, le=1.0, description="warn when the answer change ratio falls below this")


# ---------------------------------------------------------------------------------------- mlmt
class MLMTRoleConfig(_Section):
    path: Optional[str] = Field(None, description="this role's initial model (None = model.path)")
    trainable: bool = Field(True, description="update this role (the seed's HLT / LLT)")


class MLMTScheduleConfig(_Section):
    coach: int = Field(1, ge=1, description="coach steps per cycle (the seed's high-level update frequency)")
    solver: int = Field(1, ge=1, description="solver steps per cycle; the solver trains first; coach=solver=1 trains both every step")


class MLMTConfig(_Section):
    solver: MLMTRoleConfig = Field(default_factory=MLMTRoleConfig, description="the low level: solves (turn 1) and refines (turn 3)")
    coach: MLMTRoleConfig = Field(default_factory=MLMTRoleConfig, description="the high level: writes feedback (turn 2)")
    schedule: MLMTScheduleConfig = Field(default_factory=MLMTScheduleConfig, description="alternating schedule {coach: a, solver: b}")
    share: Literal["none", "weights", "lora"] = Field(
        "none", description="none: one model per role; weights: one model plays both roles (role prompts); lora: one base, one LoRA adapter per role")
    lambda_conf: float = Field(0.0, description="weight of the solver's confidence conf(y^) in the coach reward (default 0: 0.1 did not help in measured runs, docs/mlmt.md)")
    lambda_dep: float = Field(0.1, description="weight of the context dependence dep(g) in the coach reward")
    dep_max: float = Field(1.0, ge=0.0, description="dep(g) is clipped to [0, dep_max] (nats per token)")


# -------------------------------------------------------------------------------------- reward
class RewardConfig(_Section):
    own: float = Field(1.0, description="weight of the agent's own answer correctness")
    team: float = Field(1.0, description="weight of the team's vote correctness")
    custom: Optional[str] = Field(None, description='custom reward function "module:function" (None = built-in)')
    timeout: float = Field(5.0, gt=0.0, description="seconds allowed per answer verification")


# ------------------------------------------------------------------------------------- trainer
class TrainerConfig(_Section):
    num_stages: int = Field(40, ge=1, description="training stages (one rollout batch + agent updates each)")
    train_batch_size: int = Field(8, ge=1, description="prompts per stage")
    save_every: int = Field(10, ge=0, description="write HF checkpoints every N stages and at the end (0 = end only)")
    eval_every: int = Field(0, ge=0, description="evaluate on the held-out set (data.eval) every N stages, sampled, one episode per problem (0 = never)")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    grad_clip: float = Field(1.0, ge=0.0, description="max gradient norm (0 = no clipping)")
    progress: bool = Field(True, description="show progress bars (only on a terminal)")
    export_pt: bool = Field(True, description="also write the seed's agent_k_stage_N.pt state dicts")
    tensorboard: bool = Field(True, description="log metrics to TensorBoard (if installed)")
    wandb: Union[Literal["auto"], bool] = Field(
        False, description="log metrics to Weights & Biases (auto: when wandb is installed and logged in)")
    wandb_project: str = Field("satseq", description="W&B project name")
    mlflow: bool = Field(False, description="log metrics to MLflow (if installed)")
    ray_address: Optional[str] = Field(
        None, description="Ray cluster to connect to (submit_mlmt.sbatch sets it); training still runs in the driver process")


# ------------------------------------------------------------------------------------ top level
class TrainConfig(_Section):
    run_name: str = Field("sat_seq_dapo", min_length=1,
                          description="run name; the run directory is output_dir/run_name (unset: sat_seq_dapo for SAT-Seq, else the method's name)")
    output_dir: str = Field("outputs", description="parent directory of run directories")
    seed: int = Field(0, description="global random seed")
    method: Literal["sat_seq", "grpo", "apo", "pag", "mlmt"] = Field("sat_seq", description="training method")
    device: str = Field("auto", description='torch device ("auto" = cuda if available, else cpu)')
    threads: int = Field(0, ge=0, description="torch CPU threads (0 = all cores)")
    resume: bool = Field(True, description="continue from the run dir's last trainer state if present")
    model: ModelConfig = Field(default_factory=ModelConfig, description="base model")
    data: DataConfig = Field(default_factory=DataConfig, description="datasets")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="generation")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="returns and KL control")
    sat_seq: SatSeqConfig = Field(default_factory=SatSeqConfig, description="SAT-Seq method")
    grpo: GRPOConfig = Field(default_factory=GRPOConfig, description="GRPO baseline")
    apo: APOConfig = Field(default_factory=APOConfig, description="A*-PO (offline V*, optimal-advantage regression)")
    pag: PAGConfig = Field(default_factory=PAGConfig, description="PAG (policy as generative verifier); PPO settings from grpo")
    mlmt: MLMTConfig = Field(default_factory=MLMTConfig, description="MLMT-RL (coach and solver); PPO settings from grpo")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="reward shaping")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="training loop, checkpoints, logging")

    @model_validator(mode="after")
    def _method_defaults(self) -> "TrainConfig":
        if "run_name" not in self.model_fields_set and self.method != "sat_seq":
            self.__dict__["run_name"] = self.method  # plain set: no re-validation loop
        if self.method == "mlmt" and "max_new_tokens" not in self.rollout.model_fields_set:
            self.rollout.__dict__["max_new_tokens"] = MLMT_MAX_NEW_TOKENS
        return self

    @property
    def run_dir(self) -> Path:
        """``output_dir / run_name``."""
        return Path(self.output_dir) / self.run_name

    def agent_path(self, agent: AgentConfig | int | str) -> str:
        """The model an agent starts from: its own ``path``, or ``model.path`` when that is None/empty.

        ``agent`` may be an :class:`AgentConfig`, an index into ``sat_seq.agents`` or an agent name.
        """
        if isinstance(agent, int):
            agent = self.sat_seq.agents[agent]
        elif isinstance(agent, str):
            matches = [a for a in self.sat_seq.agents if a.name == agent]
            if not matches:
                raise KeyError(agent)
            agent = matches[0]
        return agent.path or self.model.path


__all__ = [
    "AgentConfig", "AlgorithmConfig", "CertificateConfig", "DataConfig", "GRPOConfig", "KLCtrlConfig",
    "LoraConfig", "MLMTConfig", "MLMTRoleConfig", "MLMTScheduleConfig", "ModelConfig", "PAGConfig", "RewardConfig", "RolloutConfig", "SatSeqConfig", "TrainConfig",
    "TrainerConfig",
]
