"""A*-PO stage 2 (arXiv 2505.20686): one generation per prompt, regression onto r − V*.

Per sequence ``(β2 · Σ_t log π_θ/π_ref + V*(x) − r)²``, mean over sequences, minus
``entropy_coef`` × the mean token entropy (loss ``apo`` in the registry). No ratio, no clipping,
no critic; the reference is the starting policy (adapters disabled for LoRA, a frozen copy for
full fine-tuning).
"""
from __future__ import annotations

import torch

import satseq.algos.regression  # noqa: F401  (registers the regression loss apo)
from satseq.algos import get_loss
from satseq.records import Episode
from satseq.update.batch import turns_of
from satseq.update.loop import fit_minibatches, make_optimizer, mean, policy_temperature, reference_logprobs


class APOUpdater:
    def __init__(self, cfg, pool, generator: torch.Generator, cache=None, device: str = "cpu"):
        self.cfg, self.pool, self.gen, self.cache, self.device = cfg, pool, generator, cache, device
        self.name = pool.names[0]
        self.loss_fn = get_loss(cfg.apo.loss)
        self.opt = make_optimizer(pool, self.name, cfg.apo.lr, cfg)
        pool.keep_reference(self.name)
        self.temperature = policy_temperature(cfg)

    def update(self, stage: int, episodes: list[Episode]) -> dict:
        rewards = torch.tensor([ep.turns[-1].reward for ep in episodes], dtype=torch.float32)
        vstar = torch.tensor(self.cache.vstar_for([ep.problem.problem_id for ep in episodes]), dtype=torch.float32)
        m = self.regress(turns_of(episodes, self.name), rewards, vstar)
        return {f"{self.name}/loss": m["loss"], f"{self.name}/entropy": m["entropy"],
                "apo/advantage_mean": float((rewards - vstar).mean()), "apo/vstar_mean": float(vstar.mean())}

    def regress(self, batch, rewards: torch.Tensor, baselines: torch.Tensor) -> dict:
        """One pass of the regression ``(β2 · Σ log π/π_ref − (r − b))²`` over ``batch`` (one reward and
        one baseline per turn: V*(x) for A*-PO; A*-PO + PAG also passes per-turn targets)."""
        a = self.cfg.apo
        ref_lp = reference_logprobs(self.pool, self.name, batch, temperature=self.temperature, device=self.device)
        model = self.pool.module(self.name)
        ents = []

        def step_loss(idx, mb, lp, m, logdist):
            w = lp.shape[1]
            entropy = -(logdist.exp() * logdist).sum(-1)
            loss, lm = self.loss_fn(lp, ref_lp[idx][:, :w], m, rewards[idx], baselines[idx], beta2=a.beta2,
                                    entropy=entropy, entropy_coef=a.entropy_coef)
            ents.append(float(lm.get("entropy", 0.0)))
            return loss

        losses = fit_minibatches(self.pool, self.name, model, self.opt, batch, step_loss, epochs=a.epochs,
                                 size=a.mini_batch_size, generator=self.gen, temperature=self.temperature,
                                 device=self.device, grad_clip=self.cfg.trainer.grad_clip, need_logits=True)
        return {"loss": mean(losses), "entropy": mean(ents)}

    def state_dict(self) -> dict:
        return {"optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state["optimizer"])
