"""GRPO (DeepSeekMath, arXiv 2402.03300), the single-agent baseline.

``A_i = (R_i − mean_g R) / (std_g R + eps)`` on every token of response i (estimator from the
registry, ``grpo.adv_estimator``), per-token clipped surrogate ``min(r A, clip(r, 1−ε_low,
1+ε_high) A)`` aggregated by ``grpo.loss_agg_mode`` (verl's ``agg_loss``), plus
``β · k3(π_θ, π_ref)`` when ``grpo.kl_coef > 0``. Dr. GRPO and DAPO's clip-higher / token-mean
are the same function with other settings.
"""
from __future__ import annotations

import torch

from satseq.algos import get_adv, get_loss
from satseq.algos.kl import kl_penalty
from satseq.algos.losses import agg_loss
from satseq.trainers.turn_batch import batch_logprobs, minibatch_indices, optimizer_step, turns_of_role
from satseq.workflows.episode import Episode


class GRPOUpdater:
    def __init__(self, cfg, pool, generator: torch.Generator, device: str = "cpu"):
        self.cfg, self.pool, self.gen, self.device = cfg, pool, generator, device
        g = cfg.grpo
        self.name = pool.names[0]
        self.adv_fn = get_adv(g.adv_estimator)
        self.loss_fn = get_loss("ppo")
        self.opt = torch.optim.AdamW(pool.parameters(self.name), lr=g.lr, weight_decay=cfg.trainer.weight_decay)
        if g.kl_coef > 0:
            pool.keep_reference()
        self.temperature = cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0
        self.pad_id = pool.tokenizer.pad_token_id

    def update(self, stage: int, episodes: list[Episode]) -> dict:
        g = self.cfg.grpo
        rewards = torch.tensor([ep.turns[-1].reward for ep in episodes], dtype=torch.float32)
        groups = torch.tensor([ep.group for ep in episodes])
        adv = self.adv_fn(rewards, groups)
        batch = turns_of_role(episodes, self.name, adv[:, None])
        model = self.pool.module(self.name)
        old_lp, _ = batch_logprobs(model, batch, self.pad_id, temperature=self.temperature, device=self.device)
        ref_lp = None
        if g.kl_coef > 0:
            with self.pool.reference() as ref:
                ref_lp, _ = batch_logprobs(ref, batch, self.pad_id, temperature=self.temperature, device=self.device)
        losses, clipfracs, kls = [], [], []
        model.train()
        for _ in range(g.ppo_epochs):
            for idx in minibatch_indices(len(batch), g.mini_batch_size, self.gen):
                mb = batch.select(idx)
                lp, m = batch_logprobs(model, mb, self.pad_id, temperature=self.temperature, device=self.device,
                                       grad=True, chunk=len(mb))
                w = lp.shape[1]
                loss, lm = self.loss_fn(lp, old_lp[idx][:, :w], mb.advantages.to(lp.device), m,
                                        clip_low=g.epsilon_low, clip_high=g.epsilon_high, agg_mode=g.loss_agg_mode)
                if ref_lp is not None:
                    kl = agg_loss(kl_penalty(lp, ref_lp[idx][:, :w], "k3"), m, g.loss_agg_mode)
                    loss = loss + g.kl_coef * kl
                    kls.append(float(kl.detach()))
                losses.append(optimizer_step(self.opt, loss, self.pool.parameters(self.name),
                                             self.cfg.trainer.grad_clip))
                clipfracs.append(float(lm["clipfrac"]))
        model.eval()
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
        out = {f"{self.name}/loss": mean(losses), f"{self.name}/clipfrac": mean(clipfracs)}
        if kls:
            out[f"{self.name}/kl_ref"] = mean(kls)
        return out

    def state_dict(self) -> dict:
        return {"optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state["optimizer"])
