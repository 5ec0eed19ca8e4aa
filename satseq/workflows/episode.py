"""Episodes and turns: the typed records every workflow produces and every trainer consumes."""
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


@dataclass
class Turn:
    """One agent's action inside an episode."""

    role: str                  # the agent (role) that acted
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
        return [t for t in self.turns if t.role == role]
