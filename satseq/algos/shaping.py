"""Reward shaping and group filtering from DAPO, as pure tensor functions.

DAPO (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
arXiv 2503.14476):

- **Soft overlong punishment** (its Eq. 13), added to the task reward, with ``L_max`` the generation
  budget and ``L_cache`` the punishment buffer::

      R_len(L) = 0                                   if L <= L_max - L_cache
               = ((L_max - L_cache) - L) / L_cache   if L_max - L_cache < L <= L_max
               = -1                                  if L > L_max

  (a response of exactly ``L_max`` tokens gets ``-1``, the value of the truncated ones).
- **Dynamic sampling**: groups (the responses to one prompt) whose rewards are all equal carry
  no GRPO signal (every advantage is 0); they are dropped and more prompts are sampled until the
  batch holds enough informative groups. :func:`informative_groups` is the filter; the
  resampling loop is the GRPO method's (:mod:`satseq.methods.grpo.dynamic_sampling`).
"""
from __future__ import annotations

import torch
from torch import Tensor


def overlong_penalty(lengths: Tensor, max_len: int, buffer: int) -> Tensor:
    """DAPO's soft overlong penalty ``R_len`` (module docstring) per response length; ``[N]`` float.

    ``buffer`` is ``L_cache`` in tokens (0 = off: all zeros); it must not exceed ``max_len``.
    """
    lengths = lengths.to(torch.float32)
    if buffer <= 0:
        return torch.zeros_like(lengths)
    if buffer > max_len:
        raise ValueError(f"overlong buffer ({buffer}) exceeds the generation budget ({max_len})")
    start = float(max_len - buffer)
    return torch.clamp((start - lengths) / float(buffer), min=-1.0, max=0.0)


def informative_groups(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """``[N]`` bool: True where the response's group has at least two different rewards (DAPO's
    dynamic-sampling filter keeps these; a group of one is never informative)."""
    if rewards.numel() == 0:
        return torch.zeros(0, dtype=torch.bool)
    _, inv = torch.unique(group_ids, return_inverse=True)
    n = int(inv.max()) + 1
    r = rewards.to(torch.float64)
    hi = torch.full((n,), -torch.inf, dtype=r.dtype).scatter_reduce(0, inv, r, "amax")
    lo = torch.full((n,), torch.inf, dtype=r.dtype).scatter_reduce(0, inv, r, "amin")
    return (hi > lo)[inv]
