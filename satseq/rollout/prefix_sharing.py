"""The decoder's hidden states that predict each response token, a prompt prefix shared by several rows run once.

A GRPO-style batch holds G samples of each prompt: ``B`` rows ``[prompt | response]`` but only
``B / G`` distinct prompts. Later turns of a multi-turn workflow repeat a longer prefix: a relay
agent's prompt is the few-shot template and the problem, then the earlier agents' answers; a PAG
revision prompt starts with the first turn's prompt. Causal attention makes a prefix's keys and
values independent of what follows it, so for row ``i`` whose prompt starts with prefix ``c(i)``::

    h_t(i) = decoder(y_t | x_i, y_<t)      with K, V of the prefix x_c(i) computed once per group

The prefixes go through the decoder once (``U`` rows, ``use_cache``), their cache rows are gathered
to the ``B`` rows (``index_select``: its backward sums the rows' gradients into their prefix's), and
each row's rest of the prompt and its response (but its last token) run as a right-padded
continuation, positions counted from each row's first real token as in generation
(:func:`satseq.rollout.padding.positions_from_mask`). Without shared prefixes each whole row is such a
continuation of nothing. Rows of similar length run together (:mod:`satseq.rollout.length_buckets`).
Token-positions through the decoder: ``U·C + B·W`` (``C`` the longest prefix, ``W`` the longest rest +
response, less with buckets) instead of ``B·(P + R)`` — with a 70-token few-shot prompt, 22-token
answers and G = 4, 2.3× fewer. The rows are grouped by :func:`prefix_groups` (the contiguous runs of the sorted prompts
that share the most tokens). The same idea as the rollout engine's prefill de-duplication, applied
to the trainer's forward and backward (verl and TRL run every row's whole prompt; docs/performance.md).

Equal to the one-pass forward up to floating-point order (tests/test_prefix_sharing.py: log-probs
and gradients). Not used when a decoder layer checkpoints its activations in training mode
(transformers then drops the cache, so the continuation would not see its prefix), with
sliding-window layers, or when sharing would save under a tenth of the token-positions.
"""
from __future__ import annotations

import os

import torch

from transformers import DynamicCache

from satseq.rollout.hf_engine import cache_layers, output_cache, pass_cache
from satseq.rollout.length_buckets import call_cost, length_buckets
from satseq.rollout.padding import left_pad, positions_from_mask
from satseq.utils.precision import trainer_autocast

MIN_SAVING = 0.1  # share only when it removes at least this fraction of the token-positions


def prefix_groups(prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """Group rows by a shared prompt prefix: the prefixes (each strictly shorter than every member's
    prompt, so every row keeps at least its last prompt token) and, per row, its group.

    Groups are contiguous runs of the prompts in sorted order (a run's common prefix is the common
    prefix of its first and last prompt); the runs maximise ``Σ_g (n_g − 1) · |prefix_g|``, the
    token-positions saved (dynamic programme over the sorted order, O(B²))."""
    B = len(prompts)
    order = sorted(range(B), key=lambda i: prompts[i])
    adjacent = [len(os.path.commonprefix([prompts[a], prompts[b]])) for a, b in zip(order, order[1:])]
    best = [0] * (B + 1)   # best[j]: the most positions saved by grouping the first j sorted rows
    start = [0] * (B + 1)  # where the last group of that optimum starts
    cut = [0] * (B + 1)    # and the length of its shared prefix
    for j in range(1, B + 1):
        shared, shortest = 1 << 30, len(prompts[order[j - 1]])
        best[j], start[j], cut[j] = best[j - 1], j - 1, shortest - 1  # row j - 1 alone: all but its last token
        for i in range(j - 2, -1, -1):  # the group order[i:j]
            shared = min(shared, adjacent[i])
            shortest = min(shortest, len(prompts[order[i]]))
            c = min(shared, shortest - 1)
            if best[i] + (j - i - 1) * c > best[j]:
                best[j], start[j], cut[j] = best[i] + (j - i - 1) * c, i, c
    prefixes, rows, j = [], [0] * B, B
    while j > 0:
        for k in range(start[j], j):
            rows[order[k]] = len(prefixes)
        prefixes.append(list(prompts[order[j - 1]][:cut[j]]))
        j = start[j]
    return prefixes, rows


def _checkpointing(decoder) -> bool:
    return any(getattr(m, "gradient_checkpointing", False) and m.training for m in decoder.modules())


def _full_attention(decoder) -> bool:
    """Every layer attends to the whole context (a sliding-window layer's cache keeps only the window)."""
    cfg = getattr(decoder, "config", None)
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return getattr(cfg, "sliding_window", None) is None or getattr(cfg, "use_sliding_window", True) is False


def sharing_plan(decoder, prompts: list[list[int]], responses: list[list[int]]):
    """``(prefixes, rows)`` of :func:`prefix_groups` when :func:`response_hidden` should share them, else
    None: every prompt has ≥ 2 tokens, every layer attends to the whole context, no layer checkpoints
    with the cache switched off, and the grouping saves at least :data:`MIN_SAVING` of the
    token-positions (``U·C + B·W`` against ``B·L``, padding included; before length buckets)."""
    if len(prompts) < 2 or not all(len(p) >= 2 for p in prompts) or not _full_attention(decoder) \
            or _checkpointing(decoder):
        return None
    prefixes, rows = prefix_groups(prompts)
    fed = [max(len(r) - 1, 0) for r in responses]  # a row's response but its last token
    shared = len(prefixes) * max(len(p) for p in prefixes) + \
        len(prompts) * max(len(p) - len(prefixes[g]) + f for p, g, f in zip(prompts, rows, fed))
    one_pass = len(prompts) * max(len(p) + f for p, f in zip(prompts, fed))
    return (prefixes, rows) if shared <= (1 - MIN_SAVING) * one_pass else None


def response_hidden(decoder, prompts: list[list[int]], responses: list[list[int]], pad_id: int,
                    device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states ``[B, R, d]`` at the positions that predict each response token (position
    ``t`` predicts ``y_t``; meaningless where the mask is 0), and the response mask ``[B, R]``; prefixes
    shared when it pays (:func:`sharing_plan`), rows of similar length run together
    (:func:`satseq.rollout.length_buckets.length_buckets`)."""
    plan = sharing_plan(decoder, prompts, responses)
    B, R = len(prompts), max((len(r) for r in responses), default=0)
    r_mask = torch.zeros((B, R), dtype=torch.long)
    for i, resp in enumerate(responses):
        r_mask[i, :len(resp)] = 1
    if plan is None:  # every row whole: a continuation of nothing
        kv, p_mask, rows, rests = None, None, [0] * B, prompts
    else:
        prefixes, rows = plan
        p_ids, p_mask = left_pad(prefixes, pad_id)
        p_ids, p_mask = p_ids.to(device), p_mask.to(device)
        with trainer_autocast(p_ids.device):
            out = decoder(input_ids=p_ids, attention_mask=p_mask, position_ids=positions_from_mask(p_mask),
                          use_cache=True)
        kv = cache_layers(output_cache(out))
        rests = [p[len(prefixes[g]):] for p, g in zip(prompts, rows)]
    buckets = length_buckets([len(x) + max(len(r) - 1, 0) for x, r in zip(rests, responses)], call_cost(device))
    parts = [_continuation_hidden(decoder, kv, p_mask, torch.tensor([rows[i] for i in b], dtype=torch.long),
                                  [rests[i] for i in b], [responses[i] for i in b], pad_id, device)
             for b in buckets]
    order = [i for b in buckets for i in b]
    hidden = torch.cat([torch.nn.functional.pad(h, (0, 0, 0, R - h.shape[1])) for h in parts], dim=0)
    if order != list(range(B)):
        hidden = hidden.index_select(0, torch.argsort(torch.tensor(order, device=hidden.device)))
    return hidden, r_mask.to(device)


def _continuation_hidden(decoder, kv, p_mask, row_of, rests, responses, pad_id, device) -> torch.Tensor:
    """``[b, R_b, d]``: each row's rest of the prompt, then its response but the last token, right-padded,
    after its prefix (rows ``row_of`` of the prefixes' keys and values ``kv``, gathered by
    ``index_select``: its backward sums the rows' gradients into their prefix's). ``kv = None``: no
    prefix, the rests are the whole prompts."""
    b, R = len(rests), max((len(r) for r in responses), default=0)
    W = max(len(x) + max(len(r) - 1, 0) for x, r in zip(rests, responses))
    c_ids = torch.full((b, W), pad_id, dtype=torch.long)
    c_mask = torch.zeros((b, W), dtype=torch.long)
    for i, (rest, resp) in enumerate(zip(rests, responses)):
        seq = rest + list(resp[:-1])
        c_ids[i, :len(seq)] = torch.tensor(seq, dtype=torch.long)
        c_mask[i, :len(seq)] = 1
    c_ids, c_mask = c_ids.to(device), c_mask.to(device)
    if kv is None:
        mask, cached = c_mask, {}
    else:
        row_of = row_of.to(p_mask.device)
        cache = DynamicCache()
        for layer, (k, v) in enumerate(kv):
            cache.update(k.index_select(0, row_of), v.index_select(0, row_of), layer)
        mask, cached = torch.cat([p_mask.index_select(0, row_of), c_mask], dim=1), pass_cache(decoder, cache)
    pos = positions_from_mask(mask)[:, mask.shape[1] - W:]
    with trainer_autocast(c_ids.device):
        cont = decoder(input_ids=c_ids, attention_mask=mask, position_ids=pos, use_cache=kv is not None,
                       **cached).last_hidden_state
    # y_t of row i is predicted at continuation position len(rest_i) − 1 + t
    first = torch.tensor([len(x) - 1 for x in rests], dtype=torch.long, device=cont.device)
    idx = (first[:, None] + torch.arange(R, device=cont.device)[None]).clamp(max=W - 1)
    return cont.gather(1, idx[..., None].expand(-1, -1, cont.shape[-1]))
