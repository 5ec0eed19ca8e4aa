"""Prompts against the model's context length, checked before any model call.

A problem whose first prompt (the problem in the workflow's prompt format) plus ``max_new_tokens``
does not fit the model's context length (``max_position_embeddings`` in its config) is refused
with one line naming where the problem came from (``file:line``) — not attempted, which for a very
long problem meant an attention allocation of terabytes and a traceback. Later turns of a
multi-turn workflow see longer prompts; this checks the part every turn contains.

Cheap: a prompt of ``b`` UTF-8 bytes has at most ``b + 2`` tokens for byte-level BPE, character
and SentencePiece tokenizers alike, so only prompts longer than the budget in bytes are tokenized.
"""
from __future__ import annotations

from typing import Any, Iterable

from satseq.errors import ConfigError, DataError
from satseq.records import Problem

__all__ = ["CONTEXT_KEYS", "check_prompt_lengths", "context_length_of"]

#: Config attributes that hold a model's context length, in the order they are tried.
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def context_length_of(module: Any) -> int | None:
    """The model's context length from its config, or None when it does not say."""
    config = getattr(module, "config", None)
    for cfg in (config, getattr(config, "text_config", None)):
        for key in CONTEXT_KEYS:
            value = getattr(cfg, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _where(p: Problem) -> str:
    return p.source or f"problem {p.problem_id!r}"


def check_prompt_lengths(problems: Iterable[Problem], fmt: Any, *, context_length: int | None,
                         max_new_tokens: int, what: str = "max_new_tokens") -> None:
    """Raise a one-line :class:`DataError` for the first problem whose prompt cannot fit.

    ``fmt`` is the prompt format (``single(text) -> prompt``, ``encode(prompt) -> ids``); ``what``
    names the setting that holds ``max_new_tokens`` in messages (``rollout.max_new_tokens``).
    """
    if context_length is None:
        return
    budget = context_length - max_new_tokens
    if budget < 1:
        raise ConfigError(f"{what} {max_new_tokens} leaves no room for a prompt in the model's context length "
                          f"{context_length}")
    render = getattr(fmt, "single", None)
    for p in problems:
        prompt = render(p.problem) if render is not None else p.problem
        if len(prompt) + 2 <= budget and len(prompt.encode("utf-8", "replace")) + 2 <= budget:
            continue
        n = len(fmt.encode(prompt))
        if n > budget:
            raise DataError(f"{_where(p)}: the prompt is {n} tokens; with {what} {max_new_tokens} that exceeds the "
                            f"model's context length {context_length} (at most {budget} prompt tokens)")
