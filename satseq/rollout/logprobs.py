"""The trainer's forward pass: per-token log-probs (and optionally logits) of given responses.

``log π(y_t | x, y_<t) = log_softmax(logits_t / T)[y_t]`` with every real token at the position
generation gave it (:mod:`satseq.rollout.padding`), so recomputed and behaviour log-probs agree up
to floating-point noise. On plain-head architectures the decoder's hidden states come from
:func:`satseq.rollout.prefix_sharing.response_hidden` (a prompt shared by G rows runs once; rows of
similar length run together); other architectures run the model's own forward on
:func:`satseq.rollout.padding.prompt_response_batch`'s layout.
"""
from __future__ import annotations

import torch

from satseq.rollout.hf_engine import base_model_of, last_logits_only
from satseq.rollout.padding import prompt_response_batch
from satseq.rollout.prefix_sharing import response_hidden
from satseq.utils.precision import full_precision, trainer_autocast


def response_logits(model, prompts: list[list[int]], responses: list[list[int]], pad_id: int,
                    device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Logits that predict each response token, ``[B, R, V]``, and the response mask ``[B, R]``."""
    # only the R positions that predict a response token reach the LM head (the prompt's would be
    # [B, P, V] of logits thrown away: 80 % of them for a few-shot prompt)
    parts = _decoder_and_head(model)
    if parts is not None:
        decoder, head = parts  # the head in fp32 under autocast (utils/precision.py)
        hidden, r_mask = response_hidden(decoder, prompts, responses, pad_id, device)
        with full_precision(hidden.device):
            return head(hidden.float()), r_mask
    ids, mask, pos, start, r_mask = prompt_response_batch(prompts, responses, pad_id)
    ids, mask, pos = ids.to(device), mask.to(device), pos.to(device)
    R = r_mask.shape[1]
    keep = last_logits_only(model, R + 1)
    with trainer_autocast(ids.device):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, **keep).logits
    first = logits.shape[1] - (R + 1)  # 0 when only R + 1 positions were kept, start - 1 otherwise
    return logits[:, first: first + R, :], r_mask.to(device)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log_softmax(logits / T)`` gathered at ``targets``, computed in fp32."""
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)


# Architectures whose logits are exactly ``lm_head(decoder(x).last_hidden_state)`` (no soft-capping,
# no logit scale): for them the log-probs can be computed from hidden states in chunks of positions.
_PLAIN_HEAD = {"llama", "qwen2", "qwen3", "mistral"}
CHUNK_BYTES = 64 * 2**20  # fp32 logits per chunk of positions in the chunked path
#: under autograd, a batch whose fp32 log-softmax ``[B, R, V]`` is at most this large keeps it for backward;
#: a larger one is recomputed chunk by chunk in backward (memory bounded by one chunk, one more head pass)
KEEP_LOGITS_BYTES = 256 * 2**20
#: a chunk of positions ``hidden[:, s:s+k]`` is a strided view of ``[B, R, d]``; F.linear on a strided 3-D
#: input takes a batched-GEMM path, so each chunk is copied contiguous first: the trainer's log-prob pass
#: on SmolLM2's GRPO batch 1.40x faster, 1.35x with its backward (equal up to rounding: on the CPU measured,
#: chunks of under 4 positions rounded differently; docs/results.md, "Contiguous LM-head chunks").
#: False: the strided views (before; bench/update/update.py contiguous-chunks times both)
CONTIGUOUS_CHUNKS = True


def _decoder_and_head(model):
    from torch.distributed.fsdp import FSDPModule

    base = base_model_of(model)
    if getattr(getattr(base, "config", None), "model_type", None) not in _PLAIN_HEAD:
        return None
    if isinstance(base, FSDPModule):  # FSDP2 unshards the root's parameters in the root's forward only
        return None
    get_decoder, get_head = getattr(base, "get_decoder", None), getattr(base, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    decoder, head = get_decoder(), get_head()
    return (decoder, head) if decoder is not None and head is not None else None


def _chunk_logprobs(hidden: torch.Tensor, targets: torch.Tensor, head, temperature: float) -> torch.Tensor:
    with full_precision(hidden.device):  # the LM head and log-softmax in fp32 under trainer.autocast
        return token_logprobs(head(hidden.float()), targets, temperature)


def chunked_response_logprobs(head, hidden: torch.Tensor, targets: torch.Tensor,
                              temperature: float) -> torch.Tensor:
    """``log π(y_t | ·)`` from the hidden states that predict each response token (``[B, R, d]``,
    :func:`satseq.rollout.prefix_sharing.response_hidden`), the LM head applied to a few positions
    at a time: the ``[B, R, V]`` logits never exist whole. Under autograd, when the whole log-softmax
    would exceed :data:`KEEP_LOGITS_BYTES`, each chunk is checkpointed, so backward recomputes its logits
    instead of keeping them (verl and TRL's chunked-entropy idea); below it the chunks' log-softmax is
    kept, which saves one LM-head pass and one log-softmax per chunk (the same chunks, so the same
    numbers bit for bit; docs/performance.md)."""
    from torch.utils.checkpoint import checkpoint

    B, R = targets.shape
    step = max(1, CHUNK_BYTES // max(1, B * head.out_features * 4))
    recompute = torch.is_grad_enabled() and B * R * head.out_features * 4 > KEEP_LOGITS_BYTES
    parts = []
    for s in range(0, R, step):
        hs, ts = hidden[:, s:s + step], targets[:, s:s + step]
        if CONTIGUOUS_CHUNKS:
            hs = hs.contiguous()
        if recompute:
            parts.append(checkpoint(_chunk_logprobs, hs, ts, head, temperature, use_reentrant=False))
        else:
            parts.append(_chunk_logprobs(hs, ts, head, temperature))
    return torch.cat(parts, dim=1) if parts else hidden.new_zeros((B, 0))


def response_logprobs(model, prompts, responses, pad_id: int, *, temperature: float = 1.0,
                      device="cpu", return_logits: bool = False):
    """Per-token log-probs ``[B, R]`` (zero at padding) and the mask; logits too if asked.

    Without ``return_logits``, on a plain-head architecture, the chunked path computes them; else
    the logits of the response-predicting positions are formed once."""
    R = max((len(r) for r in responses), default=0)
    targets = torch.zeros((len(responses), R), dtype=torch.long)
    for i, r in enumerate(responses):
        if r:
            targets[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    parts = None if return_logits else _decoder_and_head(model)
    if parts is not None:
        decoder, head = parts
        hidden, r_mask = response_hidden(decoder, prompts, responses, pad_id, device)
        lp = chunked_response_logprobs(head, hidden, targets.to(device), temperature)
        return lp * r_mask, r_mask
    logits, r_mask = response_logits(model, prompts, responses, pad_id, device)
    lp = token_logprobs(logits, targets.to(logits.device), temperature) * r_mask
    if return_logits:
        if temperature > 0 and temperature != 1.0:
            logits = logits / temperature
        return lp, r_mask, logits
    return lp, r_mask
