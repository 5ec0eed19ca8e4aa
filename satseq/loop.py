"""The training loop, for every method in every environment, on one screen.

    dataset ─▶ env's workflow.rollout ─▶ episodes ─▶ rewards ─▶ updater.update ─▶ metrics / checkpoints
               └──────── method.collect (one draw; GRPO's dynamic sampling draws again) ────┘

Nothing here names a method or an environment: ``cfg.method`` and ``env.name`` are looked up in the
registries (:mod:`satseq.registry`). The :class:`~satseq.envs.base.Environment` supplies what an
episode is (roles, workflow, reward, held-out metrics); the :class:`~satseq.methods.base.Method`
the agents, the credit and the updater. The loop resumes from
``<run_dir>/trainer_state`` when it exists (``resume=true``) and then continues the very same run:
weights, optimizer states, β's, RNG streams and the data position are all restored.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from satseq.async_rollouts import check_async
from satseq.checkpoint import save_agent_checkpoints, sole_trainer
from satseq.config import TrainConfig, dump_config, save_config
from satseq.config.loader import finalize
from satseq.data.sampler import EpochSampler
from satseq.envs.base import Environment
from satseq.errors import ConfigError
from satseq.methods.base import Method, RewardContext
from satseq.registry import get_method
from satseq.rewards.custom import resolve_custom_reward
from satseq.rewards.grade import timeout_count
from satseq.rollout.choice import default_choice
from satseq.rollout.choice import record as rollout_record
from satseq.utils.versions import library_versions
from satseq.registry import check_layout
from satseq.stage_batch import collect_stage
from satseq.strategy import Strategy, activate, launched_ranks
from satseq.tracking import NoTracker, Tracker
from satseq.runtime import Runtime
from satseq.update.loop import Updater
from satseq.utils.io import write_json
from satseq.utils.progress import progress_bar
from satseq.workflows.base import Workflow


@dataclass
class Run:
    """The live objects of one run: the method, its environment, runtime, workflow, updater and reward context."""

    method: Method
    env: Environment
    rt: Runtime
    workflow: Workflow
    updater: Updater
    rewards: RewardContext
    generator: torch.Generator
    roles: list[str] = field(default_factory=list)
    strategy: Strategy = field(default_factory=Strategy)


def build_run(cfg: TrainConfig, console=print, reward_fn=None, strategy: Strategy | None = None) -> Run:
    """Everything a run needs before its first stage (``reward_fn`` replaces correctness), laid out by
    ``strategy`` (default: the one :func:`satseq.registry.check_layout` picks for ``cfg`` in this process)."""
    strategy = strategy or check_layout(cfg, launched_ranks())(cfg)
    method = get_method(cfg.method)
    env = method.environment(cfg)
    custom = resolve_custom_reward(cfg, reward_fn)
    if custom is not None and not (method.supports_custom_reward and env.supports_custom_reward):
        key = "reward.controller" if cfg.reward.controller else "reward.custom"
        who = f"method={cfg.method}" if not method.supports_custom_reward else f"env.name={env.name}"
        raise ConfigError(f"config key '{key}': not supported with {who} "
                          "(its turn rewards are defined by correctness)")
    gen = torch.Generator().manual_seed(cfg.seed)
    rt = strategy.build_runtime(cfg, method, console)
    cfg = rt.cfg  # rollout.engine / rollout.dtype = auto resolved (satseq.rollout.choice)
    strategy.prepare(cfg, rt)  # fsdp2 under torchrun: each agent sharded over the ranks
    with activate(strategy):
        prepared = method.prepare(cfg, rt, custom, console)
        workflow = strategy.workflow(env.make_workflow(cfg, method.roles(cfg, rt.pool.names), rt.fmt, rt.sampling))
        updater = strategy.updater(method, cfg, rt, gen, prepared)  # local: method.build_updater(...)
    return Run(method, env, rt, workflow, updater, RewardContext(custom=custom, updater=updater), gen,
               env.metric_roles(cfg, rt, workflow), strategy)


def rollout_metrics(episodes, roles: list[str]) -> dict:
    """Per role: accuracy, mean response length (tokens) and ``sampled_entropy``, the mean of
    −log π_b(y_t) over the role's sampled response tokens (the engine's behaviour log-probs): a
    one-sample estimate of the sampling policy's per-token entropy, E_{y~π}[−log π(y)] = H(π), at no
    cost. Then the vote accuracy and the mean episode reward."""
    m = {}
    for role in roles:
        turns = [t for ep in episodes for t in ep.turns if t.role == role]
        m[f"{role}/accuracy"] = sum(t.correct for t in turns) / max(1, len(turns))
        m[f"{role}/response_length"] = sum(len(t.response_ids) for t in turns) / max(1, len(turns))
        n_tok = sum(len(t.behaviour_logprobs) for t in turns)
        if n_tok:
            m[f"{role}/sampled_entropy"] = -sum(sum(t.behaviour_logprobs) for t in turns) / n_tok
    m["rollout/vote_accuracy"] = sum(ep.prediction_correct for ep in episodes) / max(1, len(episodes))
    m["rollout/episode_reward"] = sum(sum(t.reward for t in ep.turns) for ep in episodes) / max(1, len(episodes))
    return m


def _fault_injection(stage: int) -> None:
    """Test hook: ``SATSEQ_KILL_AT_STAGE=N`` kills the process (SIGKILL) in the middle of stage N."""
    at = os.environ.get("SATSEQ_KILL_AT_STAGE")
    if at is not None and int(at) == stage:
        os.kill(os.getpid(), signal.SIGKILL)


def train(cfg: TrainConfig, console=print, stop_after: int | None = None, reward_fn=None,
          stop_when=None) -> Path:
    """Run (or resume) a training run; return its run directory. ``stop_after`` ends early (tests);
    ``stop_when(stage, metrics) -> bool``, asked after each stage is logged, ends the run there with a
    checkpoint of that stage (``satseq compare``'s token / wall-clock budget)."""
    cfg = finalize(cfg)
    strategy = check_layout(cfg, launched_ranks())(cfg)  # where the work happens (satseq.strategy)
    check_async(cfg, launched_ranks())
    with activate(strategy):
        return _train(cfg, strategy, console, stop_after, reward_fn, stop_when)


@contextlib.contextmanager
def _closing(ahead):
    """Stops the rollout thread when the loop ends, however it ends."""
    try:
        yield ahead
    finally:
        if ahead is not None:
            ahead.close()


def _train(cfg: TrainConfig, strategy: Strategy, console, stop_after, reward_fn, stop_when) -> Path:
    run_dir = cfg.run_dir
    main = strategy.is_main  # under torchrun only rank 0 writes and prints
    console = console if main else (lambda *a, **k: None)
    ray_info = None
    if cfg.trainer.ray_address and cfg.trainer.backend == "local":  # record the cluster, train here
        from satseq.distributed import connect_ray

        ray_info = connect_ray(cfg.trainer.ray_address, console)
    with strategy.main_first():  # rank 0 first: it may build the warm start the others then load
        run = build_run(cfg, console, reward_fn, strategy)
    with sole_trainer(run_dir) if main else contextlib.nullcontext():  # the stages write under this lock
        return _stages(cfg, strategy, run, console, ray_info, stop_after, stop_when)


def _stages(cfg: TrainConfig, strategy: Strategy, run: Run, console, ray_info, stop_after, stop_when) -> Path:
    """Resume from the trainer state (``resume=true``), then the stages: rollout, update, log, checkpoint."""
    run_dir, main = cfg.run_dir, strategy.is_main
    method, env, rt, workflow, updater, gen = run.method, run.env, run.rt, run.workflow, run.updater, run.generator
    cfg = rt.cfg  # the engine and precision that rollout.*=auto stands for in this run, everywhere below
    choice = getattr(rt, "rollout_choice", None) or default_choice(cfg)
    sampler = EpochSampler(len(rt.train), seed=cfg.seed)
    start = 0
    state = strategy.load_trainer_state(run_dir, rt.pool) if cfg.resume else None
    if state is not None:
        saved_s = state.get("max_staleness", 0)
        if saved_s != cfg.trainer.max_staleness:
            raise ConfigError(f"config key 'trainer.max_staleness': {run_dir} was trained with {saved_s}; a resumed run "
                              f"keeps its schedule (set trainer.max_staleness={saved_s})")
        updater.load_state_dict(state["updater"])
        gen.set_state(state["generator"])
        sampler.load_state_dict(state["sampler"])
        strategy.restore_rng(state.get("rank_rng"))  # torchrun: each rank's own torch RNG (dropout)
        start = state["stage"] + 1
        console(f"[satseq] resuming {run_dir} at stage {start}")
    ahead = None  # trainer.max_staleness > 0: the rollout thread (satseq.async_rollouts)
    if cfg.trainer.max_staleness:
        from satseq.async_rollouts import AsyncRollouts

        ahead = AsyncRollouts(cfg, method, rt, workflow, run.rewards, sampler, start=start,
                              state=state.get("async") if state else None, strategy=strategy)
    ray_info = strategy.info or ray_info  # with rollout actors (trainer.backend=ray), theirs too
    if main:
        save_config(cfg, run_dir / "train_config.yaml")
        write_json(run_dir / "run_info.json", {
            "method": cfg.method, "agents": rt.pool.names, "mode": rt.pool.mode, **env.run_info(cfg, workflow),
            **({"env": env.name} if cfg.env.name else {}),
            **({"ray": ray_info} if ray_info else {}), "base_model": cfg.model.path, "prompt_format": rt.fmt.name,
            "embedded_task": cfg.data.embedded_task, "rollout": rollout_record(choice), "versions": library_versions(),
            **strategy.run_info()})
    tracker = Tracker(run_dir, tensorboard=cfg.trainer.tensorboard, wandb=cfg.trainer.wandb,
                      wandb_project=cfg.trainer.wandb_project, mlflow=cfg.trainer.mlflow,
                      config=dump_config(cfg), resume_step=start) if main else NoTracker()
    last, hook_state = cfg.trainer.num_stages - 1, {}
    def rollout(problems):  # the trainer's agents, on the strategy's workers
        return strategy.rollout(workflow, problems, rt.pool, rt.engine, group_size=method.group_size(cfg), generator=gen)

    with strategy, tracker, _closing(ahead), progress_bar(cfg.trainer.num_stages, f"{cfg.method} {cfg.run_name}",
                                                          enabled=cfg.trainer.progress and main) as bar:
        bar.advance(start)
        for stage in range(start, cfg.trainer.num_stages):
            t0, timeouts0 = time.perf_counter(), timeout_count()
            if ahead is None:
                episodes, reward_metrics, generated = collect_stage(cfg, method, rt.train, sampler, rollout, run.rewards)
                stale = {}
            else:  # made by the rollout thread from θ_{stage − s}
                batch, waited = ahead.batch(stage)
                episodes, reward_metrics = batch.episodes, batch.reward_metrics
                generated = {"tokens": batch.tokens, "samples": batch.samples}
                stale = {"async/staleness": stage - batch.version, "time/trainer_wait": waited,
                         "time/rollout_wait": batch.weights_wait_s, "time/rollout_thread": batch.rollout_s,
                         **{f"{a}/staleness": stage - batch.version for a in rt.pool.names}}
            for ep in episodes:  # the version of the agents that acted (θ_stage when synchronous)
                ep.info.setdefault("policy_version", stage)
            _fault_injection(stage)
            t_rollout = time.perf_counter() - t0
            metrics = {**rollout_metrics(episodes, run.roles), **reward_metrics, **env.rollout_metrics(cfg, episodes),
                       **stale}
            metrics.update(updater.update(stage, episodes))
            if ahead is not None and stage < last:
                ahead.publish(stage + 1, rt.pool)  # θ_{stage+1}: the rollout thread may make batch stage+1+s
            metrics["time/rollout"] = t_rollout
            metrics["rollout/generated_tokens"] = generated["tokens"]
            metrics["rollout/generated_samples"] = generated["samples"]
            metrics["time/stage"] = time.perf_counter() - t0
            if cfg.trainer.eval_every and (stage + 1) % cfg.trainer.eval_every == 0:
                held_out_gen = torch.Generator().manual_seed(cfg.seed * 7919 + stage)
                strategy.update_weights(rt.engine)
                metrics.update(env.held_out_metrics(cfg, rt, workflow, held_out_gen))
            metrics["reward/timeouts"] = timeout_count() - timeouts0  # gradings killed at reward.timeout
            tracker.log(metrics, step=stage)
            method.after_log(cfg, metrics, hook_state, console)
            stop = bool(stop_when is not None and stop_when(stage, metrics))
            if stage == last or stop or (cfg.trainer.save_every and (stage + 1) % cfg.trainer.save_every == 0):
                export = strategy.export_pool(rt)  # fsdp2: every rank gathers the full weights, rank 0 writes
                if main:
                    save_agent_checkpoints(run_dir, export, stage + 1, export_pt=cfg.trainer.export_pt)
            rank_rng = strategy.rng_states()  # every rank takes part; None on one process
            strategy.save_trainer_state(run_dir, stage=stage, pool=rt.pool, extra=lambda: {  # collective under fsdp2
                "updater": updater.state_dict(), "generator": gen.get_state(), "sampler": sampler.state_dict(),
                "max_staleness": cfg.trainer.max_staleness,
                **({"async": ahead.state_dict(stage)} if ahead is not None else {}),
                **({"rank_rng": rank_rng} if rank_rng else {})})
            bar.set_postfix(f"vote {metrics['rollout/vote_accuracy']:.2f}")
            bar.advance()
            if stop or (stop_after is not None and stage + 1 >= stop_after):
                break
    return run_dir
