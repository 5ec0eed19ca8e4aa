"""satseq: multi-agent, multi-turn RL post-training of LLMs on verifiable reasoning.

``satseq.train(config, **overrides)`` and ``satseq.evaluate(run_dir, dataset=...)`` are the Python
API (:mod:`satseq.api`); ``satseq`` on the command line does the same.
"""
__version__ = "0.1.0"

__all__ = ["TrainResult", "evaluate", "load", "train"]


def __getattr__(name):  # lazy: `import satseq` stays light (no torch until used)
    if name in __all__:
        from satseq import api

        return getattr(api, name)
    raise AttributeError(f"module 'satseq' has no attribute {name!r}")
