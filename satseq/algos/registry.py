"""Registries of advantage estimators and policy losses (verl ``core_algos.py`` pattern).

Every estimator and loss is a pure tensor function registered under a short name::

    @register_adv("grpo")
    def grpo_advantages(rewards, group_ids, ...): ...

    @register_loss("ppo")
    def ppo_clip_loss(logp, old_logp, advantages, mask, ...): ...

Configs name them (``algorithm.adv_estimator``, ``actor.policy_loss``) and trainers look them
up with :func:`get_adv` / :func:`get_loss`; an unknown name is a one-line
:class:`~satseq.errors.ConfigError` that lists the known names. Importing :mod:`satseq.algos`
fills both registries (including the SAT-Seq entries that live in ``satseq.methods.sat_seq``).
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from satseq.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

ADV_ESTIMATORS: dict[str, Callable[..., Any]] = {}
POLICY_LOSSES: dict[str, Callable[..., Any]] = {}


def _register(table: dict[str, Callable[..., Any]], kind: str, name: str) -> Callable[[F], F]:
    def deco(fn: F) -> F:
        old = table.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"{kind} '{name}' is already registered by {old.__module__}.{old.__qualname__}")
        table[name] = fn
        return fn

    return deco


def register_adv(name: str) -> Callable[[F], F]:
    """Decorator: register an advantage estimator under ``name``."""
    return _register(ADV_ESTIMATORS, "advantage estimator", name)


def register_loss(name: str) -> Callable[[F], F]:
    """Decorator: register a policy loss under ``name``."""
    return _register(POLICY_LOSSES, "policy loss", name)


def _get(table: dict[str, Callable[..., Any]], kind: str, name: str) -> Callable[..., Any]:
    _populate()
    try:
        return table[name]
    except KeyError:
        known = ", ".join(sorted(table))
        raise ConfigError(f"unknown {kind} '{name}' (known: {known})") from None


def get_adv(name: str) -> Callable[..., Any]:
    """The advantage estimator registered as ``name``; ConfigError if there is none."""
    return _get(ADV_ESTIMATORS, "advantage estimator", name)


def get_loss(name: str) -> Callable[..., Any]:
    """The policy loss registered as ``name``; ConfigError if there is none."""
    return _get(POLICY_LOSSES, "policy loss", name)


def _populate() -> None:
    # Importing the package registers everything; harmless when already imported.
    import satseq.algos  # noqa: F401
