"""Updaters of a ``trainer.backend=ray`` run: the driver keeps the control flow, actors do the math.

* SAT-Seq: :class:`RayStageCoordinator` is the local
  :class:`~satseq.methods.sat_seq.stage_coordinator.StageCoordinator` (advantages, agent order,
  truncated-IS weights ``c = min(1, exp(Σ_{j updated} log π^j_new/π^j_cur))`` from the agents
  already updated, certificate, metrics) whose per-agent step ``_update_agent`` runs in the actor
  hosting the agent, on that actor's own coordinator (its optimizer, β, quantile-KL check with
  backtracking, π_cur snapshot). The episodes' turn batch and ``c`` go out, the sequence
  log-ratios and metrics come back; agents are updated one after another, as block-coordinate
  ascent requires.
* One-agent methods (GRPO): :class:`RemoteUpdater` runs the method's whole updater in the actor.

Both pass the run generator's state out and take it back (mini-batch shuffles), so the numbers
drawn are a local run's. ``state_dict`` has the local format (β's, optimizer states per agent), plus
each actor's torch RNG state, so a checkpoint resumes under either backend.
"""
from __future__ import annotations

from satseq.methods.sat_seq.stage_coordinator import StageCoordinator

ACTOR_RNG = "ray_actor_rng"


def _ray():
    import ray

    return ray


class RayStageCoordinator(StageCoordinator):
    """SAT-Seq's coordinator in the driver; ``pool`` is a :class:`~satseq.scale.ray_pool.RemotePool`."""

    def __init__(self, cfg, pool, generator, device: str = "cpu", certificate=None):
        super().__init__(cfg, pool, generator, device, certificate=certificate)
        self.actors = pool.actors()
        _ray().get([a.build_updater.remote("stage_coordinator") for a in self.actors])

    def _make_optimizers(self) -> dict:
        return {}  # each lives in the actor hosting its agent

    def _update_agent(self, name: str, batch, c):
        ray = _ray()
        res, seq_lr, metrics, state = ray.get(self.pool.host(name).update_agent.remote(name, batch, c,
                                                                                     self.gen.get_state()))
        self.gen.set_state(state)
        self.betas[name] = res.beta
        return res, seq_lr, metrics

    def state_dict(self) -> dict:
        states = _ray().get([a.updater_state.remote() for a in self.actors])
        betas, optimizers = dict(self.betas), {}
        for actor, st in zip(self.actors, states):
            hosted = [n for n in self.agents if self.pool.hosts.get(n) is actor]
            betas.update({n: st["updater"]["betas"][n] for n in hosted})
            optimizers.update(st["updater"]["optimizers"])
        return {"betas": betas, "optimizers": optimizers, "certificate_start": self.cert_start,
                ACTOR_RNG: [st["torch_rng"] for st in states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)  # β's and the certificate's start in the driver
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
