"""PAC lower bound on the stage's improvement (SAT-Seq spec, "Per stage" step 5).

Normalization: episodic and undiscounted, no (1 - gamma) factor. The bound is on
``J(pi_new) - J(pi_cur)`` with J the expected *sum* of the episode's rewards, and Â must be the raw
turn advantage in those units (``seqaware_advantages(..., gamma=1, lam=1).raw`` targets exactly
this J; gamma < 1 or lam < 1 add a bias of order (1 - lam) that the bound does not cover).

For each agent i (E_i episodes; c the truncated IS factor, w = pi^i_new(y)/pi^i_cur(y) the
uncapped sequence ratio of agent i's turn, w̄ = min(w, w_max), KL_q the q-quantile of the per-state
KL(pi^i_new || pi^i_cur) over visited states)::

    S_i    = mean_e( c w̄ Â )
    tau_i  = min(1, sqrt(KL_q / 2) + (1 - q) [, sqrt(KL_max / 2) when KL_max is given])
             (Pinsker: an upper bound on the mean TV distance over visited states)
    OCC_i  = eps_i * K (K - 1) * tau_i,   eps_i = max_e |Â|
    BIAS_i = A_max * mean_e (w - w_max)_+  +  baseline_range * sqrt(ln(2/δ') / (2 group_size))
    FS_i   = sqrt(2 V ln(2/δ') / n) + 7 R ln(2/δ') / (3 (n - 1))
             (empirical Bernstein, Maurer & Pontil 2009, Thm 4, for terms in a range of width
              R = 2 w_max A_max; V the unbiased sample variance of c w̄ Â, n = E_i)
    L      = sum_i [ S_i - OCC_i - BIAS_i - FS_i ]

δ split (union bound): each agent has two probabilistic terms (the Hoeffding baseline term and the
Bernstein term), so δ' = δ / (2 · number of agents). A_max defaults to the largest |Â| seen (an
empirical stand-in; pass the true bound, e.g. the return range, for a guarantee).
Caveat (found while testing): S_i estimates E[c w A] = sum_a (pi_new - pi_cur) A <= 2 max|A| TV_i,
while OCC_i = eps_i K(K-1) tau_i >= 2 eps_i TV_i for K >= 2. So in expectation S_i <= OCC_i and L
is essentially never positive: valid, but it cannot certify an improvement. A CPO-style
eps (Achiam et al. 2017, Cor. 1: max_s |E_{a~pi_new} A(s, a)|, itself O(TV)) would make OCC second
order in the step; that is a change of the spec, not made here.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import torch
from torch import Tensor

from satseq.errors import ConfigError


@dataclass(frozen=True)
class AgentCertInput:
    """Per-agent inputs: tensors ``[E]`` over the stage's episodes."""

    name: str
    c: Tensor  # truncated IS factor (1 for the first agent in the order)
    w: Tensor  # uncapped sequence ratio pi_new(y) / pi_cur(y) of the agent's turn
    adv: Tensor  # raw turn advantage Â, reward units
    kl_q: float  # q-quantile of per-state KL(pi_new || pi_cur) over visited states
    kl_max: float | None = None  # max of the same values (optional; tightens tau)


@dataclass(frozen=True)
class AgentCertTerms:
    name: str
    bound: float  # S - OCC - BIAS - FS
    S: float
    OCC: float
    BIAS: float
    FS: float
    eps: float
    tau: float
    bias_cap: float
    bias_baseline: float
    variance: float
    n: int


@dataclass(frozen=True)
class Certificate:
    lower_bound: float
    agents: tuple[AgentCertTerms, ...]
    delta: float
    delta_prime: float

    def to_metrics(self, prefix: str = "certificate/") -> dict[str, float]:
        """Flat name -> float dict for the trackers."""
        out: dict[str, float] = {f"{prefix}lower_bound": self.lower_bound}
        for a in self.agents:
            for k, v in asdict(a).items():
                if k != "name":
                    out[f"{prefix}{a.name}/{k}"] = float(v)
        return out


def pac_certificate(
    agents: Sequence[AgentCertInput],
    *,
    num_turns: int,
    group_size: int,
    quantile: float = 0.99,
    delta: float = 0.05,
    w_max: float = 2.0,
    A_max: float | None = None,
    baseline_range: float = 1.0,
) -> Certificate:
    """The lower bound L and its parts per agent (module docstring)."""
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"certificate delta must be in (0, 1), got {delta}")
    if not agents:
        return Certificate(0.0, (), delta, delta)
    K = int(num_turns)
    d_prime = delta / (2 * len(agents))
    log_term = math.log(2.0 / d_prime)
    if A_max is None:
        A_max = max(float(a.adv.detach().abs().max()) if a.adv.numel() else 0.0 for a in agents)
    terms: list[AgentCertTerms] = []
    for a in agents:
        c = a.c.detach().double()
        w = a.w.detach().double()
        adv = a.adv.detach().double()
        n = int(adv.numel())
        if n < 2:
            raise ValueError(f"certificate needs at least 2 episodes for agent {a.name}, got {n}")
        x = c * torch.clamp(w, max=w_max) * adv
        S = float(x.mean())
        eps = float(adv.abs().max())
        tau = math.sqrt(max(a.kl_q, 0.0) / 2.0) + (1.0 - quantile)
        tv_max = 1.0 if a.kl_max is None else min(1.0, math.sqrt(max(a.kl_max, 0.0) / 2.0))
        tau = min(1.0, tau, tv_max)
        occ = eps * K * (K - 1) * tau
        bias_cap = float(A_max) * float(torch.clamp(w - w_max, min=0.0).mean())
        bias_base = baseline_range * math.sqrt(log_term / (2.0 * group_size))
        var = float(x.var(unbiased=True))
        R = 2.0 * w_max * float(A_max)
        fs = math.sqrt(2.0 * var * log_term / n) + 7.0 * R * log_term / (3.0 * (n - 1))
        bias = bias_cap + bias_base
        terms.append(AgentCertTerms(a.name, S - occ - bias - fs, S, occ, bias, fs, eps, tau, bias_cap,
                                    bias_base, var, n))
    return Certificate(sum(t.bound for t in terms), tuple(terms), delta, d_prime)
