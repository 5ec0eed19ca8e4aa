"""Data-parallel rollouts: a stage's problems split over the ranks, the same tokens as one process.

Every rank holds the same run generator and draws the same global batch, then the same per-episode
streams (:func:`satseq.rollout.streams.episode_streams`, one per episode, problem-major), so the run
generator advances exactly as on one process. Rank r rolls out only its contiguous block of problems
(:func:`satseq.scale.ddp.shard_bounds`: a problem's whole group stays on one rank, as GRPO's
group statistics and the certificate's per-prompt means need) with those problems' streams; an
episode draws its sampling uniforms from its own stream only, so it samples the same tokens as in the
whole batch. ``Episode.group`` is renumbered to the problem's index in the global batch, and the
blocks are all-gathered in rank order: every rank ends with the episodes, in the order, one process
would have produced.
"""
from __future__ import annotations

from satseq.scale import ddp, fsdp


def rollout(workflow, problems: list, pool, engine, *, group_size: int, generator, gather: bool = True,
            **options) -> list:
    """``workflow.rollout`` of ``problems`` split over the ranks; every rank's episodes when ``gather``,
    else this rank's (``group`` = global problem index). One process: ``workflow.rollout`` itself.
    Sharded agents (``trainer.strategy=fsdp2``): every rank first gathers the current weights into the
    engine's full copies (:func:`satseq.scale.fsdp.sync_rollout`), then generates with no collective."""
    fsdp.sync_rollout(engine)
    if not ddp.is_distributed():
        return workflow.rollout(problems, pool, engine, group_size=group_size, generator=generator, **options)
    from satseq.rollout.streams import episode_streams

    streams = episode_streams(generator, len(problems) * group_size)
    lo, hi = ddp.shard_bounds(len(problems))
    mine = None if streams is None else streams[lo * group_size: hi * group_size]
    local = workflow.rollout(problems[lo:hi], pool, engine, group_size=group_size, generator=generator,
                             streams=mine, **options) if hi > lo else []
    for ep in local:
        ep.group += lo
    if not gather:
        return local
    return [ep for part in ddp.all_gather(local) for ep in part]
