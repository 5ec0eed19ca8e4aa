"""Per-seat metrics of graded solver → checker → reviser episodes (:func:`seat_metrics`).

* ``solver/accuracy``: the first attempt is right, over episodes;
* the checker, over its verdicts (its last turn in an episode; a missing verdict counts as wrong, as in
  PAG's metrics): ``checker/verdict_accuracy``; ``checker/correct_recall`` = P(verdict "correct" |
  attempt right), ``checker/wrong_recall`` = P(verdict "wrong" | attempt wrong) and
  ``checker/balanced_accuracy`` = (correct_recall + wrong_recall) / 2 (a constant verdict scores 0.5;
  logged only when the batch has both kinds of attempt); ``checker/says_correct``,
  ``checker/no_verdict``; ``checker/tool_calls`` (programs run per episode), ``checker/tool_errors``
  (runs that ended in an error, per episode);
* the reviser: ``reviser/revision_rate`` (episodes revised), ``reviser/accuracy`` (right, over revised
  episodes), ``reviser/fixed`` = P(revision right | attempt wrong) and ``reviser/broke`` =
  P(revision wrong | attempt right), over revised episodes;
* ``final/accuracy``: the prediction (the revision, else the attempt), over episodes.

A rate whose denominator is empty is left out of the row (a metrics row holds numbers only).
"""
from __future__ import annotations

from satseq.envs.check_revise.session import CHECKER, REVISER
from satseq.records import Episode


def _put(out: dict, key: str, num: float, den: int) -> None:
    if den:
        out[key] = num / den


def seat_metrics(episodes: list[Episode]) -> dict:
    """Each seat on its own (module docstring); the episodes must be graded."""
    n = len(episodes)
    out: dict = {}
    solver = [bool(ep.turns[0].correct) for ep in episodes if ep.turns]
    _put(out, "solver/accuracy", sum(solver), n)
    verdicts = [(t.info["attempt_correct"], t.info.get("verdict")) for ep in episodes for t in ep.turns
                if t.role == CHECKER and t.info.get("final")]
    _put(out, "checker/verdict_accuracy", sum(v == ("correct" if a else "wrong") for a, v in verdicts), len(verdicts))
    right = [v for a, v in verdicts if a]
    wrong = [v for a, v in verdicts if not a]
    _put(out, "checker/correct_recall", sum(v == "correct" for v in right), len(right))
    _put(out, "checker/wrong_recall", sum(v == "wrong" for v in wrong), len(wrong))
    if right and wrong:
        out["checker/balanced_accuracy"] = (out["checker/correct_recall"] + out["checker/wrong_recall"]) / 2
    _put(out, "checker/says_correct", sum(v == "correct" for _, v in verdicts), len(verdicts))
    _put(out, "checker/no_verdict", sum(v is None for _, v in verdicts), len(verdicts))
    results = [r for ep in episodes for t in ep.turns if t.role == CHECKER for r in t.info.get("tool_results", [])]
    _put(out, "checker/tool_calls", len(results), n)
    _put(out, "checker/tool_errors", sum(r.startswith("error:") or "\nerror:" in r for r in results), n)
    revised = [(bool(ep.turns[0].correct), bool(t.correct)) for ep in episodes for t in ep.turns if t.role == REVISER]
    _put(out, "reviser/revision_rate", len(revised), n)
    _put(out, "reviser/accuracy", sum(r for _, r in revised), len(revised))
    _put(out, "reviser/fixed", sum(r for a, r in revised if not a), sum(not a for a, _ in revised))
    _put(out, "reviser/broke", sum(not r for a, r in revised if a), sum(a for a, _ in revised))
    _put(out, "final/accuracy", sum(bool(ep.prediction_correct) for ep in episodes), n)
    return out
