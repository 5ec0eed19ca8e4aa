"""Quantile KL check with a backtracking line search (SAT-Seq spec, "Per stage" step 4,
``kl/quantile_kl_ctrl``).

After agent i's proposal (``ppo_epochs`` passes with penalty β) from θ_cur to θ_prop = θ_cur + Δ,
per visited state s the KL ``KL(π_new(·|s) ‖ π_cur(·|s))`` is measured. The step is accepted iff::

    quantile_q({KL(s)}) <= target_kl        (q = 0.99, target 0.05; satseq.algos.kl.kl_quantile)

Otherwise the step is **shrunk** along the proposal, without proposing again: the agent's
parameters and optimizer state are restored to the snapshot taken before the proposal, and
θ_cur + α^j · Δ is tried for j = 1, 2, …, ``max_backtracks`` (α = ``sat_seq.backtrack_alpha``,
0.5), each with β ← 1.5 β, until the check holds. If none does, θ_cur is kept (restored bit for
bit) and a rejection is recorded. A shrunk step is *also* a β increase: the β returned (kept for the
agent's next stage) is ``β0 · 1.5^j``, so that later proposals are smaller; after a rejection it is
``β0 · 1.5^max_backtracks``. Growing β alone cannot rescue a proposal: KL(π_θ ‖ π_cur) has zero
gradient at θ = θ_cur, so a one-step proposal that is too large would fail on every retry; the
line search shrinks the step itself. Each retry costs one forward pass (the KL measurement), not a
new proposal.

Optimizer state: an accepted full step keeps the optimizer state of the proposal; a shrunk or
rejected step leaves the optimizer exactly as the snapshot (a deep copy of ``state_dict()``, step
counters included): its moments describe the full proposal, not the step taken. ``backtracks`` is
j of the accepted step (0 = the full proposal), ``step_scale`` α^j (0 after a rejection). A KL
containing NaN fails the check. Gradients (``.grad``) are not part of the snapshot: the proposal
must zero them before use, as every training loop does. An LR scheduler is not part of the snapshot
either: step it outside ``propose`` (once per stage).

Ablations (the step-size study in docs/sat_seq.md; defaults are SAT-Seq's):

* ``statistic="mean"``: the check compares the *mean* per-state KL with the target instead of the
  q-quantile;
* ``on_fail="beta"``: a failed check does not shrink the step: the snapshot is restored and the agent
  **proposes again** from θ_cur with β ← 1.5 β (each retry costs a proposal, not only a forward);
  ``step_scale`` stays 1 and ``backtracks`` counts the re-proposals;
* ``check=False``: every proposal is accepted as it is (the KL is still measured and logged).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from satseq.algos.kl import kl_quantile
from satseq.errors import ConfigError


@dataclass
class KLCheckResult:
    accepted: bool
    backtracks: int  # j of the accepted step (0 = the full proposal); max_backtracks after a rejection
    beta: float  # the beta to keep for this agent afterwards
    kl_quantile: float  # of the accepted step, or of the last failed one
    kl_mean: float
    kl_max: float
    step_scale: float = 1.0  # alpha^j of the accepted step; 0 after a rejection
    attempts: list[tuple[float, float]] = field(default_factory=list)  # (step scale, kl_quantile) per check


class QuantileKLController:
    """Propose once, measure, then shrink the step along the proposal until the check holds."""

    def __init__(self, target_kl: float = 0.05, quantile: float = 0.99, max_backtracks: int = 5,
                 beta_growth: float = 1.5, alpha: float = 0.5, statistic: str = "quantile",
                 on_fail: str = "shrink", check: bool = True):
        if not target_kl > 0:
            raise ConfigError(f"algorithm.kl_ctrl.target_kl must be > 0, got {target_kl}")
        if not 0.0 < quantile <= 1.0:
            raise ConfigError(f"algorithm.kl_ctrl.quantile must be in (0, 1], got {quantile}")
        if int(max_backtracks) != max_backtracks or max_backtracks < 0:
            raise ConfigError(f"sat_seq.max_backtracks must be an integer >= 0, got {max_backtracks}")
        if not beta_growth >= 1.0:
            raise ConfigError(f"beta_growth must be >= 1, got {beta_growth}")
        if not 0.0 < alpha < 1.0:
            raise ConfigError(f"sat_seq.backtrack_alpha must be in (0, 1), got {alpha}")
        if statistic not in ("quantile", "mean"):
            raise ConfigError(f"algorithm.kl_ctrl.statistic must be quantile or mean, got {statistic!r}")
        if on_fail not in ("shrink", "beta"):
            raise ConfigError(f"algorithm.kl_ctrl.on_fail must be shrink or beta, got {on_fail!r}")
        self.statistic, self.on_fail, self.check = statistic, on_fail, bool(check)
        self.target_kl = float(target_kl)
        self.quantile = float(quantile)
        self.max_backtracks = int(max_backtracks)
        self.beta_growth = float(beta_growth)
        self.alpha = float(alpha)

    def run(
        self,
        params: Sequence[torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        beta: float,
        propose: Callable[[float], None],
        measure_kl: Callable[[], Tensor],
    ) -> KLCheckResult:
        """``propose(beta)`` updates ``params`` in place, ``measure_kl()`` gives the per-state KL of the
        current parameters against π_cur."""
        params = list(params)
        with torch.no_grad():
            p_snap = [p.detach().clone() for p in params]
        o_snap: dict[str, Any] = copy.deepcopy(optimizer.state_dict())
        beta = float(beta)
        attempts: list[tuple[float, float]] = []

        propose(beta)
        with torch.no_grad():
            step = [p.detach() - s for p, s in zip(params, p_snap)]
        scale = 1.0
        for j in range(self.max_backtracks + 1):
            if j > 0 and self.on_fail == "beta":  # re-propose from θ_cur with a larger penalty
                beta *= self.beta_growth
                with torch.no_grad():
                    for p, s in zip(params, p_snap):
                        p.copy_(s)
                optimizer.load_state_dict(copy.deepcopy(o_snap))
                propose(beta)
            elif j > 0:
                scale = self.alpha ** j
                beta *= self.beta_growth
                with torch.no_grad():
                    for p, s, d in zip(params, p_snap, step):
                        p.copy_(s + scale * d)
            with torch.no_grad():
                kl = measure_kl().detach()
                q = kl_quantile(kl, self.quantile)
                mean = float(kl.double().mean()) if kl.numel() else 0.0
                mx = float(kl.double().max()) if kl.numel() else 0.0
            attempts.append((scale, q))
            checked = q if self.statistic == "quantile" else mean
            if not self.check or checked <= self.target_kl:  # False for NaN
                return KLCheckResult(True, j, beta, q, mean, mx, scale, attempts)
            if j == 0 and self.on_fail == "shrink":  # the proposal's moments do not describe a shrunk step
                optimizer.load_state_dict(copy.deepcopy(o_snap))
        with torch.no_grad():
            for p, s in zip(params, p_snap):
                p.copy_(s)
        optimizer.load_state_dict(copy.deepcopy(o_snap))
        return KLCheckResult(False, self.max_backtracks, beta, q, mean, mx, 0.0, attempts)
