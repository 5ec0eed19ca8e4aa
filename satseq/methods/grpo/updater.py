"""GRPO (DeepSeekMath, arXiv 2402.03300), the single-agent baseline.

``A_i = (R_i − mean_g R) / (std_g R + eps)`` on every token of response i (estimator
``grpo.adv_estimator`` from the registry), then the policy loss ``ppo.policy_loss`` (default
``ppo``: the per-token clipped surrogate ``min(r A, clip(r, 1−ε_low, 1+ε_high) A)``; ``gspo``: the
sequence ratio) aggregated by ``ppo.loss_agg_mode`` (verl's ``agg_loss``), plus
``β · k3(π_θ, π_ref)`` when ``ppo.kl_coef > 0`` (the common ``ppo`` section, shared with PAG and MLMT-RL). Dr. GRPO, DAPO (clip-higher, token-mean), GSPO,
RLOO and REINFORCE++ are the same update with other settings: ``grpo.loss=<preset>``
(:mod:`satseq.methods.grpo.presets`); DAPO's overlong penalty and dynamic sampling act before it
(:mod:`satseq.methods.grpo.method`).
"""
from __future__ import annotations

import torch

from satseq.algos import get_adv
from satseq.records import Episode
from satseq.update.batch import turns_of
from satseq.update.clipped_pg import PGSettings, clipped_pg_update
from satseq.update.loop import make_optimizer


class GRPOUpdater:
    def __init__(self, cfg, pool, generator: torch.Generator, device: str = "cpu"):
        self.cfg, self.pool, self.gen, self.device = cfg, pool, generator, device
        self.name = pool.names[0]
        self.adv_fn = get_adv(cfg.grpo.adv_estimator)
        self.settings = PGSettings.from_config(cfg)
        self.opt = make_optimizer(pool, self.name, cfg.ppo.lr, cfg)
        if cfg.ppo.kl_coef > 0:
            pool.keep_reference(self.name)

    def update(self, stage: int, episodes: list[Episode]) -> dict:
        rewards = torch.tensor([ep.turns[-1].reward for ep in episodes], dtype=torch.float32)
        groups = torch.tensor([ep.group for ep in episodes])
        adv = self.adv_fn(rewards, groups)
        batch = turns_of(episodes, self.name, adv[:, None])
        m = clipped_pg_update(self.pool, self.name, self.opt, batch, self.settings, generator=self.gen,
                              device=self.device)
        return {f"{self.name}/{k}": v for k, v in m.items()}

    def state_dict(self) -> dict:
        return {"optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state["optimizer"])
