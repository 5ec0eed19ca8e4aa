"""Advantage estimators, KL estimators and policy losses as pure tensor functions.

Importing this package fills :data:`ADV_ESTIMATORS` and :data:`POLICY_LOSSES` with the generic
entries (``grpo``, ``dr_grpo``, ``rloo``, ``reinforce_pp``, ``ppo``, ``gspo``); DAPO's reward
shaping and group filter are plain functions in :mod:`satseq.algos.shaping`. A*-PO's regression loss
``apo`` registers itself when :mod:`satseq.algos.regression` is imported (A*-PO and PAG's
``pag.update=apo`` import it); SAT-Seq's formulas from their method's package (``satseq.methods.sat_seq``:
``seqaware``, ``sat_seq``); this package never imports a method.
"""
from __future__ import annotations

import satseq.algos.advantages  # noqa: F401  (registers grpo, dr_grpo, rloo, reinforce_pp)
import satseq.algos.kl  # noqa: F401
import satseq.algos.losses  # noqa: F401  (registers ppo, gspo)
from satseq.algos.registry import (
    ADV_ESTIMATORS,
    POLICY_LOSSES,
    check_name,
    get_adv,
    get_loss,
    register_adv,
    register_loss,
)

__all__ = ["ADV_ESTIMATORS", "POLICY_LOSSES", "check_name", "get_adv", "get_loss", "register_adv", "register_loss"]
