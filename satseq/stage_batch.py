"""One stage's batch: draw prompts, roll them out, reward them, count what was generated.

``method.collect`` asks for prompts (GRPO's dynamic sampling asks again); each draw takes the next
prompts of the data sampler, rolls them out with ``rollout(problems) -> episodes`` and assigns the
method's rewards. The synchronous loop (:mod:`satseq.loop`) rolls out with the trainer's agents, the
rollout thread of :mod:`satseq.async_rollouts` with its own copy.
"""
from __future__ import annotations

from typing import Callable


def collect_stage(cfg, method, train, sampler, rollout: Callable[[list], list], rewards) -> tuple[list, dict, dict]:
    """``(episodes, reward_metrics, generated)`` of one stage; ``generated``: its ``tokens`` and ``samples``,
    dropped groups (dynamic sampling) included."""
    generated = {"tokens": 0, "samples": 0}

    def draw(n: int):  # n more prompts, rolled out and rewarded
        eps = rollout([train[i] for i in sampler.next_batch(n)])
        generated["tokens"] += sum(len(t.response_ids) for ep in eps for t in ep.turns)
        generated["samples"] += sum(len(ep.turns) for ep in eps)
        return eps, method.assign_rewards(cfg, eps, rewards) or {}

    episodes, reward_metrics = method.collect(cfg, draw, cfg.trainer.train_batch_size)
    return episodes, reward_metrics, generated
