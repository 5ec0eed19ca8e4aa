"""The ``code_answer`` environment (:mod:`satseq.envs.code_answer.env`)."""
