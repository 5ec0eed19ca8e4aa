"""The registries: every training method (algorithm) is one :class:`Method` registered under its name,
every environment one :class:`~satseq.envs.base.Environment`, every strategy one class.

A method owns all that is particular to it (``methods/<name>/``): the workflow it trains with,
its config section and defaults, how rewards are assigned, its updater, its held-out metrics, its
dashboard layout, its embedded task and warm start. The loop (:mod:`satseq.loop`), the CLI,
``satseq eval`` and ``satseq plot`` look a method up here and never name one::

    from satseq.registry import Method, register_method

    @register_method
    class Reinforce(Method):
        name = "reinforce"
        def build_updater(self, cfg, rt, generator): ...

Built-in methods are found by :func:`discover`: every package ``satseq/methods/<name>/`` with a
``method.py`` is imported (``importlib``, so this module has no static dependency on any method:
adding a method is one new folder). A method defined elsewhere (a test file, a user's package)
is registered by the decorator and then works everywhere a built-in does. The base class lives in
:mod:`satseq.methods.base`.
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from typing import TypeVar

from satseq.errors import ConfigError

T = TypeVar("T")

METHODS: dict[str, object] = {}
_discovered = False


def _register_instance(table: dict, kind: str, cls: T) -> T:
    """An instance of ``cls`` in ``table`` under ``cls.name`` (re-registering the same class is a no-op;
    a different class under a taken name is an error)."""
    name = getattr(cls, "name", "")
    if not name:
        raise ValueError(f"{cls!r}: {'an' if kind[0] in 'aeiou' else 'a'} {kind} needs a non-empty `name`")
    old = table.get(name)
    if old is not None and (type(old).__module__, type(old).__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"{kind} '{name}' is already registered by {type(old).__module__}.{type(old).__qualname__}")
    table[name] = cls()
    return cls


def register_method(cls: T) -> T:
    """Class decorator: register an instance of ``cls`` under ``cls.name`` (re-registering the same
    class is a no-op; a different class under a taken name is an error)."""
    return _register_instance(METHODS, "method", cls)


def _import_plugins(package: str, module: str) -> None:
    """Import ``<package>.<name>.<module>`` for every sub-package ``<name>`` that has one (they register
    themselves)."""
    pkg = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.ispkg and importlib.util.find_spec(f"{package}.{info.name}.{module}") is not None:
            importlib.import_module(f"{package}.{info.name}.{module}")


def discover() -> None:
    """Import every built-in ``satseq.methods.<name>.method`` module once (they register themselves)."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    _import_plugins("satseq.methods", "method")


def method_names() -> list[str]:
    discover()
    return sorted(METHODS)


def get_method(name: str):
    """The registered method ``name``; a one-line ConfigError listing the known names otherwise."""
    discover()
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(f"config key 'method': unknown method '{name}' (known: {', '.join(sorted(METHODS))})") from None


def default_method():
    """The method ``method`` defaults to: the one whose class sets ``is_default = True`` itself (not
    inherited), or None."""
    discover()
    for m in METHODS.values():
        if vars(type(m)).get("is_default", False):
            return m
    return None


def method_for_env(env: str):
    """The method that stands for environment ``env`` (``Method.owns_env``: GRPO for ``single``, MLMT for
    ``coach``): a single model evaluated in that environment is scored as that method's policy would be."""
    discover()
    for name in sorted(METHODS):
        m = METHODS[name]
        if getattr(m, "env", None) == env and getattr(m, "owns_env", False):
            return m
    return None


# ---------------------------------------------------------------------------- environments
ENVS: dict[str, object] = {}
_envs_discovered = False


def register_env(cls: T) -> T:
    """Class decorator: register an instance of the :class:`satseq.envs.base.Environment` subclass ``cls``
    under ``cls.name`` (``env.name=<name>`` selects it; re-registering the same class is a no-op)."""
    return _register_instance(ENVS, "environment", cls)


def discover_envs() -> None:
    """Import every built-in ``satseq.envs.<name>.env`` module once (they register themselves)."""
    global _envs_discovered
    if _envs_discovered:
        return
    _envs_discovered = True
    _import_plugins("satseq.envs", "env")


def env_names() -> list[str]:
    discover_envs()
    return sorted(ENVS)


def get_env(name: str):
    """The registered environment ``name``; a one-line ConfigError listing the known names otherwise."""
    discover_envs()
    try:
        return ENVS[name]
    except KeyError:
        raise ConfigError(f"config key 'env.name': unknown environment '{name}' (known: {', '.join(sorted(ENVS))})") \
            from None


def env_of(cfg):
    """The environment a config runs in: ``env.name``, else its method's default (``Method.env``)."""
    return get_env(cfg.env.name or get_method(cfg.method).env)


# ---------------------------------------------------------------------------- strategies
STRATEGIES: dict[str, type] = {}
# the built-in strategies, one module each under satseq/scale/ (imported when first asked for: the
# local path never imports torch.distributed's FSDP or Ray)
_BUILTIN_STRATEGIES = {"local": "satseq.scale.local", "replicate": "satseq.scale.replicate",
                       "fsdp2": "satseq.scale.fsdp2", "ray": "satseq.scale.ray_strategy"}


def register_strategy(cls: T) -> T:
    """Class decorator: register a :class:`satseq.strategy.Strategy` subclass under ``cls.name``
    (``trainer.strategy=<name>`` selects it; re-registering the same class is a no-op)."""
    name = getattr(cls, "name", "")
    if not name:
        raise ValueError(f"{cls!r}: a strategy needs a non-empty `name`")
    old = STRATEGIES.get(name)
    if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"strategy '{name}' is already registered by {old.__module__}.{old.__qualname__}")
    STRATEGIES[name] = cls
    return cls


def get_strategy(name: str) -> type:
    """The strategy class registered as ``name``; a one-line ConfigError naming ``trainer.strategy`` otherwise."""
    if name not in STRATEGIES and name in _BUILTIN_STRATEGIES:
        importlib.import_module(_BUILTIN_STRATEGIES[name])
    try:
        return STRATEGIES[name]
    except KeyError:
        known = sorted(set(STRATEGIES) | set(_BUILTIN_STRATEGIES))
        raise ConfigError(f"config key 'trainer.strategy': unknown strategy '{name}' (known: {', '.join(known)})") \
            from None


def strategy_name(cfg, world: int) -> str:
    """Which strategy runs ``cfg`` on ``world`` processes: ``ray`` for ``trainer.backend=ray``; else
    ``trainer.strategy``, where ``replicate`` on one process is ``local`` (they are the same there)."""
    if cfg.trainer.backend == "ray":
        return "ray"
    if cfg.trainer.strategy == "replicate" and world <= 1:
        return "local"
    return cfg.trainer.strategy


def check_layout(cfg, world: int) -> type:
    """The strategy class for ``cfg`` on ``world`` processes, after its layout checks (one-line errors)."""
    cls = get_strategy(strategy_name(cfg, world))
    cls.check_layout(cfg, world)
    return cls
