"""Whose embedded task and warm start ``data.embedded_task`` names: besides ``default`` (the run's own
method's) and the named tasks of :mod:`satseq.models.embedded_tasks` (``chain``), the name of a method
with its own warm start (:attr:`satseq.methods.base.Method.warm_start_stem`) means that method's task and
warm start, for another method to train on: ``data.embedded_task=pag`` gives GRPO PAG's problems, its
solve prompt and its multi-turn warm start (``embedded/multiturn_seed<seed>``); ``mlmt`` MLMT's sum of three,
its solver prompt and its warm start (``embedded/mlmt_seed<seed>``). These are the one-policy baselines at
equal samples beside PAG and MLMT (``recipes/compare/pag.yaml`` / ``mlmt.yaml``).

:func:`task_owner` turns such a name into ``("default", that method)`` for the functions of
:mod:`satseq.models.embedded_tasks`, which then ask that method as they ask a run's own. Kept out of that
module on purpose: its code is part of the shipped chain warm start's fingerprint
(:data:`satseq.models.shipped.BUILD_MODULES`), which a new task name must not change. Methods are looked
up in the registry by name, at call time: nothing here imports a method.
"""
from __future__ import annotations

from satseq.models.embedded_tasks import DEFAULT, EMBEDDED_TASKS, config_defaults


def _methods_with_warm_starts() -> dict:
    from satseq.registry import METHODS, discover

    discover()
    return {name: m for name, m in sorted(METHODS.items()) if m.warm_start_stem}


def embedded_task_names() -> list[str]:
    """Every value ``data.embedded_task`` takes."""
    return [DEFAULT, *EMBEDDED_TASKS, *(n for n in _methods_with_warm_starts() if n not in EMBEDDED_TASKS)]


def task_owner(name: str, method):
    """``(task name, method)`` to pass to :mod:`satseq.models.embedded_tasks`: ``("default", owner)`` for a
    method's task, else ``(name, method)`` unchanged."""
    if name == DEFAULT or name in EMBEDDED_TASKS:
        return name, method
    return DEFAULT, _methods_with_warm_starts()[name]


def task_config_defaults(name: str) -> dict:
    """The config keys embedded task ``name`` sets when the user leaves them unset: a method's task brings
    that method's ``rollout.*`` defaults (MLMT's 96 new tokens); the others, :func:`config_defaults`'s."""
    if name == DEFAULT or name in EMBEDDED_TASKS:
        return config_defaults(name)
    _, owner = task_owner(name, None)
    return {k: v for k, v in owner.config_defaults.items() if k.startswith("rollout.")}


def warm_start_for(name: str, method, output_dir, **kw):
    """The warm start ``model.path=embedded`` means for ``method`` under ``data.embedded_task=name`` (built on
    first use): every caller (the runtime, Ray's actors, ``satseq compare``'s warm-start row) asks here."""
    from satseq.models.embedded_tasks import ensure_embedded_warm_start

    return ensure_embedded_warm_start(*task_owner(name, method), output_dir, **kw)


def task_for(name: str, method, seed: int = 0):
    """The task object ``embedded`` problems come from for ``method`` under ``data.embedded_task=name``."""
    from satseq.models.embedded_tasks import embedded_task

    return embedded_task(*task_owner(name, method), seed=seed)
