"""The plain records every layer shares: a :class:`Problem`, the :class:`Turn` s of an
:class:`Episode`. They import nothing from satseq, so every module may import them.

``Turn.role`` is the part the turn plays in its workflow; ``Turn.agent`` is the pool agent (the
parameters) that generated it:

=============== =============================== ===================================
workflow        role                            agent
=============== =============================== ===================================
``single``      the agent's name                that agent
``relay``       the agent's name (one per turn) that agent
``self_verify`` ``"policy"`` or ``"verifier"``  the one policy (plays both roles)
``coach``       ``"solver"`` or ``"coach"``     the agent that plays the role (one agent
                                                for both when weights are shared)
=============== =============================== ===================================

Rewards and metrics read ``role``; updates select the turns of the ``agent`` they train.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Problem:
    """One task instance: the text shown to the agents and the reference answer."""

    problem_id: Any
    problem: str
    answer: str
    meta: dict = field(default_factory=dict)
    source: str = field(default="", compare=False, repr=False)  # "file:line" it was read from, if any


@dataclass
class Turn:
    """One agent's action inside an episode."""

    role: str                  # the part played in the workflow (module docstring)
    index: int                 # position of the turn in the episode, from 0
    prompt_text: str
    prompt_ids: list[int]
    response_ids: list[int]
    behaviour_logprobs: list[float]
    text: str
    finish_reason: str
    answer: str | None = None  # extracted final answer, if any
    reward: float = 0.0        # this turn's reward (own correctness, plus team reward on the last turn)
    correct: bool = False
    info: dict = field(default_factory=dict)
    agent: str = ""            # the pool agent that generated the turn ("" = the role's name)

    def __post_init__(self) -> None:
        if not self.agent:
            self.agent = self.role

    @classmethod
    def from_generation(cls, gen, *, role: str, agent: str | None = None, index: int, prompt_text: str,
                        answer: str | None = None, info: dict | None = None) -> "Turn":
        """The turn recorded from one engine :class:`~satseq.rollout.types.Generation`."""
        return cls(role=role, agent=agent or role, index=index, prompt_text=prompt_text, prompt_ids=gen.prompt_ids,
                   response_ids=gen.response_ids, behaviour_logprobs=gen.logprobs, text=gen.text,
                   finish_reason=gen.finish_reason, answer=answer, info=dict(info or {}))


@dataclass
class Episode:
    """All turns taken on one problem by one rollout; ``group`` indexes the problem in the batch."""

    problem: Problem
    group: int
    turns: list[Turn] = field(default_factory=list)
    prediction: str | None = None     # the workflow's final answer (e.g. the majority vote)
    prediction_correct: bool = False
    info: dict = field(default_factory=dict)

    def turns_of(self, role: str) -> list[Turn]:
        """The turns that played ``role``."""
        return [t for t in self.turns if t.role == role]


@dataclass(frozen=True)
class Probe:
    """One validation item of a warm start: a behaviour forced by the first characters of its
    completion (``head``), and the answer the rest must reach (``kind`` names the behaviour)."""

    kind: str
    prompt: str
    head: str
    answer: str
