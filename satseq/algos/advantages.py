"""Outcome-reward advantage estimators for grouped responses (GRPO family).

GRPO (DeepSeekMath, arXiv 2402.03300), per response i of a group g (responses to one prompt)::

    A_i = (R_i - mean_g R) / (std_g R + eps)

with ``std_g`` the *unbiased* (Bessel-corrected, ``torch.std``) standard deviation, as verl's
``compute_grpo_outcome_advantage``. Dr. GRPO (arXiv 2503.20783) drops the division:
``A_i = R_i - mean_g R``. A group of a single response gets advantage 0 (verl instead returns
``R_i / (1 + eps)``; with one sample there is no baseline, so no signal is the honest value), and
so does a group whose rewards are all equal (exactly 0, not a rounding residue divided by eps).

RLOO (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
from Human Feedback in LLMs", arXiv 2402.14740; Kool et al. 2019), leave-one-out baseline::

    A_i = R_i - (1 / (n_g - 1)) sum_{j in g, j != i} R_j  =  n_g / (n_g - 1) * (R_i - mean_g R)

REINFORCE++-baseline (Hu et al. 2025, "REINFORCE++: An Efficient RLHF Algorithm with Robustness to
Both Prompt and Reward Models", arXiv 2501.03262; OpenRLHF ``reinforce_baseline``): the group mean
is subtracted, then the advantages are normalised over the *whole batch* (global batch
normalisation, not per group)::

    a_i = R_i - mean_g R;     A_i = (a_i - mean_B a) / (std_B a + eps)

``std_B`` is the unbiased std over the N responses of the batch, each response counted once
(OpenRLHF whitens over tokens, so a long response weighs more there; with outcome rewards the two
differ only in those weights). ``baseline=False`` gives plain REINFORCE++ on outcome rewards
(no KL in the reward): ``A_i = (R_i - mean_B R) / (std_B R + eps)``.

:func:`group_stats` and :func:`group_normalize` are the shared grouped-statistics helpers (also
used by the SAT-Seq turn-level estimator).
"""
from __future__ import annotations

import torch
from torch import Tensor

from satseq.algos.registry import register_adv


def group_stats(x: Tensor, group_ids: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Per-element group mean, unbiased group std and group count.

    ``x`` is ``[N]`` or ``[N, K]``; statistics are taken over the rows of the same group
    (separately per column), counting only entries where ``mask`` is true. Returns tensors shaped
    like ``x``: mean, std (0 where the count is < 2) and count.
    """
    if group_ids.dim() != 1 or group_ids.shape[0] != x.shape[0]:
        raise ValueError(f"group_ids must be [N] with N={x.shape[0]}, got {tuple(group_ids.shape)}")
    m = torch.ones_like(x, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    _, inv = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inv.max().item()) + 1 if inv.numel() else 0
    mf = m.to(x.dtype)
    xm = torch.where(m, x, torch.zeros_like(x))
    shape = (n_groups,) + tuple(x.shape[1:])
    cnt = torch.zeros(shape, dtype=x.dtype, device=x.device).index_add_(0, inv, mf)
    tot = torch.zeros(shape, dtype=x.dtype, device=x.device).index_add_(0, inv, xm)
    mean_g = tot / cnt.clamp(min=1)
    dev = torch.where(m, x - mean_g[inv], torch.zeros_like(x))
    ss = torch.zeros(shape, dtype=x.dtype, device=x.device).index_add_(0, inv, dev * dev)
    std_g = torch.where(cnt > 1, (ss / (cnt - 1).clamp(min=1)).sqrt(), torch.zeros_like(ss))
    return mean_g[inv], std_g[inv], cnt[inv]


def group_normalize(
    x: Tensor, group_ids: Tensor, mask: Tensor | None = None, norm_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """``(x - mean_g) / (std_g + eps)`` (or ``x - mean_g``); 0 for groups of one and masked entries."""
    mean, std, cnt = group_stats(x, group_ids, mask)
    out = x - mean
    if norm_by_std:
        out = out / (std + eps)
    keep = (cnt > 1) & ~_constant_group(x, group_ids, mask)
    if mask is not None:
        keep = keep & mask.to(torch.bool)
    return torch.where(keep, out, torch.zeros_like(out))


def keyed_group_normalize(x: Tensor, keys: Tensor, norm_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """:func:`group_normalize` of ``x [N]`` where a baseline group is a distinct row of ``keys [N, k]``
    (e.g. prompt group x role x turn index: per-role, per-turn GRPO normalization)."""
    if x.shape[0] == 0:
        return x.clone()
    _, ids = torch.unique(keys.to(device=x.device, dtype=torch.long), dim=0, return_inverse=True)
    return group_normalize(x, ids, norm_by_std=norm_by_std, eps=eps)


def _constant_group(x: Tensor, group_ids: Tensor, mask: Tensor | None) -> Tensor:
    """True where every (valid) entry of the element's group, same column, is equal."""
    m = torch.ones_like(x, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    _, inv = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inv.max().item()) + 1 if inv.numel() else 0
    idx = inv.view(-1, *([1] * (x.dim() - 1))).expand_as(x)
    shape = (n_groups,) + tuple(x.shape[1:])
    inf = torch.full(shape, float("inf"), dtype=x.dtype, device=x.device)
    hi = (-inf).scatter_reduce(0, idx, torch.where(m, x, -torch.inf), "amax")
    lo = inf.scatter_reduce(0, idx, torch.where(m, x, torch.inf), "amin")
    return (hi == lo)[inv]


def _as_float(rewards: Tensor) -> Tensor:
    return rewards if rewards.is_floating_point() else rewards.to(torch.float32)


@register_adv("grpo")
def grpo_advantages(rewards: Tensor, group_ids: Tensor, norm_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO outcome advantage ``[N]`` from scalar rewards ``[N]`` and prompt group ids ``[N]`` (long)."""
    return group_normalize(_as_float(rewards), group_ids, norm_by_std=norm_by_std, eps=eps)


@register_adv("dr_grpo")
def dr_grpo_advantages(rewards: Tensor, group_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """Dr. GRPO outcome advantage ``R_i - mean_g R`` (no std division)."""
    return group_normalize(_as_float(rewards), group_ids, norm_by_std=False, eps=eps)


@register_adv("rloo")
def rloo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """RLOO outcome advantage ``R_i - mean_{j != i in g} R_j`` (0 for groups of one or of equal rewards)."""
    r = _as_float(rewards)
    centred = group_normalize(r, group_ids, norm_by_std=False)
    _, _, cnt = group_stats(r, group_ids)
    return centred * cnt / (cnt - 1).clamp(min=1)


@register_adv("reinforce_pp")
def reinforce_pp_advantages(rewards: Tensor, group_ids: Tensor, baseline: bool = True, eps: float = 1e-6) -> Tensor:
    """REINFORCE++(-baseline) outcome advantage: group-mean baseline (if ``baseline``), then batch
    whitening ``(a - mean_B a) / (std_B a + eps)``; all zeros when the batch has no spread."""
    r = _as_float(rewards)
    a = group_normalize(r, group_ids, norm_by_std=False) if baseline else r
    if a.numel() < 2 or bool((a == a[0]).all()):
        return torch.zeros_like(a)
    return (a - a.mean()) / (a.std() + eps)
