"""The ``gym_text`` environment (:mod:`satseq.envs.gym_text.env`)."""
