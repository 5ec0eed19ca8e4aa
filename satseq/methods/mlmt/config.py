"""The ``mlmt`` config section (the clipped update's settings come from the common ``ppo`` section)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from satseq.config.section import Section, turn_prompt


class MLMTRoleConfig(Section):
    """One MLMT role (``mlmt.coach`` / ``mlmt.solver``): its initial model and whether it trains."""

    path: Optional[str] = Field(None, description="this role's initial model (None = model.path)")
    trainable: bool = Field(True, description="update this role (the seed's HLT / LLT)")


class MLMTScheduleConfig(Section):
    """``mlmt.schedule``: how coach and solver updates alternate."""

    coach: int = Field(1, ge=1, description="coach steps per cycle (the seed's high-level update frequency)")
    solver: int = Field(1, ge=1, description="solver steps per cycle; the solver trains first; coach=solver=1 trains both every step")


class MLMTConfig(Section):
    """``mlmt``: MLMT-RL's coach and solver, the coach reward, the schedule and weight sharing."""

    solver: MLMTRoleConfig = Field(default_factory=MLMTRoleConfig, description="the low level: solves (turn 1) and refines (turn 3)")
    coach: MLMTRoleConfig = Field(default_factory=MLMTRoleConfig, description="the high level: writes feedback (turn 2)")
    schedule: MLMTScheduleConfig = Field(default_factory=MLMTScheduleConfig, description="alternating schedule {coach: a, solver: b}")
    share: Literal["none", "weights", "lora"] = Field(
        "none", description="none: one model per role; weights: one model plays both roles (role prompts); lora: one base, one LoRA adapter per role")
    lambda_conf: float = Field(0.0, description="weight of the solver's confidence conf(y^) in the coach reward (default 0: 0.1 did not help in measured runs, docs/mlmt.md)")
    lambda_dep: float = Field(0.1, description="weight of the context dependence dep(g) in the coach reward")
    dep_max: float = Field(1.0, ge=0.0, description="dep(g) is clipped to [0, dep_max] (nats per token)")
    coach_prompt: Optional[str] = Field(
        None, description="chat models: the coach turn's prompt as exact text, with {problem} and {attempt} (e.g. a few-shot feedback for a small model); None = the chat instruction")
    refine_prompt: Optional[str] = Field(
        None, description="chat models: the refine turn's prompt as exact text, with {problem}, {attempt} and {feedback}; the dependence term's prompt without the feedback is it with {feedback} empty; None = the chat instruction")

    @field_validator("coach_prompt", "refine_prompt")
    @classmethod
    def _placeholders(cls, t: Optional[str], info) -> Optional[str]:
        return turn_prompt(t, ("{problem}", "{attempt}") + (("{feedback}",) if info.field_name == "refine_prompt" else ()))
