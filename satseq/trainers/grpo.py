"""GRPO (DeepSeekMath, arXiv 2402.03300), the single-agent baseline.

``A_i = (R_i − mean_g R) / (std_g R + eps)`` on every token of response i (estimator from the
registry, ``grpo.adv_estimator``), per-token clipped surrogate ``min(r A, clip(r, 1−ε_low,
1+ε_high) A)`` aggregated by ``grpo.loss_agg_mode`` (verl's ``agg_loss``), plus
``β · k3(π_θ, π_ref)`` when ``grpo.kl_coef > 0``. Dr. GRPO and DAPO's clip-higher / token-mean
are the same function with other settings.
"""
from __future__ import annotations

import torch

from satseq.algos import get_adv
from satseq.trainers.pg_update import PGSettings, clipped_pg_update
from satseq.trainers.turn_batch import turns_of_role
from satseq.workflows.episode import Episode


class GRPOUpdater:
    def __init__(self, cfg, pool, generator: torch.Generator, device: str = "cpu"):
        self.cfg, self.pool, self.gen, self.device = cfg, pool, generator, device
        self.name = pool.names[0]
        self.adv_fn = get_adv(cfg.grpo.adv_estimator)
        self.settings = PGSettings.from_grpo(cfg)
        self.opt = torch.optim.AdamW(pool.parameters(self.name), lr=cfg.grpo.lr, weight_decay=cfg.trainer.weight_decay)
        if cfg.grpo.kl_coef > 0:
            pool.keep_reference(self.name)

    def update(self, stage: int, episodes: list[Episode]) -> dict:
        rewards = torch.tensor([ep.turns[-1].reward for ep in episodes], dtype=torch.float32)
        groups = torch.tensor([ep.group for ep in episodes])
        adv = self.adv_fn(rewards, groups)
        batch = turns_of_role(episodes, self.name, adv[:, None])
        m = clipped_pg_update(self.pool, self.name, self.opt, batch, self.settings, generator=self.gen,
                              device=self.device)
        return {f"{self.name}/{k}": v for k, v in m.items()}

    def state_dict(self) -> dict:
        return {"optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state["optimizer"])
