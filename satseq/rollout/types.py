"""Plain records exchanged between workflows and rollout engines."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn. ``temperature == 0`` means greedy decoding."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Generation:
    """One sampled response.

    ``logprobs[t]`` is the behaviour policy's log-probability of ``response_ids[t]`` under
    ``softmax(logits / temperature)`` (temperature 1 for greedy), before top-p truncation — the same
    quantity the trainer recomputes for the loss.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop" (stop string), "eos", or "length"
