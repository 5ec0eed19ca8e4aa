"""The trainer objects the seed documents' notebooks use, as thin fronts on satseq's Python API
(:func:`satseq.train`): each maps the seed's arguments onto config keys and trains nothing itself.

- :class:`~satseq.seed_trainers.astarpo_pag.AStarPO_PAG_Trainer_WithMetrics`: the A*-PO + PAG seed's
  trainer (``recipes/apo_pag/AstarPO_PAG_implementation.ipynb``); also ``satseq.AStarPO_PAG_Trainer_WithMetrics``.
"""
from satseq.seed_trainers.astarpo_pag import AStarPO_PAG_Trainer_WithMetrics

__all__ = ["AStarPO_PAG_Trainer_WithMetrics"]
