"""The coach environment's metrics from a batch of ``coach`` episodes (solver → coach → solver, spec mlmt.md)."""
from __future__ import annotations

from satseq.records import Episode
from satseq.rewards.turn_rewards import grade_episodes


def mlmt_rollout_metrics(episodes: list[Episode]) -> dict:
    """Accuracy after turn 1 and 3, improvement (wrong → right) and degradation (right → wrong) rates,
    and how often the final answer is the coach's (``follows_coach``, over episodes where the coach
    gave an answer)."""
    n = max(1, len(episodes))
    t1 = [ep.turns[0].correct for ep in episodes]
    t3 = [ep.turns[2].correct for ep in episodes]
    wrong1, right1 = sum(not a for a in t1), sum(t1)
    return {
        "mlmt/acc_t1": sum(t1) / n, "mlmt/acc_t3": sum(t3) / n,
        "mlmt/coach_accuracy": sum(ep.turns[1].correct for ep in episodes) / n,
        "mlmt/improvement_rate": sum((not a) and b for a, b in zip(t1, t3)) / max(1, wrong1),
        "mlmt/degradation_rate": sum(a and not b for a, b in zip(t1, t3)) / max(1, right1),
        "mlmt/follows_coach": sum(ep.turns[2].answer == g for ep in episodes if (g := ep.turns[1].answer) is not None)
        / max(1, sum(ep.turns[1].answer is not None for ep in episodes)),
    }


def graded_mlmt_metrics(episodes: list[Episode]) -> dict:
    """:func:`mlmt_rollout_metrics` after grading every turn (held-out episodes carry no rewards)."""
    grade_episodes(episodes)
    return mlmt_rollout_metrics(episodes)
