"""Truncated importance-sampling factor for block-coordinate updates (spec step 4, HAPPO-style).

When agent i trains, the agents already updated this stage (set U) changed the joint policy that
produced the data. Per episode e::

    c_e = min(1, exp( sum_{j in U} sum_{t in turns of j in e} [log pi^j_new(a_t|s_t) - log pi^j_cur(a_t|s_t)] ))

detached; c = 1 for the first agent in the order (U empty). HAPPO uses the untruncated product of
the predecessors' ratios; truncating at 1 bounds the variance.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


def sequence_log_ratio(logp_new: Tensor, logp_cur: Tensor, mask: Tensor) -> Tensor:
    """Per-sequence summed log-ratio ``sum_t mask * (logp_new - logp_cur)``, ``[B, T] -> [B]``, detached."""
    return ((logp_new - logp_cur) * mask.to(logp_new.dtype)).sum(-1).detach()


def episode_log_ratio(seq_log_ratio: Tensor, episode_ids: Tensor, num_episodes: int) -> Tensor:
    """Sum per-turn log-ratios ``[B]`` into their episodes (``episode_ids[B]`` in 0..E-1) -> ``[E]``."""
    out = torch.zeros(num_episodes, dtype=seq_log_ratio.dtype, device=seq_log_ratio.device)
    return out.index_add_(0, episode_ids, seq_log_ratio.detach())


def truncated_is_weight(updated_log_ratios: Sequence[Tensor] | Tensor, num_episodes: int | None = None) -> Tensor:
    """c ``[E]`` from the per-episode summed log-ratios of each agent already updated this stage.

    ``updated_log_ratios``: a list of ``[E]`` tensors (one per updated agent) or a ``[J, E]``
    tensor; empty for the first agent, in which case ``num_episodes`` gives E.
    """
    if isinstance(updated_log_ratios, Tensor):
        if num_episodes is None:
            num_episodes = int(updated_log_ratios.shape[-1])
        parts = list(updated_log_ratios.reshape(-1, updated_log_ratios.shape[-1]))
    else:
        parts = list(updated_log_ratios)
    if not parts:
        if num_episodes is None:
            raise ValueError("num_episodes is required when no agent has been updated yet")
        return torch.ones(num_episodes)
    total = torch.stack([p.detach() for p in parts]).sum(0)
    return torch.exp(torch.clamp(total, max=0.0))
