"""Sequence-aware turn-level advantages (SAT-Seq spec, "Per stage" step 2).

For E episodes of K turns with turn rewards ``r[e, k]`` (the caller has already added the team
reward to the last turn), groups g = episodes of the same prompt, discount gamma, GAE lambda::

    G_k = r_k + gamma * G_{k+1}                       (G_{K+1} = 0; discounted return)
    V_k = mean of G_k over the episodes of the group   (same turn; no critic)
    delta_k = r_k + gamma * V_{k+1} - V_k             (V_{K+1} = 0)
    A_k = sum_l (gamma * lam)^l * delta_{k+l}          (GAE over turns)

``raw`` is A in reward units (what the PAC certificate needs). ``normalized`` is A normalized
per group and turn, ``(A - mean) / (std + 1e-6)`` with the unbiased std (as GRPO / verl), then
clipped to ``[-A_clip, A_clip]``; a group of one episode gets 0.

With a turn mask, a masked turn does not exist: its reward, return, value and advantage are 0,
the turn after it is treated as terminal for the previous turn, and group statistics at a turn
use only the episodes that have that turn. (Masks are expected to be prefixes: turns 1..K_e.)
Note: with lam = 1 (and no mask) A_k = G_k - V_k; for any gamma, lam the group mean of A_k is 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from satseq.algos.advantages import group_normalize, group_stats
from satseq.algos.registry import register_adv


@dataclass(frozen=True)
class SeqAwareAdvantages:
    """All tensors ``[E, K]``."""

    returns: Tensor  # G_k
    values: Tensor  # V_k (group-mean baseline)
    deltas: Tensor  # delta_k
    raw: Tensor  # A_k, reward units
    normalized: Tensor  # group-normalized and clipped A_k


@register_adv("seqaware", kind="turn")
def seqaware_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    gamma: float = 0.99,
    lam: float = 0.95,
    mask: Tensor | None = None,
    A_clip: float = 5.0,
    eps: float = 1e-6,
) -> SeqAwareAdvantages:
    """Turn-level GAE with group-mean baselines, from ``rewards[E, K]`` and ``group_ids[E]``."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [E, K], got {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.to(torch.float32)
    m = torch.ones_like(r, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    mf = m.to(r.dtype)
    r = r * mf
    E, K = r.shape
    returns = torch.zeros_like(r)
    nxt = torch.zeros(E, dtype=r.dtype, device=r.device)
    for k in reversed(range(K)):
        nxt = (r[:, k] + gamma * nxt) * mf[:, k]
        returns[:, k] = nxt
    values, _, _ = group_stats(returns, group_ids, m)
    values = values * mf
    v_next = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    deltas = (r + gamma * v_next - values) * mf
    raw = torch.zeros_like(r)
    acc = torch.zeros(E, dtype=r.dtype, device=r.device)
    for k in reversed(range(K)):
        acc = (deltas[:, k] + gamma * lam * acc) * mf[:, k]
        raw[:, k] = acc
    normalized = group_normalize(raw, group_ids, m, norm_by_std=True, eps=eps).clamp(-A_clip, A_clip)
    return SeqAwareAdvantages(returns=returns, values=values, deltas=deltas, raw=raw, normalized=normalized)
