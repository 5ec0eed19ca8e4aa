"""What ``satseq eval`` evaluates: resolve ``--checkpoint_dir`` and load it as a :class:`Target`.

- a **run directory** (it holds ``run_info.json``): the agents of the latest stage for which every
  agent has a checkpoint (or ``stage``), loaded as the run saved them (full models or LoRA adapters
  on the run's base model, the LoRA shape taken from the saved adapter), in the workflow of the
  run's method (``run_info.json``'s ``method``, looked up in the registry) with the run's prompt
  format and workflow options: a SAT-Seq run answers in turn (``relay``, the team's prediction is
  the agents' majority vote); an MLMT run plays solver and coach (``coach``); a PAG run solves,
  verifies, revises (``self_verify``); GRPO and A*-PO runs answer alone (``single``);
- a **single model** (an HF model directory, a hub id, ``smollm2``, or ``embedded`` = the embedded
  warm start), answering alone with the ``single`` workflow, or playing every role of
  ``--workflow coach`` / ``--workflow self_verify``; the method that trains with that workflow
  supplies the prompt format and, for ``embedded``, its warm start.

Prompt format: a model whose ``config.json`` says ``"satseq_prompt_format": "embedded"`` gets the
embedded task's format; any other model gets :class:`~satseq.workflows.prompts.ChatFormat` (the
tokenizer's chat template plus the ``\\boxed{}`` instruction). The rest of the evaluation lives in
:mod:`satseq.eval.runner`.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from satseq.errors import ConfigError, SatseqError

__all__ = ["CHAT_MAX_NEW_TOKENS", "Target", "load_target", "method_of"]

CHAT_MAX_NEW_TOKENS = 512


@dataclass
class Target:
    """The loaded policy (or policies) and how to prompt them."""

    kind: str                      # "single" or "run"
    model: str                     # identity: resolved path / hub id / run dir
    pool: Any
    fmt: Any
    agents: list[str]
    stage: int | None = None
    default_max_new_tokens: int = CHAT_MAX_NEW_TOKENS
    stop: tuple[str, ...] = ()
    info: dict = field(default_factory=dict)
    method: Any = None                   # the registered method it stands for (its config's)
    workflow: str = "single"             # the environment it runs in (its name)
    env: Any = None                      # that environment: its workflow, grading and prediction fields
    cfg: Any = None                      # the config the environment reads (a run's train_config.yaml)
    roles: Any = None                    # role -> agent (or one agent name: it plays every role)
    options: dict = field(default_factory=dict)  # workflow options (e.g. PAG's max_policy_turns)


def _is_run_dir(p: Path) -> bool:
    return p.is_dir() and (p / "run_info.json").is_file()


def _stage_dirs(run_dir: Path, names: list[str], stage: int | None) -> tuple[int, dict[str, Path]]:
    from satseq.checkpoint import latest_agent_checkpoints

    if stage is None:
        found = latest_agent_checkpoints(run_dir, names)
        if found is None:
            raise SatseqError(f"{run_dir}: no stage has a checkpoint for every agent ({', '.join(names)}); "
                              "train longer or check trainer.save_every")
        return found
    dirs = {n: run_dir / f"{n}_stage_{stage}" for n in names}
    missing = [n for n, d in dirs.items() if not d.is_dir()]
    if missing:
        latest = latest_agent_checkpoints(run_dir, names)
        hint = f" (latest complete stage: {latest[0]})" if latest else ""
        raise SatseqError(f"{run_dir}: stage {stage} has no checkpoint for {', '.join(missing)}{hint}")
    return stage, dirs


def _lora_shape_from_adapter(cfg, adapter_dir: Path) -> None:
    """LoRA runs: take rank, alpha and target modules from the saved adapter, not the YAML."""
    f = adapter_dir / "adapter_config.json"
    if not f.is_file():
        return
    try:
        ac = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise SatseqError(f"{f}: unreadable ({e})") from None
    cfg.model.lora.enabled = True
    if isinstance(ac.get("r"), int):
        cfg.model.lora.r = ac["r"]
    if isinstance(ac.get("lora_alpha"), int):
        cfg.model.lora.alpha = ac["lora_alpha"]
    tm = ac.get("target_modules")
    if isinstance(tm, (list, set, tuple)) and tm:
        cfg.model.lora.target_modules = sorted(tm)


def method_of(checkpoint_dir=None, workflow: str | None = None):
    """The registered method a target stands for: the run's (``run_info.json``), else the one that
    stands for environment ``workflow`` (default ``single``)."""
    from satseq.registry import get_method, method_for_env

    info = Path(str(checkpoint_dir or "")).expanduser() / "run_info.json"
    try:
        name = json.loads(info.read_text(encoding="utf-8")).get("method") if info.is_file() else None
    except (OSError, ValueError, AttributeError):
        name = None
    if isinstance(name, str):
        return get_method(name)
    m = method_for_env(workflow or "single")
    if m is None:
        raise ConfigError(f"--workflow {workflow}: no registered method stands for this environment")
    return m


def env_of(checkpoint_dir=None, workflow: str | None = None):
    """The environment a target runs in: the run's (its ``train_config.yaml``: ``env.name``, else its
    method's own), else environment ``workflow`` (default ``single``)."""
    from satseq.registry import get_env

    run = Path(str(checkpoint_dir or "")).expanduser()
    if _is_run_dir(run) and (run / "train_config.yaml").is_file():
        from satseq.config import load_config

        cfg = load_config(run / "train_config.yaml", [], saved=True)
        return method_of(run).environment(cfg)
    if _is_run_dir(run):
        return get_env(method_of(run).env)
    return get_env(workflow or "single")


def embedded_task_of(checkpoint_dir=None) -> str:
    """The embedded task a run trained on (``run_info.json``'s ``embedded_task``; ``default`` otherwise)."""
    info = Path(str(checkpoint_dir or "")).expanduser() / "run_info.json"
    try:
        name = json.loads(info.read_text(encoding="utf-8")).get("embedded_task") if info.is_file() else None
    except (OSError, ValueError, AttributeError):
        name = None
    return name if isinstance(name, str) else "default"


def _trained_with(workflow: str) -> str:
    from satseq.registry import method_for_env

    m = method_for_env(workflow)
    return m.title if m is not None else workflow


def seat_checkpoints(names: list[str], dirs: dict, seat_agents: Sequence[str] | None) -> dict:
    """Each seat's checkpoint: seat ``names[i]`` plays ``seat_agents[i]``'s weights (AT-GRPO's adapter swap:
    if the agents specialised, playing them in each other's seats should hurt), or its own when None.
    ``seat_agents`` must be a permutation of ``names``."""
    if seat_agents is None:
        return dict(dirs)
    if sorted(seat_agents) != sorted(names):
        raise ConfigError(f"--seat_agents {','.join(seat_agents)}: must name each of the run's agents once, in seat "
                          f"order (the run's agents: {','.join(names)})")
    return {seat: dirs[agent] for seat, agent in zip(names, seat_agents)}


def _load_run(run_dir: Path, stage: int | None, device: str, console,
              seat_agents: Sequence[str] | None = None) -> Target:
    from satseq.config import TrainConfig, load_config
    from satseq.config.loader import finalize
    from satseq.runtime import build_pool, prompt_format_of

    try:
        info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise SatseqError(f"{run_dir / 'run_info.json'}: unreadable ({e})") from None
    names = info.get("agents")
    if not isinstance(names, list) or not names:
        raise SatseqError(f"{run_dir / 'run_info.json'}: no 'agents' list")
    cfg_file = run_dir / "train_config.yaml"
    method = method_of(run_dir)
    cfg = load_config(cfg_file, [], saved=True) if cfg_file.is_file() else finalize(TrainConfig(method=method.name))
    if info.get("mode") in ("full", "lora"):
        cfg.model.lora.enabled = info["mode"] == "lora"
    if info.get("base_model") and cfg.model.path != info["base_model"]:
        cfg.model.path = info["base_model"]
    stage, dirs = _stage_dirs(run_dir, names, stage)
    if seat_agents is not None:
        seat_agents = [str(a).strip() for a in seat_agents]
    dirs = seat_checkpoints(list(names), dirs, seat_agents)
    _lora_shape_from_adapter(cfg, dirs[names[0]])
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        env = method.environment(cfg)
        pool = build_pool(cfg, names, [str(dirs[n]) for n in names], device, console, env=env)
    for n in names:
        pool.module(n).eval()
    fmt = prompt_format_of(pool, cfg, env)
    max_new = cfg.rollout.max_new_tokens  # a run is evaluated at the length it was trained to answer in
    try:
        roles = env.eval_roles(info, list(names), cfg) or method.roles(cfg, list(names))
    except SatseqError as e:
        raise SatseqError(f"{run_dir}/{e}") from None
    return Target(kind="run", model=str(run_dir.resolve()), pool=pool, fmt=fmt, agents=list(names), stage=stage,
                  default_max_new_tokens=max_new, stop=tuple(cfg.rollout.stop),
                  info={"mode": info.get("mode"), "method": info.get("method"),
                        "base_model": info.get("base_model"),
                        "checkpoints": {n: str(d.resolve()) for n, d in dirs.items()},
                        **({"seat_agents": seat_agents} if seat_agents is not None else {})},
                  method=method, workflow=env.name, env=env, cfg=cfg, roles=roles, options=env.workflow_options(cfg))


def _load_single(spec: str, device: str, console, workflow: str | None = None) -> Target:
    from satseq.config import TrainConfig
    from satseq.config.loader import finalize
    from satseq.models.agents import AgentPool
    from satseq.models.warm_start import EMBEDDED
    from satseq.models.loading import load_causal_lm, resolve_model_source

    from satseq.registry import get_env

    env = get_env(workflow or "single")
    method = method_of(None, env.name)
    cfg = finalize(TrainConfig(method=method.name))
    if spec == EMBEDDED:  # built where `satseq train` builds it: the default output_dir's embedded/
        src: Any = env.ensure_warm_start(cfg.output_dir, console=console)
    else:
        src = resolve_model_source(spec)
    model, tok = load_causal_lm(src, device=device)
    model.eval()
    kind = getattr(model.config, "satseq_prompt_format", None) or "chat"
    fmt = env.prompt_format(kind, tok, cfg)
    identity = str(Path(src).resolve()) if isinstance(src, Path) else str(src)
    max_new = cfg.rollout.max_new_tokens if fmt.name == "embedded" else CHAT_MAX_NEW_TOKENS
    pool = AgentPool.full(["model"], [model], tok, device=device)
    return Target(kind="single", model=identity, pool=pool, fmt=fmt, agents=["model"],
                  default_max_new_tokens=max_new, info={"spec": spec}, method=method,
                  workflow=env.name, env=env, cfg=cfg, roles="model", options=env.workflow_options(cfg))


def load_target(checkpoint_dir: str | os.PathLike, *, stage: int | None = None, device: str = "cpu",
                console=print, workflow: str | None = None, seat_agents: Sequence[str] | None = None) -> Target:
    """A run directory (relay over its agents; an MLMT run: its coach workflow) or a single model
    (see the module docstring); ``workflow="coach"`` makes a single model play both MLMT roles;
    ``seat_agents`` puts a run's agents in other seats (:func:`seat_checkpoints`)."""
    spec = str(checkpoint_dir).strip()
    if not spec:
        raise ConfigError("--checkpoint_dir is empty")
    p = Path(spec).expanduser()
    if _is_run_dir(p):
        target = _load_run(p, stage, device, console, seat_agents)
        if workflow is not None and workflow != target.workflow:
            raise ConfigError(f"--workflow {workflow}: '{spec}' is a run of method "
                              f"{target.info.get('method')!r} (its workflow is {target.workflow}); pass a "
                              f"{_trained_with(workflow)} run directory or a single model")
        return target
    if stage is not None:
        raise ConfigError(f"--stage applies to a SAT-Seq run directory (with run_info.json); "
                          f"'{spec}' is not one")
    if seat_agents is not None:
        raise ConfigError(f"--seat_agents applies to a run directory of several agents (with run_info.json); "
                          f"'{spec}' is not one")
    if p.is_dir() and not (p / "config.json").is_file() and any(p.glob("*_stage_*")):
        raise SatseqError(f"'{spec}' holds stage checkpoints but no run_info.json: "
                          "pass one agent's checkpoint dir, or a run directory made by `satseq train`")
    return _load_single(spec, device, console, workflow)
