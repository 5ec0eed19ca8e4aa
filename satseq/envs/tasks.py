"""Which embedded task and warm start ``data.embedded_task`` names, for a run in environment ``env``:

* ``default``: the environment's own (:meth:`~satseq.envs.base.Environment.embedded_task`,
  :meth:`~satseq.envs.base.Environment.ensure_warm_start`);
* a named task of :mod:`satseq.models.embedded_tasks` (``chain``: the relay whose later seats build on
  earlier answers);
* the name of an environment with its own warm start (:attr:`~satseq.envs.base.Environment.warm_start_stem`:
  ``self_verify``, ``coach``; older configs named them ``pag`` and ``mlmt``,
  :attr:`~satseq.envs.base.Environment.task_aliases`): that environment's problems and warm start,
  played in this run's environment. ``data.embedded_task=coach`` with ``env.name=single`` is GRPO's one
  pass over MLMT's sum of three from MLMT's warm start: the one-policy baseline at equal samples
  (``recipes/compare/mlmt.yaml``, ``pag.yaml``).

:func:`task_env` turns such a name into ``("default", that environment)`` for the functions of
:mod:`satseq.models.embedded_tasks`, which ask an environment as they ask a run's own. Kept out of that
module on purpose: its code is part of the shipped chain warm start's fingerprint
(:data:`satseq.models.shipped.BUILD_MODULES`), which a new name must not change. Environments are looked
up in the registry by name, at call time.
"""
from __future__ import annotations

from satseq.models.embedded_tasks import DEFAULT, EMBEDDED_TASKS, config_defaults


def _envs_with_warm_starts() -> dict:
    """name (and each alias) -> the environment, for every environment with its own warm start."""
    from satseq.registry import ENVS, discover_envs

    discover_envs()
    out = {}
    for name, env in sorted(ENVS.items()):
        if env.warm_start_stem:
            out[name] = env
            out.update({alias: env for alias in env.task_aliases})
    return out


def embedded_task_names() -> list[str]:
    """Every value ``data.embedded_task`` takes."""
    return [DEFAULT, *EMBEDDED_TASKS, *(n for n in _envs_with_warm_starts() if n not in EMBEDDED_TASKS)]


def task_env(name: str, env):
    """``(task name, environment)`` to pass to :mod:`satseq.models.embedded_tasks`: ``("default", owner)``
    for an environment's task, else ``(name, env)`` unchanged."""
    if name == DEFAULT or name in EMBEDDED_TASKS:
        return name, env
    return DEFAULT, _envs_with_warm_starts()[name]


def task_config_defaults(name: str, cfg) -> dict:
    """The config keys embedded task ``name`` sets when the user leaves them unset: an environment's task
    brings that environment's ``rollout.*`` defaults (the coach's 96 new tokens); the others,
    :func:`~satseq.models.embedded_tasks.config_defaults`'s."""
    if name == DEFAULT or name in EMBEDDED_TASKS:
        return config_defaults(name)
    _, owner = task_env(name, None)
    return {k: v for k, v in owner.config_defaults(cfg).items() if k.startswith("rollout.")}


def warm_start_for(name: str, env, output_dir, **kw):
    """The warm start ``model.path=embedded`` means in ``env`` under ``data.embedded_task=name`` (built on
    first use): every caller (the runtime, Ray's actors, ``satseq compare``'s warm-start row) asks here."""
    from satseq.models.embedded_tasks import ensure_embedded_warm_start

    return ensure_embedded_warm_start(*task_env(name, env), output_dir, **kw)


def task_for(name: str, env, seed: int = 0):
    """The task object ``embedded`` problems come from in ``env`` under ``data.embedded_task=name``."""
    from satseq.models.embedded_tasks import embedded_task

    return embedded_task(*task_env(name, env), seed=seed)
