"""The training loop, for every method, on one screen.

    dataset ─▶ workflow.rollout ─▶ episodes ─▶ rewards ─▶ algorithm.update ─▶ metrics / checkpoints

``method=sat_seq``: the relay workflow over K agents, updated by the SAT-Seq stage coordinator.
``method=grpo``: one agent, the single-turn workflow, the GRPO updater. ``method=apo``: A*-PO —
V* from the cache (stage 1 runs first if there is none), one sample per prompt, the regression loss. The loop resumes from
``<run_dir>/trainer_state`` when it exists (``resume=true``) and then continues the very same run:
weights, optimizer states, β's, RNG streams and the data position are all restored.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

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


def build_method(cfg: TrainConfig, console=print, reward_fn=None):
    """(runtime, workflow, updater, group_size, reward assigner, generator) for ``cfg.method``.

    ``reward_fn(prompt, response, answer) -> float`` (or ``reward.custom``) replaces correctness.
    """
    from satseq.rewards.grade import load_custom_reward

    custom = reward_fn or (load_custom_reward(cfg.reward.custom) if cfg.reward.custom else None)
    gen = torch.Generator().manual_seed(cfg.seed)
    if cfg.method == "sat_seq":
        from satseq.methods.sat_seq.stage_coordinator import StageCoordinator

        names = [a.name for a in cfg.sat_seq.agents]
        rt = build_runtime(cfg, names, [a.path for a in cfg.sat_seq.agents], console)
        workflow = RelayWorkflow(names, rt.fmt, rt.sampling)
        updater = StageCoordinator(cfg, rt.pool, gen, rt.device)
        assign = lambda eps: assign_relay_rewards(eps, own=cfg.reward.own, team=cfg.reward.team, custom=custom)  # noqa: E731
        return rt, workflow, updater, cfg.sat_seq.group_size, assign, gen
    if cfg.method == "grpo":
        from satseq.trainers.grpo import GRPOUpdater

        rt = build_runtime(cfg, [GRPO_AGENT], [None], console)
        workflow = SingleWorkflow(GRPO_AGENT, rt.fmt, rt.sampling)
        updater = GRPOUpdater(cfg, rt.pool, gen, rt.device)
        assign = lambda eps: assign_outcome_rewards(eps, custom=custom)  # noqa: E731
        return rt, workflow, updater, cfg.grpo.group_size, assign, gen
    if cfg.method == "apo":
        from satseq.methods.apo.stage1 import load_or_compute_vstar
        from satseq.methods.apo.updater import APOUpdater

        rt = build_runtime(cfg, [GRPO_AGENT], [None], console)
        cache = load_or_compute_vstar(cfg, rt, GRPO_AGENT, custom=custom, console=console)
        if cfg.apo.filter_unsolvable:
            keep = {str(i) for i in cache.solvable_ids()}
            rt.train = [p for p in rt.train if str(p.problem_id) in keep]
            if not rt.train:
                raise ConfigError("apo.filter_unsolvable: every training prompt is unsolvable for the reference policy")
        workflow = SingleWorkflow(GRPO_AGENT, rt.fmt, rt.sampling)
        updater = APOUpdater(cfg, rt.pool, gen, cache, rt.device)
        assign = lambda eps: assign_outcome_rewards(eps, custom=custom)  # noqa: E731
        return rt, workflow, updater, 1, assign, gen
    raise ConfigError(f"config key 'method': unknown method '{cfg.method}'")


def rollout_metrics(episodes, roles: list[str]) -> dict:
    m = {}
    for role in roles:
        turns = [t for ep in episodes for t in ep.turns if t.role == role]
        m[f"{role}/accuracy"] = sum(t.correct for t in turns) / max(1, len(turns))
        m[f"{role}/response_length"] = sum(len(t.response_ids) for t in turns) / max(1, len(turns))
    m["rollout/vote_accuracy"] = sum(ep.prediction_correct for ep in episodes) / max(1, len(episodes))
    m["rollout/episode_reward"] = sum(sum(t.reward for t in ep.turns) for ep in episodes) / max(1, len(episodes))
    return m


def held_out_metrics(cfg: TrainConfig, rt, stage: int) -> dict:
    """Sampled accuracy on ``data.eval`` (one episode per problem), with its own seeded generator."""
    from satseq.eval.rollout_eval import evaluate_relay, evaluate_single

    gen = torch.Generator().manual_seed(cfg.seed * 7919 + stage)
    names = rt.pool.names
    if cfg.method == "sat_seq":
        r = evaluate_relay(rt.pool, names, rt.fmt, rt.engine, rt.eval, sampling=rt.sampling, generator=gen)
        return {"eval/vote_accuracy": r["vote"]["acc"], **{f"eval/{n}/accuracy": r[n]["acc"] for n in names}}
    r = evaluate_single(rt.pool, names[0], rt.fmt, rt.engine, rt.eval, sampling=rt.sampling, generator=gen)
    return {f"eval/{names[0]}/accuracy": r["acc"]}


def _fault_injection(stage: int) -> None:
    """Test hook: ``SATSEQ_KILL_AT_STAGE=N`` kills the process (SIGKILL) in the middle of stage N."""
    at = os.environ.get("SATSEQ_KILL_AT_STAGE")
    if at is not None and int(at) == stage:
        os.kill(os.getpid(), signal.SIGKILL)


def train(cfg: TrainConfig, console=print, stop_after: int | None = None, reward_fn=None) -> Path:
    """Run (or resume) a training run; return its run directory. ``stop_after`` ends early (tests)."""
    run_dir = cfg.run_dir
    rt, workflow, updater, group_size, assign_rewards, gen = build_method(cfg, console, reward_fn)
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
                                           "base_model": cfg.model.path, "prompt_format": rt.fmt.name})
    tracker = Tracker(run_dir, tensorboard=cfg.trainer.tensorboard, wandb=cfg.trainer.wandb,
                      wandb_project=cfg.trainer.wandb_project, mlflow=cfg.trainer.mlflow,
                      config=dump_config(cfg), resume_step=start)
    last = cfg.trainer.num_stages - 1
    with tracker, progress_bar(cfg.trainer.num_stages, f"{cfg.method} {cfg.run_name}",
                               enabled=cfg.trainer.progress) as bar:
        bar.advance(start)
        for stage in range(start, cfg.trainer.num_stages):
            t0 = time.perf_counter()
            problems = [rt.train[i] for i in sampler.next_batch(cfg.trainer.train_batch_size)]
            episodes = workflow.rollout(problems, rt.pool, rt.engine, group_size=group_size, generator=gen)
            assign_rewards(episodes)
            _fault_injection(stage)
            t_rollout = time.perf_counter() - t0
            metrics = rollout_metrics(episodes, rt.pool.names)
            metrics.update(updater.update(stage, episodes))
            metrics["time/rollout"] = t_rollout
            metrics["time/stage"] = time.perf_counter() - t0
            if cfg.trainer.eval_every and (stage + 1) % cfg.trainer.eval_every == 0:
                metrics.update(held_out_metrics(cfg, rt, stage))
            tracker.log(metrics, step=stage)
            if stage == last or (cfg.trainer.save_every and (stage + 1) % cfg.trainer.save_every == 0):
                save_agent_checkpoints(run_dir, rt.pool, stage + 1, export_pt=cfg.trainer.export_pt)
            save_trainer_state(run_dir, stage=stage, pool=rt.pool, extra={
                "updater": updater.state_dict(), "generator": gen.get_state(), "sampler": sampler.state_dict()})
            bar.set_postfix(f"vote {metrics['rollout/vote_accuracy']:.2f}")
            bar.advance()
            if stop_after is not None and stage + 1 >= stop_after:
                break
    return run_dir
