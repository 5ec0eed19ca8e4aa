"""PAG training metrics from a batch of ``self_verify`` episodes (spec ``apo_pag.md``, Metrics).

``pag_metrics(episodes)`` grades the batch (:func:`grade_pag_episodes`, idempotent) and returns:

* ``acc_t1`` / ``acc_final``: correctness of the first / last policy turn, over episodes;
* ``verifier_acc``: verdict right about the judged attempt, over all verifier turns (no verdict
  counts as wrong); ``verifier_acc_t1``: the same over first verifications only;
* ``correct_recall``: P(verdict "correct" | judged attempt correct); ``wrong_recall``:
  P(verdict "wrong" | judged attempt wrong), over all verifier turns;
* ``no_verdict_rate``: verifier turns without a parseable verdict;
* ``revision_rate``: episodes with a revision (a policy turn t >= 2), over episodes;
* ``answer_change_ratio``: among revised episodes, those whose final answer differs from the
  turn-1 answer (math-verify equivalence; two missing answers count as the same).

A rate whose denominator is empty is ``None``. ``collapse_warning`` flags a low answer change
ratio: revisions that copy the first answer (a collapsed self-correction).
"""
from __future__ import annotations

from satseq.rewards.grade import is_equivalent
from satseq.envs.self_verify.rewards import grade_pag_episodes
from satseq.records import Episode


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def same_answer(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.strip() == b.strip() or is_equivalent(a, b)


def pag_metrics(episodes: list[Episode]) -> dict[str, float | int | None]:
    grade_pag_episodes(episodes)
    policy = [[t for t in ep.turns if t.role == "policy"] for ep in episodes]
    verifier = [[t for t in ep.turns if t.role == "verifier"] for ep in episodes]
    v_all = [t for vs in verifier for t in vs]
    v_t1 = [vs[0] for vs in verifier if vs]
    on_right = [t for t in v_all if t.info["attempt_correct"]]
    on_wrong = [t for t in v_all if not t.info["attempt_correct"]]
    revised = [ep for ep, ps in zip(episodes, policy) if len(ps) > 1]
    changed = sum(not same_answer(ep.info.get("answer_t1"), ep.info.get("final_answer")) for ep in revised)
    n = len(episodes)
    return {
        "acc_t1": _rate(sum(ps[0].correct for ps in policy if ps), n),
        "acc_final": _rate(sum(ps[-1].correct for ps in policy if ps), n),
        "verifier_acc": _rate(sum(t.correct for t in v_all), len(v_all)),
        "verifier_acc_t1": _rate(sum(t.correct for t in v_t1), len(v_t1)),
        "correct_recall": _rate(sum(t.info.get("verdict") == "correct" for t in on_right), len(on_right)),
        "wrong_recall": _rate(sum(t.info.get("verdict") == "wrong" for t in on_wrong), len(on_wrong)),
        "no_verdict_rate": _rate(sum(t.info.get("verdict") is None for t in v_all), len(v_all)),
        "revision_rate": _rate(len(revised), n),
        "answer_change_ratio": _rate(changed, len(revised)),
        "n_episodes": n,
        "n_revised": len(revised),
    }


def collapse_warning(answer_change_ratio: float | None, threshold: float = 0.5) -> str | None:
    """A warning line when the answer change ratio is below ``threshold``; None otherwise (or if unknown)."""
    if answer_change_ratio is None or answer_change_ratio != answer_change_ratio:  # None or NaN
        return None
    if answer_change_ratio < threshold:
        return (f"answer change ratio {answer_change_ratio:.3f} < {threshold:g}: revisions mostly repeat the "
                "first answer (possible self-correction collapse)")
    return None
