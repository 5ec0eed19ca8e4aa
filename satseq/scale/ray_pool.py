"""The driver's view of agents that live in Ray actors (``trainer.backend=ray``, docs/scale.md).

:class:`RemotePool` stands where a local run has its :class:`~satseq.models.agents.AgentPool`, with
the parts of it the driver uses: ``names``, ``tokenizer``, ``mode``, ``module(name)`` (an
:class:`AgentRef`: the agent's name and model config, no weights), weights in and out
(``trainable_state`` / ``load_trainable_state``, through Ray's object store) and ``save_agent``
(written by the actor). :class:`RayEngine` stands where the local rollout engine is: a
workflow's ``engine.generate(pool.module(agent), prompts, sampling, streams)`` runs in the actor
hosting ``agent``. So every workflow, the held-out evaluation and SAT-Seq's certificate run
unchanged against actors.

Sampling streams: a call with one generator splits it into per-row streams here, in the driver,
exactly as the local engine does (:func:`~satseq.rollout.streams.as_row_streams`); the streams
travel to the actor and their advanced states come back into the driver's generator objects, so
the next turn (possibly another actor) continues each episode's stream where it stopped.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from satseq.errors import SatseqError
from satseq.rollout.streams import as_row_streams


@dataclass(frozen=True)
class AgentRef:
    """What ``RemotePool.module(name)`` returns: the agent's name and its model's config."""

    name: str
    config: object = None


class RemotePool:
    def __init__(self, hosts: dict, tokenizer, mode: str, configs: dict):
        """``hosts``: agent name -> the actor handle hosting it (in turn order)."""
        self.names = list(hosts)
        self.hosts = dict(hosts)
        self.tokenizer = tokenizer
        self.mode = mode
        self.device = "ray"
        self._configs = dict(configs)

    def _check(self, name: str):
        if name not in self.hosts:
            raise SatseqError(f"unknown agent '{name}' (agents: {', '.join(self.names)})")
        return self.hosts[name]

    def host(self, name: str):
        """The actor hosting agent ``name``."""
        return self._check(name)

    def actors(self) -> list:
        """Each actor once, in the order of the agents they host."""
        seen: dict = {}
        for n in self.names:
            seen.setdefault(id(self.hosts[n]), self.hosts[n])
        return list(seen.values())

    def module(self, name: str) -> AgentRef:
        self._check(name)
        return AgentRef(name, self._configs.get(name))

    def trainable_state(self, name: str) -> dict:
        import ray

        return ray.get(self._check(name).trainable_state.remote(name))

    def load_trainable_state(self, name: str, state: dict) -> None:
        import ray

        ray.get(self._check(name).load_trainable_state.remote(name, state))

    def save_agent(self, name: str, out_dir) -> Path:
        import ray

        return Path(ray.get(self._check(name).save_agent.remote(name, str(out_dir))))

    def parameters(self, name: str):
        raise SatseqError(f"agent '{name}' lives in a Ray actor (trainer.backend=ray): its parameters are not "
                          "in the driver; this method is not supported with trainer.backend=ray")

    named_trainable = keep_reference = reference = enable_gradient_checkpointing = parameters


class RayEngine:
    """``generate`` for agents in actors (see the module docstring)."""

    def __init__(self, pool: RemotePool):
        self.pool = pool

    def generate(self, model, prompts: list[list[int]], sampling, generator=None):
        import ray

        if not isinstance(model, AgentRef):
            raise SatseqError("trainer.backend=ray: the rollout engine generates for agents in actors "
                              f"(pool.module(name)), not for a {type(model).__name__}")
        streams = as_row_streams(generator, len(prompts))
        gens, states = ray.get(self.pool.host(model.name).generate.remote(model.name, prompts, sampling, streams))
        if streams is not None:
            for s, state in zip(streams, states):
                s.set_state(state)
        return gens
