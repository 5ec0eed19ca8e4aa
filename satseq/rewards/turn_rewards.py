"""Per-turn rewards for multi-turn episodes.

Relay (SAT-Seq spec): agent k's own correctness r_k ∈ {0,1} times ``reward.own``; the last turn
also gets the team reward R = correctness of the vote times ``reward.team``. A custom reward
function ``(prompt, response, answer) -> float`` replaces correctness for the per-turn part.

Correctness and the outcome reward come from the problem's scorer (:mod:`satseq.rewards.scorers`):
math-verify equivalence by default (reward 1.0 or 0.0, as always), or a named scorer's score in
[0, 1] (reasoning-gym's ``score_answer``), which is then the turn's reward and ``Turn.info["score"]``;
``correct`` is ``score == 1``.
"""
from __future__ import annotations

from typing import Callable

from satseq.rewards.scorers import DEFAULT_SCORER, grade, scorer_name
from satseq.records import Episode, Turn

CustomReward = Callable[[str, str, str], float]


def grade_episodes(episodes: list[Episode]) -> None:
    """Mark each turn's and each episode's correctness under the problem's scorer; a named scorer's
    score also goes to ``Turn.info["score"]`` (the math scorer's is ``float(correct)``, not recorded)."""
    for ep in episodes:
        named = scorer_name(ep.problem) != DEFAULT_SCORER
        for t in ep.turns:
            t.correct, score = grade(t.answer, ep.problem)
            if named:
                t.info["score"] = score
        ep.prediction_correct = grade(ep.prediction, ep.problem)[0]


def turn_score(t: Turn) -> float:
    """A graded turn's score in [0, 1]: its scorer's (``info["score"]``), else ``float(correct)``."""
    return float(t.info.get("score", float(t.correct)))


def assign_relay_rewards(episodes: list[Episode], *, own: float = 1.0, team: float = 1.0,
                         custom: CustomReward | None = None) -> None:
    grade_episodes(episodes)
    for ep in episodes:
        for t in ep.turns:
            base = custom(t.prompt_text, t.text, ep.problem.answer) if custom else turn_score(t)
            t.reward = own * float(base)
        ep.turns[-1].reward += team * float(ep.prediction_correct)


def assign_outcome_rewards(episodes: list[Episode], *, custom: CustomReward | None = None) -> None:
    """Single-turn: the reward is the score (correctness, or a named scorer's partial credit) of the
    only turn, or the custom function's."""
    grade_episodes(episodes)
    for ep in episodes:
        t = ep.turns[-1]
        t.reward = float(custom(t.prompt_text, t.text, ep.problem.answer)) if custom else turn_score(t)
