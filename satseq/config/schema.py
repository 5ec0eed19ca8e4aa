"""Typed, validated training configuration.

Every section is a pydantic v2 model with ``extra="forbid"`` (an unknown key is an error naming the
key), and every field has a type, a default and a one-line description. The seed's
``config/sat_seq.yaml`` (sections ``algorithm`` and ``sat_seq``) loads into :class:`TrainConfig`
unchanged; every other section is optional and falls back to the defaults below.

The common sections (model, data, rollout, algorithm, ppo, reward, trainer) are defined here; ``ppo``
holds the clipped policy-gradient update that several methods share (each lists it in its
``Method.update_sections``). A method's own section is declared by the method
(``Method.config_section = ("<key>", <Section class>)``, the class in
``satseq/methods/<name>/config.py``) and mounted through the registry: :func:`train_config_model`
builds the whole model with pydantic's ``create_model`` after :func:`satseq.registry.discover`, and
builds it again when a method registered later (a test file, a user's package) brings a new section.
This module names no method. ``method`` names a registered method (default: the one registered as
the default); the loader (:func:`satseq.config.load_config`) checks it, applies the method's defaults
to keys the user left unset, and lets the method check its settings, all before anything runs.

Load from YAML with overrides through :func:`satseq.config.load_config`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import Field, create_model, field_validator
from pydantic.fields import FieldInfo


from satseq.config.section import KLEstimator, Section

#: the named prompt templates of ``data.prompt_template`` (or a custom one containing ``{problem}``),
#: rendered by :func:`satseq.workflows.prompts.render_problem`
PROMPT_TEMPLATES = ("boxed", "chat", "raw")

#: marks a field that only weights the update and never changes what is generated
#: (``Field(..., json_schema_extra=UPDATE_ONLY)``): runs differing only in such fields sample alike, so
#: ``satseq compare`` evaluates their shared warm start once (:func:`update_only_keys`)
UPDATE_ONLY = {"update_only": True}


def update_only_keys(section: type) -> tuple[str, ...]:
    """The fields of a config section marked :data:`UPDATE_ONLY`, in declaration order."""
    return tuple(name for name, f in section.model_fields.items()
                 if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("update_only"))


# --------------------------------------------------------------------------------------- model
class LoraConfig(Section):
    """``model.lora``: the LoRA adapter each agent trains (one shared frozen base per process)."""

    enabled: Union[Literal["auto"], bool] = Field(
        "auto", description="auto: LoRA for HF models, full fine-tuning for the embedded tiny model")
    r: int = Field(16, ge=1, description="LoRA rank")
    alpha: int = Field(32, ge=1, description="LoRA scaling alpha (scale = alpha / r)")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="dropout on the LoRA input")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="names of the linear modules that get adapters")


class ModelConfig(Section):
    """``model``: the base model every agent starts from, its dtype, chat template and LoRA settings."""

    path: str = Field(
        "embedded", description='"embedded" = built-in tiny warm-start model; else a HF model dir or hub id')
    gguf_file: Optional[str] = Field(None, description="GGUF file inside `path` to load (dequantized) instead of safetensors")
    tokenizer: Optional[str] = Field(None, description="tokenizer dir or hub id (None = the model's own)")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="parameter dtype")
    quantization: Literal["none", "int8", "nf4"] = Field(
        "none", description="load the frozen base quantized by bitsandbytes (BitsAndBytesConfig): int8 = LLM.int8 (load_in_8bit), nf4 = 4-bit NormalFloat (load_in_4bit, QLoRA); only the LoRA adapters train, in model.dtype. Needs LoRA (model.lora.enabled), a trainer.strategy other than fsdp2 and satseq's engine (rollout.engine=hf or auto); int8 rollouts are weighted by rollout.is_correction=auto (satseq/models/quantize.py; memory and time: docs/results_speed.md)")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapter settings")
    chat_template: Literal["auto", "never", "always"] = Field(
        "auto", description="wrap prompts in the tokenizer's chat template (auto: if it has one)")


# ---------------------------------------------------------------------------------------- data
class DataConfig(Section):
    """``data``: training and held-out sets (embedded task, a file path or a benchmark name) and the prompt template."""

    train: str = Field("embedded", description="training set: embedded synthetic task, a file path, a dataset name, or a reasoning-gym generator reasoning_gym:<name>[?key=value&...] graded by its own scorer (satseq/data/reasoning_gym.py; docs/reasoning_gym.md)")
    eval: str = Field("embedded", description="evaluation set: embedded synthetic task, a file path, a dataset name, or a reasoning-gym generator reasoning_gym:<name>[?key=value&...] (its held-out seed stream)")
    train_size: int = Field(4096, ge=1, description="number of training problems used (or generated)")
    eval_size: int = Field(200, ge=1, description="number of evaluation problems used (or generated)")
    data_dir: Optional[str] = Field(None, description="local directory searched for named datasets (None = default cache)")
    prompt_template: str = Field(
        "boxed", description='how a problem becomes the first prompt of a real model: boxed = the problem + "Please reason step by step, and put your final answer within \\boxed{}." in the chat template (model.chat_template decides); chat = the problem alone as the user message of the tokenizer\'s chat template; raw = the problem text exactly, no template, no instruction; or a custom template containing {problem} (used exactly when model.chat_template is never), and optionally {previous}, where a relay\'s later turns show the earlier answers inline (else they follow the problem). The embedded task\'s fixed-length prompts ignore it')
    embedded_task: str = Field(
        "default", description="what `embedded` means for data.train/data.eval/model.path: default = the run's environment's own task and warm start; chain = the three-stage relay task where a later agent builds on an earlier one's answer (satseq/data/relay_chain.py); or the name of an environment with its own warm start (`satseq sft --task` lists them: self_verify, coach; pag and mlmt are older names of those two): that environment's task and warm start in this run's environment (GRPO in env single beside PAG or MLMT at equal samples; satseq/envs/tasks.py)")


    @field_validator("embedded_task")
    @classmethod
    def _check_embedded_task(cls, name: str) -> str:
        from satseq.envs.tasks import embedded_task_names

        known = embedded_task_names()
        if name not in known:
            raise ValueError(f"expected one of {', '.join(known)}, got {name!r}")
        return name

    @field_validator("train", "eval")
    @classmethod
    def _check_reasoning_gym(cls, source: str) -> str:
        from satseq.data.reasoning_gym import is_spec, parse_spec
        from satseq.errors import ConfigError

        if is_spec(source):  # reasoning_gym:<name>?...: the generator and its settings, checked up front
            try:
                parse_spec(source, key="")
            except ConfigError as e:
                raise ValueError(str(e)) from None
        return source

    @field_validator("prompt_template")
    @classmethod
    def _check_template(cls, t: str) -> str:
        if t not in PROMPT_TEMPLATES and "{problem}" not in t:
            raise ValueError(f"expected one of {', '.join(PROMPT_TEMPLATES)} or a template containing "
                             f"{{problem}}, got {t!r}")
        return t


# ------------------------------------------------------------------------------------- rollout
class VllmConfig(Section):
    """``rollout.vllm``: how the vLLM engine is started (``rollout.engine=vllm``; docs/vllm.md). The one
    vLLM settings class: :class:`satseq.rollout.vllm_engine.VLLMEngine` takes this section as it is."""

    max_model_len: Optional[int] = Field(None, ge=16, description="the engine's context in tokens (prompt + rollout.max_new_tokens); None = the model's own")
    kv_cache_gb: int = Field(1, ge=1, description="CPU: the KV cache vLLM reserves, in whole GiB (VLLM_CPU_KVCACHE_SPACE, which vLLM reads as an integer)")
    gpu_memory_utilization: float = Field(0.5, gt=0.0, le=1.0, description="GPU: the share of device memory vLLM takes for weights and KV cache; the trainer needs the rest")
    enforce_eager: bool = Field(True, description="true: no graph compilation (starts in seconds); false: vLLM compiles the model (about 30 s on CPU, once) for faster decoding")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs one engine spans (tensor parallel)")
    sleep: bool = Field(False, description="GPU: put the engine to sleep (weights offloaded, KV cache freed) between rollout and update, and wake it for the next rollout; ignored on CPU")
    max_loras: Optional[int] = Field(None, ge=1, description="LoRA adapters one batch may mix; None = the number of LoRA agents, at least 4 and at most 8")
    max_lora_rank: Optional[int] = Field(None, ge=1, description="the largest LoRA rank the engine accepts; None = the agents' rank (model.lora.r). On CPU vLLM's LoRA kernels gather each token's adapter at this rank, so their cost grows with it")
    block_size: Optional[int] = Field(None, ge=16, description="tokens per KV-cache block; None = 32 on CPU (vLLM's CPU default of 128 decoded SmolLM2's ~120-token relay turns 1.5x slower, and long rollouts no faster: docs/vllm.md), vLLM's own on GPU. vLLM's CPU attention takes multiples of 32")
    lora_mode: Literal["auto", "adapter", "merged"] = Field("auto", description="how LoRA agents are served: adapter = one base engine, each agent a per-request adapter (vLLM's LoRA kernels); merged = a full-weight engine loaded with the acting agent's merged weights W + (alpha/r)·B·A whenever the acting agent or its weights change (one reload per agent turn); auto = merged on CPU, where vLLM's LoRA kernels are several times slower than the base model (docs/results.md), adapter on GPU")


class RolloutConfig(Section):
    """``rollout``: sampling settings of every agent turn (tokens, temperature, stops, batch, fused decode)."""

    max_new_tokens: int = Field(48, ge=1, description="maximum tokens generated per agent turn (a method or an embedded task may set its own default: 96 for mlmt, 64 for data.embedded_task=chain)")
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature (0 = greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    stop: list[str] = Field(default_factory=list, description="extra stop strings ending a response")
    batch_size: int = Field(128, ge=1, description="generation micro-batch (sequences per forward)")
    engine: Literal["auto", "hf", "vllm"] = Field("auto", description="generation backend: auto = the fastest installed engine measured on this machine and model before the first stage (cached per machine and model shape, recorded in run_info.json, kept by a resumed run; satseq/rollout/choice.py); hf = satseq's own decode loop (no install); vllm = vLLM in-process, weights synced after every update (make setup-vllm on CPU, pip install 'satseq[vllm]' on GPU; docs/vllm.md)")
    fused: bool = Field(True, description="Llama-family models (Llama, Qwen2, SmolLM2) decode through satseq's fused forward (fused weights, preallocated KV cache, packed GEMMs on x86 CPUs; satseq/rollout/fused_decode.py); false = the model's own forward")
    vllm: VllmConfig = Field(default_factory=VllmConfig, description="the vLLM engine's settings (rollout.engine=vllm)")
    is_correction: Literal["auto", "token", "sequence", "off"] = Field("auto", description="truncated importance sampling of the engine-vs-trainer mismatch: every advantage is weighted by min(is_cap, pi_trainer/pi_engine), per token or per sequence (product over its tokens); auto = token with rollout.engine=vllm, off with hf (whose fp32 log-probs are the trainer's); SAT-Seq's own c_t is unchanged", json_schema_extra=UPDATE_ONLY)
    is_cap: float = Field(2.0, ge=1.0, description="the truncation C of the engine importance weight min(C, pi_trainer/pi_engine)", json_schema_extra=UPDATE_ONLY)
    decode_gemm: Literal["auto", "mkl", "onednn", "torch"] = Field("auto", description="CPU: the kernel of satseq's fused decode GEMMs (rollout.engine=hf): mkl = MKL's packed GEMM (bit-identical to F.linear), onednn = oneDNN's packed linear (equal up to rounding), torch = F.linear; auto = measured with rollout.engine and rollout.dtype (a kernel other than the default, MKL's where the build has it, only where at least 1.1x faster), recorded in run_info.json and kept by a resumed run. A kernel the build lacks for the rollout's dtype decodes through F.linear")
    prefix_cache: bool = Field(True, description="interactive episodes (tool_use, textarena, gym_text, trl_env, code_answer) on satseq's engine: a turn that continues a conversation prefills only its new tokens, the earlier turns' keys and values kept for the rollout (satseq/rollout/prefix_cache.py; equal to full prefill up to floating-point order, the first turn bit-identical; the fused decode and the model's own forward alike; decoders with sliding-window layers prefill whole). Single-turn and relay workflows never use it; vLLM's prefix caching is always on")
    prefix_cache_gb: float = Field(4.0, gt=0.0, description="memory for the keys and values rollout.prefix_cache keeps; past it the oldest conversations are dropped (their next turn prefills whole)")
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description="precision of the rollout: auto = measured with rollout.engine (bfloat16 only where it is at least 1.1x faster than float32 and the trainer is float32; else model.dtype). The trainer re-scores every rollout in model.dtype; a bf16 rollout samples from a slightly different policy, so rollout.is_correction=auto weights it by the truncated ratio (the gap is logged as <agent>/logprob_gap). Which precision is faster depends on the CPU (docs/results.md)")


# ----------------------------------------------------------------------------------- algorithm
class KLCtrlConfig(Section):
    """``algorithm.kl_ctrl``: the quantile-KL check on each proposed step, and what a failed check does.
    Read by the block-coordinate update of method=sat_seq only (its stage coordinator, local or in Ray
    actors); the simultaneous update, the shared policy and the clipped update of ``ppo`` have no
    such check and ignore it. It stays in the common ``algorithm`` section, where the seed's
    configs put it."""

    kl_coef: float = Field(0.001, ge=0.0, description="initial KL penalty coefficient beta of the proposal's KL term (method=sat_seq only; the clipped update's KL-to-reference coefficient is ppo.kl_coef)")
    target_kl: float = Field(0.05, gt=0.0, description="target KL divergence threshold delta")
    quantile: float = Field(0.99, gt=0.0, lt=1.0, description="quantile level for the KL check (1 - alpha), 0<q<1")
    estimator: KLEstimator = Field("exact", description="per-state KL used by the quantile check")
    statistic: Literal["quantile", "mean"] = Field("quantile", description="what the check compares with target_kl: the q-quantile of the per-state KL (SAT-Seq) or its mean (ablation)")
    on_fail: Literal["shrink", "beta"] = Field("shrink", description="after a failed check: shrink the step along the proposal, theta_cur + alpha^j * step, with beta x1.5 (SAT-Seq), or restore theta_cur and propose again with beta x1.5 only (ablation: beta growth alone)")
    check: bool = Field(True, description="false: accept every proposal as it is (ablation: SAT-Seq without its trust region; the KL is still measured and logged)")


class AlgorithmConfig(Section):
    """``algorithm``: discounting and the KL trust-region control."""

    gamma: float = Field(0.99, ge=0.0, le=1.0, description="discount factor for return computation")
    lam: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda")
    kl_ctrl: KLCtrlConfig = Field(default_factory=KLCtrlConfig, description="quantile-KL trust-region control of method=sat_seq's block-coordinate update (no other method reads it)")


# ----------------------------------------------------------------------------------------- ppo
class PPOConfig(Section):
    """``ppo``: the clipped policy-gradient update (:mod:`satseq.update.clipped_pg`) shared by the
    methods that list ``ppo`` in their ``update_sections``: GRPO and its presets, PAG (with
    ``pag.update=grpo``) and MLMT-RL (both roles). The per-token clipped surrogate
    ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` (or another registered clipped loss), its
    aggregation, the KL-to-reference penalty, the epochs, mini-batches and learning rate. GRPO's
    baseline presets (``grpo.loss``) fill the keys left unset; SAT-Seq, its simultaneous update and
    A*-PO keep their own update settings in their sections."""

    epsilon_low: float = Field(0.2, ge=0.0, description="lower clip range of the ratio (1 - eps_low)")
    epsilon_high: float = Field(0.2, ge=0.0, description="upper clip range of the ratio (1 + eps_high)")
    kl_coef: float = Field(0.0, ge=0.0, description="KL-to-reference penalty coefficient (k3, 0 = none; keeps a reference copy of the policy when > 0)")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = Field(
        "seq-mean-token-mean", description="how token losses are aggregated into the batch loss (verl's agg_loss; seq-mean-token-sum-norm divides by rollout.max_new_tokens, Dr. GRPO)")
    policy_loss: str = Field("ppo", description="clipped policy-gradient loss from the registry (satseq.algos: ppo, gspo, ...)")
    ppo_epochs: int = Field(1, ge=1, description="passes over the rollouts per update")
    mini_batch_size: int = Field(64, ge=1, description="sequences per optimizer step")
    lr: float = Field(3e-5, gt=0.0, description="learning rate (AdamW)")


# -------------------------------------------------------------------------------------- reward
class RewardConfig(Section):
    """``reward``: own and team reward weights, a custom reward (``custom`` / ``controller``), the grading timeout."""

    own: float = Field(1.0, description="weight of the agent's own answer correctness")
    team: float = Field(1.0, description="weight of the team's vote correctness")
    custom: Optional[str] = Field(None, description='custom reward function "module:function" (None = built-in)')
    timeout: float = Field(5.0, gt=0.0, description="seconds allowed per answer verification: math-verify runs in a worker process killed after it; an expiry grades 0 and counts in reward/timeouts (docs/grading.md)")
    controller: Optional[str] = Field(
        None, description='a RealController subclass "module:Class" whose _compute_reward(prompt, response, answer) gives each turn\'s reward (as reward.custom)')


# ------------------------------------------------------------------------------------- trainer
class ActorPlacement(Section):
    """One ``trainer.placement`` entry of ``trainer.backend=ray``: one Ray actor, the agents it hosts
    and the resources it reserves (docs/scale.md, "Placements")."""

    agents: list[str] = Field(..., min_length=1, description="the pool agents this actor hosts (LoRA: one shared base in the actor)")
    num_cpus: float = Field(1.0, ge=0.0, description="logical CPUs the actor reserves (also its torch threads when threads=0)")
    num_gpus: float = Field(0.0, ge=0.0, description="GPUs the actor reserves; fractional values share a GPU between actors (0.5: two per GPU)")
    resources: dict[str, float] = Field(default_factory=dict, description='custom Ray resources the actor needs, e.g. {"node_a": 1} to pin it to the node declaring node_a')


class TrainerConfig(Section):
    """``trainer``: stages, batch size, checkpoints, evaluation, logging, precision and the distributed backend."""

    num_stages: int = Field(40, ge=1, description="training stages (one rollout batch + agent updates each)")
    train_batch_size: int = Field(8, ge=1, description="prompts per stage")
    save_every: int = Field(10, ge=0, description="write HF checkpoints every N stages and at the end (0 = end only)")
    eval_every: int = Field(0, ge=0, description="evaluate on the held-out set (data.eval) every N stages, sampled, one episode per problem (0 = never)")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    grad_clip: float = Field(1.0, ge=0.0, description="max gradient norm (0 = no clipping)")
    release_memory: bool = Field(False, description="CPU, glibc: serve blocks >= 128 KiB from mmap so that freed activations go back to the OS (a SmolLM2 LoRA update peaked at 3.45 GB without, 1.4 GB with; satseq/utils/memory.py, docs/results.md)")
    autocast: Literal["off", "bfloat16"] = Field("off", description="run the trainer's decoder forward in bf16 (torch.autocast); parameters, optimizer state, the LM head and log-softmax stay fp32, and old/new log-probs come from the same forward (on-policy ratios exactly 1). Pays on GPUs and AMX CPUs; slower on CPUs without AMX (satseq/utils/precision.py)")
    gradient_checkpointing: bool = Field(False, description="recompute decoder-layer activations in backward instead of storing them (less memory, ~1 extra forward per update; docs/results.md, update memory). Grad passes then run every row's prompt: the shared-prefix forward needs the cache that transformers drops in checkpointed layers (docs/performance.md)")
    step_kl: bool = Field(False, description="log <agent>/kl_step_q99, kl_step_max, kl_step_mean: the per-token k3 KL between the policy before and after each stage's update on the stage's batch (satseq/update/step_kl.py). GRPO, PAG, MLMT and the simultaneous update pay one no-grad forward of the batch per updated agent; SAT-Seq logs it always (free, from its KL check); A*-PO does not log it. satseq compare turns it on")
    max_staleness: int = Field(0, ge=0, description="asynchronous rollouts: stage t trains on a batch generated by the weights after update t - s (the first s stages: the start), made by a rollout thread beside the trainer while it updates; deterministic, so a seed fixes the run and a resume continues it. 0 = the synchronous loop. With s > 0 rollout.is_correction=auto weights advantages by min(C, pi_trainer/pi_behaviour) per token; satseq's engine or vLLM (rollout.engine=auto is satseq's here); trainer.backend=local (a rollout thread beside the trainer) or ray (rollout actors beside the trainer's actors, trainer.rollout_placement), not torchrun (satseq/async_rollouts.py, docs/scale.md)")
    progress: bool = Field(True, description="show progress bars (only on a terminal)")
    export_pt: bool = Field(True, description="also write the seed's agent_k_stage_N.pt state dicts")
    tensorboard: bool = Field(True, description="log metrics to TensorBoard (if installed)")
    wandb: Union[Literal["auto"], bool] = Field(
        False, description="log metrics to Weights & Biases (auto: when wandb is installed and logged in)")
    wandb_project: str = Field("satseq", description="W&B project name")
    mlflow: bool = Field(False, description="log metrics to MLflow (if installed)")
    ray_address: Optional[str] = Field(
        None, description="Ray cluster to connect to (the Slurm scripts set it); with backend=ray and no address a local cluster is started; with backend=local the run only records the cluster and trains in its own process")
    backend: Literal["local", "ray"] = Field(
        "local", description="local: every agent in this process (needs no Ray); ray: each agent (or group of LoRA agents) in a Ray actor placed by trainer.placement, the driver stays the single controller; sat_seq and grpo only (docs/scale.md)")
    placement: list[ActorPlacement] = Field(
        default_factory=list, description="backend=ray: one entry per actor, the agents it hosts and the resources it reserves (empty: one actor per agent, 1 CPU each; docs/scale.md)")
    rollout_placement: list[ActorPlacement] = Field(
        default_factory=list, description="backend=ray with max_staleness > 0: the rollout actors the rollout thread generates with, one entry per actor as in trainer.placement (empty: the same entries as trainer.placement; docs/scale.md)")
    strategy: str = Field(
        "replicate", min_length=1, description="under torchrun, how each agent trains over the ranks: replicate (every rank holds the whole agent, gradients all-reduced; on one process the same as local) or fsdp2 (parameters, gradients and AdamW states sharded with torch's fully_shard, per decoder layer then the root; the trainer state through torch.distributed.checkpoint, resumable on another number of ranks; backend=local only); local = one process; or a strategy registered with satseq.registry.register_strategy (satseq/strategy.py, docs/scale.md)")
    fsdp_mixed_precision: Literal["off", "bf16"] = Field(
        "off", description="strategy=fsdp2 on CUDA: bf16 parameters in forward and backward, gradients reduced in fp32 (FSDP2's MixedPrecisionPolicy)")
    fsdp_cpu_offload: bool = Field(
        False, description="strategy=fsdp2 on CUDA: keep the sharded parameters, gradients and optimizer states in CPU memory (FSDP2's CPUOffloadPolicy)")
    pipeline_micro_batches: int = Field(
        1, ge=1, description="backend=ray: roll a stage out in this many micro-batches of prompts run concurrently, so agent k+1 works on micro-batch b while agent k works on b+1; the same episodes as 1 (per-episode streams; docs/scale.md)")


# ---------------------------------------------------------------------------------- environment
class EnvConfigBase(Section):
    """``env``: the environment a run trains in (what an episode is: its roles, turns and reward;
    satseq/envs/) and each registered environment's own settings, mounted at ``env.<key>`` by
    :func:`train_config_model` (``Environment.config_section``)."""

    name: Optional[str] = Field(None, min_length=1, description="the environment: a registered one (satseq/envs/: single, relay, self_verify, coach, or one registered with satseq.registry.register_env); None = the method's own (sat_seq, simultaneous, shared_policy: relay; grpo, apo: single; pag: self_verify; mlmt: coach)")
    max_turns: Optional[int] = Field(None, ge=1, description="turns per episode at most; an environment with a fixed protocol (single 1, coach 3, the relay one per seat) refuses another value; None = the environment's own")

    def __reduce__(self):
        """Pickled by content and restored into the receiving process's ``env`` model (built at run time
        from the environments registered there; a section of an environment it lacks is dropped). The
        sections of environments defined outside satseq (a test file, a user's module) travel only when
        this run is in that environment: a Ray actor need not import the module of every environment
        registered here."""
        state = self.__getstate__()
        foreign = {k for k, _, _, e in env_sections() if k in state["__dict__"]
                   and not type(e).__module__.startswith("satseq.") and e.name != self.name}
        if foreign:
            state = dict(state, __dict__={k: v for k, v in state["__dict__"].items() if k not in foreign},
                         __pydantic_fields_set__=set(state["__pydantic_fields_set__"]) - foreign)
        return _restore_env, (state,)


def _restore_env(state: dict) -> "EnvConfigBase":
    cls = env_config_model(env_sections())
    known = set(cls.model_fields)
    state = dict(state, __dict__={k: v for k, v in state["__dict__"].items() if k in known},
                 __pydantic_fields_set__=set(state["__pydantic_fields_set__"]) & known)
    obj = cls.__new__(cls)
    obj.__setstate__(state)
    for name, field in cls.model_fields.items():
        if name not in obj.__dict__:
            obj.__dict__[name] = field.get_default(call_default_factory=True)
    return obj


# ------------------------------------------------------------------------------------ top level
class TrainConfigBase(Section):
    """The common part of :class:`TrainConfig`: every key but the methods' sections."""

    run_name: str = Field("run", min_length=1,
                          description="run name; the run directory is output_dir/run_name (unset: the method's default, sat_seq_dapo for SAT-Seq, else the method's name)")
    output_dir: str = Field("outputs", description="parent directory of run directories")
    seed: int = Field(0, description="global random seed")
    method: str = Field("", min_length=1, description="training method: a registered method (satseq.methods: sat_seq, grpo, apo, pag, mlmt, ...)")
    device: str = Field("auto", description='torch device ("auto" = cuda if available, else cpu)')
    threads: int = Field(0, ge=0, description="torch CPU threads (0 = all cores)")
    resume: bool = Field(True, description="continue from the run dir's last trainer state if present")
    model: ModelConfig = Field(default_factory=ModelConfig, description="base model")
    data: DataConfig = Field(default_factory=DataConfig, description="datasets")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="generation")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="returns and KL control")
    ppo: PPOConfig = Field(default_factory=PPOConfig, description="the clipped policy-gradient update shared by several methods")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="reward shaping")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="training loop, checkpoints, logging")
    env: EnvConfigBase = Field(default_factory=EnvConfigBase, description="the environment and its settings")

    @property
    def run_dir(self) -> Path:
        """``output_dir / run_name``."""
        return Path(self.output_dir) / self.run_name

    def agent_path(self, agent: Any) -> str:
        """The model an agent starts from: its own path, or ``model.path`` when that is None/empty.

        ``agent`` is an index into the method's agents, an agent name, or an object with a ``name``
        (e.g. an ``AgentConfig``); the agents and their paths are the method's
        (:meth:`~satseq.methods.base.Method.agents`).
        """
        from satseq.registry import get_method

        spec = get_method(self.method).agents(self)
        if isinstance(agent, int):
            path = spec.paths[agent]
        else:
            name = agent if isinstance(agent, str) else agent.name
            if name not in spec.names:
                raise KeyError(name)
            path = spec.paths[spec.names.index(name)]
        return path or self.model.path

    def __reduce__(self):
        """Pickled by content and restored into the receiving process's model (the class is built at run
        time). The sections of methods defined outside satseq (a test file, a user's module) travel only
        when this run uses that method: a Ray actor or another process need not import the module of
        every method registered here."""
        state = self.__getstate__()
        foreign = {k for k, _, _, m in method_sections() if k in state["__dict__"]
                   and not type(m).__module__.startswith("satseq.") and m.name != self.method}
        if foreign:
            state = dict(state, __dict__={k: v for k, v in state["__dict__"].items() if k not in foreign},
                         __pydantic_fields_set__=set(state["__pydantic_fields_set__"]) - foreign)
        return _restore, (state,)


def _restore(state: dict) -> "TrainConfigBase":
    cls = train_config_model()
    obj = cls.__new__(cls)
    obj.__setstate__(state)
    for name, field in cls.model_fields.items():  # a section this process has and the sender left out
        if name not in obj.__dict__:
            obj.__dict__[name] = field.get_default(call_default_factory=True)
    return obj


def method_sections(builtin_only: bool = False) -> list[tuple[str, type, str, Any]]:
    """``(key, Section class, description, method)`` of every registered method's config section
    (``Method.config_section``), in registration order; a method sharing a section with the method
    it derives from (same key and class) adds nothing. ``builtin_only``: the methods of ``satseq.methods``."""
    from satseq.registry import METHODS, discover

    discover()
    out: dict[str, tuple[str, type, str, Any]] = {}
    for m in list(METHODS.values()):
        decl = getattr(m, "config_section", None)
        if not decl:
            continue
        if builtin_only and not type(m).__module__.startswith("satseq.methods."):
            continue
        key, cls, *rest = decl
        desc = rest[0] if rest else (cls.__doc__ or key).strip().splitlines()[0]
        if key in TrainConfigBase.model_fields:
            raise ValueError(f"method {m.name!r}: config section {key!r} is a common section")
        old = out.get(key)
        if old is not None:
            if old[1] is not cls:
                raise ValueError(f"method {m.name!r}: config section {key!r} is already {old[3].name!r}'s")
            continue
        out[key] = (key, cls, desc, m)
    return list(out.values())


def env_sections() -> list[tuple[str, type, str, Any]]:
    """``(key, Section class, description, environment)`` of every registered environment's own section
    (``Environment.config_section``), mounted at ``env.<key>``."""
    from satseq.registry import ENVS, discover_envs

    discover_envs()
    out: dict[str, tuple[str, type, str, Any]] = {}
    for e in list(ENVS.values()):
        decl = getattr(e, "config_section", None)
        if not decl:
            continue
        key, cls, *rest = decl
        desc = rest[0] if rest else (cls.__doc__ or key).strip().splitlines()[0]
        if key in EnvConfigBase.model_fields:
            raise ValueError(f"environment {e.name!r}: config section {key!r} is a common key of env")
        old = out.get(key)
        if old is not None and old[1] is not cls:
            raise ValueError(f"environment {e.name!r}: config section env.{key} is already {old[3].name!r}'s")
        out[key] = (key, cls, desc, e)
    return list(out.values())


def env_config_model(sections) -> type:
    """The ``env`` section's model: :class:`EnvConfigBase` plus each environment's own section."""
    if not sections:
        return EnvConfigBase
    fields = {k: (sec, Field(default_factory=sec, description=desc)) for k, sec, desc, _ in sections}
    cls = create_model("EnvConfig", __base__=EnvConfigBase, __module__=__name__, **fields)
    cls.__qualname__ = "EnvConfig"
    return cls


_built: dict[tuple, type] = {}


def train_config_model(builtin_only: bool = False) -> type[TrainConfigBase]:
    """The :class:`TrainConfig` model of the methods registered now: :class:`TrainConfigBase` plus
    each method's section (:func:`method_sections`; ``builtin_only``: only satseq's own methods', as
    docs/configuration.md lists them), ``method`` defaulting to the default method and ``run_name``
    to its run name. Built once per set of sections."""
    from satseq.registry import default_method

    sections = method_sections(builtin_only)
    envs = [s for s in env_sections() if not builtin_only or type(s[3]).__module__.startswith("satseq.envs.")]
    default = default_method()
    key = (tuple((k, cls) for k, cls, _, _ in sections), tuple((k, cls) for k, cls, _, _ in envs),
           default.name if default else "")
    cls = _built.get(key)
    if cls is None:
        fields: dict[str, Any] = {k: (sec, Field(default_factory=sec, description=desc)) for k, sec, desc, _ in sections}
        if envs:
            env_cls = env_config_model(envs)
            fields["env"] = (env_cls, FieldInfo.merge_field_infos(TrainConfigBase.model_fields["env"],
                                                                  default_factory=env_cls))
        if default is not None:
            base = TrainConfigBase.model_fields
            fields["method"] = (str, FieldInfo.merge_field_infos(base["method"], default=default.name))
            fields["run_name"] = (str, FieldInfo.merge_field_infos(base["run_name"], default=default.default_run_name))
        cls = create_model("TrainConfig", __base__=TrainConfigBase, __module__=__name__, **fields)
        cls.__qualname__ = "TrainConfig"
        cls.__doc__ = TrainConfig.__doc__
        if len(_built) > 8:
            _built.clear()
        _built[key] = cls
    return cls


class _CurrentModel(type):
    """Makes :class:`TrainConfig` stand for the model :func:`train_config_model` builds now."""

    def __call__(cls, *args, **kwargs):
        return train_config_model()(*args, **kwargs)

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(train_config_model(), name)

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, TrainConfigBase)

    def __subclasscheck__(cls, sub) -> bool:
        return isinstance(sub, type) and issubclass(sub, TrainConfigBase)


class TrainConfig(metaclass=_CurrentModel):
    """The whole run configuration: what ``satseq train CONFIG key=value ...`` and :func:`satseq.train` load and validate.

    The common sections (:class:`TrainConfigBase`) plus every registered method's section, built by
    :func:`train_config_model` (``TrainConfig(...)``, ``TrainConfig.model_validate(...)`` and
    ``isinstance(x, TrainConfig)`` use the model of the methods registered now).

    Every key, with its type, default and description: docs/configuration.md."""


__all__ = [
    "ActorPlacement", "AlgorithmConfig", "DataConfig", "EnvConfigBase", "KLCtrlConfig", "LoraConfig", "ModelConfig", "PPOConfig",
    "RewardConfig", "RolloutConfig", "TrainConfig", "TrainConfigBase", "TrainerConfig", "method_sections",
    "train_config_model",
]
