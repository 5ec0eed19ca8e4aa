"""The trainer's forward pass: per-token log-probs (and optionally logits) of given responses.

``log π(y_t | x, y_<t) = log_softmax(logits_t / T)[y_t]`` on the exact layout generation used
(:func:`satseq.rollout.padding.prompt_response_batch`), so recomputed and behaviour log-probs agree
up to floating-point noise.
"""
from __future__ import annotations

import torch

from satseq.rollout.hf_engine import last_logits_only
from satseq.rollout.padding import prompt_response_batch


def response_logits(model, prompts: list[list[int]], responses: list[list[int]], pad_id: int,
                    device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Logits that predict each response token, ``[B, R, V]``, and the response mask ``[B, R]``."""
    ids, mask, pos, start, r_mask = prompt_response_batch(prompts, responses, pad_id)
    ids, mask, pos = ids.to(device), mask.to(device), pos.to(device)
    R = r_mask.shape[1]
    # only the R positions that predict a response token reach the LM head (the prompt's would be
    # [B, P, V] of logits thrown away: 80 % of them for a few-shot prompt)
    keep = last_logits_only(model, R + 1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, **keep).logits
    first = logits.shape[1] - (R + 1)  # 0 when only R + 1 positions were kept, start - 1 otherwise
    return logits[:, first: first + R, :], r_mask.to(device)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log_softmax(logits / T)`` gathered at ``targets``, computed in fp32."""
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)


def response_logprobs(model, prompts, responses, pad_id: int, *, temperature: float = 1.0,
                      device="cpu", return_logits: bool = False):
    """Per-token log-probs ``[B, R]`` (zero at padding) and the mask; logits too if asked."""
    logits, r_mask = response_logits(model, prompts, responses, pad_id, device)
    R = r_mask.shape[1]
    targets = torch.zeros((len(responses), R), dtype=torch.long, device=logits.device)
    for i, r in enumerate(responses):
        if r:
            targets[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    lp = token_logprobs(logits, targets, temperature) * r_mask
    if return_logits:
        if temperature > 0 and temperature != 1.0:
            logits = logits / temperature
        return lp, r_mask, logits
    return lp, r_mask
