"""Simultaneous multi-agent update: every trainable agent is updated from the same batch at once,
with no importance correction for the others' updates, no order and no trust-region check — the
independent (IPPO-style; MAGRPO in the multi-agent LLM libraries) update that SAT-Seq's
block-coordinate scheme is compared with.

Everything else is SAT-Seq's, so that the comparison isolates the update scheme: the relay workflow
and rewards, the turn advantages (``adv/seqaware``: GAE over turns, normalised per (prompt, turn),
clipped at ±``A_clip``), the policy loss ``sat_seq.policy_loss`` with ratio ``sat_seq.ratio`` and clip
``sat_seq.epsilon``, the learning rate, mini-batches and epochs of the ``sat_seq`` section. Per agent::

    L = −min(r·A, clip(r, 1−ε, 1+ε)·A)        (c = 1, β = 0; r against the batch's policy)

All agents' old log-probs are computed before any agent moves (the batch's behaviour policy). With
``trainer.step_kl``, one no-grad forward per agent after its update gives ``<agent>/kl_step_q99``,
``kl_step_max`` and ``kl_step_mean`` against those old log-probs (:mod:`satseq.update.step_kl`).
"""
from __future__ import annotations

import inspect

import torch

from satseq.algos import get_adv, get_loss
from satseq.records import Episode
from satseq.update.batch import batch_logprobs, turns_of
from satseq.update.loop import fit_minibatches, make_optimizer, mean, policy_temperature
from satseq.update.engine_correction import EngineCorrection, corrected_advantages
from satseq.update.step_kl import step_kl_stats
from satseq.update.turn_credit import turn_advantages

_RATIO = {"seq_mean": "sequence", "token": "token", "product": "product"}


class SimultaneousUpdater:
    def __init__(self, cfg, pool, generator: torch.Generator, device: str = "cpu", *,
                 trainable: list[str] | None = None, credit: str = "turn"):
        """``trainable``: the pool agents to update (default: the ``sat_seq.agents`` marked trainable;
        ``method=shared_policy`` passes its one agent, which plays every role). ``credit``: the turn
        advantages by turn position (``turn``: the relay) or per role (``role``: a game;
        :mod:`satseq.update.turn_credit`)."""
        s = cfg.sat_seq
        self.cfg, self.pool, self.gen, self.device, self.credit = cfg, pool, generator, device, credit
        self.trainable = trainable if trainable is not None else [a.name for a in s.agents if a.trainable]
        self.optimizers = {n: make_optimizer(pool, n, s.lr, cfg) for n in self.trainable}
        self.loss_fn = get_loss(s.policy_loss)
        # SAT-Seq's turn advantages (GAE over turns, normalised per (prompt, turn)), by their registered
        # name: registered by satseq.methods.sat_seq, which the method registry has imported
        self.adv_fn = get_adv("seqaware")
        self.options = {"ratio": _RATIO[s.ratio]} if "ratio" in inspect.signature(self.loss_fn).parameters else {}
        self.temperature = policy_temperature(cfg)
        self.pad_id = pool.tokenizer.pad_token_id
        self.correction = EngineCorrection.from_config(cfg)

    def update(self, stage: int, episodes: list[Episode]) -> dict:
        s = self.cfg.sat_seq
        normalized = turn_advantages(self.adv_fn, episodes, credit=self.credit, gamma=self.cfg.algorithm.gamma,
                                     lam=self.cfg.algorithm.lam, A_clip=s.A_clip)
        batches = {n: turns_of(episodes, n, normalized) for n in self.trainable}
        live = [n for n in self.trainable if len(batches[n])]  # a game's role may not have played this stage
        old = {n: batch_logprobs(self.pool.module(n), batches[n], self.pad_id, temperature=self.temperature,
                                 device=self.device)[0] for n in live}
        metrics: dict = {f"{n}/turns": 0 for n in self.trainable if n not in live}
        for name in live:
            model, batch, clipfracs, is_stats = self.pool.module(name), batches[name], [], []

            def step_loss(idx, mb, lp, m, _logdist):  # called within this iteration: name, lists are this agent's
                old_mb = old[name][idx][:, :lp.shape[1]]
                adv, st = corrected_advantages(self.correction, mb.advantages.to(lp.device), old_mb, m,
                                               mb.behaviour_logprobs)
                if st:
                    is_stats.append(st)
                loss, lm = self.loss_fn(lp, old_mb, adv, m,
                                        clip_low=s.epsilon, clip_high=s.epsilon, agg_mode="seq-mean-token-mean",
                                        **self.options)
                clipfracs.append(float(lm["clipfrac"]))
                return loss

            losses = fit_minibatches(self.pool, name, model, self.optimizers[name], batch, step_loss,
                                     epochs=s.ppo_epochs, size=s.mini_batch_size, generator=self.gen,
                                     temperature=self.temperature, device=self.device,
                                     grad_clip=self.cfg.trainer.grad_clip)
            metrics.update({f"{name}/loss": mean(losses), f"{name}/clipfrac": mean(clipfracs)})
            metrics.update({f"{name}/{k}": mean([st[k] for st in is_stats]) for k in (is_stats[0] if is_stats else {})})
            if self.cfg.trainer.step_kl:
                new_lp, mask = batch_logprobs(model, batch, self.pad_id, temperature=self.temperature,
                                              device=self.device)
                metrics.update({f"{name}/{k}": v for k, v in step_kl_stats(old[name], new_lp, mask).items()})
        return metrics

    def state_dict(self) -> dict:
        return {"optimizers": {n: o.state_dict() for n, o in self.optimizers.items()}}

    def load_state_dict(self, state: dict) -> None:
        for n, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][n])
