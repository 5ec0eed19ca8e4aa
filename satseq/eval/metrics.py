"""Sampling metrics: pass@k, avg@k, maj@k, the relay's majority vote, and their summaries.

- pass@k (Chen et al. 2021, unbiased): with n samples of which c are correct,
  ``pass@k = 1 − C(n−c, k) / C(n, k)``, computed stably as
  ``1 − prod(1 − k / arange(n−c+1, n+1))``; it is 1 when ``n − c < k``.
- avg@k: the mean correctness of the first k samples.
- maj@k: the correctness of the most frequent answer among the first k samples, answers grouped
  by equivalence (``is_equivalent``, i.e. math-verify), not by string equality. Ties: for an odd k
  the answer that appeared first; for an even k (where two different answers always tie, so a
  first-sample rule makes a vote of 2 the first sample) one of the tied answers drawn by the
  evaluation's seeded stream for that problem (:func:`~satseq.rewards.voting.tie_generator`: the
  eval seed, the problem id and k), so the figure is reproducible and leans on no sample position.
  A problem graded by a named scorer (``Problem.meta["scorer"]``, :mod:`satseq.rewards.scorers`:
  reasoning-gym's) groups answers with that scorer's ``same``, and the vote's verdict is the verdict its
  scorer gave the winning sample (``by_sample``): the reference answer is not what such a scorer compares with.
- standard error of an overall figure: ``SE = s / sqrt(P)``, with ``s`` the sample standard
  deviation (ddof = 1) of the per-problem values over the ``P`` problems.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from satseq.rewards.grade import is_equivalent
from satseq.rewards.scorers import DEFAULT_SCORER, get_scorer
from satseq.utils.stats import mean_se
from satseq.rewards.voting import Equivalent, majority_vote, tie_generator  # noqa: F401  (re-exported)

__all__ = [
    "pass_at_k",
    "avg_at_k",
    "maj_at_k",
    "majority_vote",
    "vote_of",
    "problem_metrics",
    "summarize",
]

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k: ``1 − C(n−c, k)/C(n, k) = 1 − prod_{i=n−c+1}^{n} (1 − k/i)``.

    Raises ``ValueError`` unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    n, c, k = int(n), int(c), int(k)
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n and n >= 1, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def avg_at_k(correct: Sequence[bool | float], k: int | None = None) -> float:
    """Mean correctness of the first ``k`` samples (all samples when ``k`` is None)."""
    if k is None:
        k = len(correct)
    if not 1 <= k <= len(correct):
        raise ValueError(f"avg_at_k: need 1 <= k <= {len(correct)} samples, got k={k}")
    return float(sum(float(x) for x in correct[:k]) / k)


def vote_of(
    answers: Sequence[str | None],
    k: int,
    equivalent: Equivalent = is_equivalent,
    tie_seed: tuple[int, Any] | None = None,
) -> str | None:
    """The majority answer of the first ``k`` answers (maj@k's winner); None if all are None.

    Ties: odd ``k``, the answer that appeared first (``tie_break="first"``); even ``k``, drawn by
    ``tie_generator(seed, problem_id, k)`` with ``tie_seed = (seed, problem_id)`` (required then: a
    ``ValueError`` otherwise, so no even vote falls back to the first sample unnoticed).
    """
    if k % 2:
        return majority_vote(answers[:k], equivalent, tie_break="first")
    if tie_seed is None:
        raise ValueError(f"a vote of an even k ({k}) breaks ties with the run's seeded stream: "
                         "pass tie_seed=(seed, problem_id)")
    return majority_vote(answers[:k], equivalent, tie_break="seeded",
                         generator=tie_generator(tie_seed[0], tie_seed[1], k))


def maj_at_k(
    answers: Sequence[str | None],
    gold: str,
    k: int | None = None,
    equivalent: Equivalent = is_equivalent,
    tie_seed: tuple[int, Any] | None = None,
    by_sample: Sequence[bool | float] | None = None,
) -> float:
    """1.0 if the majority answer of the first ``k`` samples is equivalent to ``gold``, else 0.0.

    Ties as in :func:`vote_of` (odd k: the first answer; even k: the seeded stream of ``tie_seed =
    (seed, problem_id)``); a problem whose k answers are all None scores 0. ``by_sample`` (each sample's
    correctness, for a named scorer): the winner's verdict is that of the first sample with its answer.
    """
    if k is None:
        k = len(answers)
    if not 1 <= k <= len(answers):
        raise ValueError(f"maj_at_k: need 1 <= k <= {len(answers)} samples, got k={k}")
    winner = vote_of(answers, k, equivalent, tie_seed)
    if winner is None:
        return 0.0
    if by_sample is not None:
        return 1.0 if float(by_sample[list(answers).index(winner)]) > 0.5 else 0.0
    return 1.0 if equivalent(winner, gold) else 0.0


def problem_metrics(
    correct: Sequence[bool | float],
    ks: Sequence[int],
    answers: Sequence[str | None] | None = None,
    gold: str | None = None,
    equivalent: Equivalent = is_equivalent,
    tie_seed: tuple[int, Any] | None = None,
    scorer: str | None = None,
) -> dict[str, float]:
    """``{"pass@k", "avg@k"[, "maj@k"]}`` for one problem, for each k in ``ks``.

    ``maj@k`` is computed only when ``answers`` and ``gold`` are given; an even k needs ``tie_seed =
    (seed, problem_id)`` for its ties (:func:`maj_at_k`). ``scorer``: the problem's named scorer (None or
    ``math``: ``equivalent`` against ``gold``), whose ``same`` groups the vote and whose verdicts on
    the samples (``correct``) judge the winner.
    """
    by_sample = None
    if scorer is not None and scorer != DEFAULT_SCORER:
        equivalent, by_sample = get_scorer(scorer).same, correct
    n = len(correct)
    c = int(sum(1 for x in correct if float(x) > 0.5))
    out: dict[str, float] = {}
    for k in ks:
        out[f"pass@{k}"] = pass_at_k(n, c, k)
        out[f"avg@{k}"] = avg_at_k(correct, k)
        if answers is not None and gold is not None:
            if len(answers) != n:
                raise ValueError(f"problem_metrics: {len(answers)} answers for {n} samples")
            out[f"maj@{k}"] = maj_at_k(answers, gold, k, equivalent, tie_seed, by_sample)
    return out


def summarize(
    per_problem: Sequence[dict],
    ks: Sequence[int],
    equivalent: Equivalent = is_equivalent,
    seed: int | None = None,
) -> dict:
    """Overall metrics over problems, with standard errors and counts.

    Each entry of ``per_problem`` has ``correct`` (list of per-sample 0/1) and, optionally,
    ``answers`` (list of extracted answers, None allowed) and ``gold`` for maj@k, ``scorer`` (a named
    scorer, :func:`problem_metrics`), and ``problem_id``
    (with ``seed``, the evaluation's seed: the stream that breaks an even k's ties). Returns::

        {"n_problems": P, "n_samples": S, "samples_per_problem": n or None (if unequal),
         "pass@k": {"mean": m, "se": s}, "avg@k": {...}, "maj@k": {...}, ...}

    maj@k is reported only when every problem carries ``answers`` and ``gold``. A ``k`` larger
    than a problem's sample count raises ``ValueError``.
    """
    if not per_problem:
        raise ValueError("summarize: no problems")
    ks = sorted(set(int(k) for k in ks))
    with_maj = all(p.get("answers") is not None and p.get("gold") is not None for p in per_problem)
    if with_maj and seed is not None and any(k % 2 == 0 for k in ks) and \
            any(p.get("problem_id") is None for p in per_problem):
        # one stream for every problem would break every tie the same way: the first-sample bias again
        raise ValueError("summarize: an even k's ties are drawn per problem: every entry needs its problem_id")
    values: dict[str, list[float]] = {}
    counts = [len(p["correct"]) for p in per_problem]
    for p in per_problem:
        m = problem_metrics(
            p["correct"], ks,
            p.get("answers") if with_maj else None,
            p.get("gold") if with_maj else None,
            equivalent,
            (seed, p.get("problem_id")) if seed is not None else None,
            p.get("scorer"),
        )
        for key, v in m.items():
            values.setdefault(key, []).append(v)
    out: dict = {
        "n_problems": len(per_problem),
        "n_samples": int(sum(counts)),
        "samples_per_problem": counts[0] if len(set(counts)) == 1 else None,
    }
    for kind in ("pass", "avg", "maj"):
        for k in ks:
            key = f"{kind}@{k}"
            if key in values:
                out[key] = mean_se(values[key])
    return out
