"""The training loop, for every method, on one screen.

    dataset ─▶ workflow.rollout ─▶ episodes ─▶ rewards ─▶ algorithm.update ─▶ metrics / checkpoints

``method=sat_seq``: the relay workflow over K agents, updated by the SAT-Seq stage coordinator.
``method=grpo``: one agent, the single-turn workflow, the GRPO updater. ``method=apo``: A*-PO —
V* from the cache (stage 1 runs first if there is none), one sample per prompt, the regression loss.
``method=pag``: one policy solves, verifies, revises (``self_verify``); per-turn rewards, per-role
advantages, GRPO-style or A*-PO updates. ``method=mlmt``: solver → coach → solver (``coach``); coach
reward with confidence and context dependence, per-role per-turn GRPO, alternating schedule. The loop resumes from
``<run_dir>/trainer_state`` when it exists (``resume=true``) and then continues the very same run:
weights, optimizer states, β's, RNG streams and the data position are all restored.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch

from satseq.checkpoint import load_trainer_state, save_agent_checkpoints, save_trainer_state
from satseq.config import TrainConfig, dump_config, save_config
from satseq.data.sampler import EpochSampler
from satseq.errors import ConfigError
from satseq.rewards.turn_rewards import assign_outcome_rewards, assign_relay_rewards
from satseq.tracking import Tracker
from satseq.trainers.runtime import build_runtime
from satseq.utils.io import write_json
from satseq.utils.progress import progress_bar
from satseq.workflows.relay import RelayWorkflow
from satseq.workflows.single import SingleWorkflow

GRPO_AGENT = "policy"


@dataclass
class Method:
    """What the loop needs for one method: the runtime, the workflow that makes episodes, the updater,
    rewards, and the roles whose per-turn metrics are logged."""

    rt: object
    workflow: object
    updater: object
    group_size: int
    assign_rewards: Callable[[list], Optional[dict]]
    generator: torch.Generator
    roles: list[str] = field(default_factory=list)


def build_method(cfg: TrainConfig, console=print, reward_fn=None) -> Method:
    """The :class:`Method` for ``cfg.method``.

    ``reward_fn(prompt, response, answer) -> float`` (or ``reward.custom``) replaces correctness.
    """
    from satseq.rewards.grade import load_custom_reward

    custom = reward_fn or (load_custom_reward(cfg.reward.custom) if cfg.reward.custom else None)
    gen = torch.Generator().manual_seed(cfg.seed)
    if custom is not None and cfg.method in ("pag", "mlmt"):
        raise ConfigError(f"config key 'reward.custom': not supported with method={cfg.method} "
                          "(its turn rewards are defined by correctness)")
    if cfg.method == "sat_seq":
        from satseq.methods.sat_seq.stage_coordinator import StageCoordinator

        names = [a.name for a in cfg.sat_seq.agents]
        rt = build_runtime(cfg, names, [a.path for a in cfg.sat_seq.agents], console)
        assign = lambda eps: assign_relay_rewards(eps, own=cfg.reward.own, team=cfg.reward.team, custom=custom)  # noqa: E731
        return Method(rt, RelayWorkflow(names, rt.fmt, rt.sampling), StageCoordinator(cfg, rt.pool, gen, rt.device),
                      cfg.sat_seq.group_size, assign, gen, names)
    if cfg.method == "grpo":
        from satseq.trainers.grpo import GRPOUpdater

        rt = build_runtime(cfg, [GRPO_AGENT], [None], console)
        return Method(rt, SingleWorkflow(GRPO_AGENT, rt.fmt, rt.sampling), GRPOUpdater(cfg, rt.pool, gen, rt.device),
                      cfg.grpo.group_size, lambda eps: assign_outcome_rewards(eps, custom=custom), gen, [GRPO_AGENT])
    if cfg.method == "apo":
        from satseq.methods.apo.updater import APOUpdater

        rt = build_runtime(cfg, [GRPO_AGENT], [None], console)
        cache = _vstar(cfg, rt, custom, console)
        return Method(rt, SingleWorkflow(GRPO_AGENT, rt.fmt, rt.sampling), APOUpdater(cfg, rt.pool, gen, cache, rt.device),
                      1, lambda eps: assign_outcome_rewards(eps, custom=custom), gen, [GRPO_AGENT])
    if cfg.method == "pag":
        from satseq.methods.pag.updater import PAGUpdater
        from satseq.rewards.pag_rewards import assign_pag_rewards
        from satseq.workflows.self_verify import SelfVerifyWorkflow

        rt = build_runtime(cfg, [GRPO_AGENT], [None], console)
        cache = _vstar(cfg, rt, None, console) if cfg.pag.update == "apo" else None
        workflow = SelfVerifyWorkflow(GRPO_AGENT, rt.fmt, rt.sampling, cfg.pag.max_policy_turns,
                                      verify_last=cfg.pag.verify_last)
        return Method(rt, workflow, PAGUpdater(cfg, rt.pool, gen, rt.device, vstar_cache=cache),
                      cfg.grpo.group_size, lambda eps: assign_pag_rewards(eps, alpha=cfg.pag.alpha), gen)
    if cfg.method == "mlmt":
        from satseq.methods.mlmt.updater import MLMTUpdater
        from satseq.workflows.coach import CoachWorkflow

        m = cfg.mlmt
        if m.share == "weights":
            if m.solver.trainable != m.coach.trainable:
                raise ConfigError("config key 'mlmt.share': with shared weights one role cannot be frozen while the "
                                  "other trains (use mlmt.share=lora: one adapter per role)")
            roles = {"solver": "actor", "coach": "actor"}
            rt = build_runtime(cfg, ["actor"], [m.solver.path], console, path_keys=["mlmt.solver.path"])
        else:
            roles = {"solver": "solver", "coach": "coach"}
            rt = build_runtime(cfg, ["solver", "coach"], [m.solver.path, m.coach.path], console,
                               path_keys=["mlmt.solver.path", "mlmt.coach.path"], force_lora=m.share == "lora")
        updater = MLMTUpdater(cfg, rt.pool, roles, gen, rt.device)
        return Method(rt, CoachWorkflow(roles, rt.fmt, rt.sampling), updater, cfg.grpo.group_size,
                      updater.assign_rewards, gen, ["solver", "coach"])
    raise ConfigError(f"config key 'method': unknown method '{cfg.method}'")


def _vstar(cfg: TrainConfig, rt, custom, console):
    """A*-PO stage 1 from the cache (computed on first use); ``apo.filter_unsolvable`` trims ``rt.train``."""
    from satseq.methods.apo.stage1 import load_or_compute_vstar

    cache = load_or_compute_vstar(cfg, rt, GRPO_AGENT, custom=custom, console=console)
    if cfg.apo.filter_unsolvable:
        keep = {str(i) for i in cache.solvable_ids()}
        rt.train = [p for p in rt.train if str(p.problem_id) in keep]
        if not rt.train:
            raise ConfigError("apo.filter_unsolvable: every training prompt is unsolvable for the reference policy")
    return cache


def rollout_metrics(episodes, roles: list[str]) -> dict:
    m = {}
    for role in roles:
        turns = [t for ep in episodes for t in ep.turns if t.role == role]
        m[f"{role}/accuracy"] = sum(t.correct for t in turns) / max(1, len(turns))
        m[f"{role}/response_length"] = sum(len(t.response_ids) for t in turns) / max(1, len(turns))
    m["rollout/vote_accuracy"] = sum(ep.prediction_correct for ep in episodes) / max(1, len(episodes))
    m["rollout/episode_reward"] = sum(sum(t.reward for t in ep.turns) for ep in episodes) / max(1, len(episodes))
    return m


def held_out_metrics(cfg: TrainConfig, method: Method, stage: int) -> dict:
    """Sampled accuracy on ``data.eval`` (one episode per problem), with its own seeded generator."""
    from satseq.eval.rollout_eval import evaluate_multiturn, evaluate_relay, evaluate_single

    rt = method.rt
    gen = torch.Generator().manual_seed(cfg.seed * 7919 + stage)
    names = rt.pool.names
    if cfg.method == "sat_seq":
        r = evaluate_relay(rt.pool, names, rt.fmt, rt.engine, rt.eval, sampling=rt.sampling, generator=gen)
        return {"eval/vote_accuracy": r["vote"]["acc"], **{f"eval/{n}/accuracy": r[n]["acc"] for n in names}}
    if cfg.method in ("pag", "mlmt"):
        r = evaluate_multiturn(method.workflow, rt.pool, rt.engine, rt.eval, generator=gen)
        return {f"eval/{k}": v for k, v in r.items()}
    r = evaluate_single(rt.pool, names[0], rt.fmt, rt.engine, rt.eval, sampling=rt.sampling, generator=gen)
    return {f"eval/{names[0]}/accuracy": r["acc"]}


def extra_rollout_metrics(cfg: TrainConfig, episodes) -> dict:
    if cfg.method == "mlmt":
        from satseq.methods.mlmt.updater import mlmt_rollout_metrics

        return mlmt_rollout_metrics(episodes)
    return {}


def _pag_collapse_check(cfg: TrainConfig, metrics: dict, warned: bool, console) -> bool:
    """Print the collapse warning the first time the answer change ratio drops below the threshold."""
    from satseq.methods.pag.metrics import collapse_warning

    msg = collapse_warning(metrics.get("pag/answer_change_ratio"), cfg.pag.collapse_threshold)
    if msg and not warned:
        console(f"[satseq] warning: {msg}")
    return warned or bool(msg)


def _fault_injection(stage: int) -> None:
    """Test hook: ``SATSEQ_KILL_AT_STAGE=N`` kills the process (SIGKILL) in the middle of stage N."""
    at = os.environ.get("SATSEQ_KILL_AT_STAGE")
    if at is not None and int(at) == stage:
        os.kill(os.getpid(), signal.SIGKILL)


def train(cfg: TrainConfig, console=print, stop_after: int | None = None, reward_fn=None) -> Path:
    """Run (or resume) a training run; return its run directory. ``stop_after`` ends early (tests)."""
    run_dir = cfg.run_dir
    ray_info = None
    if cfg.trainer.ray_address:
        from satseq.distributed import connect_ray

        ray_info = connect_ray(cfg.trainer.ray_address, console)
    method = build_method(cfg, console, reward_fn)
    rt, workflow, updater, gen = method.rt, method.workflow, method.updater, method.generator
    sampler = EpochSampler(len(rt.train), seed=cfg.seed)
    start = 0
    state = load_trainer_state(run_dir, rt.pool) if cfg.resume else None
    if state is not None:
        updater.load_state_dict(state["updater"])
        gen.set_state(state["generator"])
        sampler.load_state_dict(state["sampler"])
        start = state["stage"] + 1
        console(f"[satseq] resuming {run_dir} at stage {start}")
    save_config(cfg, run_dir / "train_config.yaml")
    write_json(run_dir / "run_info.json", {"method": cfg.method, "agents": rt.pool.names, "mode": rt.pool.mode,
                                           **({"roles": method.workflow.agents} if cfg.method == "mlmt" else {}),
                                           **({"ray": ray_info} if ray_info else {}),
                                           "base_model": cfg.model.path, "prompt_format": rt.fmt.name})
    tracker = Tracker(run_dir, tensorboard=cfg.trainer.tensorboard, wandb=cfg.trainer.wandb,
                      wandb_project=cfg.trainer.wandb_project, mlflow=cfg.trainer.mlflow,
                      config=dump_config(cfg), resume_step=start)
    last = cfg.trainer.num_stages - 1
    warned = False
    with tracker, progress_bar(cfg.trainer.num_stages, f"{cfg.method} {cfg.run_name}",
                               enabled=cfg.trainer.progress) as bar:
        bar.advance(start)
        for stage in range(start, cfg.trainer.num_stages):
            t0 = time.perf_counter()
            problems = [rt.train[i] for i in sampler.next_batch(cfg.trainer.train_batch_size)]
            episodes = workflow.rollout(problems, rt.pool, rt.engine, group_size=method.group_size, generator=gen)
            reward_metrics = method.assign_rewards(episodes) or {}
            _fault_injection(stage)
            t_rollout = time.perf_counter() - t0
            metrics = {**rollout_metrics(episodes, method.roles), **reward_metrics, **extra_rollout_metrics(cfg, episodes)}
            metrics.update(updater.update(stage, episodes))
            metrics["time/rollout"] = t_rollout
            metrics["time/stage"] = time.perf_counter() - t0
            if cfg.trainer.eval_every and (stage + 1) % cfg.trainer.eval_every == 0:
                metrics.update(held_out_metrics(cfg, method, stage))
            tracker.log(metrics, step=stage)
            if cfg.method == "pag":
                warned = _pag_collapse_check(cfg, metrics, warned, console)
            if stage == last or (cfg.trainer.save_every and (stage + 1) % cfg.trainer.save_every == 0):
                save_agent_checkpoints(run_dir, rt.pool, stage + 1, export_pt=cfg.trainer.export_pt)
            save_trainer_state(run_dir, stage=stage, pool=rt.pool, extra={
                "updater": updater.state_dict(), "generator": gen.get_state(), "sampler": sampler.state_dict()})
            bar.set_postfix(f"vote {metrics['rollout/vote_accuracy']:.2f}")
            bar.advance()
            if stop_after is not None and stage + 1 >= stop_after:
                break
    return run_dir
