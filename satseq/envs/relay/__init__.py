"""The ``relay`` environment (:mod:`satseq.envs.relay.env`)."""
