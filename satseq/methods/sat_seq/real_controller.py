"""SAT-Seq on real data and real models (the seed's ``real_controller.py``).

    from satseq.methods.sat_seq.real_controller import RealController
    RealController("recipes/sat_seq/config/sat_seq.yaml",
                   ["model.path=Qwen/Qwen2.5-3B-Instruct", "data.train=data/dapo/train.jsonl"]).train()

The reward of every turn comes from :meth:`RealController._compute_reward`. As the seed README
says, customise it by editing that method — or, better, subclass ``RealController`` and override
it, or point ``reward.custom`` at any ``module:function`` with the same signature.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from satseq.config import load_config
from satseq.rewards.grade import correctness_reward


class RealController:
    def __init__(self, config: str | Path | None = None, overrides: Iterable[str] = ()):
        self.cfg = load_config(config, list(overrides))

    def _compute_reward(self, prompt: str, response: str, answer: str) -> float:
        """Reward of one agent turn: 1.0 when the response's final answer matches ``answer``."""
        return correctness_reward(response, answer)

    def train(self) -> Path:
        from satseq.train import train

        return train(self.cfg, reward_fn=self._compute_reward)
