"""PAG training step (spec ``apo_pag.md``): per-turn rewards → turn-independent, per-role
advantages → one update of the single policy on every turn it took (solve, verify, revise).

``pag.update = "grpo"`` (default): the clipped policy-gradient update of GRPO
(:func:`satseq.update.clipped_pg.clipped_pg_update`, settings from the ``ppo`` section) with the
advantages of :func:`satseq.methods.pag.advantages.pag_advantages`.

``pag.update = "apo"``: A*-PO + PAG (the seed's notebook; our reading, docs/apo_pag.md). Every turn
is regressed by A*-PO, ``(β2 · Σ_t log π/π_ref − (r_turn − b))²``, where r_turn is the turn's
reward (revision bonus included) and the baseline b is V*(x) from stage 1 for policy turns and the
batch mean of verifier rewards for verifier turns (no offline V* exists for contexts the current
policy creates).
"""
from __future__ import annotations

import torch

from satseq.methods.pag.advantages import assign_pag_advantages
from satseq.envs.self_verify.metrics import pag_metrics
from satseq.update.clipped_pg import PGSettings, clipped_pg_update
from satseq.update.batch import turns_of
from satseq.update.loop import make_optimizer
from satseq.records import Episode


def pag_targets(episodes: list[Episode], vstar: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards, baselines) per turn, in :func:`~satseq.update.batch.turns_of` order, for A*-PO + PAG."""
    v_turns = [t.reward for ep in episodes for t in ep.turns if t.role == "verifier"]
    v_mean = sum(v_turns) / len(v_turns) if v_turns else 0.0
    r, b = [], []
    for ep, vs in zip(episodes, vstar):
        for t in ep.turns:
            r.append(t.reward)
            b.append(vs if t.role == "policy" else v_mean)
    return torch.tensor(r, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)


class PAGUpdater:
    def __init__(self, cfg, pool, generator: torch.Generator, device: str = "cpu", vstar_cache=None):
        self.cfg, self.pool, self.gen, self.device = cfg, pool, generator, device
        self.name = pool.names[0]
        self.mode = cfg.pag.update
        if self.mode == "apo":
            from satseq.update.regression import APOUpdater

            if vstar_cache is None:
                raise ValueError("pag.update=apo needs the stage-1 V* cache")
            self.cache = vstar_cache
            self.apo = APOUpdater(cfg, pool, generator, vstar_cache, device)
            self.opt = self.apo.opt
        else:
            self.settings = PGSettings.from_config(cfg)
            self.opt = make_optimizer(pool, self.name, cfg.ppo.lr, cfg)
            if cfg.ppo.kl_coef > 0:
                pool.keep_reference(self.name)

    def update(self, stage: int, episodes: list[Episode]) -> dict:
        flat = assign_pag_advantages(episodes, group_by=self.cfg.pag.adv_group_by,
                                     verifier_balance=self.cfg.pag.verifier_balance)
        out = {f"pag/{k}": v for k, v in pag_metrics(episodes).items() if v is not None}
        out["pag/policy_turns_mean"] = sum(ep.info["policy_turns"] for ep in episodes) / max(1, len(episodes))
        if self.mode == "apo":
            vstar = self.cache.vstar_for([ep.problem.problem_id for ep in episodes])
            rewards, baselines = pag_targets(episodes, vstar)
            m = self.apo.regress(turns_of(episodes, self.name), rewards, baselines)
            out["apo/vstar_mean"] = sum(vstar) / len(vstar)
        else:
            width = max(len(ep.turns) for ep in episodes)
            adv = torch.zeros(len(episodes), width)
            it = iter(flat.tolist())
            for e, ep in enumerate(episodes):
                for t in ep.turns:
                    adv[e, t.index] = next(it)
            m = clipped_pg_update(self.pool, self.name, self.opt, turns_of(episodes, self.name, adv),
                                  self.settings, generator=self.gen, device=self.device)
        out.update({f"{self.name}/{k}": v for k, v in m.items()})
        return out

    def state_dict(self) -> dict:
        return {"optimizer": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.opt.load_state_dict(state["optimizer"])
