"""The pipelined relay (``trainer.pipeline_micro_batches=M`` with ``trainer.backend=ray``).

A stage's prompts are cut into M contiguous micro-batches, and the unchanged workflow rolls each
one out, all M at once from M driver threads. Each turn's generation is a call to the actor
hosting that turn's agent (:class:`~satseq.scale.ray_pool.RayEngine`), and an actor serves its
calls one after another; so agent 0 works through micro-batches 0, 1, ..., M−1 while, as soon as
micro-batch b leaves agent 0, agent 1 starts on it — agent k+1 on micro-batch b while agent k is
on b+1::

    agent_1 | mb0 | mb1 | mb2 | mb3 |
    agent_2       | mb0 | mb1 | mb2 | mb3 |
    agent_3             | mb0 | mb1 | mb2 | mb3 |

The episodes are those of the sequential relay: the stage's per-episode streams are drawn from the
run generator up front, exactly as the workflow draws them for the whole batch
(:func:`~satseq.rollout.streams.episode_streams`), and each micro-batch receives its episodes'
streams; an episode's tokens depend on its own stream only. Episodes come back in the whole
batch's order, with their ``group`` (the prompt index) offset to the whole batch's.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from satseq.rollout.streams import episode_streams
from satseq.workflows.base import rollout_slice


def split(n: int, parts: int) -> list[range]:
    """``range(n)`` cut into ``min(parts, n)`` contiguous, near-equal pieces (the first ones longer)."""
    parts = max(1, min(parts, n))
    size, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + size + (1 if i < extra else 0)
        out.append(range(start, stop))
        start = stop
    return out


class PipelinedWorkflow:
    """``workflow`` whose ``rollout`` runs in ``micro_batches`` concurrent micro-batches of prompts."""

    def __init__(self, workflow, micro_batches: int):
        self.workflow, self.micro_batches = workflow, micro_batches

    def __getattr__(self, key):  # name, roles, agents, fmt, sampling: the wrapped workflow's
        return getattr(self.workflow, key)

    def rollout(self, problems, pool, engine, *, group_size: int = 1, generator=None, sampling=None,
                streams=None):
        streams = streams if streams is not None else episode_streams(generator, len(problems) * group_size)
        parts = split(len(problems), self.micro_batches)

        def one(part: range):
            return rollout_slice(self.workflow, problems, part.start, part.stop, pool, engine, group_size=group_size,
                                 streams=streams, sampling=sampling)

        with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="satseq-relay") as pool_:
            return [ep for eps in pool_.map(one, parts) for ep in eps]
