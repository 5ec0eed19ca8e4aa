"""Per-turn rewards for multi-turn episodes.

Relay (SAT-Seq spec): agent k's own correctness r_k ∈ {0,1} times ``reward.own``; the last turn
also gets the team reward R = correctness of the vote times ``reward.team``. A custom reward
function ``(prompt, response, answer) -> float`` replaces correctness for the per-turn part.
"""
from __future__ import annotations

from typing import Callable

from satseq.rewards.grade import is_equivalent
from satseq.records import Episode

CustomReward = Callable[[str, str, str], float]


def grade_episodes(episodes: list[Episode]) -> None:
    """Mark each turn's and each episode's correctness against the reference answer."""
    for ep in episodes:
        gold = ep.problem.answer
        for t in ep.turns:
            t.correct = t.answer is not None and is_equivalent(t.answer, gold)
        ep.prediction_correct = ep.prediction is not None and is_equivalent(ep.prediction, gold)


def assign_relay_rewards(episodes: list[Episode], *, own: float = 1.0, team: float = 1.0,
                         custom: CustomReward | None = None) -> None:
    grade_episodes(episodes)
    for ep in episodes:
        for t in ep.turns:
            base = custom(t.prompt_text, t.text, ep.problem.answer) if custom else float(t.correct)
            t.reward = own * float(base)
        ep.turns[-1].reward += team * float(ep.prediction_correct)


def assign_outcome_rewards(episodes: list[Episode], *, custom: CustomReward | None = None) -> None:
    """Single-turn: the reward is correctness (or the custom function) of the only turn."""
    grade_episodes(episodes)
    for ep in episodes:
        t = ep.turns[-1]
        t.reward = float(custom(t.prompt_text, t.text, ep.problem.answer)) if custom else float(t.correct)
