"""satseq: multi-agent, multi-turn RL post-training of LLMs on verifiable reasoning.

``satseq.train(config, **overrides)`` and ``satseq.evaluate(run_dir, dataset=...)`` are the Python
API (:mod:`satseq.api`); ``satseq`` on the command line does the same. The seed notebooks' trainer objects
(``satseq.AStarPO_PAG_Trainer_WithMetrics``) are thin fronts on it (:mod:`satseq.seed_trainers`).
"""
__version__ = "0.1.0"

__all__ = ["AStarPO_PAG_Trainer_WithMetrics", "TrainResult", "evaluate", "load", "train"]
_SEED_TRAINERS = ("AStarPO_PAG_Trainer_WithMetrics",)


def __getattr__(name):  # lazy: `import satseq` stays light (no torch until used)
    if name in _SEED_TRAINERS:
        from satseq import seed_trainers

        return getattr(seed_trainers, name)
    if name in __all__:
        from satseq import api

        return getattr(api, name)
    raise AttributeError(f"module 'satseq' has no attribute {name!r}")
