"""The Ray actor that hosts agents (``trainer.backend=ray``): their model or LoRA adapters, optimizers,
rollout engine and update step, built from the same code as a local run (docs/scale.md).

:class:`AgentHost` is a plain class; :mod:`satseq.scale.ray_runtime` turns it into an actor with
``ray.remote(AgentHost).options(num_cpus=..., num_gpus=..., resources=...)``, so ``ray`` is not
imported to define it. Inside, everything is the local code: :func:`~satseq.runtime.build_pool`
loads the agents (in LoRA mode all K adapters are created, as a local run creates them, so their
random initialisation is the same, then the other actors' adapters are deleted:
:meth:`~satseq.models.agents.AgentPool.only`), :class:`~satseq.rollout.hf_engine.HFEngine`
samples, and the updates are the method's per-agent steps (its
:meth:`~satseq.methods.base.Method.build_agent_updater`, through the public
:class:`satseq.update.loop.AgentSteps` contract) or the method's whole updater (a one-agent method).

Randomness stays the driver's: every call that samples or shuffles receives the generator state
(per-episode streams for sampling, the run generator for mini-batch order) and returns it
advanced, so a Ray run draws exactly the numbers a local run draws. The actor's own global torch
RNG (used only by dropout) is part of :meth:`state_dict`, for exact resume.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch


class AgentHost:
    """Agents ``names`` of the run ``cfg`` (a :class:`~satseq.config.TrainConfig` whose embedded model
    paths the driver has already resolved), on ``threads`` torch threads."""

    def __init__(self, cfg, names: list[str], all_names: list[str], paths: list, path_keys: list[str],
                 force_lora: bool, threads: int):
        from satseq.registry import get_method
        from satseq.runtime import build_pool, run_engine, setup_torch

        cfg = cfg.model_copy(update={"threads": cfg.threads or max(1, threads)})
        self.cfg, self.names = cfg, list(names)
        self.method = get_method(cfg.method)
        self.device = setup_torch(cfg)
        lora = force_lora or cfg.model.lora.enabled is True  # the driver resolved "auto" to a bool
        build = list(all_names) if lora else list(names)
        keep = [i for i, n in enumerate(all_names) if n in build]
        pool = build_pool(cfg, build, [paths[i] for i in keep], self.device, console=lambda *a, **k: None,
                          path_keys=[path_keys[i] for i in keep], force_lora=force_lora,
                          env=self.method.environment(cfg))
        self.pool = pool.only(self.names) if pool.names != self.names else pool
        if cfg.trainer.gradient_checkpointing:
            self.pool.enable_gradient_checkpointing()
        self.engine = run_engine(cfg, self.pool.tokenizer, self.device)
        self.gen = torch.Generator()
        self.updater = None

    # ------------------------------------------------------------------ what the driver needs to know
    def describe(self) -> dict:
        """Tokenizer, pool mode and each hosted agent's model config (prompt format, context length)."""
        import ray

        return {"tokenizer": self.pool.tokenizer, "mode": self.pool.mode, "device": self.device,
                "node_id": ray.get_runtime_context().get_node_id(),
                "configs": {n: getattr(self.pool.module(n), "config", None) for n in self.names}}

    # ------------------------------------------------------------------ rollout
    def generate(self, name: str, prompts: list[list[int]], sampling, streams):
        """Agent ``name`` samples one response per prompt; ``streams`` (one generator per row, or
        None) come back advanced, as their states."""
        gens = self.engine.generate(self.pool.module(name), prompts, sampling, streams)
        return gens, None if streams is None else [s.get_state() for s in streams]

    # ------------------------------------------------------------------ updates
    def build_updater(self, kind: str) -> None:
        """``per_agent``: the method's per-agent updater over the hosted agents (whose steps the
        driver's updater calls, :meth:`update_agent`); ``whole``: the method's own updater."""
        rt = SimpleNamespace(cfg=self.cfg, device=self.device, pool=self.pool, tokenizer=self.pool.tokenizer,
                             agent_steps=None)
        if kind == "per_agent":
            self.updater = self.method.build_agent_updater(self.cfg, rt, self.gen)
        else:
            self.updater = self.method.build_updater(self.cfg, rt, self.gen, {})

    def update_agent(self, name: str, batch, weights: torch.Tensor, gen_state: torch.Tensor):
        """One agent's step (:meth:`satseq.update.loop.AgentSteps.update_agent`) with the run
        generator's state; returns the step's result, log-ratios and metrics, and the advanced state."""
        self.gen.set_state(gen_state)
        res, out, metrics = self.updater.update_agent(name, batch, weights)
        return res, out, metrics, self.gen.get_state()

    def update(self, stage: int, episodes, gen_state: torch.Tensor):
        """The whole updater's stage (``whole``); returns its metrics and the advanced generator state."""
        self.gen.set_state(gen_state)
        metrics = self.updater.update(stage, episodes)
        return metrics, self.gen.get_state()

    def updater_state(self) -> dict:
        return {"updater": self.updater.state_dict(), "torch_rng": torch.get_rng_state()}

    def load_updater_state(self, state: dict, torch_rng: torch.Tensor | None) -> None:
        self.updater.load_state_dict(state)
        if torch_rng is not None:
            torch.set_rng_state(torch_rng)

    # ------------------------------------------------------------------ weights and checkpoints
    def trainable_state(self, name: str) -> dict:
        return {k: v.cpu() for k, v in self.pool.trainable_state(name).items()}

    def load_trainable_state(self, name: str, state: dict) -> None:
        self.pool.load_trainable_state(name, state)

    def save_agent(self, name: str, out_dir: str) -> str:
        """The agent's HF-format checkpoint, written by this actor (the run dir must be on a file
        system this node shares with the driver: one machine, or a cluster's shared storage)."""
        return str(self.pool.save_agent(name, out_dir))
