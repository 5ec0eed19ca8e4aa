"""The ``coach`` environment (:mod:`satseq.envs.coach.env`)."""
