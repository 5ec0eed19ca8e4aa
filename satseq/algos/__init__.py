"""Advantage estimators, KL estimators and policy losses as pure tensor functions.

Importing this package fills :data:`ADV_ESTIMATORS` and :data:`POLICY_LOSSES`: the generic
estimators here (``grpo``, ``dr_grpo``, ``ppo``, ``gspo``) and the SAT-Seq ones that live with
the method (``seqaware``, ``sat_seq``). Plain ``import`` statements (not ``from ... import``) keep
this safe when a SAT-Seq module is imported first and imports the registry back.
"""
from __future__ import annotations

import satseq.algos.advantages  # noqa: F401  (registers grpo, dr_grpo)
import satseq.algos.kl  # noqa: F401
import satseq.algos.losses  # noqa: F401  (registers ppo, gspo)
import satseq.methods.sat_seq.adv.seqaware  # noqa: F401  (registers seqaware)
import satseq.methods.sat_seq.loss.seq_ratio_loss  # noqa: F401  (registers sat_seq)
import satseq.methods.apo.loss  # noqa: F401  (registers apo)
from satseq.algos.registry import (
    ADV_ESTIMATORS,
    POLICY_LOSSES,
    get_adv,
    get_loss,
    register_adv,
    register_loss,
)

__all__ = ["ADV_ESTIMATORS", "POLICY_LOSSES", "get_adv", "get_loss", "register_adv", "register_loss"]
