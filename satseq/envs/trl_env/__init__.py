"""The ``trl_env`` environment (:mod:`satseq.envs.trl_env.env`)."""
