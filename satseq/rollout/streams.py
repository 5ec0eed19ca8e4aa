"""Per-episode random streams for sampling.

Every episode owns one ``torch.Generator``, seeded from the run generator when the episode is
created; each of its turns draws its sampling uniforms from that stream only (one uniform per
generated token, :mod:`satseq.rollout.hf_engine`). So an episode's tokens do not depend on which
other episodes share its batch: any split of a stage's episodes (engine batches, micro-batches of
a pipelined relay, data-parallel ranks) samples the same tokens as the whole batch, provided each
part receives its episodes' streams. The run generator advances by one draw per episode, whatever
the split, so a resumed run continues the same streams.
"""
from __future__ import annotations

from typing import Sequence

import torch

_SEED_HIGH = 2 ** 62


def episode_streams(generator: torch.Generator | None, n: int) -> list[torch.Generator] | None:
    """``n`` independent streams seeded from ``generator`` (None → None: unseeded sampling)."""
    if generator is None:
        return None
    seeds = torch.randint(0, _SEED_HIGH, (n,), generator=generator).tolist()
    return [torch.Generator().manual_seed(int(s)) for s in seeds]


def as_row_streams(generator, n: int) -> list[torch.Generator] | None:
    """What an engine call receives (one generator, a list with one per row, or None) as row streams."""
    if generator is None or isinstance(generator, torch.Generator):
        return episode_streams(generator, n)
    streams = list(generator)
    if len(streams) != n:
        raise ValueError(f"got {len(streams)} sampling streams for {n} prompts")
    return streams


def pick(streams: Sequence[torch.Generator] | None, rows: Sequence[int]) -> list[torch.Generator] | None:
    """The streams of the given rows (None stays None)."""
    return None if streams is None else [streams[i] for i in rows]


def row_uniforms(streams: Sequence[torch.Generator] | None, rows: Sequence[int], n: int) -> torch.Tensor:
    """``[n, 1]`` uniforms: one fresh draw for each row in ``rows`` from its own stream, 0.5 elsewhere
    (rows that are finished draw nothing, so a stream advances once per token of its row)."""
    u = torch.full((n, 1), 0.5)
    for i in rows:
        u[i, 0] = torch.rand((), generator=None if streams is None else streams[i])
    return u
