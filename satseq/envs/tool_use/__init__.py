"""The ``tool_use`` environment (:mod:`satseq.envs.tool_use.env`)."""
