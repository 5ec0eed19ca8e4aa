"""Registries of advantage estimators and policy losses (verl ``core_algos.py`` pattern).

Every estimator and loss is a pure tensor function registered under a short name::

    @register_adv("grpo")
    def grpo_advantages(rewards, group_ids, ...): ...

    @register_loss("ppo")
    def ppo_clip_loss(logp, old_logp, advantages, mask, ...): ...

Configs name them (``grpo.adv_estimator``, ``ppo.policy_loss``, ``sat_seq.policy_loss``,
``apo.loss``), the config loader checks the names (:func:`check_name`), and updaters look them up
with :func:`get_adv` / :func:`get_loss`; an unknown name is a one-line
:class:`~satseq.errors.ConfigError` that lists the known names. A loss has a kind:
``clipped_pg`` (the one signature of :mod:`satseq.algos.losses`) or ``regression`` (A*-PO's). An
advantage estimator has a kind too: ``outcome`` (one reward per episode ``[E]`` and its group ids ->
advantages ``[E]``: grpo, dr_grpo, rloo, reinforce_pp) or ``turn`` (per-turn rewards ``[E, K]`` ->
per-turn advantages: SAT-Seq's seqaware); a config key naming an estimator of the wrong kind is a
load-time error naming the key.

Importing :mod:`satseq.algos` (the package, which re-exports the lookups) registers the generic entries (``grpo``, ``dr_grpo``, ``rloo``,
``reinforce_pp``, ``ppo``, ``gspo``); a method registers its own formulas in its own package (SAT-Seq's ``seqaware`` and
``sat_seq``, A*-PO's ``apo``) when it is imported, so this layer never imports a method.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from satseq.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

ADV_ESTIMATORS: dict[str, Callable[..., Any]] = {}
POLICY_LOSSES: dict[str, Callable[..., Any]] = {}
LOSS_KINDS: dict[str, str] = {}
ADV_KINDS: dict[str, str] = {}


def _register(table: dict[str, Callable[..., Any]], kind: str, name: str) -> Callable[[F], F]:
    def deco(fn: F) -> F:
        old = table.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"{kind} '{name}' is already registered by {old.__module__}.{old.__qualname__}")
        table[name] = fn
        return fn

    return deco


def register_adv(name: str, kind: str = "outcome") -> Callable[[F], F]:
    """Decorator: register an advantage estimator under ``name`` (``kind``: outcome or turn)."""
    ADV_KINDS[name] = kind
    return _register(ADV_ESTIMATORS, "advantage estimator", name)


def adv_names(kind: str | None = None) -> list[str]:
    return sorted(n for n in ADV_ESTIMATORS if kind is None or ADV_KINDS.get(n, "outcome") == kind)


def register_loss(name: str, kind: str = "clipped_pg") -> Callable[[F], F]:
    """Decorator: register a policy loss under ``name`` (``kind``: clipped_pg or regression)."""
    LOSS_KINDS[name] = kind
    return _register(POLICY_LOSSES, "policy loss", name)


def loss_names(kind: str | None = None) -> list[str]:
    return sorted(n for n in POLICY_LOSSES if kind is None or LOSS_KINDS.get(n) == kind)


def check_name(key: str, name: str, *, kind: str, of: str | None = None) -> None:
    """Config-load check: ``name`` (the value of config key ``key``) is a registered advantage
    estimator (``kind="adv"``; of kind ``of`` when given: outcome or turn) or loss of that kind; else
    a one-line ConfigError listing them."""
    if kind == "adv" and of is not None and name in ADV_ESTIMATORS and ADV_KINDS.get(name, "outcome") != of:
        raise ConfigError(f"config key '{key}': '{name}' is a {ADV_KINDS[name]} advantage estimator, this key takes "
                          f"an {of} one (known: {', '.join(adv_names(of))})")
    known = adv_names(of) if kind == "adv" else loss_names(kind)
    if name not in known:
        what = "advantage estimator" if kind == "adv" else f"{kind} policy loss"
        raise ConfigError(f"config key '{key}': unknown {what} '{name}' (known: {', '.join(known)})")


def _get(table: dict[str, Callable[..., Any]], kind: str, name: str) -> Callable[..., Any]:
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


