"""The decoder's hidden states that predict each response token, a prompt shared by several rows run once.

A GRPO-style batch holds G samples of each prompt: ``B`` rows ``[prompt | response]`` but only
``U = B / G`` distinct prompts. Causal attention makes a prompt's keys and values independent of what
follows it, so for row ``i`` with prompt ``u(i)``::

    h_t(i) = decoder(y_t | x_u(i), y_<t)      with K, V of x_u(i) computed once per distinct prompt

The prompts go through the decoder once (``U`` rows, ``use_cache``), their cache rows are gathered to
the ``B`` rows (``index_select``: its backward sums the G rows' gradients into their prompt's), and the
responses run as a continuation with the same positions and attention mask as the one-pass layout of
:func:`satseq.rollout.padding.prompt_response_batch`. Token-positions through the decoder:
``U·P + B·(R − 1)`` instead of ``B·(P + R)`` — with a 70-token few-shot prompt, 22-token answers and
G = 4, 2.3× fewer. The same idea as the rollout engine's prefill de-duplication, applied to the
trainer's forward and backward (verl and TRL run every row's prompt; docs/performance.md).

Equal to the one-pass forward up to floating-point order (tests/test_prefix_sharing.py: log-probs
and gradients). Not used when a decoder layer checkpoints its activations in training mode
(transformers then drops the cache, so the continuation would not see its prompt), with
sliding-window layers, or when no prompt repeats.
"""
from __future__ import annotations

import torch

from satseq.rollout.padding import left_pad, positions_from_mask, prompt_response_batch
from satseq.utils.precision import trainer_autocast


def distinct_prompts(prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct prompts in first-seen order and, for each row, the index of its prompt."""
    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(p), len(index)) for p in prompts]
    return [list(p) for p in index], rows


def _checkpointing(decoder) -> bool:
    return any(getattr(m, "gradient_checkpointing", False) and m.training for m in decoder.modules())


def _full_attention(decoder) -> bool:
    """Every layer attends to the whole context (a sliding-window layer's cache keeps only the window)."""
    cfg = getattr(decoder, "config", None)
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return getattr(cfg, "sliding_window", None) is None or getattr(cfg, "use_sliding_window", True) is False


def shares_prefixes(decoder, prompts: list[list[int]]) -> bool:
    """Whether :func:`response_hidden` runs the prompts once each: some prompt repeats, every prompt
    is non-empty, every layer attends to the whole context, and no layer checkpoints with the cache
    switched off."""
    return (len({tuple(p) for p in prompts}) < len(prompts) and all(prompts)
            and _full_attention(decoder) and not _checkpointing(decoder))


def response_hidden(decoder, prompts: list[list[int]], responses: list[list[int]], pad_id: int,
                    device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states ``[B, R, d]`` at the positions that predict each response token (position
    ``t`` predicts ``y_t``), and the response mask ``[B, R]``; prompts shared when they repeat."""
    if not shares_prefixes(decoder, prompts):
        ids, mask, pos, start, r_mask = prompt_response_batch(prompts, responses, pad_id)
        ids, mask, pos = ids.to(device), mask.to(device), pos.to(device)
        R = r_mask.shape[1]
        with trainer_autocast(ids.device):
            hidden = decoder(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).last_hidden_state
        return hidden[:, start - 1: start - 1 + R], r_mask.to(device)

    distinct, rows = distinct_prompts(prompts)
    p_ids, p_mask = left_pad(distinct, pad_id)
    p_ids, p_mask = p_ids.to(device), p_mask.to(device)
    with trainer_autocast(p_ids.device):
        out = decoder(input_ids=p_ids, attention_mask=p_mask, position_ids=positions_from_mask(p_mask),
                      use_cache=True)
    row_of = torch.tensor(rows, dtype=torch.long, device=p_ids.device)
    last = out.last_hidden_state[:, -1].index_select(0, row_of)[:, None]  # predicts y_0
    _, mask, pos, start, r_mask = prompt_response_batch(prompts, responses, pad_id)
    R = r_mask.shape[1]
    if R <= 1:
        return last[:, :R], r_mask.to(device)
    cache = out.past_key_values
    cache.reorder_cache(row_of)  # U → B rows: index_select, differentiable
    r_ids = torch.tensor([r[:R - 1] + [pad_id] * (R - 1 - len(r[:R - 1])) for r in responses], dtype=torch.long)
    mask, pos = mask.to(device), pos.to(device)
    with trainer_autocast(p_ids.device):
        cont = decoder(input_ids=r_ids.to(device), attention_mask=mask[:, :start + R - 1],
                       position_ids=pos[:, start:start + R - 1], past_key_values=cache,
                       use_cache=True).last_hidden_state
    return torch.cat([last, cont], dim=1), r_mask.to(device)
