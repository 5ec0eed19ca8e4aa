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

The built-in workflows fill in one template, :class:`EpisodeWorkflow`: its ``rollout`` expands the
problems into episodes and sets up their streams once, then calls the workflow's ``play(episodes,
turns)``, which only builds prompts, samples turns (``turns.sample(agent, texts, rows)``, one
batched ``engine.generate``) and records them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, TypeVar, runtime_checkable

import torch

from satseq.records import Episode, Problem
from satseq.rollout.streams import episode_streams, pick
from satseq.rollout.types import Generation, SamplingParams

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


@dataclass
class TurnSampler:
    """What every turn of one ``rollout`` call samples with: the pool, the engine, the sampling
    settings, the episodes' streams (one per episode, or None) and the prompt format."""

    pool: Any
    engine: Any
    sampling: SamplingParams
    streams: list[torch.Generator] | None
    fmt: Any

    def sample(self, agent: str, texts: list[str], rows: Sequence[int] | None = None) -> list[Generation]:
        """One batched turn: ``agent`` answers each prompt text; text ``i`` draws from the stream of
        episode ``rows[i]`` (``rows`` None: every episode, in order)."""
        streams = self.streams if rows is None else pick(self.streams, rows)
        return self.engine.generate(self.pool.module(agent), [self.fmt.encode(t) for t in texts], self.sampling,
                                    streams)

    def sample_ids(self, agent: str, prompts: list[list[int]], rows: Sequence[int] | None = None) -> list[Generation]:
        """One batched turn from token prompts, used as given (a conversation continued token for token:
        :mod:`satseq.envs.conversation`); prompt ``i`` draws from the stream of episode ``rows[i]``."""
        streams = self.streams if rows is None else pick(self.streams, rows)
        return self.engine.generate(self.pool.module(agent), [list(p) for p in prompts], self.sampling, streams)


class EpisodeWorkflow:
    """The template of a workflow: roles checked once, episodes expanded once, streams set up once.

    ``rollout`` builds ``group_size`` episodes per problem, problem-major (episode ``p * group_size +
    g`` has ``group = p``), gives episode ``e`` the stream ``streams[e]`` (``streams`` as passed, else
    ``episode_streams(generator, E)``: E seeds drawn from ``generator``, one generator each; None
    without a generator), and hands the episodes to :meth:`play` with a :class:`TurnSampler`."""

    name: str
    roles: tuple[str, ...] | None = None

    def __init__(self, agents: dict[str, str], prompt_format, sampling: SamplingParams):
        self.agents = check_roles(self.name, self.roles, agents)
        self.fmt = prompt_format
        self.sampling = sampling

    def rollout(self, problems: list[Problem], pool, engine, *, group_size: int = 1,
                generator: torch.Generator | None = None, sampling: SamplingParams | None = None,
                streams: list[torch.Generator] | None = None) -> list[Episode]:
        episodes = [Episode(problem=p, group=g) for g, p in enumerate(problems) for _ in range(group_size)]
        streams = streams if streams is not None else episode_streams(generator, len(episodes))
        self.play(episodes, TurnSampler(pool, engine, sampling or self.sampling, streams, self.fmt))
        return episodes

    def play(self, episodes: list[Episode], turns: TurnSampler) -> None:
        """The workflow's turns: append them to ``episodes`` and set each episode's prediction."""
        raise NotImplementedError


def rollout_slice(workflow, problems: list, lo: int, hi: int, pool, engine, *, group_size: int, streams,
                  **options) -> list[Episode]:
    """``workflow.rollout`` of ``problems[lo:hi]`` alone, each episode sampling from the stream the whole
    batch gives it (``streams``: :func:`~satseq.rollout.streams.episode_streams` of all the problems,
    problem-major), so its tokens are the whole batch's; ``Episode.group`` renumbered to the problem's
    index in ``problems``. What splits a batch (data-parallel ranks, the pipelined relay's micro-batches,
    a test's toy strategy) rolls each piece out with it."""
    if hi <= lo:
        return []
    episodes = workflow.rollout(problems[lo:hi], pool, engine, group_size=group_size,
                                streams=pick(streams, range(lo * group_size, hi * group_size)), **options)
    for ep in episodes:
        ep.group += lo
    return episodes


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
