"""``ray``: agents in Ray actors (``trainer.backend=ray``), the driver keeping the loop (docs/scale.md).

The runtime's agent pool and rollout engine are stand-ins whose calls go to the actors
(:mod:`satseq.scale.ray_runtime`); the workflow is the method's own, pipelined over micro-batches
with ``trainer.pipeline_micro_batches > 1`` (:mod:`satseq.scale.pipeline`); the updater is the
method's, in the form its :attr:`~satseq.methods.base.Method.ray_updater` declares
(:mod:`satseq.scale.ray_updaters`):

* ``"whole"``: the method's updater runs whole in the actor hosting its one agent;
* ``"per_agent"``: the method's updater runs in the driver, and each of its per-agent steps runs in
  the actor hosting that agent (the public contract :class:`satseq.update.loop.AgentSteps`, given to
  the updater as ``rt.agent_steps``).

Leaving the block (the loop's ``with strategy``) kills the actors.
"""
from __future__ import annotations

from satseq.errors import ConfigError
from satseq.registry import register_strategy
from satseq.strategy import Strategy


@register_strategy
class Ray(Strategy):
    name = "ray"

    @classmethod
    def check_layout(cls, cfg, world: int) -> None:
        from satseq.scale.fsdp import check_layout

        check_layout(cfg, world)
        if world > 1:
            raise ConfigError("config key 'trainer.backend': torchrun data parallelism runs with trainer.backend=local "
                              "(Ray places agents; torchrun splits one run's data: use one or the other)")

    def build_runtime(self, cfg, method, console):
        from satseq.scale.ray_runtime import build_ray_runtime

        rt, self.info, self.hosts = build_ray_runtime(cfg, method, console)
        self.pool = rt.pool
        return rt

    def rollout_side(self, cfg, rt):
        """Rollout actors beside the trainer's (``trainer.rollout_placement``, empty = as
        ``trainer.placement``): each hosts a copy of its agents and an engine; the rollout thread in the
        driver loads each scheduled version into them and drives the workflow against them, while the
        trainer's actors update."""
        from satseq.scale.ray_pool import RayEngine
        from satseq.scale.ray_runtime import placement_of

        pool, described = self.hosts.start(placement_of(cfg, rt.pool.names, "rollout_placement"))
        self.info = {**(self.info or {}), "rollout_actors": [
            {"agents": list(d["configs"]), "node_id": d["node_id"], "device": d["device"]} for d in described]}
        return pool, RayEngine(pool)

    def workflow(self, workflow):
        m = self.cfg.trainer.pipeline_micro_batches
        if m <= 1:
            return workflow
        from satseq.scale.pipeline import PipelinedWorkflow

        return PipelinedWorkflow(workflow, m)

    def updater(self, method, cfg, rt, generator, prepared):
        from satseq.scale.ray_updaters import RemoteAgentSteps, RemoteUpdater

        if method.ray_updater == "per_agent":
            rt.agent_steps = RemoteAgentSteps(self.pool, generator)
            return method.build_updater(cfg, rt, generator, prepared)
        return RemoteUpdater(self.pool.host(self.pool.names[0]), generator)

    def __exit__(self, *exc) -> None:
        import ray

        for a in self.hosts.actors:  # the trainer's actors and any rollout actors
            ray.kill(a)
