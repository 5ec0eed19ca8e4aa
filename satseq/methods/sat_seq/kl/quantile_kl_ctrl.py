"""Quantile KL check with backtracking (SAT-Seq spec, "Per stage" step 4, ``kl/quantile_kl_ctrl``).

After agent i's proposal (``ppo_epochs`` passes with penalty beta), per visited state s the KL
``KL(pi_new(.|s) || pi_cur(.|s))`` is measured. The proposal is accepted iff::

    quantile_q({KL(s)}) <= target_kl        (q = 0.99, target 0.05; linear interpolation, as torch.quantile)

Otherwise the agent's parameters **and** optimizer state (a deep copy of ``state_dict()``, step
counters included) are restored to the snapshot taken before the first proposal, beta <- 1.5 beta,
and the proposal is made again from the snapshot.

Counting (our reading of "after max_backtracks failures keep pi_cur"): one first attempt plus at
most ``max_backtracks`` retries, i.e. ``1 + max_backtracks`` proposals. If all fail, the snapshot
is restored (pi_cur kept) and a rejection is returned. Every failure multiplies beta by
``beta_growth``, so the beta returned after a rejection is ``beta0 * 1.5^(max_backtracks + 1)``;
after an acceptance it is the beta of the accepted proposal. ``backtracks`` = number of retries.
A KL containing NaN fails the check. Gradients (``.grad``) are not part of the snapshot: the
proposal must zero them before use, as every training loop does. An LR scheduler is not part
of the snapshot either: step it outside ``propose`` (once per stage).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from satseq.errors import ConfigError


def kl_quantile(kl: Tensor, q: float) -> float:
    """``torch.quantile(kl, q)`` (linear interpolation) without torch.quantile's size limit; NaN if any NaN."""
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


@dataclass
class KLCheckResult:
    accepted: bool
    backtracks: int  # retries after the first proposal
    beta: float  # the beta to keep for this agent afterwards
    kl_quantile: float  # of the accepted proposal, or of the last failed one
    kl_mean: float
    kl_max: float
    attempts: list[tuple[float, float]] = field(default_factory=list)  # (beta, kl_quantile) per proposal


class QuantileKLController:
    """Propose, measure, accept or restore-and-retry with a larger beta."""

    def __init__(self, target_kl: float = 0.05, quantile: float = 0.99, max_backtracks: int = 5,
                 beta_growth: float = 1.5):
        if not target_kl > 0:
            raise ConfigError(f"algorithm.kl_ctrl.target_kl must be > 0, got {target_kl}")
        if not 0.0 < quantile <= 1.0:
            raise ConfigError(f"algorithm.kl_ctrl.quantile must be in (0, 1], got {quantile}")
        if int(max_backtracks) != max_backtracks or max_backtracks < 0:
            raise ConfigError(f"sat_seq.max_backtracks must be an integer >= 0, got {max_backtracks}")
        if not beta_growth > 1.0:
            raise ConfigError(f"beta_growth must be > 1, got {beta_growth}")
        self.target_kl = float(target_kl)
        self.quantile = float(quantile)
        self.max_backtracks = int(max_backtracks)
        self.beta_growth = float(beta_growth)

    def run(
        self,
        params: Sequence[torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        beta: float,
        propose: Callable[[float], None],
        measure_kl: Callable[[], Tensor],
    ) -> KLCheckResult:
        """Run the check; ``propose(beta)`` updates ``params`` in place, ``measure_kl()`` gives per-state KL."""
        params = list(params)
        with torch.no_grad():
            p_snap = [p.detach().clone() for p in params]
        o_snap: dict[str, Any] = copy.deepcopy(optimizer.state_dict())
        attempts: list[tuple[float, float]] = []
        beta = float(beta)
        q = mean = mx = float("nan")
        for attempt in range(self.max_backtracks + 1):
            propose(beta)
            with torch.no_grad():
                kl = measure_kl().detach()
                q = kl_quantile(kl, self.quantile)
                mean = float(kl.double().mean()) if kl.numel() else 0.0
                mx = float(kl.double().max()) if kl.numel() else 0.0
            attempts.append((beta, q))
            if q <= self.target_kl:  # False for NaN
                return KLCheckResult(True, attempt, beta, q, mean, mx, attempts)
            self._restore(params, p_snap, optimizer, o_snap)
            beta *= self.beta_growth
        return KLCheckResult(False, self.max_backtracks, beta, q, mean, mx, attempts)

    @staticmethod
    def _restore(params: list[torch.nn.Parameter], p_snap: list[Tensor], optimizer: torch.optim.Optimizer,
                 o_snap: dict[str, Any]) -> None:
        with torch.no_grad():
            for p, s in zip(params, p_snap):
                p.copy_(s)
        # load_state_dict keeps references to the tensors it is given: hand it a fresh copy so
        # the snapshot stays pristine for the next retry.
        optimizer.load_state_dict(copy.deepcopy(o_snap))
