"""The rollout-engine interface.

An engine turns prompt token ids into sampled responses with the behaviour policy's per-token
log-probabilities. Workflows call it; trainers never depend on which engine produced the data,
because they recompute log-probs with their own model (see :mod:`satseq.rollout.logprobs`).
"""
from __future__ import annotations

import functools

from typing import Protocol

import torch

from satseq.rollout.types import Generation, SamplingParams


class RolloutEngine(Protocol):
    def generate(self, model: torch.nn.Module, prompts: list[list[int]], sampling: SamplingParams,
                 generator: torch.Generator | None = None) -> list[Generation]:
        """Sample one response per prompt with ``model`` (the acting policy for this turn)."""
        ...


def _bitsandbytes(model) -> bool:
    """Whether ``model`` (or the transformers model under a peft wrapper) holds bitsandbytes weights."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return bool(getattr(base, "is_loaded_in_8bit", False) or getattr(base, "is_loaded_in_4bit", False))


@functools.lru_cache(maxsize=None)
def _dense_fused_engine():
    """satseq's engine that decodes a quantized base (``model.quantization``) through the model's own
    forward (the fused decode packs dense weights) and whose :meth:`continuing` view prefills only a
    conversation's new tokens (:mod:`satseq.rollout.prefix_cache`). (Both sit here, not in
    :mod:`satseq.rollout.hf_engine` or :mod:`satseq.rollout.fused_decode`, whose code is part of the
    shipped chain warm start's fingerprint.)"""
    from satseq.rollout import fused_decode
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.prefix_cache import continues_with_own_forward, continuing_view

    class Engine(HFEngine):
        prefix_cache = True   # rollout.prefix_cache: interactive rollouts continue conversations from their cache
        prefix_cache_gb = 4.0
        prefix_store = None   # a PastStore in the view continuing() gives, None in the engine itself

        def _stepper(self, model, ids, mask, pos, max_new_tokens):
            if self.fused and _bitsandbytes(model):
                self.fused = False
                try:
                    return self._stepper(model, ids, mask, pos, max_new_tokens)
                finally:
                    self.fused = True
            if self.prefix_store is not None:
                if self.fused and fused_decode.supports(model):
                    dtype = self.dtype or next(model.parameters()).dtype
                    weights = self._weights.get(model, dtype, rows=len(ids), gemm=self.gemm)
                    return self.prefix_store.decoder(model, weights, ids, mask, pos, max_new_tokens)
                if continues_with_own_forward(model):
                    return self.prefix_store.stepper(model, ids, mask, pos)
            return super()._stepper(model, ids, mask, pos, max_new_tokens)

        def generate(self, model, prompts, sampling, generator=None):
            out = super().generate(model, prompts, sampling, generator)
            if self.prefix_store is not None:
                self.prefix_store.collect()
            return out

        def continuing(self):
            """This engine for one interactive rollout: its turns continue their conversations from the
            kept keys and values (:mod:`satseq.rollout.prefix_cache`); itself with ``rollout.prefix_cache`` off."""
            return continuing_view(self, self.prefix_cache_gb) if self.prefix_cache else self

    Engine.__name__ = Engine.__qualname__ = "HFEngine"
    return Engine


def make_engine(name: str, tokenizer, *, batch_size: int = 128, device: str = "cpu", fused: bool = True,
                dtype: str = "auto", vllm=None, gemm: str = "auto", instance: str = "", prefix_cache: bool = True,
                prefix_cache_gb: float = 4.0) -> RolloutEngine:
    """``rollout.engine``: ``hf`` (satseq's decode loop) or ``vllm`` (``vllm``: the ``rollout.vllm`` section,
    a :class:`~satseq.config.schema.VllmConfig` or a dict of its keys; None = its defaults; ``gemm``:
    ``rollout.decode_gemm``, satseq's engine only; ``instance``: vLLM only, a name that gives this engine a
    vLLM instance of its own, e.g. the rollout thread's beside the trainer's; ``prefix_cache``,
    ``prefix_cache_gb``: ``rollout.prefix_cache*``, satseq's engine only: vLLM's prefix caching is always on)."""
    from satseq.errors import ConfigError

    if name in ("hf", "auto"):  # auto unresolved (satseq.rollout.choice: no measurement) is satseq's engine
        engine = _dense_fused_engine()(tokenizer, batch_size=batch_size, device=device, fused=fused,
                                       dtype=None if dtype == "auto" else getattr(torch, dtype), gemm=gemm)
        engine.prefix_cache, engine.prefix_cache_gb = prefix_cache, prefix_cache_gb
        return engine
    if name == "vllm":
        from satseq.config.schema import VllmConfig
        from satseq.rollout.vllm_engine import VLLMEngine

        settings = vllm if isinstance(vllm, VllmConfig) else VllmConfig(**(vllm or {}))
        return VLLMEngine(tokenizer, settings=settings, device=device, dtype=dtype, instance=instance)
    raise ConfigError(f"rollout.engine: unknown engine '{name}' (known: auto, hf, vllm)")
