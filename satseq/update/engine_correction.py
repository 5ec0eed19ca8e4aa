"""The engine-mismatch correction of every policy-gradient update (``rollout.is_correction``).

Turns carry the engine's log-probs of their sampled tokens (``behaviour_logprobs``); the update
scores the same tokens with the trainer's model before its first step. Their ratio, truncated, weights
each advantage (:func:`satseq.algos.engine_is.engine_is_weights`). ``auto`` applies it per token with
``rollout.engine=vllm`` and not at all with satseq's own engine, whose fp32 log-probs are the
trainer's (a bf16 rollout on that engine can turn it on by name).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from satseq.algos.engine_is import engine_is_weights


@dataclass(frozen=True)
class EngineCorrection:
    level: str = "off"      # off | token | sequence
    cap: float = 2.0

    @classmethod
    def from_config(cls, cfg) -> "EngineCorrection":
        r = cfg.rollout
        level = r.is_correction
        if level == "auto":
            level = "token" if r.engine == "vllm" else "off"
        return cls(level=level, cap=r.is_cap)

    @property
    def on(self) -> bool:
        return self.level != "off"


def behaviour_tensor(behaviour: list[list[float]], like: torch.Tensor) -> torch.Tensor:
    """The engine's log-probs as ``like``'s ``[B, T]`` (0 past each response)."""
    out = torch.zeros(like.shape, dtype=torch.float32)
    for i, b in enumerate(behaviour):
        n = min(len(b), out.shape[1])
        if n:
            out[i, :n] = torch.tensor(b[:n], dtype=torch.float32)
    return out.to(like.device)


def corrected_advantages(correction: EngineCorrection, advantages: torch.Tensor, trainer_lp: torch.Tensor,
                         mask: torch.Tensor, behaviour: list[list[float]]) -> tuple[torch.Tensor, dict]:
    """``advantages`` ``[B]`` weighted by the truncated engine ratio: ``[B, T]`` (token) or ``[B]``
    (sequence); unchanged (and no statistics) when the correction is off."""
    if not correction.on:
        return advantages, {}
    w, stats = engine_is_weights(trainer_lp, behaviour_tensor(behaviour, trainer_lp), mask, cap=correction.cap,
                                 level=correction.level)
    adv = advantages.to(w.device)
    if correction.level == "token":
        adv = (adv.unsqueeze(-1) if adv.dim() == 1 else adv) * w
    else:
        adv = (adv * w) if adv.dim() == 1 else adv * w.unsqueeze(-1)
    return adv, stats
