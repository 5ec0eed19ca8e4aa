"""The ``pag`` config section (the clipped update's settings come from the common ``ppo`` section)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from satseq.config.section import Section, turn_prompt


class PAGConfig(Section):
    """``pag``: PAG's solve, verify and revise turns, and their update (GRPO or A*-PO)."""

    max_policy_turns: int = Field(2, ge=1, description="most policy turns per episode (solve + revisions)")
    alpha: float = Field(1.0, description="revision bonus alpha * (R(y_t) - R(y_{t-1})) on policy turns t >= 2")
    verify_last: bool = Field(True, description="also verify the last policy turn (a verifier training turn; changes nothing in the episode)")
    adv_group_by: Literal["group_role_turn", "group_role", "role"] = Field(
        "role", description="baseline group of a turn's advantage: role = the whole batch per role (the paper's RoleAdvNorm; measured best), or per prompt group x role (x turn)")
    verifier_balance: bool = Field(
        False, description="verifier turns: the unbiased gradient of balanced accuracy (leave-one-out baseline per class of the judged attempt, right / wrong, classes weighted equally, no std scaling; no verifier gradient from a group with one class); grpo update only")
    update: Literal["grpo", "apo"] = Field(
        "grpo", description="grpo: clipped policy gradient (ppo section); apo: A*-PO regression of every turn (apo section, V* from stage 1)")
    collapse_threshold: float = Field(0.5, ge=0.0, le=1.0, description="warn when the answer change ratio falls below this")
    verify_prompt: Optional[str] = Field(
        None, description="chat models: the verify turn's prompt as exact text, with {problem} and {attempt} (e.g. a few-shot check ending in 'Check:'; the verdict is read from 'The answer is correct/wrong'); None = the chat instruction")
    revise_prompt: Optional[str] = Field(
        None, description="chat models: the revise turn's prompt as exact text, with {problem}, {attempt} and {verification}; None = the chat instruction")

    @field_validator("verify_prompt", "revise_prompt")
    @classmethod
    def _placeholders(cls, t: Optional[str], info) -> Optional[str]:
        return turn_prompt(t, ("{problem}", "{attempt}")
                           + (("{verification}",) if info.field_name == "revise_prompt" else ()))
