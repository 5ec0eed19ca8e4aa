"""SAT-Seq on real data and real models (the seed's ``real_controller.py``).

    from satseq.methods.sat_seq.real_controller import RealController
    RealController("recipes/sat_seq/config/sat_seq.yaml",
                   ["model.path=Qwen/Qwen2.5-3B-Instruct", "data.train=data/dapo/train.jsonl"]).train()

The reward of every turn comes from :meth:`RealController._compute_reward`. As the seed README
says, customise it by editing that method — or, better, subclass ``RealController``, override it,
and either call ``MyController(...).train()`` or name the subclass in the config
(``reward.controller=my_module:MyController``) so that ``satseq train`` and ``train_dapo.sh`` use it
too. ``reward.custom=module:function`` does the same with a plain function.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from satseq.config import load_config
from satseq.rewards.grade import correctness_reward


class RealController:
    def __init__(self, config: str | Path | None = None, overrides: Iterable[str] = ()):
        self.cfg = load_config(config, list(overrides))

    @classmethod
    def from_config(cls, cfg) -> "RealController":
        """The controller of an already loaded config (how ``reward.controller`` builds it)."""
        obj = cls.__new__(cls)
        obj.cfg = cfg
        return obj

    def _compute_reward(self, prompt: str, response: str, answer: str) -> float:
        """Reward of one agent turn: 1.0 when the response's final answer matches ``answer``."""
        return correctness_reward(response, answer)

    def train(self) -> Path:
        from satseq.loop import train

        return train(self.cfg, reward_fn=self._compute_reward)
