"""Left-padded batches with position ids that ignore padding.

Generation and the training forward must see every real token at the same position. Both build
their inputs here: prompts left-padded, responses (for training) right-padded after them, and
``position_ids = cumsum(attention_mask) - 1`` so that a token's position never depends on how much
padding its batch needed (a pitfall seen in other frameworks when left padding meets RoPE).
"""
from __future__ import annotations

import torch


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids, mask


def positions_from_mask(mask: torch.Tensor) -> torch.Tensor:
    return (mask.cumsum(-1) - 1).clamp(min=0)


def prompt_response_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int):
    """``[pad.. prompt | response ..pad]`` rows; returns ids, attention mask, positions, the column
    where responses start, and the response mask ``[B, R]``."""
    p_ids, p_mask = left_pad(prompts, pad_id)
    r_len = max((len(r) for r in responses), default=0)
    r_ids = torch.full((len(responses), r_len), pad_id, dtype=torch.long)
    r_mask = torch.zeros((len(responses), r_len), dtype=torch.long)
    for i, r in enumerate(responses):
        if r:
            r_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            r_mask[i, : len(r)] = 1
    ids = torch.cat([p_ids, r_ids], dim=1)
    mask = torch.cat([p_mask, r_mask], dim=1)
    return ids, mask, positions_from_mask(mask), p_ids.shape[1], r_mask
