"""SAT-Seq's quantile-KL check with backtracking, driven across verl worker groups.

satseq's :class:`satseq.methods.sat_seq.kl.quantile_kl_ctrl.QuantileKLController` holds the agent's
parameters and optimizer in the same process. In verl they live in the agent's actor worker group, so the
same line search is driven through five calls (``SatSeqActorRolloutRefWorker`` in ``workers.py`` runs
the parameter side on every rank, :class:`StepSnapshot` below)::

    snapshot()            theta_cur and the optimizer state are kept
    propose(beta)         the agent's PPO epochs (verl's update_actor) with penalty beta
    measure_kl()          per-state KL(pi_new || pi_cur) at the agent's tokens (compute_log_prob)
    set_step_scale(s)     theta = theta_cur + s * (theta_prop - theta_cur), optimizer = snapshot
    restore()             theta_cur and the optimizer state, bit for bit

The decisions — the statistic (``kl_quantile``), the target, the shrink schedule ``alpha^j`` with
``beta <- beta_growth * beta`` per try, ``max_backtracks``, the ``on_fail`` and ``check`` ablations — are
the controller's own settings (``controller.quantile`` etc.), and the result is its
:class:`~satseq.methods.sat_seq.kl.quantile_kl_ctrl.KLCheckResult`. ``tests/test_kl_check.py`` runs both
on one model and asserts the same results and the same parameters.

verl has no registry for KL controllers (``core_algos.get_kl_controller`` knows ``fixed`` and
``adaptive``, for the in-reward KL), so the check is this module, called by the K-agent trainer.
The KL estimator is one of verl's sampled ones (``kl`` = k1, ``mse`` = k2, ``low_var_kl`` = k3,
``abs``): verl's ``compute_log_prob`` returns the sampled tokens' log-probs, not the vocabulary.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from satseq.algos.kl import kl_penalty, kl_quantile
from satseq.errors import ConfigError
from satseq.methods.sat_seq.kl.quantile_kl_ctrl import KLCheckResult, QuantileKLController

SAMPLED_ESTIMATORS = ("kl", "k1", "mse", "k2", "low_var_kl", "k3", "abs")


def controller_from_config(sat_seq_cfg, kl_ctrl_cfg) -> QuantileKLController:
    """satseq's controller from the recipe's ``sat_seq`` section and verl's ``algorithm.kl_ctrl``
    (``target_kl`` is verl's own key; the quantile and the line search are ``sat_seq.*``)."""
    target = kl_ctrl_cfg.get("target_kl", None)
    if target is None:
        raise ConfigError("algorithm.kl_ctrl.target_kl must be set for sat_seq (the KL check's target)")
    return QuantileKLController(target_kl=float(target), quantile=float(sat_seq_cfg.quantile),
                                max_backtracks=int(sat_seq_cfg.max_backtracks),
                                alpha=float(sat_seq_cfg.backtrack_alpha), statistic=str(sat_seq_cfg.statistic),
                                on_fail=str(sat_seq_cfg.on_fail), check=bool(sat_seq_cfg.check))


def per_state_kl(new_log_prob: Tensor, cur_log_prob: Tensor, response_mask: Tensor, estimator: str) -> Tensor:
    """KL(pi_new || pi_cur) at each response token of the batch, flattened (satseq's kl_penalty)."""
    if estimator not in SAMPLED_ESTIMATORS:
        raise ConfigError(f"sat_seq.kl_estimator must be a sampled estimator ({', '.join(SAMPLED_ESTIMATORS)}), "
                          f"got {estimator!r}")
    return kl_penalty(new_log_prob.float(), cur_log_prob.float(), estimator)[response_mask.bool()]


def line_search(controller: QuantileKLController, beta: float, *, snapshot: Callable[[], None],
                propose: Callable[[float], None], measure_kl: Callable[[], Tensor],
                set_step_scale: Callable[[float], None], restore: Callable[[], None]) -> KLCheckResult:
    """The controller's propose / check / shrink loop over remote parameters (module docstring)."""
    c = controller
    beta = float(beta)
    attempts: list[tuple[float, float]] = []
    snapshot()
    propose(beta)
    scale = 1.0
    q = mean = mx = float("nan")
    for j in range(c.max_backtracks + 1):
        if j > 0 and c.on_fail == "beta":  # propose again from theta_cur with a larger penalty
            beta *= c.beta_growth
            restore()
            propose(beta)
        elif j > 0:
            scale = c.alpha ** j
            beta *= c.beta_growth
            set_step_scale(scale)
        with torch.no_grad():
            kl = measure_kl().detach()
            q = kl_quantile(kl, c.quantile)
            mean = float(kl.double().mean()) if kl.numel() else 0.0
            mx = float(kl.double().max()) if kl.numel() else 0.0
        attempts.append((scale, q))
        checked = q if c.statistic == "quantile" else mean
        if not c.check or checked <= c.target_kl:  # False for NaN
            return KLCheckResult(True, j, beta, q, mean, mx, scale, attempts)
    restore()
    return KLCheckResult(False, c.max_backtracks, beta, q, mean, mx, 0.0, attempts)


@dataclass
class StepSnapshot:
    """theta_cur and the optimizer state of one agent on one rank (FSDP shards or plain tensors alike);
    the parameter side of :func:`line_search`, run by the worker on every rank."""

    params: list[Tensor]
    optimizer_state: Optional[dict]
    proposal: Optional[list[Tensor]] = None

    @classmethod
    def take(cls, parameters, optimizer: Any = None) -> "StepSnapshot":
        with torch.no_grad():
            params = [p.detach().clone() for p in parameters]
        state = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
        return cls(params, state)

    def set_step_scale(self, parameters, optimizer: Any, scale: float) -> None:
        """theta = theta_cur + scale * (theta_prop - theta_cur); the proposal is read on the first call.
        The optimizer goes back to the snapshot (its moments describe the full proposal, not this step)."""
        parameters = list(parameters)
        with torch.no_grad():
            if self.proposal is None:
                self.proposal = [p.detach().clone() for p in parameters]
            for p, s, d in zip(parameters, self.params, self.proposal):
                p.copy_(s + scale * (d - s))
        self._restore_optimizer(optimizer)

    def restore(self, parameters, optimizer: Any = None) -> None:
        with torch.no_grad():
            for p, s in zip(parameters, self.params):
                p.copy_(s)
        self.proposal = None
        self._restore_optimizer(optimizer)

    def _restore_optimizer(self, optimizer: Any) -> None:
        if optimizer is not None and self.optimizer_state is not None:
            optimizer.load_state_dict(copy.deepcopy(self.optimizer_state))
