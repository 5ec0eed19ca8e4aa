"""From a validated config and its method to the live objects a training run needs.

``build_runtime(cfg, method)`` resolves the device and thread count, loads (or builds) the agents
the method declares (:meth:`~satseq.methods.base.Method.agents`) into an
:class:`~satseq.models.agents.AgentPool`, takes the prompt format from the run's environment, makes the
rollout engine, and loads the training and held-out problems (``embedded``: the environment's task). All user-input problems surface here as one-line
:class:`~satseq.errors.SatseqError` before any output is written.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from satseq.config import TrainConfig
from satseq.data.context import check_prompt_lengths, context_length_of
from satseq.errors import ConfigError, DataError
from satseq.models.agents import AgentPool
from satseq.models.warm_start import EMBEDDED, eval_exclusion
from satseq.rollout.choice import choose as choose_rollout
from satseq.rollout.choice import resolved_config
from satseq.rollout.engine import make_engine
from satseq.rollout.types import SamplingParams
from satseq.records import Problem
from satseq.rewards.grade import set_grading_timeout

if TYPE_CHECKING:
    from satseq.rollout.engine import RolloutEngine
    from satseq.workflows.prompts import ChatFormat, EmbeddedFormat

EMBEDDED_TASK_SEED = 0


@dataclass
class Runtime:
    cfg: TrainConfig
    device: str
    pool: AgentPool  # or, trainer.backend=ray, its stand-in (satseq.scale.ray_pool.RemotePool)
    tokenizer: object  # a transformers tokenizer
    fmt: "EmbeddedFormat | ChatFormat"
    engine: "RolloutEngine"
    sampling: SamplingParams
    train: list[Problem]
    eval: list[Problem]
    # where a block-coordinate updater's per-agent steps run: None = here; the Ray strategy's stand-in
    # runs them in the actors (a satseq.update.loop.AgentSteps; not imported: update/ sits above this)
    agent_steps: object = None
    # what rollout.engine / rollout.dtype = auto stood for (satseq.rollout.choice); None: not resolved here
    rollout_choice: object = None


def setup_torch(cfg: TrainConfig) -> str:
    if cfg.trainer.release_memory:
        from satseq.utils.memory import release_freed_memory

        release_freed_memory()
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    from satseq.utils.precision import set_autocast

    set_autocast(cfg.trainer.autocast)
    device = cfg.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"config key 'device': '{device}' requested but CUDA is not available")
    torch.manual_seed(cfg.seed)
    return device


def _agent_sources(cfg: TrainConfig, paths: list[str | None]) -> list[str]:
    return [p if p else cfg.model.path for p in paths]


def _is_embedded_model(src: str) -> bool:
    if src == EMBEDDED:
        return True
    cfg_file = Path(src) / "config.json"
    if not cfg_file.exists():
        return False
    import json

    return json.loads(cfg_file.read_text()).get("satseq_prompt_format") == "embedded"


def _load(path: str, cfg: TrainConfig, device: str, console, env=None):
    from satseq.models.loading import load_causal_lm

    if path == EMBEDDED:  # each environment starts from the warm start that knows its roles
        from satseq.envs.tasks import warm_start_for

        path = str(warm_start_for(cfg.data.embedded_task, env, cfg.output_dir,
                                  show_progress=cfg.trainer.progress, console=console))
    model, tok = load_causal_lm(path, gguf_file=cfg.model.gguf_file, dtype=cfg.model.dtype, device=device,
                                quantization=cfg.model.quantization)
    if cfg.model.tokenizer:
        from satseq.models.loading import load_tokenizer

        tok = load_tokenizer(cfg.model.tokenizer)
    return model, tok


def agent_path_keys(names: list[str]) -> list[str]:
    """The config keys agents' paths are named by in errors, when the method's
    :class:`~satseq.methods.base.AgentSpec` gives none: ``agents[i].path``."""
    return [f"agents[{i}].path" for i in range(len(names))]


def check_agent_paths(cfg: TrainConfig, names: list[str], paths: list[str | None],
                      path_keys: list[str] | None = None) -> None:
    """Fail early, naming the config key, on an agent path that looks local but does not exist."""
    from satseq.models.loading import resolve_model_source

    path_keys = path_keys or agent_path_keys(names)
    for i, (name, p) in enumerate(zip(names, paths)):
        key, src = (path_keys[i], p) if p else ("model.path", cfg.model.path)
        if src == EMBEDDED:
            continue
        src = str(resolve_model_source(src))
        looks_local = src.startswith(("/", ".", "~")) or src.count("/") > 1 or src.endswith(".gguf")
        if looks_local and not Path(src).expanduser().exists():
            raise ConfigError(f"config key '{key}': agent '{name}' path '{src}' does not exist")


def build_pool(cfg: TrainConfig, names: list[str], paths: list[str | None], device: str,
               console=print, *, path_keys: list[str] | None = None, force_lora: bool = False,
               env=None) -> AgentPool:
    """Load each agent's policy: full copies (embedded default) or LoRA adapters on one base.
    ``env`` (the run's environment) provides the warm start when a path is ``embedded``."""
    path_keys = path_keys or agent_path_keys(names)
    check_agent_paths(cfg, names, paths, path_keys)
    sources = _agent_sources(cfg, paths)
    use_lora = True if force_lora else cfg.model.lora.enabled
    if use_lora == "auto":  # full fine-tuning for the embedded tiny model, LoRA for real HF models
        use_lora = not all(_is_embedded_model(s) for s in sources)
    if not use_lora:
        loaded: dict[str, tuple] = {}
        models, tok = [], None
        for src in sources:
            if src not in loaded:
                loaded[src] = _load(src, cfg, device, console, env)
                model = loaded[src][0]
            else:
                model = copy.deepcopy(loaded[src][0])
            tok = tok or loaded[src][1]
            models.append(model)
        return AgentPool.full(names, models, tok, device=device)
    # LoRA: one base (model.path); an agent path may name a PEFT adapter dir to start from.
    base_path = cfg.model.path
    if base_path not in sources and len(set(sources)) == 1 \
            and not (Path(sources[0]) / "adapter_config.json").exists():  # e.g. AGENT1..3_PATH all name one model
        base_path = sources[0]
    adapters = {}
    for name, src in zip(names, sources):
        if src == base_path:
            continue
        if not (Path(src) / "adapter_config.json").exists():
            where = path_keys[names.index(name)]
            if not Path(src).exists():
                raise ConfigError(f"config key '{where}': agent path '{src}' does not exist")
            raise ConfigError(f"config key '{where}': in LoRA mode every agent shares model.path; "
                              f"'{src}' is not a PEFT adapter dir (set model.lora.enabled=false for full models)")
        adapters[name] = src
    base, tok = _load(base_path, cfg, device, console, env)
    lc = cfg.model.lora
    return AgentPool.lora(names, base, tok, r=lc.r, alpha=lc.alpha, dropout=lc.dropout,
                          target_modules=lc.target_modules, adapter_paths=adapters, device=device)


def prompt_format_of(pool: AgentPool, cfg: TrainConfig, env):
    """The environment's prompt format for the pool's model kind (``satseq_prompt_format`` in its config)."""
    module = pool.module(pool.names[0])
    kind = getattr(getattr(module, "config", None), "satseq_prompt_format", "chat")
    return env.prompt_format(kind, pool.tokenizer, cfg)


def load_datasets(cfg: TrainConfig, env) -> tuple[list[Problem], list[Problem]]:
    from satseq.data.loading import load_problems

    from satseq.envs.tasks import task_for

    task = task_for(cfg.data.embedded_task, env, seed=EMBEDDED_TASK_SEED)
    if cfg.data.eval == EMBEDDED:
        eval_set = task.problems(cfg.data.eval_size, split="eval")
    else:
        eval_set = load_problems(cfg.data.eval, split="test", data_dir=cfg.data.data_dir, limit=cfg.data.eval_size)
    if cfg.data.train == EMBEDDED:
        train_set = task.problems(cfg.data.train_size, split="train", exclude=eval_exclusion(task))
    else:
        train_set = load_problems(cfg.data.train, split="train", data_dir=cfg.data.data_dir, limit=cfg.data.train_size)
    if not train_set:
        raise DataError(f"{cfg.data.train}: the training set is empty")
    return train_set, eval_set


def _check_prompts_before_the_warm_start(cfg: TrainConfig, spec, env, sets) -> None:
    """Every agent on the embedded model: its tokenizer (built in code) and context length are known
    before the warm start is built or loaded, so a too-long prompt is refused before any of that."""
    if cfg.model.tokenizer or not all(s == EMBEDDED for s in _agent_sources(cfg, spec.paths)):
        return
    import inspect

    from satseq.models.tiny import build_char_tokenizer, tiny_config

    context = inspect.signature(tiny_config).parameters["max_positions"].default
    fmt = env.prompt_format("embedded", build_char_tokenizer(), cfg)
    for problems in sets:
        check_prompt_lengths(problems, fmt, context_length=context, max_new_tokens=cfg.rollout.max_new_tokens,
                             what="rollout.max_new_tokens")


def check_decode_gemm(cfg: TrainConfig, device: str) -> None:
    """``rollout.decode_gemm`` set to a kernel this torch build lacks for the rollout's dtype on this
    CPU: one line naming the key, before anything is written."""
    from satseq.rollout.fused_decode import available_gemms

    r = cfg.rollout
    if r.decode_gemm in ("auto", "torch") or r.engine == "vllm" or not str(device).startswith("cpu"):
        return
    dtype = r.dtype if r.dtype != "auto" else cfg.model.dtype
    avail = available_gemms(getattr(torch, dtype), device)
    if r.decode_gemm not in avail:
        raise ConfigError(f"config key 'rollout.decode_gemm': {r.decode_gemm} does not run in {dtype} with this torch "
                          f"build on this CPU (available: {', '.join(avail)}); use rollout.decode_gemm=auto")


def run_engine(cfg: TrainConfig, tokenizer, device: str, *, instance: str = ""):
    """The run's rollout engine (``rollout.*``); a Ray actor and the rollout thread build theirs with this
    too (``instance``: a vLLM engine of their own, not the trainer's)."""
    # a quantized base (model.quantization) decodes through its own bitsandbytes forward, not the fused one
    fused = cfg.rollout.fused and cfg.model.quantization == "none"
    return make_engine(cfg.rollout.engine, tokenizer, batch_size=cfg.rollout.batch_size, device=device,
                       fused=fused, dtype=cfg.rollout.dtype, vllm=cfg.rollout.vllm,
                       gemm=cfg.rollout.decode_gemm, instance=instance, prefix_cache=cfg.rollout.prefix_cache,
                       prefix_cache_gb=cfg.rollout.prefix_cache_gb)


def build_runtime(cfg: TrainConfig, method, console=print) -> Runtime:
    set_grading_timeout(cfg.reward.timeout)  # every is_equivalent of this run: math-verify killed after it
    device = setup_torch(cfg)
    env = method.environment(cfg)
    train_set, eval_set = load_datasets(cfg, env)
    spec = method.agents(cfg)
    _check_prompts_before_the_warm_start(cfg, spec, env, (train_set, eval_set))
    pool = build_pool(cfg, spec.names, spec.paths, device, console, path_keys=spec.path_keys,
                      force_lora=spec.force_lora, env=env)
    if cfg.trainer.gradient_checkpointing:
        pool.enable_gradient_checkpointing()
    fmt = prompt_format_of(pool, cfg, env)
    context = context_length_of(pool.module(pool.names[0]))
    for problems in (train_set, eval_set):  # before any model call, and before the run dir is written
        check_prompt_lengths(problems, fmt, context_length=context, max_new_tokens=cfg.rollout.max_new_tokens,
                             what="rollout.max_new_tokens")
    stop = tuple(cfg.rollout.stop)
    sampling = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
                              top_p=cfg.rollout.top_p, stop=stop)
    # rollout.engine / rollout.dtype = auto: measured on this model, or the resumed run's record
    choice = choose_rollout(cfg, pool.module(pool.names[0]), pool.tokenizer, device, run_dir=Path(cfg.run_dir))
    if choice.source in ("measured", "cached", "resumed"):
        console(choice.line())
    cfg = resolved_config(cfg, choice)
    check_decode_gemm(cfg, device)
    engine = run_engine(cfg, pool.tokenizer, device)
    return Runtime(cfg, device, pool, pool.tokenizer, fmt, engine, sampling, train_set, eval_set,
                   rollout_choice=choice)
