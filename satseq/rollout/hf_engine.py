"""Transformers rollout engine: batched sampling with behaviour log-probs.

A hand decode loop rather than ``model.generate`` (reasons in docs/design.md, "Written by hand"):
it returns the exact per-token log-probabilities of the sampled tokens without a second pass, every
random number comes from the episode's own stream (:mod:`satseq.rollout.streams`: a seed fixes a
run, a resumed run continues the same streams, and any split of a batch samples the same tokens),
and it is faster. Llama-family models step through :mod:`satseq.rollout.fused_decode` (fused
weights, preallocated KV cache, a group's prompt and a batch's shared few-shot header prefilled once, finished rows dropped); any other
causal LM through its own forward with a ``DynamicCache``. Sampling is an exact inverse CDF with one
uniform per row (:func:`inverse_cdf`), much cheaper than ``torch.multinomial`` over a 49k vocabulary.
SmolLM2-135M: 1.8× ``generate`` on this CPU (bench/rollout/throughput.py roofline, docs/results.md).
"""
from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from satseq.rollout import fused_decode
from satseq.rollout.fused_decode import WeightCache
from satseq.rollout.padding import left_pad, positions_from_mask
from satseq.rollout.streams import as_row_streams, row_uniforms
from satseq.rollout.types import Generation, SamplingParams


def sample_next(logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None = None,
                u: torch.Tensor | None = None):
    """Pick one token per row; return (tokens, log-prob of each under softmax(logits / T)).
    ``u``: ``[B, 1]`` uniforms (one per row, :func:`satseq.rollout.streams.row_uniforms`); drawn from
    ``generator`` when None. The log-prob is ``z_y − logsumexp(z)`` with ``z = logits / T``."""
    z = logits.float()
    if sampling.greedy:
        tok = z.argmax(dim=-1)
        return tok, z.gather(-1, tok[:, None]).squeeze(-1) - torch.logsumexp(z, dim=-1)
    if sampling.temperature != 1.0:
        z = z / sampling.temperature
    u = (torch.rand((z.shape[0], 1), generator=generator) if u is None else u).to(z.device)  # CPU streams
    if sampling.top_p < 1.0:
        logp = torch.log_softmax(z, dim=-1)
        sorted_p, order = logp.exp().sort(dim=-1, descending=True)
        keep = (sorted_p.cumsum(-1) - sorted_p) < sampling.top_p  # always keeps the top token
        cdf = (sorted_p * keep).cumsum(-1)
        idx = torch.searchsorted(cdf, u * cdf[:, -1:]).clamp(max=z.shape[-1] - 1)
        tok = order.gather(-1, idx).squeeze(-1)
        return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
    top = z.max(dim=-1, keepdim=True).values
    weights = (z - top).exp_()
    tok, total = inverse_cdf(weights, u)
    return tok, z.gather(-1, tok[:, None]).squeeze(-1) - top.squeeze(-1) - total.log()


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor, block: int = 256):
    """Row-wise inverse-CDF draw from unnormalised ``weights`` ``[B, V]`` with uniforms ``u`` ``[B, 1]``:
    the token y with ``W_{<y} ≤ u·W < W_{≤y}``. Two levels — the block of ``block`` tokens from the
    cumulative block sums, then the token inside it — instead of one ``[B, V]`` cumulative sum (a
    sequential scan that cost as much as the LM head for a 49k vocabulary). Returns (tokens, W)."""
    B, V = weights.shape
    pad = (-V) % block
    w = (torch.nn.functional.pad(weights, (0, pad)) if pad else weights).view(B, -1, block)
    block_cdf = w.sum(-1).cumsum(-1)                                   # [B, V / block]
    total = block_cdf[:, -1]
    target = u * total[:, None]
    b = torch.searchsorted(block_cdf, target).clamp(max=block_cdf.shape[1] - 1)  # [B, 1]
    before = torch.where(b > 0, block_cdf.gather(-1, (b - 1).clamp(min=0)), torch.zeros_like(target))
    inner = w.gather(1, b[:, :, None].expand(B, 1, block)).squeeze(1).cumsum(-1)  # [B, block]
    k = torch.searchsorted(inner, target - before).clamp(max=block - 1)
    tok = (b * block + k).clamp(max=V - 1).squeeze(-1)
    return tok, total


def base_model_of(model):
    """The transformers model under a peft wrapper (adapters stay injected in its layers), else ``model``."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def last_logits_only(model, n: int = 1) -> dict:
    """``{"logits_to_keep": n}`` where the model's forward takes it (transformers ≥ 4.49): only the
    last ``n`` positions are projected onto the vocabulary (the prefill needs 1; the trainer needs the
    positions that predict the response) instead of every position."""
    base = base_model_of(model)
    key = type(base)
    if key not in _KEEPS_LOGITS:
        _KEEPS_LOGITS[key] = "logits_to_keep" in inspect.signature(base.forward).parameters
    return {"logits_to_keep": n} if _KEEPS_LOGITS[key] else {}


_KEEPS_LOGITS: dict[type, bool] = {}


def pass_cache(model, cache) -> dict:
    """The KV-cache keyword for ``model``'s forward: ``cache`` from transformers 5.24 on,
    ``past_key_values`` before (deprecated in 5.24, removed in 5.40)."""
    base = base_model_of(model)
    key = type(base)
    if key not in _CACHE_KWARG:
        _CACHE_KWARG[key] = "cache" if "cache" in inspect.signature(key.forward).parameters else "past_key_values"
    return {_CACHE_KWARG[key]: cache}


def output_cache(out):
    """The cache a forward returned (``out.cache`` from transformers 5.24 on, ``out.past_key_values`` before)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def cache_layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) of a ``DynamicCache`` (``cache.layers`` from transformers 4.56 on; lists before)."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


_CACHE_KWARG: dict[type, str] = {}


class _HFStepper:
    """Prefill and decode through the model's own forward with a ``DynamicCache`` (any architecture)."""

    def __init__(self, model, ids, mask, positions):
        self.model, self.mask, self.cache = model, mask, DynamicCache()
        self._first = model(input_ids=ids, attention_mask=mask, position_ids=positions, **pass_cache(model, self.cache),
                            use_cache=True, **last_logits_only(model)).logits[:, -1, :]

    def first_logits(self):
        return self._first

    def step(self, tokens, positions, live):
        self.mask = torch.cat([self.mask, live.long()[:, None]], dim=1)
        return self.model(input_ids=tokens[:, None], attention_mask=self.mask, position_ids=positions,
                          **pass_cache(self.model, self.cache), use_cache=True).logits[:, -1, :]


class HFEngine:
    """Batched generation for any ``transformers`` causal LM (CPU or GPU).

    Llama-family models (Llama, Qwen2, SmolLM2) decode through :mod:`satseq.rollout.fused_decode`
    (``fused=True``, the default), in ``dtype`` (None = the model's own); other architectures through
    the model's forward with a ``DynamicCache``."""

    def __init__(self, tokenizer, *, batch_size: int = 128, device: str = "cpu", fused: bool = True,
                 dtype: torch.dtype | None = None, gemm: str = "auto"):
        """``gemm``: the fused decode's GEMM kernel (``rollout.decode_gemm``; :func:`satseq.rollout.fused_decode.resolve_gemm`)."""
        self.tokenizer = tokenizer
        self.gemm = gemm
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.fused = fused
        self.dtype = dtype
        self._weights = WeightCache()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()

    def generate(self, model, prompts: list[list[int]], sampling: SamplingParams,
                 generator=None) -> list[Generation]:
        """``generator``: one ``torch.Generator`` (split into one stream per prompt) or a list of
        per-prompt streams (:mod:`satseq.rollout.streams`); row i samples from its stream only."""
        streams = as_row_streams(generator, len(prompts))
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            rows = slice(start, start + self.batch_size)
            out.extend(self._generate_batch(model, prompts[rows], sampling,
                                            None if streams is None else streams[rows]))
        return out

    def _stepper(self, model, ids, mask, pos, max_new_tokens):
        if self.fused and fused_decode.supports(model):
            dtype = self.dtype or next(model.parameters()).dtype
            return fused_decode.FusedDecoder(self._weights.get(model, dtype, rows=len(ids), gemm=self.gemm), ids, mask, pos,
                                             max_new_tokens)
        return _HFStepper(model, ids, mask, pos)

    @torch.no_grad()
    def _generate_batch(self, model, prompts, sampling: SamplingParams, streams) -> list[Generation]:
        was_training = model.training
        model.eval()
        ids, mask = left_pad(prompts, self.pad_id)
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = positions_from_mask(mask)
        stepper = self._stepper(model, ids, mask, pos, sampling.max_new_tokens)
        logits = stepper.first_logits()
        B = len(prompts)
        tokens = [[] for _ in range(B)]
        logps = [[] for _ in range(B)]
        finish = ["length"] * B
        done = [False] * B
        rows = list(range(B))  # the stepper's row j generates for prompt rows[j]
        row_streams = streams
        next_pos = pos[:, -1:] + 1
        for _ in range(sampling.max_new_tokens):
            active = [j for j, i in enumerate(rows) if not done[i]]
            u = None if sampling.greedy else row_uniforms(row_streams, active, len(rows))
            tok, lp = sample_next(logits, sampling, u=u)
            tok, lp = tok.cpu(), lp.cpu()
            for j in active:
                i, t = rows[j], int(tok[j])
                tokens[i].append(t)
                logps[i].append(float(lp[j]))
                if t in self.eos_ids:
                    done[i], finish[i] = True, "eos"
                elif sampling.stop and self._hit_stop(tokens[i], sampling.stop):
                    done[i], finish[i] = True, "stop"
            live = [j for j in active if not done[rows[j]]]
            if not live or len(tokens[rows[active[0]]]) >= sampling.max_new_tokens:
                break
            if hasattr(stepper, "keep_rows") and len(live) <= len(rows) // 2:  # drop finished rows
                keep = torch.tensor(live)
                stepper.keep_rows(keep.to(self.device))
                rows, tok, next_pos = [rows[j] for j in live], tok[keep], next_pos[keep.to(next_pos.device)]
                row_streams = None if streams is None else [streams[i] for i in rows]
            alive = torch.tensor([not done[i] for i in rows])
            step_ids = torch.where(alive, tok, torch.full_like(tok, self.pad_id)).to(self.device)
            logits = stepper.step(step_ids, next_pos, alive.to(self.device))
            next_pos = next_pos + 1
        if was_training:
            model.train()
        return [
            Generation(prompt_ids=list(p), response_ids=tokens[i], logprobs=logps[i],
                       text=self.tokenizer.decode(tokens[i], skip_special_tokens=True),
                       finish_reason=finish[i])
            for i, p in enumerate(prompts)
        ]

    def _hit_stop(self, toks: list[int], stops: tuple[str, ...]) -> bool:
        tail = self.tokenizer.decode(toks[-16:], skip_special_tokens=True)
        return any(tail.endswith(s) for s in stops)
