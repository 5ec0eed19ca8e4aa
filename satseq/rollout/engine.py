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
    forward: the fused decode packs dense weights. (The check sits here, not in
    :mod:`satseq.rollout.fused_decode`, whose code is part of the shipped chain warm start's fingerprint.)"""
    from satseq.rollout.hf_engine import HFEngine

    class Engine(HFEngine):
        def _stepper(self, model, *args):
            if not (self.fused and _bitsandbytes(model)):
                return super()._stepper(model, *args)
            self.fused = False
            try:
                return super()._stepper(model, *args)
            finally:
                self.fused = True

    Engine.__name__ = Engine.__qualname__ = "HFEngine"
    return Engine


def make_engine(name: str, tokenizer, *, batch_size: int = 128, device: str = "cpu", fused: bool = True,
                dtype: str = "auto", vllm=None, gemm: str = "auto", instance: str = "") -> RolloutEngine:
    """``rollout.engine``: ``hf`` (satseq's decode loop) or ``vllm`` (``vllm``: the ``rollout.vllm`` section,
    a :class:`~satseq.config.schema.VllmConfig` or a dict of its keys; None = its defaults; ``gemm``:
    ``rollout.decode_gemm``, satseq's engine only; ``instance``: vLLM only, a name that gives this engine a
    vLLM instance of its own, e.g. the rollout thread's beside the trainer's)."""
    from satseq.errors import ConfigError

    if name in ("hf", "auto"):  # auto unresolved (satseq.rollout.choice: no measurement) is satseq's engine
        return _dense_fused_engine()(tokenizer, batch_size=batch_size, device=device, fused=fused,
                        dtype=None if dtype == "auto" else getattr(torch, dtype), gemm=gemm)
    if name == "vllm":
        from satseq.config.schema import VllmConfig
        from satseq.rollout.vllm_engine import VLLMEngine

        settings = vllm if isinstance(vllm, VllmConfig) else VllmConfig(**(vllm or {}))
        return VLLMEngine(tokenizer, settings=settings, device=device, dtype=dtype, instance=instance)
    raise ConfigError(f"rollout.engine: unknown engine '{name}' (known: auto, hf, vllm)")
