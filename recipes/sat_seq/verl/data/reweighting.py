"""Truncated IS between agents (satseq ``satseq.methods.sat_seq.data.reweighting``) on verl's rows.

When agent i trains, every agent already updated this stage changed the joint policy that produced
the data; per episode e, satseq's weight is ``c_e = min(1, exp(sum_{j updated} log pi^j_new/pi^j_cur))``.
verl's policy loss receives per-token weights (``rollout_is_weights[B, T]``), so agent i's row b gets
``c_{e_b}`` on each of its response tokens (``loss/seq_ratio_loss`` reads it back as the masked mean).
"""
from __future__ import annotations

import torch
from torch import Tensor

from satseq.methods.sat_seq.data.reweighting import episode_log_ratio, sequence_log_ratio, truncated_is_weight

__all__ = ["episode_log_ratio", "rollout_is_weights", "sequence_log_ratio", "truncated_is_weight"]


def rollout_is_weights(c: Tensor, episode_of_row: Tensor, response_mask: Tensor) -> Tensor:
    """``[B, T]``: ``c[episode_of_row[b]]`` on row b's response tokens, 0 on padding."""
    m = response_mask.to(torch.float32)
    return c.to(m.device, torch.float32)[episode_of_row.to(m.device)].unsqueeze(-1) * m
