"""SAT-Seq stage coordinator: block-coordinate updates of K agents with a quantile-KL check.

One stage (spec ``sat_seq.md`` §"Per stage")::

    raw, A  = seqaware GAE over turns → group-normalise per (prompt, turn) → clip ±A_clip
    order   = scheduler.order(stage)
    for agent i in order:                       # all other agents frozen
        c   = min(1, exp(Σ_{j updated} log π^j_new/π^j_cur))      # truncated IS, detached
        propose: ppo_epochs × mini-batches of
                 L = −c·min(r·A, clip(r,1−ε,1+ε)·A) + β·KL(π^i_θ‖π^i_cur),  r = exp(mean_t log ratio)
        check:   q-quantile of exact per-state KL(π^i_new‖π^i_cur) ≤ target, else shrink the step
                 θ_cur + α^j Δ with β ← 1.5β (j ≤ max_backtracks), else restore π^i_cur (reject)
    certificate: before the first stage, when due and after the last one, a PAC lower bound on the
                 joint policy's vote accuracy and episode reward from a fresh batch
                 (monitor/certificate, monitor/certificate_batch), and the certified improvement
                 over the warm start
    logged per agent: accepted, backtracks (j), step_scale (α^j, 0 = rejected), β, the check's
                 kl_quantile / kl_mean / kl_max (of the accepted or the last tried step), and
                 kl_step_q99 / kl_step_max / kl_step_mean of the step taken (satseq.update.step_kl)

The rollout, rewards, logging and checkpointing around a stage live in :mod:`satseq.loop`.
"""
from __future__ import annotations

import inspect
import time

import torch

import satseq.methods.sat_seq.loss.seq_ratio_loss  # noqa: F401  (registers policy loss sat_seq)
from satseq.algos.kl import exact_kl, kl_penalty
from satseq.algos import get_loss
from satseq.methods.sat_seq.adv.seqaware import seqaware_advantages
from satseq.methods.sat_seq.agent_scheduler import AgentScheduler
from satseq.methods.sat_seq.data.reweighting import episode_log_ratio, sequence_log_ratio, truncated_is_weight
from satseq.methods.sat_seq.kl.quantile_kl_ctrl import QuantileKLController
from satseq.methods.sat_seq.monitor.certificate_batch import certificate_metrics
from satseq.records import Episode
from satseq.update.batch import batch_logprobs, turns_of
from satseq.update.clipped_pg import behaviour_gap
from satseq.update.engine_correction import EngineCorrection, corrected_advantages
from satseq.update.step_kl import step_kl_stats
from satseq.update.turn_credit import turn_advantages
from satseq.update.loop import fit_minibatches, has_dropout, make_optimizer, mean, policy_temperature

_RATIO = {"seq_mean": "sequence", "token": "token", "product": "product"}


class StageCoordinator:
    """Owns the per-agent optimizers and β's; ``update(stage, episodes)`` runs one stage's updates."""

    def __init__(self, cfg, pool, generator: torch.Generator, device: str = "cpu", certificate=None,
                 agent_steps=None, simultaneous: bool = False, credit: str = "turn"):
        """``certificate``: a :class:`~satseq.methods.sat_seq.monitor.certificate_batch.CertificateBatch`
        (None = no certificate). ``simultaneous``: every agent's step from the batch policy with c = 1,
        in the listed order (no scheduler), the check and shrink unchanged: the simultaneous update
        with SAT-Seq's trust region (``method=simultaneous simultaneous.trust_region=true``). ``credit``:
        the turn advantages by turn position (``turn``: the relay) or per role (``role``: a game;
        :mod:`satseq.update.turn_credit`)."""
        self.cfg, self.pool, self.gen, self.device = cfg, pool, generator, device
        self.simultaneous, self.credit = simultaneous, credit
        self.certificate = certificate
        self.cert_start: dict | None = None  # the warm start's bounds (for the certified improvement)
        self.cert_start_known = True
        s = cfg.sat_seq
        self.agents = [a.name for a in s.agents]
        self.trainable = {a.name for a in s.agents if a.trainable}
        self.scheduler = AgentScheduler(self.agents, mode=s.scheduler, seed=cfg.seed)
        kc = cfg.algorithm.kl_ctrl
        self.controller = QuantileKLController(target_kl=kc.target_kl, quantile=kc.quantile,
                                               max_backtracks=s.max_backtracks, alpha=s.backtrack_alpha,
                                               statistic=kc.statistic, on_fail=kc.on_fail, check=kc.check)
        self.betas = {n: kc.kl_coef for n in self.agents}
        self.agent_steps = agent_steps  # where update_agent runs: None = here (trainer.backend=ray: the actors)
        self.optimizers = self._make_optimizers()
        self.loss_fn = get_loss(s.policy_loss)
        self.temperature = policy_temperature(cfg)
        self.pad_id = pool.tokenizer.pad_token_id
        self.correction = EngineCorrection.from_config(cfg)  # the engine-mismatch TIS weight; c_t is separate

    def _make_optimizers(self) -> dict:
        """One optimizer per trainable agent this pool holds (a Ray actor holds only its own agents;
        a coordinator whose steps run elsewhere, ``agent_steps``, holds none)."""
        if self.agent_steps is not None:
            return {}
        return {n: make_optimizer(self.pool, n, self.cfg.sat_seq.lr, self.cfg) for n in self.agents
                if n in self.trainable and n in self.pool.names}

    # ------------------------------------------------------------------ the stage
    def update(self, stage: int, episodes: list[Episode]) -> dict:
        s, E = self.cfg.sat_seq, len(episodes)
        if self.credit == "turn":  # the relay: turn k is agent k's
            rewards = torch.tensor([[t.reward for t in ep.turns] for ep in episodes], dtype=torch.float32)
            groups = torch.tensor([ep.group for ep in episodes])
            normalized = seqaware_advantages(rewards, groups, gamma=self.cfg.algorithm.gamma,
                                             lam=self.cfg.algorithm.lam, A_clip=s.A_clip).normalized
            mean_abs = {n: float(normalized[:, k].abs().mean()) for k, n in enumerate(self.agents)}
        else:  # each role over its own turns (satseq.update.turn_credit)
            normalized = turn_advantages(seqaware_advantages, episodes, credit=self.credit,
                                         gamma=self.cfg.algorithm.gamma, lam=self.cfg.algorithm.lam, A_clip=s.A_clip)
            mean_abs = {n: float(a.abs().mean()) if len(a) else 0.0
                        for n in self.agents for a in [turns_of(episodes, n, normalized).advantages]}
        order = self.agents if self.simultaneous else self.scheduler.order(stage, mean_abs)
        order = [n for n in order if n in self.trainable]

        metrics: dict = {"stage/order": ",".join(order)}
        if self.certificate is not None and self.cert_start is None and self.cert_start_known:
            t0 = time.perf_counter()  # before the first update: the warm start's bounds
            self.cert_start = self.certificate.certify(-1)
            metrics.update({f"certificate/start_{k}_upper": b["upper_half"] for k, b in self.cert_start.items()})
            metrics["time/certificate_start"] = time.perf_counter() - t0
        updated_log_ratios: list[torch.Tensor] = []
        for name in order:
            c = truncated_is_weight(updated_log_ratios, num_episodes=E) \
                if updated_log_ratios and s.importance_weight and not self.simultaneous else torch.ones(E)
            batch = turns_of(episodes, name, normalized)
            if not len(batch):  # a game's role that did not play this stage (the other ended it first)
                metrics[f"{name}/turns"] = 0
                continue
            t0 = time.perf_counter()
            res, seq_lr, m = self._agent_step(name, batch, c[batch.episode])
            metrics[f"time/kl_check_{name}"] = m.pop("time_kl_check")  # part of time/update_<agent>
            metrics.update({f"{name}/{key}": v for key, v in m.items()})
            metrics[f"time/update_{name}"] = time.perf_counter() - t0
            updated_log_ratios.append(episode_log_ratio(seq_lr, batch.episode, E))
        if self.certificate is not None and self.certificate.due(stage):
            t0 = time.perf_counter()
            metrics.update(certificate_metrics(self.certificate.certify(stage), self.cert_start))
            metrics["time/certificate"] = time.perf_counter() - t0
        return metrics

    # ------------------------------------------------------------------ one agent
    def _agent_step(self, name: str, batch, c: torch.Tensor):
        """:meth:`update_agent` here, or where ``agent_steps`` runs it (trainer.backend=ray: the actor
        hosting the agent, whose β comes back with the result)."""
        if self.agent_steps is None:
            return self.update_agent(name, batch, c)
        res, seq_lr, m = self.agent_steps.update_agent(name, batch, c)
        self.betas[name] = res.beta
        return res, seq_lr, m

    def update_agent(self, name: str, batch, c: torch.Tensor):
        """One agent's block-coordinate step (the public per-agent contract,
        :class:`satseq.update.loop.AgentSteps`): the proposal on its turns weighted by ``c``, the
        quantile-KL check with backtracking; returns the controller's result, the turns' sequence
        log-ratios log π_new/π_cur and the agent's metrics."""
        s = self.cfg.sat_seq
        model = self.pool.module(name)
        opt = self.optimizers[name]
        exact = self.cfg.algorithm.kl_ctrl.estimator == "exact" or s.kl_penalty == "exact"
        # π_cur's log-probs (and log-softmax for the exact KL): from a no-grad forward, or, when the
        # proposal is one step on the whole batch and training mode changes nothing (no dropout), from
        # the proposal's own grad pass at θ_cur, detached: the same numbers, one forward fewer.
        reuse = s.ppo_epochs == 1 and len(batch) <= s.mini_batch_size and not has_dropout(model)
        cur: dict = {}
        if not reuse:
            out = batch_logprobs(model, batch, self.pad_id, temperature=self.temperature, device=self.device,
                                 need_logits=exact)
            cur["lp"], cur["mask"] = out[0], out[1]
            cur["dist"] = out[2] if exact else None
        stats: dict = {"loss": [], "clipfrac": [], "kl": [], "engine_is": []}

        # sat_seq.ratio goes to the losses that take a ratio form (sat_seq's own does)
        options = {"ratio": _RATIO[s.ratio]} if "ratio" in inspect.signature(self.loss_fn).parameters else {}

        def propose(beta: float) -> None:
            def step_loss(idx, mb, lp, m, logits):
                width = lp.shape[1]
                if reuse:  # the one mini-batch is the whole batch, permuted by idx
                    order = torch.argsort(idx)
                    cur["lp"], cur["mask"] = lp.detach()[order], m[order]
                    cur["dist"] = logits.detach()[order] if exact else None
                cur_lp_mb = cur["lp"][idx][:, :width]
                if s.kl_penalty == "exact":
                    kl = exact_kl(logits, cur["dist"][idx][:, :width]) * m
                else:
                    kl = kl_penalty(lp, cur_lp_mb, s.kl_penalty) * m
                adv, st = corrected_advantages(self.correction, mb.advantages.to(lp.device), cur_lp_mb, m,
                                               mb.behaviour_logprobs)
                stats["engine_is"] += [st] if st else []
                loss, lm = self.loss_fn(lp, cur_lp_mb, adv, m, clip_low=s.epsilon,
                                        clip_high=s.epsilon, agg_mode="seq-mean-token-mean", is_weight=c[idx].to(lp.device),
                                        kl=kl, beta=beta, **options)
                stats["clipfrac"].append(float(lm["clipfrac"]))
                return loss

            stats["loss"] += fit_minibatches(self.pool, name, model, opt, batch, step_loss, epochs=s.ppo_epochs,
                                             size=s.mini_batch_size, generator=self.gen, temperature=self.temperature,
                                             device=self.device, grad_clip=self.cfg.trainer.grad_clip, need_logits=True)

        last: dict = {"seconds": 0.0}

        def measure_kl() -> torch.Tensor:
            """Per-state KL(π_new ‖ π_cur) at agent i's visited states; keeps π_new's log-probs."""
            t0 = time.perf_counter()
            if self.cfg.algorithm.kl_ctrl.estimator == "exact":
                new_lp, _, new_dist = batch_logprobs(model, batch, self.pad_id, temperature=self.temperature,
                                                     device=self.device, need_logits=True)
                per_state = exact_kl(new_dist, cur["dist"][:, :new_dist.shape[1]])  # inputs are log-softmaxes
            else:
                new_lp, _ = batch_logprobs(model, batch, self.pad_id, temperature=self.temperature, device=self.device)
                per_state = kl_penalty(new_lp, cur["lp"], self.cfg.algorithm.kl_ctrl.estimator)
            last["new_lp"] = new_lp
            last["seconds"] += time.perf_counter() - t0
            return per_state[cur["mask"].bool()]

        res = self.controller.run(self.pool.parameters(name), opt, self.betas[name], propose, measure_kl)
        self.betas[name] = res.beta
        new_lp = last["new_lp"] if res.accepted else cur["lp"]  # a rejection restored π_cur exactly
        seq_lr = sequence_log_ratio(new_lp, cur["lp"], cur["mask"]).cpu()
        return res, seq_lr, {
            "accepted": float(res.accepted), "backtracks": res.backtracks, "step_scale": res.step_scale,
            "beta": res.beta,
            "kl_quantile": res.kl_quantile, "kl_mean": res.kl_mean, "kl_max": res.kl_max,
            "is_weight_mean": float(c.mean()),
            # the step taken (0 after a rejection), k3 at the sampled tokens as for every method: free here
            **step_kl_stats(cur["lp"], new_lp, cur["mask"]),
            "clipfrac": mean(stats["clipfrac"]), "loss": mean(stats["loss"]),
            # π_cur is the policy that sampled these turns: the gap is the engine's (precision, kernels)
            "logprob_gap": behaviour_gap(cur["lp"], cur["mask"], batch.behaviour_logprobs),
            "time_kl_check": last["seconds"],  # every check's forward, retries included
            **{k: mean([st[k] for st in stats["engine_is"]]) for k in (stats["engine_is"][0] if stats["engine_is"] else {})},
        }

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict:
        state = {"betas": dict(self.betas), "optimizers": {n: o.state_dict() for n, o in self.optimizers.items()},
                 "certificate_start": self.cert_start}
        return state if self.agent_steps is None else self.agent_steps.state_dict(state)

    def load_state_dict(self, state: dict) -> None:
        self.betas.update(state["betas"])
        self.cert_start = state.get("certificate_start")
        self.cert_start_known = "certificate_start" in state  # older states: no warm-start bound to compare
        for n, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][n])
        if self.agent_steps is not None:
            self.agent_steps.load_state_dict(state)
