"""The ``single`` environment (:mod:`satseq.envs.single.env`)."""
