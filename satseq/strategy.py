"""The Strategy: everything about where a run's work happens, behind one object the loop calls.

The loop (:mod:`satseq.loop`), the updaters (:mod:`satseq.update`), the checkpoint code
(:mod:`satseq.checkpoint`) and the methods never call torch.distributed, FSDP or Ray. They ask the
run's :class:`Strategy`, which owns

* the layout: checks (:meth:`Strategy.check_layout`), who writes (:attr:`is_main`), who goes first;
* building: the runtime (:meth:`build_runtime`), sharding and wrapping (:meth:`prepare`), the
  workflow and the updater in their distributed form (:meth:`workflow`, :meth:`updater`);
* rollouts: the stage's problems over the workers (:meth:`rollout`), the explicit weight update
  of the rollout engine before it generates (:meth:`update_weights`), and the agents and engine that
  asynchronous rollouts generate with (:meth:`rollout_side`, ``trainer.max_staleness > 0``);
* the trainer's passes: a turn batch's rows over the workers (:meth:`logprobs`), the backward with
  its gradient reduction and clipping (:meth:`backward`), sums over workers (:meth:`all_reduce_sum`);
* checkpoints: the pool exports are written from (:meth:`export_pool`), each rank's RNG
  (:meth:`rng_states`), the trainer state's collective IO (:meth:`save_trainer_state`,
  :meth:`load_trainer_state`).

This base class *is* the one-process strategy (``trainer.backend=local`` without torchrun): every
method does the plain thing. The others live in ``satseq/scale/`` (one file each: ``local``,
``replicate``, ``fsdp2``, ``ray``) and are looked up by name in the registry
(:func:`satseq.registry.strategy_for`); a strategy defined elsewhere (a test file) is registered with
:func:`satseq.registry.register_strategy` and selected with ``trainer.strategy=<name>``.

The strategy of the run in progress is process-wide (:func:`current`), as torch.distributed's
process group is: the update helpers that every method calls (``batch_logprobs``,
``optimizer_step``) read it, so a method's updater is written once for every layout.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch


class Strategy:
    """One process, nothing distributed: the reference every other strategy must reproduce."""

    name = "local"
    world_size = 1
    rank = 0
    info = None  # what run_info.json records about the cluster (Ray), else None

    def __init__(self, cfg=None):
        self.cfg = cfg

    # ------------------------------------------------------------------ the layout
    @classmethod
    def check_layout(cls, cfg, world: int) -> None:
        """One-line :class:`~satseq.errors.ConfigError`'s for a layout this strategy cannot run
        (called before any process group exists, so every rank prints the same line)."""

    @property
    def is_main(self) -> bool:
        """The process that writes outputs and talks to the console."""
        return self.rank == 0

    def main_first(self):
        """A block rank 0 runs first (it may write shared files the others then read)."""
        return nullcontext()

    def run_info(self) -> dict:
        """Entries of run_info.json that describe the layout."""
        return {}

    # ------------------------------------------------------------------ building the run
    def build_runtime(self, cfg, method, console):
        from satseq.runtime import build_runtime

        return build_runtime(cfg, method, console)

    def prepare(self, cfg, rt) -> None:
        """Shard and wrap the runtime's agents and engine (after they are loaded, before the method
        prepares its updater)."""

    def workflow(self, workflow):
        return workflow

    def updater(self, method, cfg, rt, generator, prepared):
        return method.build_updater(cfg, rt, generator, prepared)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    # ------------------------------------------------------------------ rollouts
    def update_weights(self, engine) -> None:
        """Bring the rollout engine's weights up to the trainer's (an explicit step before every
        rollout and held-out evaluation; nothing where the engine reads the trained modules)."""

    def rollout(self, workflow, problems: list, pool, engine, *, group_size: int, generator, gather: bool = True,
                **options) -> list:
        """``workflow.rollout`` of ``problems``; a distributed strategy splits them over its workers and
        returns the episodes one process would produce (all of them when ``gather``, else this
        worker's, ``Episode.group`` being the problem's index in ``problems``)."""
        self.update_weights(engine)
        return workflow.rollout(problems, pool, engine, group_size=group_size, generator=generator, **options)

    def rollout_side(self, cfg, rt):
        """``(pool, engine)`` for the rollout thread of ``trainer.max_staleness > 0``
        (:mod:`satseq.async_rollouts`): a copy of the trainer's agents that the thread loads each
        scheduled version into, and an engine of its own (a vLLM engine is another instance than the
        trainer's, which evaluations use: one engine is never called from two threads)."""
        import copy

        from satseq.models.agents import AgentPool
        from satseq.runtime import run_engine

        pool = rt.pool
        if pool.mode == "full":
            side = AgentPool.full(pool.names, [copy.deepcopy(pool.module(n)) for n in pool.names], pool.tokenizer,
                                  device=pool.device)
        else:
            side = AgentPool(pool.names, pool.tokenizer, mode="lora", peft_model=copy.deepcopy(pool.root_modules()[0]),
                             device=pool.device)
        return side, run_engine(cfg, pool.tokenizer, rt.device, instance="rollout-thread")

    # ------------------------------------------------------------------ the trainer's passes
    def logprobs(self, model, batch, compute, *, chunk: int, pad_id: int, device, grad: bool, need_logits: bool):
        """``compute(batch, chunk)`` — the log-probs ``[B, R]``, mask (and log-softmax) of a turn batch —
        over this strategy's workers; every worker gets the whole batch back."""
        return compute(batch, chunk)

    def backward(self, loss: torch.Tensor, params: list, grad_clip: float) -> None:
        """``loss.backward()``, the gradients reduced over the workers, the global norm clipped to
        ``grad_clip`` (if > 0)."""
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)

    def all_reduce_sum(self, values):
        """Element-wise sum over the workers (a list of floats or a tensor)."""
        return values

    # ------------------------------------------------------------------ checkpoints
    def export_pool(self, rt):
        """The pool HF checkpoints and ``.pt`` exports are written from."""
        return rt.pool

    def rng_states(self) -> list | None:
        """Every worker's torch RNG state, when workers draw different numbers (dropout of their rows)."""
        return None

    def restore_rng(self, states: list | None) -> None:
        pass

    def save_trainer_state(self, run_dir, *, stage: int, pool, extra) -> None:
        """Write the trainer state after ``stage`` (every worker calls it; the ones that write call
        ``extra()`` for the loop's part: updater, generator, sampler)."""
        from satseq.checkpoint import save_trainer_state

        if self.is_main:
            save_trainer_state(run_dir, stage=stage, pool=pool, extra=extra())

    def load_trainer_state(self, run_dir, pool) -> dict | None:
        from satseq.checkpoint import load_trainer_state

        return load_trainer_state(run_dir, pool)


def launched_ranks() -> int:
    """``WORLD_SIZE`` set by torchrun (1 when not launched by it): how many processes run this run."""
    import os

    return int(os.environ.get("WORLD_SIZE", "1"))


_CURRENT: list[Strategy] = []
_LOCAL = Strategy()


def current() -> Strategy:
    """The strategy of the run in progress in this process (the one-process strategy outside a run)."""
    return _CURRENT[-1] if _CURRENT else _LOCAL


@contextmanager
def activate(strategy: Strategy):
    """Make ``strategy`` :func:`current` inside the block."""
    _CURRENT.append(strategy)
    try:
        yield strategy
    finally:
        _CURRENT.pop()
