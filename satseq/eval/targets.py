"""What ``satseq eval`` evaluates: resolve ``--checkpoint_dir`` and load it as a :class:`Target`.

- a **SAT-Seq run directory** (it holds ``run_info.json``): the agents of the latest stage for
  which every agent has a checkpoint (or ``stage``), loaded as the run saved them (full models or
  LoRA adapters on the run's base model, the LoRA shape taken from the saved adapter), answering in
  turn with the ``relay`` workflow and the run's prompt format; the team's prediction is the
  agents' majority vote;
- an **MLMT run directory** (``method: mlmt`` in ``run_info.json``): its solver and coach (or the
  one shared actor) in the three-turn ``coach`` workflow;
- a **PAG run directory** (``method: pag``): its policy in the ``self_verify`` workflow (solve →
  verify → revise after "wrong", up to the run's ``pag.max_policy_turns``);
- a **single model** (an HF model directory, a hub id, ``smollm2``, or ``embedded`` = the embedded
  warm start), answering alone with the ``single`` workflow, or playing both MLMT roles with
  ``--workflow coach``, or solving and verifying itself with ``--workflow self_verify``
  (``embedded`` is then the multi-turn warm start).

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
from typing import Any

from satseq.errors import ConfigError, SatseqError

__all__ = ["CHAT_MAX_NEW_TOKENS", "Target", "load_target"]

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
    roles: dict[str, str] | None = None  # coach workflow: role -> agent
    self_verify: bool = False            # PAG's solve -> verify -> revise
    max_policy_turns: int = 2

    @property
    def workflow(self) -> str:
        if self.roles is not None:
            return "coach"
        if self.self_verify:
            return "self_verify"
        return "relay" if self.kind == "run" else "single"


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


def _load_run(run_dir: Path, stage: int | None, device: str, console) -> Target:
    from satseq.config import TrainConfig, load_config
    from satseq.trainers.runtime import build_pool, prompt_format_of

    try:
        info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise SatseqError(f"{run_dir / 'run_info.json'}: unreadable ({e})") from None
    names = info.get("agents")
    if not isinstance(names, list) or not names:
        raise SatseqError(f"{run_dir / 'run_info.json'}: no 'agents' list")
    cfg_file = run_dir / "train_config.yaml"
    cfg = load_config(cfg_file, []) if cfg_file.is_file() else TrainConfig()
    if info.get("mode") in ("full", "lora"):
        cfg.model.lora.enabled = info["mode"] == "lora"
    if info.get("base_model") and cfg.model.path != info["base_model"]:
        cfg.model.path = info["base_model"]
    stage, dirs = _stage_dirs(run_dir, names, stage)
    _lora_shape_from_adapter(cfg, dirs[names[0]])
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        pool = build_pool(cfg, names, [str(dirs[n]) for n in names], device, console)
    for n in names:
        pool.module(n).eval()
    fmt = prompt_format_of(pool, cfg)
    max_new = cfg.rollout.max_new_tokens if fmt.name == "embedded" else CHAT_MAX_NEW_TOKENS
    roles = info.get("roles") if info.get("method") == "mlmt" else None
    if roles is not None and (set(roles) != {"solver", "coach"} or not set(roles.values()) <= set(names)):
        raise SatseqError(f"{run_dir / 'run_info.json'}: 'roles' must map solver and coach to its agents")
    return Target(kind="run", model=str(run_dir.resolve()), pool=pool, fmt=fmt, agents=list(names), stage=stage,
                  default_max_new_tokens=max_new, stop=tuple(cfg.rollout.stop),
                  info={"mode": info.get("mode"), "method": info.get("method"),
                        "base_model": info.get("base_model"),
                        "checkpoints": {n: str(d.resolve()) for n, d in dirs.items()}},
                  roles=roles, self_verify=info.get("method") == "pag",
                  max_policy_turns=cfg.pag.max_policy_turns)


def _load_single(spec: str, device: str, console, workflow: str | None = None) -> Target:
    from satseq.models.agents import AgentPool
    from satseq.models.embedded import EMBEDDED, ensure_for
    from satseq.models.loading import load_causal_lm, resolve_model_source
    from satseq.workflows.prompts import make_format

    if spec == EMBEDDED:
        src: Any = ensure_for(workflow, "outputs", console=console)
    else:
        src = resolve_model_source(spec)
    model, tok = load_causal_lm(src, device=device)
    model.eval()
    kind = getattr(model.config, "satseq_prompt_format", None) or "chat"
    fmt = make_format(kind, tok)
    if workflow == "coach":
        from satseq.workflows.mlmt_prompts import make_mlmt_format

        fmt = make_mlmt_format(kind, tok)
    elif workflow == "self_verify":
        from satseq.workflows.pag_prompts import make_pag_format

        fmt = make_pag_format(kind, tok)
    identity = str(Path(src).resolve()) if isinstance(src, Path) else str(src)
    max_new = CHAT_MAX_NEW_TOKENS
    if fmt.name == "embedded":
        from satseq.config.schema import MLMT_MAX_NEW_TOKENS, RolloutConfig

        max_new = MLMT_MAX_NEW_TOKENS if workflow == "coach" else RolloutConfig().max_new_tokens
    pool = AgentPool.full(["model"], [model], tok, device=device)
    return Target(kind="single", model=identity, pool=pool, fmt=fmt, agents=["model"],
                  default_max_new_tokens=max_new, info={"spec": spec},
                  roles={"solver": "model", "coach": "model"} if workflow == "coach" else None,
                  self_verify=workflow == "self_verify")


def load_target(checkpoint_dir: str | os.PathLike, *, stage: int | None = None, device: str = "cpu",
                console=print, workflow: str | None = None) -> Target:
    """A run directory (relay over its agents; an MLMT run: its coach workflow) or a single model
    (see the module docstring); ``workflow="coach"`` makes a single model play both MLMT roles."""
    spec = str(checkpoint_dir).strip()
    if not spec:
        raise ConfigError("--checkpoint_dir is empty")
    p = Path(spec).expanduser()
    if _is_run_dir(p):
        target = _load_run(p, stage, device, console)
        if workflow is not None and workflow != target.workflow:
            raise ConfigError(f"--workflow {workflow}: '{spec}' is a run of method "
                              f"{target.info.get('method')!r} (its workflow is {target.workflow}); pass a "
                              f"{'MLMT' if workflow == 'coach' else 'PAG'} run directory or a single model")
        return target
    if stage is not None:
        raise ConfigError(f"--stage applies to a SAT-Seq run directory (with run_info.json); "
                          f"'{spec}' is not one")
    if p.is_dir() and not (p / "config.json").is_file() and any(p.glob("*_stage_*")):
        raise SatseqError(f"'{spec}' holds stage checkpoints but no run_info.json: "
                          "pass one agent's checkpoint dir, or a run directory made by `satseq train`")
    return _load_single(spec, device, console, workflow)
