"""``replicate``: every rank holds every agent whole; data parallel over torchrun's ranks
(``torchrun --nproc_per_node N -m satseq.cli train ...``, docs/scale.md).

Every rank builds the same run (same seed, generator and sampler), so every rank takes the same
decisions; the work is split and the results exchanged with the collectives of :mod:`satseq.scale.ddp`:

* rollouts — the stage's problems in contiguous blocks, one per rank, with the per-episode streams
  one process would give them; the episodes are all-gathered in rank order (:meth:`Replicate.rollout`);
* the trainer's forwards — a turn batch's rows, ordered by prompt, in contiguous blocks over the
  ranks; the per-token results all-gathered, a rank's own rows kept live (:meth:`Replicate.logprobs`);
* gradients — summed over ranks before clipping and the step (:meth:`Replicate.backward`): the loss
  is a function of the batch's per-row log-probs, so Σ_ranks of the ranks' backwards is the 1-rank
  gradient (:mod:`satseq.scale.ddp`);
* outputs — rank 0 writes; the trainer state keeps every rank's torch RNG (dropout masks of its rows).

On one process every collective is a no-op, so this strategy then equals ``local``.
"""
from __future__ import annotations

import torch

from satseq.registry import register_strategy
from satseq.scale import ddp
from satseq.strategy import Strategy


@register_strategy
class Replicate(Strategy):
    name = "replicate"

    @property
    def world_size(self) -> int:
        return ddp.world_size()

    @property
    def rank(self) -> int:
        return ddp.rank()

    @classmethod
    def check_layout(cls, cfg, world: int) -> None:
        from satseq.scale.fsdp import check_layout

        check_layout(cfg, world)

    def main_first(self):
        return ddp.main_first()

    def run_info(self) -> dict:
        return {"data_parallel_ranks": ddp.world_size(), "strategy": self.cfg.trainer.strategy} \
            if ddp.is_distributed() else {}

    # ------------------------------------------------------------------ rollouts
    def rollout(self, workflow, problems: list, pool, engine, *, group_size: int, generator, gather: bool = True,
                **options) -> list:
        """Rank r rolls out its contiguous block of problems (:func:`satseq.scale.ddp.shard_bounds`: a
        problem's whole group on one rank, as group statistics and the certificate's per-prompt means
        need) with those problems' streams (:func:`satseq.rollout.streams.episode_streams`, drawn for
        the whole batch on every rank, so the run generator advances as on one process); an episode
        samples from its own stream only, so it gets the same tokens as in the whole batch.
        ``Episode.group`` is renumbered to the problem's index in the whole batch."""
        self.update_weights(engine)
        if not ddp.is_distributed():
            return workflow.rollout(problems, pool, engine, group_size=group_size, generator=generator, **options)
        from satseq.rollout.streams import episode_streams
        from satseq.workflows.base import rollout_slice

        streams = episode_streams(generator, len(problems) * group_size)
        lo, hi = ddp.shard_bounds(len(problems))
        local = rollout_slice(workflow, problems, lo, hi, pool, engine, group_size=group_size, streams=streams,
                              generator=generator, **options)
        if not gather:
            return local
        return [ep for part in ddp.all_gather(local) for ep in part]

    # ------------------------------------------------------------------ the trainer's passes
    def logprobs(self, model, batch, compute, *, chunk: int, pad_id: int, device, grad: bool, need_logits: bool):
        """Each rank computes its rows (a group's rows on one rank: their prompt runs once there) and
        every rank gets the whole batch back, its own rows still carrying their graph when ``grad``."""
        if not ddp.is_distributed():
            return compute(batch, chunk)
        keys = batch.prompts
        own = batch.select(torch.tensor(ddp.owned_rows(len(batch), keys), dtype=torch.long))
        if len(own):
            out = compute(own, chunk)
        else:  # fewer rows than ranks: this rank has none (the shapes only need the right rank and dtype)
            out = (torch.zeros((0, 0), device=device), torch.zeros((0, 0), dtype=torch.long, device=device),
                   torch.zeros((0, 0, 0), device=device))[: 3 if need_logits else 2]
        return tuple(ddp.share_rows(x, len(batch), keys) for x in out)

    def backward(self, loss: torch.Tensor, params: list, grad_clip: float) -> None:
        if loss.requires_grad or not ddp.is_distributed():  # a rank may hold no row of the batch
            loss.backward()
        ddp.all_reduce_grads(params)  # Σ over ranks; nothing on one process
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)

    def all_reduce_sum(self, values):
        return ddp.all_reduce_sum(values)

    # ------------------------------------------------------------------ checkpoints
    def rng_states(self) -> list | None:
        return ddp.rng_states()

    def restore_rng(self, states: list | None) -> None:
        ddp.restore_rng(states)
