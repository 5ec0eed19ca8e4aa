"""The ``textarena`` environment (:mod:`satseq.envs.textarena.env`)."""
