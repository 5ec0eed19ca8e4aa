"""KL estimators: per-token sampled estimators and exact KL over the vocabulary.

With ``a ~ pi`` and ``log r = ref_logp - logp`` (Schulman, "Approximating KL divergence", 2020;
verl ``kl_penalty``), estimators of KL(pi || ref):

- ``k1`` (alias ``kl``):        logp - ref_logp                       unbiased, can be negative
- ``k2`` (alias ``mse``):       0.5 * (logp - ref_logp)^2             biased, low variance, >= 0
- ``k3`` (alias ``low_var_kl``): exp(log r) - log r - 1, clamped to [-10, 10]
                                                                     unbiased, >= 0 (verl clamps
                                                                     log r to [-20, 20] first)
- ``abs``:                      |logp - ref_logp|

Exact: ``KL(p || q) = sum_v p_v (log p_v - log q_v)`` from logits over the last dim, in fp32
(terms with p_v = 0 count 0).

The quantile statistic of a set of per-state (or per-token) KL values, shared by SAT-Seq's check
(``quantile_q({KL(s)}) <= target``) and the step-KL statistic of every method (``kl_step_q99``):
with ``x_(0) <= ... <= x_(n-1)`` sorted in float64, ``pos = q (n - 1)``, ``lo = floor(pos)``::

    quantile_q = x_(lo) + (pos - lo) (x_(lo+1) - x_(lo))        (linear, as torch.quantile)

0 for an empty set, NaN if any value is NaN.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from satseq.errors import ConfigError

KL_KINDS: dict[str, str] = {
    "k1": "k1", "kl": "k1",
    "k2": "k2", "mse": "k2",
    "k3": "k3", "low_var_kl": "k3",
    "abs": "abs",
}


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(pi || ref) at tokens sampled from pi; same shape as ``logp``."""
    k = KL_KINDS.get(kind)
    if k is None:
        raise ConfigError(f"unknown KL estimator '{kind}' (known: {', '.join(sorted(KL_KINDS))})")
    diff = logp - ref_logp
    if k == "k1":
        return diff
    if k == "k2":
        return 0.5 * diff.square()
    if k == "abs":
        return diff.abs()
    log_r = torch.clamp(-diff, min=-20.0, max=20.0)
    return torch.clamp(torch.exp(log_r) - log_r - 1.0, min=-10.0, max=10.0)


def kl_quantile(kl: Tensor, q: float) -> float:
    """``torch.quantile(kl, q)`` (linear interpolation) without torch.quantile's size limit, in float64;
    0.0 when empty, NaN if any NaN (module docstring)."""
    x = kl.detach().reshape(-1).double()
    if x.numel() == 0:
        return 0.0
    if torch.isnan(x).any():
        return float("nan")
    xs = torch.sort(x).values
    pos = q * (xs.numel() - 1)
    lo = int(pos)
    hi = min(lo + 1, xs.numel() - 1)
    return float(xs[lo] + (pos - lo) * (xs[hi] - xs[lo]))


def exact_kl(logits_p: Tensor, logits_q: Tensor) -> Tensor:
    """KL(softmax(logits_p) || softmax(logits_q)) over the last dim, per state, in fp32."""
    lp = F.log_softmax(logits_p.float(), dim=-1)
    lq = F.log_softmax(logits_q.float(), dim=-1)
    p = lp.exp()
    terms = torch.where(p > 0, p * (lp - lq), torch.zeros_like(p))
    return terms.sum(-1)


def exact_kl_chunked(
    fn_p: Callable[[int, int], Tensor], fn_q: Callable[[int, int], Tensor], n: int, chunk: int = 1024
) -> Tensor:
    """Exact KL for ``n`` states, ``chunk`` at a time, without keeping all logits in memory.

    ``fn_p(start, stop)`` and ``fn_q(start, stop)`` return logits ``[stop - start, V]`` of the two
    policies at states ``start:stop``. Runs under ``torch.no_grad``; returns ``[n]`` fp32.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    out: list[Tensor] = []
    with torch.no_grad():
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            out.append(exact_kl(fn_p(s, e), fn_q(s, e)))
    return torch.cat(out) if out else torch.zeros(0)
