"""Updaters of a ``trainer.backend=ray`` run: the driver keeps the control flow, actors do the math.

* ``ray_updater = "per_agent"`` (block-coordinate methods such as SAT-Seq): the method's own updater
  runs in the driver (advantages, agent order, the importance weights of the agents already updated,
  certificate, metrics), and each per-agent step runs in the actor hosting the agent, on the updater
  that actor built for its agents (its optimizer, β, trust-region check, π_cur snapshot) through the
  public contract :class:`satseq.update.loop.AgentSteps`: :class:`RemoteAgentSteps` sends the turn
  batch and the weights out, and the step's result comes back. Agents are updated one after another,
  as block-coordinate ascent requires.
* ``ray_updater = "whole"`` (one-agent methods such as GRPO): :class:`RemoteUpdater` runs the
  method's whole updater in the actor.

Both pass the run generator's state out and take it back (mini-batch shuffles), so the numbers
drawn are a local run's. State dicts have the local format (per-agent entries from the actor that
hosts each agent), plus each actor's torch RNG state, so a checkpoint resumes under either backend.
"""
from __future__ import annotations

ACTOR_RNG = "ray_actor_rng"


def _ray():
    import ray

    return ray


class RemoteAgentSteps:
    """:class:`satseq.update.loop.AgentSteps` in the actors of a :class:`~satseq.scale.ray_pool.RemotePool`:
    each actor builds the method's per-agent updater for the agents it hosts
    (:meth:`satseq.methods.base.Method.build_agent_updater`)."""

    def __init__(self, pool, generator):
        self.pool, self.gen = pool, generator
        self.actors = pool.actors()
        _ray().get([a.build_updater.remote("per_agent") for a in self.actors])

    def update_agent(self, name: str, batch, weights):
        res, out, metrics, state = _ray().get(self.pool.host(name).update_agent.remote(name, batch, weights,
                                                                                     self.gen.get_state()))
        self.gen.set_state(state)
        return res, out, metrics

    def _hosted(self, actor) -> set:
        return {n for n in self.pool.names if self.pool.hosts.get(n) is actor}

    def state_dict(self, driver_state: dict) -> dict:
        """The driver updater's ``driver_state`` with each per-agent entry (a dict keyed by agent name:
        β's, optimizer states) taken from the actor hosting that agent, and every actor's torch RNG."""
        states = _ray().get([a.updater_state.remote() for a in self.actors])
        merged = dict(driver_state)
        for actor, st in zip(self.actors, states):
            hosted = self._hosted(actor)
            for key, value in st["updater"].items():
                if isinstance(value, dict) and hosted & set(value):
                    merged[key] = {**merged.get(key, {}), **{n: v for n, v in value.items() if n in hosted}}
        return {**merged, ACTOR_RNG: [st["torch_rng"] for st in states]}

    def load_state_dict(self, state: dict) -> None:
        rngs = state.get(ACTOR_RNG)
        rngs = rngs if rngs is not None and len(rngs) == len(self.actors) else [None] * len(self.actors)
        _ray().get([a.load_updater_state.remote(state, rng) for a, rng in zip(self.actors, rngs)])


class RemoteUpdater:
    """A one-agent method's updater, whole, in the actor hosting its agent."""

    def __init__(self, actor, generator):
        self.actor, self.gen = actor, generator
        _ray().get(actor.build_updater.remote("whole"))

    def update(self, stage: int, episodes) -> dict:
        metrics, state = _ray().get(self.actor.update.remote(stage, episodes, self.gen.get_state()))
        self.gen.set_state(state)
        return metrics

    def state_dict(self) -> dict:
        st = _ray().get(self.actor.updater_state.remote())
        return {**st["updater"], ACTOR_RNG: [st["torch_rng"]]}

    def load_state_dict(self, state: dict) -> None:
        rng = state.get(ACTOR_RNG)
        updater_state = {k: v for k, v in state.items() if k != ACTOR_RNG}
        _ray().get(self.actor.load_updater_state.remote(updater_state, rng[0] if rng else None))
