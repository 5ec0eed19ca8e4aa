"""``trainer.autocast``: the trainer's forward passes in bf16 where that is numerically safe.

Under ``bfloat16`` the decoder's matmuls run in bf16 (``torch.autocast``) while everything whose error
would reach the loss stays fp32:

* parameters, gradients and AdamW state (autocast never changes them: fp32 master weights);
* the LM head and ``log_softmax`` over the vocabulary (:mod:`satseq.rollout.logprobs` turns autocast
  off around them: a bf16 logit of magnitude 20 is off by up to 0.06, which would move every
  token's log-prob by that much);
* the ratio ``exp(log π_θ − log π_old)``: both come from the same autocast forward (the trainer
  re-scores; it never mixes in another precision's log-probs), so on-policy ratios are exactly 1.

Pays on GPUs and on CPUs with AMX; on this project's CPUs (AVX-512 bf16, no AMX) a bf16 GEMM runs
at about half the fp32 rate (bench/rollout/throughput.py roofline), so the default is ``off``.
"""
from __future__ import annotations

import contextlib

import torch

_DTYPE: torch.dtype | None = None


def set_autocast(name: str) -> None:
    """``off`` or ``bfloat16`` (set once per run by the runtime from ``trainer.autocast``)."""
    global _DTYPE
    _DTYPE = None if name == "off" else getattr(torch, name)


def autocast_dtype() -> torch.dtype | None:
    return _DTYPE


def trainer_autocast(device) -> contextlib.AbstractContextManager:
    """The context the trainer's decoder forward runs in."""
    if _DTYPE is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=_DTYPE)


def full_precision(device) -> contextlib.AbstractContextManager:
    """Autocast off (the LM head and log-softmax)."""
    if _DTYPE is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, enabled=False)
