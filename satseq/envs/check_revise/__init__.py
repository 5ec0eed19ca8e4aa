"""The ``check_revise`` environment (:mod:`satseq.envs.check_revise.env`)."""
