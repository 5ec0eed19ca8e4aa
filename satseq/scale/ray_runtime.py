"""``trainer.backend=ray``: the run's runtime with its agents in Ray actors (docs/scale.md).

``build_ray_runtime(cfg, method)`` returns the same :class:`~satseq.runtime.Runtime` a local run gets,
so :mod:`satseq.loop` runs unchanged, with two stand-ins: a
:class:`~satseq.scale.ray_pool.RemotePool` for the agent pool and a
:class:`~satseq.scale.ray_pool.RayEngine` for the rollout engine; and what run_info.json records
of the cluster. The strategy (:mod:`satseq.scale.ray_strategy`) gives the loop the method's updater in
its Ray form (:mod:`satseq.scale.ray_updaters`) and the pipelined workflow.

Steps: check the method is supported; load the problems (in the driver: rewards are graded here);
start or join the cluster and check it can hold ``trainer.placement``
(:func:`~satseq.distributed.start_ray`); build the embedded warm start once, here, so that actors
only load it; create one :class:`~satseq.scale.ray_actor.AgentHost` actor per placement entry
(:class:`AgentHosts`, which later starts the rollout actors of ``trainer.max_staleness > 0``).
"""
from __future__ import annotations

import re

import torch

import satseq.errors as errors
from satseq.errors import ConfigError
from satseq.models.warm_start import EMBEDDED
from satseq.runtime import Runtime

def _started(ray, actors) -> list[dict]:
    """Each actor's ``describe()``; an actor that failed to start (a bad path, no CUDA where it was
    placed, ...) becomes the one-line error it raised, or one line saying which error it was."""
    try:
        return ray.get([a.describe.remote() for a in actors])
    except ray.exceptions.RayError as e:
        text = str(e)
        found = re.findall(r"satseq\.errors\.(\w+): (.+)", text)
        if found:
            raise getattr(errors, found[-1][0], errors.SatseqError)(found[-1][1].strip()) from None
        last = [line for line in text.splitlines() if line.strip()][-1:] or [type(e).__name__]
        raise errors.SatseqError(f"trainer.backend=ray: an agent actor failed to start ({last[0].strip()[:200]})") \
            from None


def placement_of(cfg, names: list[str], key: str = "placement") -> list:
    """``trainer.placement`` (or ``trainer.rollout_placement``), or one actor per agent with 1 CPU;
    every agent in exactly one actor. An empty ``rollout_placement`` is ``placement``'s."""
    from satseq.config.schema import ActorPlacement

    placement = list(getattr(cfg.trainer, key))
    if not placement and key == "rollout_placement":
        return placement_of(cfg, names)
    placement = placement or [ActorPlacement(agents=[n]) for n in names]
    placed = [n for p in placement for n in p.agents]
    unknown = sorted(set(placed) - set(names))
    twice = sorted({n for n in placed if placed.count(n) > 1})
    missing = [n for n in names if n not in placed]
    if unknown or twice or missing:
        what = (f"unknown agents {unknown}" if unknown else f"agents {twice} placed twice" if twice
                else f"agents {missing} not placed")
        raise ConfigError(f"config key 'trainer.{key}': {what} (the run's agents: {', '.join(names)})")
    return placement


def _resolved(cfg, spec, method, console):
    """The config and agent paths the actors load: ``embedded`` replaced by the warm-start dir
    (built here, once), ``model.lora.enabled=auto`` by what a local run would choose."""
    from satseq.runtime import _agent_sources, _is_embedded_model

    sources = _agent_sources(cfg, spec.paths)
    use_lora = True if spec.force_lora else cfg.model.lora.enabled
    if use_lora == "auto":
        use_lora = not all(_is_embedded_model(s) for s in sources)
    warm = None
    if EMBEDDED in sources:
        from satseq.envs.tasks import warm_start_for

        warm = str(warm_start_for(cfg.data.embedded_task, method.environment(cfg), cfg.output_dir,
                                  show_progress=cfg.trainer.progress, console=console))
    model = cfg.model.model_copy(update={"path": warm if cfg.model.path == EMBEDDED else cfg.model.path,
                                         "lora": cfg.model.lora.model_copy(update={"enabled": bool(use_lora)})})
    paths = [warm if p == EMBEDDED else p for p in spec.paths]
    return cfg.model_copy(update={"model": model}), paths


def build_ray_runtime(cfg, method, console=print) -> tuple[Runtime, dict]:
    if method.ray_updater is None:
        from satseq.registry import method_names, get_method

        ok = " and ".join(n for n in method_names() if get_method(n).ray_updater)
        raise ConfigError(f"config key 'trainer.backend': ray supports method={ok}, not method={cfg.method} "
                          "(use trainer.backend=local)")
    from satseq.distributed import import_ray, start_ray
    from satseq.data.context import check_prompt_lengths, context_length_of
    from satseq.rewards.grade import set_grading_timeout
    from satseq.runtime import _check_prompts_before_the_warm_start, agent_path_keys, check_agent_paths, load_datasets
    from satseq.rollout.types import SamplingParams
    from satseq.scale.ray_pool import RayEngine

    import_ray()
    set_grading_timeout(cfg.reward.timeout)
    if cfg.threads > 0:  # the driver's own work (rewards, advantages); devices are the actors' business
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    env = method.environment(cfg)
    train_set, eval_set = load_datasets(cfg, env)
    spec = method.agents(cfg)
    _check_prompts_before_the_warm_start(cfg, spec, env, (train_set, eval_set))
    path_keys = spec.path_keys or agent_path_keys(spec.names)
    check_agent_paths(cfg, spec.names, spec.paths, path_keys)
    placement = placement_of(cfg, spec.names)
    rollout_placement = placement_of(cfg, spec.names, "rollout_placement") if cfg.trainer.max_staleness else []
    rollout_key = "trainer.rollout_placement" if cfg.trainer.rollout_placement else "trainer.placement"
    keys = ([f"trainer.placement[{i}]" for i in range(len(placement))]
            + [f"{rollout_key}[{i}]" for i in range(len(rollout_placement))])
    info = start_ray(cfg.trainer.ray_address, placement + rollout_placement, console, keys)
    actor_cfg, paths = _resolved(cfg, spec, method, console)
    hosts = AgentHosts(actor_cfg, spec.names, paths, path_keys, spec.force_lora)
    pool, described = hosts.start(placement)
    info = {**info, "actors": [{"agents": p.agents, "node_id": d["node_id"], "device": d["device"]}
                               for p, d in zip(placement, described)]}
    from satseq.runtime import prompt_format_of

    fmt = prompt_format_of(pool, cfg, env)
    context = context_length_of(pool.module(pool.names[0]))
    for problems in (train_set, eval_set):
        check_prompt_lengths(problems, fmt, context_length=context, max_new_tokens=cfg.rollout.max_new_tokens,
                             what="rollout.max_new_tokens")
    sampling = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
                              top_p=cfg.rollout.top_p, stop=tuple(cfg.rollout.stop))
    rt = Runtime(cfg, "cpu", pool, pool.tokenizer, fmt, RayEngine(pool), sampling, train_set, eval_set)
    console(f"[satseq] backend=ray: {len(placement)} actor(s) for agents {', '.join(spec.names)}")
    return rt, info, hosts


class AgentHosts:
    """Starts :class:`~satseq.scale.ray_actor.AgentHost` actors for the run's agents, one per placement
    entry: the trainer's (:func:`build_ray_runtime`) and, with ``trainer.max_staleness > 0``, the
    rollout actors the rollout thread generates with (``trainer.rollout_placement``); every actor
    started is kept in :attr:`actors` (the strategy kills them at the end of the run)."""

    def __init__(self, cfg, names: list[str], paths: list, path_keys: list[str], force_lora: bool):
        self.cfg, self.names, self.paths, self.path_keys, self.force_lora = cfg, names, paths, path_keys, force_lora
        self.actors: list = []

    def start(self, placement: list):
        """A :class:`~satseq.scale.ray_pool.RemotePool` of new actors and their ``describe()``'s."""
        import ray

        from satseq.scale.ray_actor import AgentHost
        from satseq.scale.ray_pool import RemotePool

        remote = ray.remote(AgentHost)
        hosts, actors = {}, []
        for p in placement:
            opts = {"num_cpus": p.num_cpus, "num_gpus": p.num_gpus, **({"resources": p.resources} if p.resources else {})}
            actor = remote.options(**opts).remote(self.cfg, p.agents, self.names, self.paths, self.path_keys,
                                                  self.force_lora, int(p.num_cpus))
            actors.append(actor)
            hosts.update({n: actor for n in p.agents})
        self.actors += actors
        described = _started(ray, actors)
        configs = {n: c for d in described for n, c in d["configs"].items()}
        pool = RemotePool({n: hosts[n] for n in self.names}, described[0]["tokenizer"], described[0]["mode"], configs)
        return pool, described
