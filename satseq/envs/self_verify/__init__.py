"""The ``self_verify`` environment (:mod:`satseq.envs.self_verify.env`)."""
