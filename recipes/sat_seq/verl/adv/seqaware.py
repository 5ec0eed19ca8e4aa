"""SAT-Seq's sequence-aware advantage as a verl advantage estimator (``algorithm.adv_estimator=sat_seq``).

verl hands an estimator one row per response (``token_level_rewards[B, T]``, ``response_mask[B, T]``,
``index[B]`` = the prompt's uid; ``verl.trainer.ppo.ray_trainer.compute_advantage``). SAT-Seq's advantage
is over the K turns of a relay episode (``satseq.methods.sat_seq.adv.seqaware``: turn-level GAE with the
group-mean baseline, group-normalised per (prompt, turn), clipped to ±A_clip). This module only re-shapes:

    row b  ->  (episode e_b, turn k_b)        r[e_b, k_b] = sum_t token_level_rewards[b, t]
    group of episode e = the uid of its rows  (one prompt's episodes form a group)
    A, G   = satseq's seqaware_advantages(r, groups, gamma, lam, mask, A_clip)
    advantages[b, t] = A.normalized[e_b, k_b] * response_mask[b, t]
    returns[b, t]    = A.returns[e_b, k_b]    * response_mask[b, t]

The K-agent trainer (``ray_trainer.SatSeqRayTrainer``) passes ``episode_index`` and ``turn_index`` (rows of
the K agents' turns). Called by verl's own ``compute_advantage`` (no episode structure: every row is a
one-turn episode, K = 1) the estimator is GRPO's group normalisation of the discounted return — the
K = 1 case of the same formula. ``gamma`` and ``lam`` come from ``algorithm`` (verl's AlgoConfig);
``A_clip`` from the caller (``sat_seq.A_clip``), else satseq's default. No formula is restated here.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from satseq.methods.sat_seq.adv.seqaware import seqaware_advantages
from verl.trainer.ppo.core_algos import register_adv_est

ADV_ESTIMATOR = "sat_seq"


def _codes(values) -> torch.Tensor:
    """Integer codes 0..n-1 of arbitrary hashable labels (verl's uids are strings), first-seen order."""
    seen: dict = {}
    return torch.tensor([seen.setdefault(v, len(seen)) for v in np.asarray(values, dtype=object).tolist()],
                        dtype=torch.long)


def _get(config, key: str, default):
    if config is None:
        return default
    value = config.get(key, None) if hasattr(config, "get") else getattr(config, key, None)
    return default if value is None else value


@register_adv_est(ADV_ESTIMATOR)
def compute_sat_seq_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Optional[Any] = None,
    episode_index: Optional[np.ndarray] = None,
    turn_index: Optional[np.ndarray] = None,
    A_clip: Optional[float] = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages[B, T], returns[B, T])`` (module docstring); verl's estimator contract."""
    B = token_level_rewards.shape[0]
    if (episode_index is None) != (turn_index is None):
        raise ValueError("sat_seq advantage: episode_index and turn_index go together")
    if episode_index is None:  # verl's own compute_advantage: each response a one-turn episode
        episode_index, turn_index = np.arange(B), np.zeros(B, dtype=np.int64)
    ep = _codes(episode_index)
    turn = torch.as_tensor(np.asarray(turn_index, dtype=np.int64))
    if len(ep) != B or len(turn) != B:
        raise ValueError(f"sat_seq advantage: episode_index/turn_index need {B} entries (one per row)")
    E, K = int(ep.max()) + 1, int(turn.max()) + 1
    if (ep * K + turn).unique().numel() != B:
        raise ValueError("sat_seq advantage: two rows share one (episode, turn)")
    rewards = torch.zeros(E, K, dtype=torch.float32)
    present = torch.zeros(E, K, dtype=torch.bool)
    rewards[ep, turn] = token_level_rewards.detach().float().sum(-1).cpu()
    present[ep, turn] = True
    uid_code = _codes(index)
    groups = torch.zeros(E, dtype=torch.long)
    groups[ep] = uid_code
    if not bool((uid_code == groups[ep]).all()):
        raise ValueError("sat_seq advantage: the rows of one episode carry different uids")
    options = {} if A_clip is None else {"A_clip": float(A_clip)}
    out = seqaware_advantages(rewards, groups, gamma=float(_get(config, "gamma", 1.0)),
                              lam=float(_get(config, "lam", 1.0)), mask=present, **options)
    m = response_mask.to(torch.float32)
    adv = out.normalized[ep, turn].to(m.device).unsqueeze(-1) * m
    ret = out.returns[ep, turn].to(m.device).unsqueeze(-1) * m
    return adv, ret
