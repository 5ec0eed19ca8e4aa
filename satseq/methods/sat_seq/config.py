"""The ``sat_seq`` config section (the seed's ``config/sat_seq.yaml`` keys) and its agents."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from satseq.config.section import KLEstimator, Section  # noqa: F401


class AgentConfig(Section):
    """One ``sat_seq.agents`` entry: an agent's name and starting model (None = ``model.path``)."""

    name: str = Field(..., min_length=1, description="agent name (unique; used in checkpoint and metric names)")
    path: Optional[str] = Field(None, description="this agent's initial model (None or empty = model.path)")
    trainable: bool = Field(True, description="update this agent (False = frozen teammate)")


def _default_agents() -> list[AgentConfig]:
    return [AgentConfig(name=f"agent_{k}") for k in (1, 2, 3)]


class CertificateConfig(Section):
    """``sat_seq.certificate``: the PAC lower bound on the team's vote accuracy, from a fresh batch."""

    delta: float = Field(0.05, gt=0.0, lt=1.0, description="failure probability of each certificate (a lower bound holds with probability >= 1 - delta; an improvement uses delta/2 per side)")
    prompts: int = Field(256, ge=0, description="prompts in each certificate batch, drawn uniformly with replacement from the pool (0 = no certificate)")
    samples: int = Field(1, ge=1, description="relay episodes per certificate prompt (the per-prompt mean is one i.i.d. unit)")
    every: int = Field(0, ge=0, description="also certify every N stages (0 = only before the first stage and after the last); each costs prompts x samples relay episodes")
    pool: Literal["eval", "train"] = Field("eval", description="prompt distribution the certificate is about: data.eval (held out) or data.train")


class SatSeqConfig(Section):
    """``sat_seq``: the agents, their order, update settings (lr, clipping, truncated IS) and the certificate."""

    epsilon: float = Field(0.2, gt=0.0, description="PPO clipping parameter epsilon")
    A_clip: float = Field(5.0, gt=0.0, description="advantage clipping threshold")
    group_size: int = Field(4, ge=1, description="responses per prompt for aggregation")
    max_backtracks: int = Field(5, ge=0, description="maximum backtracking iterations per update (step shrunk by backtrack_alpha each)")
    backtrack_alpha: float = Field(0.5, gt=0.0, lt=1.0, description="a failed KL check tries theta_cur + alpha^j * step, j = 1..max_backtracks (beta grows 1.5x per try)")
    agents: list[AgentConfig] = Field(default_factory=_default_agents, description="the K agents, in turn order")
    scheduler: Literal["fixed", "random", "round_robin", "greedy"] = Field(
        "random", description="order in which agents are updated within a stage")
    ppo_epochs: int = Field(1, ge=1, description="passes over the stage's rollouts per agent update")
    importance_weight: bool = Field(True, description="weight agent i's loss by the truncated IS factor c = min(1, prod over the agents already updated this stage of pi_new/pi_cur) (SAT-Seq); false = c = 1 (ablation)")
    mini_batch_size: int = Field(64, ge=1, description="sequences per optimizer step")
    ratio: Literal["seq_mean", "token", "product"] = Field(
        "seq_mean", description="importance ratio form: mean log-ratio per sequence, per token, or sequence product")
    lr: float = Field(3e-5, gt=0.0, description="learning rate (AdamW)")
    certificate: CertificateConfig = Field(default_factory=CertificateConfig, description="PAC lower bound on the joint policy's vote accuracy and episode reward, from a fresh batch")
    show_previous: Literal["answers", "responses", "none"] = Field(
        "answers", description="what later agents see of earlier turns: extracted answers, full responses, or none (the problem alone: for a model too small to use a hint, docs/results.md SmolLM2)")
    previous_budget: int = Field(200, ge=0, description="characters of each earlier response shown")
    previous_template: Optional[str] = Field(
        None, description="the prompt template of a later turn, one shown earlier answers: a custom template with {problem} and {previous} (data.prompt_template's syntax); null = data.prompt_template for every turn. Lets the first agent keep its one-pass prompt while later agents see worked examples of a hand-off (docs/sat_seq.md, SmolLM2)")
    kl_penalty: KLEstimator = Field("k3", description="KL estimator inside the loss")
    policy_loss: str = Field("sat_seq", description="clipped policy-gradient loss from the registry (satseq.algos; ratio options apply to sat_seq)")

    @field_validator("previous_template")
    @classmethod
    def _check_previous_template(cls, t: Optional[str]) -> Optional[str]:
        if t is not None and ("{problem}" not in t or "{previous}" not in t):
            raise ValueError("must contain {problem} and {previous} (where the earlier answers go)")
        return t

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
