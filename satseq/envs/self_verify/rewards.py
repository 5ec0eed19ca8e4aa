"""Per-turn rewards of PAG ``self_verify`` episodes (spec ``apo_pag.md``, section PAG).

Every turn is rewarded (rewarding only the final answer makes the verifier collapse to "always
correct", PAG App. A.4):

* policy turn y_t:   ``R_y(y_t) = correctness`` of its answer (math-verify, :func:`is_equivalent`);
  on revision turns t >= 2 plus the bonus ``alpha * (R_y(y_t) - R_y(y_{t-1}))``, so
  wrong -> right earns ``1 + alpha``, right -> wrong ``-alpha``, no change ``R_y``;
* verifier turn v_t: ``R_v = 1`` if its verdict matches the true correctness of the attempt it
  judged ("correct" on a correct attempt, "wrong" on a wrong one), else 0; no verdict -> 0.

Grading sets ``Turn.correct`` (policy: the answer is right; verifier: the verdict is right),
``info["attempt_correct"]`` on verifier turns and ``Episode.prediction_correct``;
:func:`assign_pag_rewards` also stores ``Turn.reward`` and ``info["revision_bonus"]``.
Turns are told apart by ``Turn.role`` (see :mod:`satseq.workflows.self_verify`).
"""
from __future__ import annotations

from satseq.rewards.grade import is_equivalent
from satseq.records import Episode


def verdict_matches(verdict: str | None, attempt_correct: bool) -> bool:
    """Whether a verdict ("correct" / "wrong" / None) is right about an attempt; None never is."""
    return verdict == ("correct" if attempt_correct else "wrong")


def grade_pag_episodes(episodes: list[Episode]) -> None:
    """Mark correctness of every policy turn, verdict correctness of every verifier turn (idempotent)."""
    for ep in episodes:
        gold = ep.problem.answer
        for t in ep.turns:
            if t.role == "policy":
                t.correct = t.answer is not None and is_equivalent(t.answer, gold)
        for t in ep.turns:
            if t.role == "verifier":
                judged = ep.turns[t.info["judged_turn"]]
                t.info["attempt_correct"] = judged.correct
                t.correct = verdict_matches(t.info.get("verdict"), judged.correct)
        ep.prediction_correct = ep.prediction is not None and is_equivalent(ep.prediction, gold)


def assign_pag_rewards(episodes: list[Episode], *, alpha: float = 1.0) -> None:
    """Grade, then set ``Turn.reward`` on every turn as in the module docstring."""
    grade_pag_episodes(episodes)
    for ep in episodes:
        prev: float | None = None  # R_y of the previous policy turn
        for t in ep.turns:
            role = t.role
            if role == "policy":
                r = float(t.correct)
                bonus = 0.0 if prev is None else alpha * (r - prev)
                t.reward = r + bonus
                t.info["revision_bonus"] = bonus
                prev = r
            elif role == "verifier":
                t.reward = float(t.correct)
            else:
                raise ValueError(f"turn {t.index} of episode {ep.problem.problem_id!r} has no PAG role")
