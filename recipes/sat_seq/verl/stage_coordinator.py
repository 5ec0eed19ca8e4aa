"""One SAT-Seq stage on verl data: block-coordinate updates of K agents, each in its own worker group.

The stage (seed README, "Stage-Level Optimization Loop"; satseq's ``StageCoordinator.update`` is the
same loop over agents held in one process)::

    batch      = the relay episodes of the stage: one row per agent turn, with
                 non_tensor_batch["uid"] (prompt), ["sat_seq_episode"], ["sat_seq_agent"]
    pi_cur     = each trainable agent's log-probs of its own rows (its worker group, before any update)
    A          = SAT-Seq's sequence-aware advantage (verl's registry: adv_estimator "sat_seq")
    order      = the agent scheduler's order for the stage; frozen agents (trainable: false) are skipped
    for agent i in order:                                     # only agent i's worker group changes
        c      = min(1, exp(sum_{j updated} log pi^j_new/pi^j_cur)) per episode  -> rollout_is_weights
        propose: agent i's worker group runs verl's update_actor on agent i's rows only, with the
                 registered sat_seq loss and beta_i
        check:   quantile-KL line search (kl/quantile_kl_ctrl.line_search): shrink or restore
        the accepted step's sequence log-ratios feed the next agents' c

:class:`AgentOps` is what the driver needs from where the agents live: ``ray_trainer.SatSeqRayTrainer``
implements it on verl worker groups; the CPU tests implement it on stub worker groups.
"""
from __future__ import annotations

import time
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from satseq.errors import ConfigError
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from .adv.seqaware import ADV_ESTIMATOR
from .agent_scheduler import AgentScheduler
from .data.reweighting import episode_log_ratio, rollout_is_weights, sequence_log_ratio, truncated_is_weight
from .kl.quantile_kl_ctrl import controller_from_config, line_search, per_state_kl

AGENT_KEY, EPISODE_KEY = "sat_seq_agent", "sat_seq_episode"


class AgentOps(Protocol):
    """Per-agent operations on the agent's own worker group."""

    def log_prob(self, name: str, data: DataProto) -> Tensor:
        """``[B, T]`` response log-probs of ``data`` under the agent's current parameters."""

    def update(self, name: str, data: DataProto) -> dict:
        """verl's update_actor on ``data`` (the agent's rows with old_log_probs, advantages, rollout_is_weights)."""

    def set_beta(self, name: str, beta: float) -> None: ...

    def snapshot(self, name: str) -> None: ...

    def set_step_scale(self, name: str, scale: float) -> None: ...

    def restore(self, name: str) -> None: ...


#: the ``sat_seq`` section's keys (config/sat_seq.yaml); any other key is a one-line error naming it
SAT_SEQ_KEYS = ("epsilon", "A_clip", "group_size", "max_backtracks", "backtrack_alpha", "quantile", "statistic",
                "on_fail", "check", "kl_estimator", "scheduler", "seed", "importance_weight", "show_previous",
                "previous_budget", "certificate", "agents")
AGENT_KEYS = ("name", "path", "trainable")
CERTIFICATE_KEYS = ("delta", "every")


def check_sat_seq_section(sat_seq_cfg) -> None:
    """Unknown keys in ``sat_seq`` (or an agent, or the certificate) are a ConfigError naming the key."""
    for key in sat_seq_cfg:
        if key not in SAT_SEQ_KEYS:
            raise ConfigError(f"unknown config key 'sat_seq.{key}' (known: {', '.join(SAT_SEQ_KEYS)})")
    for k, agent in enumerate(sat_seq_cfg.agents):
        for key in agent:
            if key not in AGENT_KEYS:
                raise ConfigError(f"unknown config key 'sat_seq.agents.{k}.{key}' (known: {', '.join(AGENT_KEYS)})")
    for key in sat_seq_cfg.get("certificate", {}) or {}:
        if key not in CERTIFICATE_KEYS:
            raise ConfigError(f"unknown config key 'sat_seq.certificate.{key}' (known: {', '.join(CERTIFICATE_KEYS)})")


def agent_names(sat_seq_cfg) -> list[str]:
    check_sat_seq_section(sat_seq_cfg)
    names = [str(a["name"]) for a in sat_seq_cfg.agents]
    if not names:
        raise ConfigError("sat_seq.agents is empty: at least one agent is needed")
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate agent names in sat_seq.agents: {names}")
    return names


def _codes(values) -> np.ndarray:
    seen: dict = {}
    return np.array([seen.setdefault(v, len(seen)) for v in np.asarray(values, dtype=object).tolist()], dtype=np.int64)


class SatSeqStageDriver:
    """Owns the scheduler, the controller and the per-agent betas; ``run_stage(stage, batch)``."""

    def __init__(self, config, ops: AgentOps):
        s = config.sat_seq
        rc = config.algorithm.get("rollout_correction") or {}
        if rc.get("rollout_is") or rc.get("rollout_rs") or rc.get("bypass_mode"):
            raise ConfigError("config key 'algorithm.rollout_correction': sat_seq writes rollout_is_weights itself "
                              "(the truncated IS between agents); verl's rollout correction is not combined with it")
        self.config, self.ops = config, ops
        self.agents = agent_names(s)
        self.trainable = {str(a["name"]) for a in s.agents if a.get("trainable", True)}
        self.scheduler = AgentScheduler(self.agents, mode=str(s.scheduler), seed=int(s.get("seed", 0)))
        self.controller = controller_from_config(s, config.algorithm.kl_ctrl)
        self.betas = {n: float(config.algorithm.kl_ctrl.kl_coef) for n in self.agents}
        self.estimator = str(s.kl_estimator)
        self.importance_weight = bool(s.importance_weight)

    def rows(self, batch: DataProto, name: str) -> np.ndarray:
        return np.nonzero(np.asarray(batch.non_tensor_batch[AGENT_KEY], dtype=object) == name)[0]

    def advantages(self, batch: DataProto) -> DataProto:
        """advantages/returns of every row, through verl's registry (adv_estimator ``sat_seq``)."""
        agent = np.asarray(batch.non_tensor_batch[AGENT_KEY], dtype=object)
        unknown = sorted(set(agent.tolist()) - set(self.agents))
        if unknown:
            raise ConfigError(f"rows of agents not in sat_seq.agents: {unknown}")
        turn = np.array([self.agents.index(a) for a in agent], dtype=np.int64)
        fn = get_adv_estimator_fn(ADV_ESTIMATOR)
        adv, ret = fn(token_level_rewards=batch.batch["token_level_rewards"], response_mask=batch.batch["response_mask"],
                      index=batch.non_tensor_batch["uid"], config=self.config.algorithm,
                      episode_index=batch.non_tensor_batch[EPISODE_KEY], turn_index=turn,
                      A_clip=float(self.config.sat_seq.A_clip))
        batch.batch["advantages"], batch.batch["returns"] = adv, ret
        return batch

    def run_stage(self, stage: int, batch: DataProto) -> dict:
        ops = self.ops
        episode = torch.as_tensor(_codes(batch.non_tensor_batch[EPISODE_KEY]))
        E = int(episode.max()) + 1
        subs, cur = {}, {}
        for name in self.agents:  # pi_cur of every trainable agent, before any update of the stage
            idx = self.rows(batch, name)
            if name in self.trainable and len(idx):
                subs[name] = batch.select_idxs(idx)
                cur[name] = ops.log_prob(name, subs[name]).detach().float()
        self.advantages(batch)
        mask = batch.batch["response_mask"].bool()
        mean_abs = {}
        for name in self.agents:
            idx = torch.as_tensor(self.rows(batch, name))
            a, m = batch.batch["advantages"][idx], mask[idx]
            mean_abs[name] = float((a * m).sum(-1).div(m.sum(-1).clamp(min=1)).abs().mean()) if len(idx) else 0.0
        order = [n for n in self.scheduler.order(stage, mean_abs) if n in subs]
        metrics: dict = {"sat_seq/order": ",".join(order)}
        updated: list[Tensor] = []
        for name in order:
            t0 = time.perf_counter()
            idx = self.rows(batch, name)
            sub = subs[name]
            ep_rows = episode[torch.as_tensor(idx)]
            m = sub.batch["response_mask"].bool()
            c = truncated_is_weight(updated, num_episodes=E) if updated and self.importance_weight else torch.ones(E)
            sub.batch["old_log_probs"] = cur[name]
            sub.batch["advantages"] = batch.batch["advantages"][torch.as_tensor(idx)]
            sub.batch["rollout_is_weights"] = rollout_is_weights(c, ep_rows, m)
            last: dict = {}

            def propose(beta: float, name=name, sub=sub) -> None:
                ops.set_beta(name, beta)
                last["update"] = ops.update(name, sub)

            def measure_kl(name=name, sub=sub, m=m) -> Tensor:
                last["lp"] = ops.log_prob(name, sub).detach().float()
                return per_state_kl(last["lp"], cur[name], m, self.estimator)

            res = line_search(self.controller, self.betas[name], snapshot=lambda n=name: ops.snapshot(n),
                              propose=propose, measure_kl=measure_kl,
                              set_step_scale=lambda s, n=name: ops.set_step_scale(n, s),
                              restore=lambda n=name: ops.restore(n))
            self.betas[name] = res.beta
            new_lp = last["lp"] if res.accepted else cur[name]  # a rejection restored pi_cur
            seq_lr = sequence_log_ratio(new_lp, cur[name], m)
            updated.append(episode_log_ratio(seq_lr, ep_rows, E))
            metrics.update({f"sat_seq/{name}/accepted": float(res.accepted), f"sat_seq/{name}/backtracks": res.backtracks,
                            f"sat_seq/{name}/step_scale": res.step_scale, f"sat_seq/{name}/beta": res.beta,
                            f"sat_seq/{name}/kl_quantile": res.kl_quantile, f"sat_seq/{name}/kl_mean": res.kl_mean,
                            f"sat_seq/{name}/kl_max": res.kl_max, f"sat_seq/{name}/is_weight_mean": float(c.mean()),
                            f"sat_seq/{name}/mean_abs_adv": mean_abs[name],
                            f"timing_s/sat_seq_update_{name}": time.perf_counter() - t0})
            metrics.update({f"sat_seq/{name}/{k}": v for k, v in (last.get("update") or {}).items()
                            if isinstance(v, (int, float))})
        return metrics
