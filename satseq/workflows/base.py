"""The workflow contract and its registry.

A workflow is how roles interact on one problem: it builds each turn's prompt, calls the rollout
engine, extracts answers and decides the next turn. It never touches rewards or gradients. Every
workflow is constructed the same way and rolls out the same way::

    wf = WORKFLOWS["coach"](agents={"solver": "solver", "coach": "coach"}, prompt_format=fmt,
                            sampling=sampling, **options)
    episodes = wf.rollout(problems, pool, engine, group_size=4, generator=gen)

``agents`` maps each role the workflow needs (``roles``) to the pool agent that plays it; a role
list of ``None`` means "one role per agent, named after it" (``single``, ``relay``). Every turn is
recorded with :meth:`satseq.records.Turn.from_generation`, with ``role`` and ``agent`` set as
:mod:`satseq.records` describes. Episodes are ordered problem-major (episode ``p * group_size + g``)
and each samples from its own stream (:mod:`satseq.rollout.streams`): ``streams`` passes them in
(a shard or micro-batch of a larger batch), else they are drawn from ``generator``.
"""
from __future__ import annotations

from typing import Protocol, TypeVar, runtime_checkable

import torch

from satseq.records import Episode, Problem
from satseq.rollout.types import SamplingParams

W = TypeVar("W")

WORKFLOWS: dict[str, type] = {}


@runtime_checkable
class Workflow(Protocol):
    name: str
    roles: tuple[str, ...] | None       # the roles it needs; None = one role per agent
    agents: dict[str, str]              # role -> pool agent

    def rollout(self, problems: list[Problem], pool, engine, *, group_size: int = 1,
                generator: torch.Generator | None = None, sampling: SamplingParams | None = None,
                streams: list[torch.Generator] | None = None) -> list[Episode]: ...


def register_workflow(cls: W) -> W:
    """Class decorator: register a workflow class under its ``name``."""
    WORKFLOWS[cls.name] = cls
    return cls


def check_roles(name: str, needed, agents) -> dict[str, str]:
    """``agents`` as a role -> agent dict, checked to name an agent for every role ``needed``.

    Shorthands: a list of agent names (each plays the role named after it); one agent name (it
    plays every role ``needed``, or the one role named after it)."""
    if isinstance(agents, str):
        agents = {r: agents for r in needed} if needed is not None else {agents: agents}
    elif not isinstance(agents, dict):
        agents = {a: a for a in agents}
    agents = dict(agents)
    if not agents:
        raise ValueError(f"{name} workflow needs at least one agent")
    if needed is not None:
        missing = set(needed) - set(agents)
        if missing:
            raise ValueError(f"{name} workflow needs agents for roles {sorted(missing)}")
    return agents


def workflow_names() -> list[str]:
    """The registered workflows (the built-in ones are loaded first)."""
    _load_builtin()
    return sorted(WORKFLOWS)


def make_workflow(name: str, agents: dict[str, str], prompt_format, sampling: SamplingParams,
                  **options) -> Workflow:
    """Build the registered workflow ``name``."""
    from satseq.errors import ConfigError

    _load_builtin()
    if name not in WORKFLOWS:
        raise ConfigError(f"unknown workflow '{name}' (known: {', '.join(sorted(WORKFLOWS))})")
    return WORKFLOWS[name](agents, prompt_format, sampling, **options)


def _load_builtin() -> None:
    import importlib

    for mod in ("single", "relay", "coach", "self_verify"):
        importlib.import_module(f"satseq.workflows.{mod}")
