"""PAC lower bound on the joint policy's performance (SAT-Seq spec, "Per stage" step 5).

**What is bounded.** ``J_f(π) = E_{x ~ P} E_{episode ~ π(·|x)} [f(episode)]`` for a score f in
[0, 1]: the vote accuracy (``f = 1{vote correct}``) and the normalised episode reward
(``f = R / R_max``, R the sum of the episode's turn rewards, ``R_max = K · reward.own + reward.team``
for correctness rewards). π is the joint sampling policy of the K agents at the moment the
certificate batch is drawn (the rollout temperature included); P is the certificate pool
(``sat_seq.certificate.pool``: the held-out set by default), prompts drawn uniformly with
replacement.

**Data.** A dedicated certificate batch (:mod:`satseq.methods.sat_seq.monitor.certificate_batch`):
n prompts drawn i.i.d. from P, m episodes each, sampled from π with a generator of its own. The
batch is fresh: nothing π was fitted on enters the bound (a bound on the episodes the update was
fitted on is not valid: the earlier S − OCC − BIAS − FS bound came out above the truth in 2,000 of
2,000 trials on coin-flip rewards). The i.i.d. units are the per-prompt means of f over the m
episodes, each in [0, 1] with mean J_f(π).

**Concentration.** Chernoff–Hoeffding in KL form (Hoeffding 1963, Theorem 1, which holds for any
independent variables in [0, 1]): for the mean X̄ of n such units and t > 0,
``P(X̄ ≤ μ − t) ≤ exp(−n · kl(μ − t ‖ μ))`` with ``kl`` the Bernoulli relative entropy. Hence::

    LB_δ(X̄) = min { p ≤ X̄ : n · kl(X̄ ‖ p) ≤ ln(1/δ) }      P(J < LB_δ) ≤ δ
    UB_δ(X̄) = max { p ≥ X̄ : n · kl(X̄ ‖ p) ≤ ln(1/δ) }      P(J > UB_δ) ≤ δ

solved by bisection (60 halvings: exact to float precision). It is never looser than Hoeffding's
``X̄ − sqrt(ln(1/δ) / 2n)`` and much tighter near 0 and 1 (Pinsker).

**Certified improvement** of π_T over the warm start π_0, from two independent batches:
``LB_{δ/2}(J(π_T)) − UB_{δ/2}(J(π_0)) ≤ J(π_T) − J(π_0)`` with probability ≥ 1 − δ (union bound
over the two one-sided statements).

**Scope.** Each certificate is a statement about one policy with failure probability δ. Reported at
several stages, the guarantee holds per certificate, not jointly: a joint statement over T
certificates needs δ/T each (union bound).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from satseq.errors import ConfigError

_BISECTIONS = 60


def bernoulli_kl(p: float, q: float) -> float:
    """``kl(p ‖ q) = p ln(p/q) + (1−p) ln((1−p)/(1−q))`` (0 ln 0 = 0; +inf when q ∈ {0, 1} ≠ p)."""
    def term(a: float, b: float) -> float:
        if a == 0.0:
            return 0.0
        if b == 0.0:
            return math.inf
        return a * math.log(a / b)

    return term(p, q) + term(1.0 - p, 1.0 - q)


def _check(mean: float, n: int, delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"certificate delta must be in (0, 1), got {delta}")
    if n < 1:
        raise ValueError(f"a bound needs at least one sample, got n={n}")
    if not -1e-12 <= mean <= 1.0 + 1e-12:
        raise ValueError(f"the mean of [0, 1] scores must lie in [0, 1], got {mean}")


def kl_lower_bound(mean: float, n: int, delta: float) -> float:
    """``LB_δ``: a lower confidence bound at level 1 − δ on the mean of n i.i.d. [0, 1] variables."""
    _check(mean, n, delta)
    mean = min(max(mean, 0.0), 1.0)
    budget = math.log(1.0 / delta) / n
    lo, hi = 0.0, mean
    if bernoulli_kl(mean, 0.0) <= budget:
        return 0.0
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        if bernoulli_kl(mean, mid) > budget:
            lo = mid
        else:
            hi = mid
    return hi


def kl_upper_bound(mean: float, n: int, delta: float) -> float:
    """``UB_δ``: an upper confidence bound at level 1 − δ (the mirror of :func:`kl_lower_bound`)."""
    _check(mean, n, delta)
    return 1.0 - kl_lower_bound(1.0 - min(max(mean, 0.0), 1.0), n, delta)


@dataclass(frozen=True)
class Bound:
    """Confidence bounds on one J_f from one batch: each side holds with probability ≥ 1 − delta."""

    mean: float
    lower: float
    upper: float
    n: int
    delta: float


def bound(values: Sequence[float], delta: float) -> Bound:
    """Both one-sided bounds (each at level 1 − δ) on the mean of i.i.d. ``values`` in [0, 1]."""
    vals = [float(v) for v in values]
    if any(not (-1e-12 <= v <= 1.0 + 1e-12) for v in vals):
        raise ValueError("certificate scores must lie in [0, 1]")
    mean = sum(vals) / max(1, len(vals))
    return Bound(mean, kl_lower_bound(mean, len(vals), delta), kl_upper_bound(mean, len(vals), delta), len(vals),
                 delta)


def improvement_lower_bound(new: Bound, old: Bound) -> float:
    """``LB(J_new) − UB(J_old)``: holds with probability ≥ 1 − (δ_new + δ_old) (union bound); build
    ``new`` and ``old`` at δ/2 each for a 1 − δ statement."""
    return new.lower - old.upper


__all__ = ["Bound", "bernoulli_kl", "bound", "improvement_lower_bound", "kl_lower_bound", "kl_upper_bound"]
