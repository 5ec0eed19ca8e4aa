"""``satseq eval``: evaluate one model, or every agent of a SAT-Seq run directory, on a benchmark.

This module runs the evaluation (:func:`run_evaluation`: dataset, sampling, chunked generation,
``metrics.json``) and computes the metrics (:func:`compute_metrics`). Two jobs live next to it:
:mod:`satseq.eval.targets` resolves and loads what is evaluated (:func:`load_target`, re-exported
here), and :mod:`satseq.eval.predictions_io` builds the ``predictions.jsonl`` lines and does the
resume bookkeeping (reading existing lines, refusing a different configuration).

What is evaluated (``checkpoint_dir``): a **SAT-Seq run directory**, whose agents answer in turn
(``relay``; the team's prediction is their majority vote), or a **single model** (``single``); how
each is found, loaded and prompted is described in :mod:`satseq.eval.targets`.

Sampling: ``n`` samples per problem; temperature 0.6 and top-p 0.95 when ``n > 1`` (or when a
temperature > 0 is given), greedy when ``n == 1`` unless a temperature is given.

Per problem, one line of ``predictions.jsonl``:

- ``problem_id``, ``problem`` (the text), ``prompt`` (the exact text the first agent saw, sample 0),
  ``answer`` (the reference);
- ``answers`` / ``correct``: the final answer of each of the n samples (single: the model's
  answer; relay: the vote) and its correctness; ``pass_at_k``, ``avg_at_k``, ``maj_at_k`` (dicts
  keyed by k) over them;
- ``predicted_answer``: single: the majority answer over the n samples (ties as maj@n's: odd n the first
  seen, even n the eval seed's stream, :func:`~satseq.eval.metrics.vote_of`); relay:
  the vote of sample 0; ``individual_answers``: what ``predicted_answer`` is the vote of (single:
  the n samples' answers; relay: the K agents' answers in sample 0);
- ``responses`` (single: n texts; relay: n lists of K texts), ``finish_reasons`` (same shape);
- relay only: ``agents``, ``agent_answers`` and ``agent_correct`` (n lists of K), ``votes``.

``metrics.json`` is computed from every line of ``predictions.jsonl`` at the end (see
:func:`compute_metrics`); ``inference_config.yaml`` holds everything needed to rerun.

Resuming: problems whose ``problem_id`` is already in ``predictions.jsonl`` are skipped; new
problems are appended a chunk at a time, whole lines only (a torn last line from a killed run is
dropped). Each chunk draws its random numbers from its own generator, seeded from ``seed`` and the
chunk's position in the problem list, so an interrupted and resumed run samples exactly what an
uninterrupted one would (same ``batch_size``). Output made with a different configuration (model,
stage, dataset, n, temperature, top-p, max_new_tokens, seed, prompt format) is refused, never mixed.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from satseq.data.context import check_prompt_lengths, context_length_of
from satseq.errors import ConfigError, DataError
from satseq.eval.predictions_io import (
    CONFIG_FILE,
    METRICS_FILE,
    PREDICTIONS,
    check_same_config,
    check_same_problems,
    problem_key,
    read_existing,
    records,
)
from satseq.eval.report import compute_metrics, print_table  # noqa: F401  (re-exported)
from satseq.eval.targets import CHAT_MAX_NEW_TOKENS, Target, embedded_task_of, env_of, load_target, method_of  # noqa: F401  (re-exported)
from satseq.rollout.types import SamplingParams
from satseq.utils.io import append_jsonl, read_jsonl, write_json, write_yaml
from satseq.records import Problem

__all__ = [
    "EMBEDDED_DATASET",
    "default_output_dir",
    "resolve_sampling",
    "load_target",
    "run_evaluation",
    "compute_metrics",
]

#: ``--dataset embedded``: the held-out split of the embedded arithmetic task.
EMBEDDED_DATASET = "embedded"
EMBEDDED_EVAL_DEFAULT = 200


# ------------------------------------------------------------------------------ small helpers
def default_output_dir(dataset: str) -> Path:
    """``outputs/<name>_inference``; ``<name>`` is the benchmark name or the file's stem."""
    text = str(dataset).rstrip("/")
    p = Path(text)
    name = p.stem if (p.suffix or os.sep in text or text.startswith((".", "~"))) else text.replace("/", "_")
    if name in ("test", "train") and p.parent.name:  # data/aime24/test.jsonl -> aime24
        name = p.parent.name
    return Path("outputs") / f"{name or 'eval'}_inference"


def resolve_sampling(n: int, temperature: float | None, top_p: float | None, max_new_tokens: int,
                     stop: Sequence[str] = ()) -> SamplingParams:
    """Defaults: greedy for ``n == 1``; temperature 0.6, top-p 0.95 when sampling."""
    if temperature is None:
        temperature = 0.6 if n > 1 else 0.0
    if not math.isfinite(temperature) or temperature < 0:
        raise ConfigError(f"--temperature must be a finite number >= 0, got {temperature}")
    if top_p is None:
        top_p = 0.95 if temperature > 0 else 1.0
    if not 0.0 < top_p <= 1.0:
        raise ConfigError(f"--top_p must be in (0, 1], got {top_p}")
    if max_new_tokens < 1:
        raise ConfigError(f"--max_new_tokens must be >= 1, got {max_new_tokens}")
    return SamplingParams(max_new_tokens=int(max_new_tokens), temperature=float(temperature), top_p=float(top_p),
                          stop=tuple(stop))


def _resolve_ks(ks: Sequence[int] | None, n: int, console) -> list[int]:
    if not ks:
        return sorted({1, n})
    bad = [k for k in ks if k < 1]
    if bad:
        raise ConfigError(f"--k must be >= 1, got {bad[0]}")
    kept = sorted({int(k) for k in ks if k <= n})
    dropped = sorted({int(k) for k in ks if k > n})
    if dropped:
        console(f"[satseq] k={','.join(map(str, dropped))} > n={n}: not reported (pass@k needs k <= n samples)")
    if not kept:
        raise ConfigError(f"every --k is larger than --n {n}: use --n >= {min(dropped)}")
    return kept


# -------------------------------------------------------------------------------------- data
def _load_dataset(dataset: str, *, data_dir: str | None, limit: int | None,
                  env=None, embedded_task: str = "default") -> tuple[list[Problem], str]:
    """Problems and the dataset's identity (a benchmark name / hub id, or an absolute path).
    ``embedded`` is the held-out split of the run's embedded task (``data.embedded_task``; by default
    ``env``'s own: the coach's is the sum of three)."""
    from satseq.data.loading import load_problems

    if dataset == EMBEDDED_DATASET:
        from satseq.envs.tasks import task_for
        from satseq.runtime import EMBEDDED_TASK_SEED

        size = EMBEDDED_EVAL_DEFAULT if limit is None else limit
        task = task_for(embedded_task, env, EMBEDDED_TASK_SEED)
        return task.problems(size, split="eval"), f"{task.identity}:eval:seed{EMBEDDED_TASK_SEED}"
    problems = load_problems(dataset, split="test", data_dir=data_dir, limit=limit)
    p = Path(dataset).expanduser()
    identity = str(p.resolve()) if p.exists() else dataset
    return problems, identity


# ----------------------------------------------------------------------------------- metrics
# ---------------------------------------------------------------------------------------- run
def _device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: CUDA is not available")
    return device


def run_evaluation(
    dataset: str,
    checkpoint_dir: str | os.PathLike = "embedded",
    output_dir: str | os.PathLike | None = None,
    *,
    n: int = 1,
    ks: Sequence[int] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_new_tokens: int | None = None,
    limit: int | None = None,
    data_dir: str | None = None,
    batch_size: int = 32,
    threads: int = 0,
    stage: int | None = None,
    seed: int = 0,
    device: str = "auto",
    show_progress: bool = True,
    show_table: bool = True,
    console: Callable[[str], None] = print,
    engine_factory: Callable[..., Any] | None = None,
    workflow: str | None = None,
    engine: str = "hf",
    seat_agents: Sequence[str] | None = None,
) -> dict:
    """Evaluate and write ``predictions.jsonl``, ``inference_config.yaml``, ``metrics.json``.

    Returns the metrics dict (also written to ``metrics.json``). ``engine_factory(tokenizer,
    batch_size=, device=)`` replaces the rollout engine (tests); ``engine``: ``hf`` (satseq's) or ``vllm``
    (recorded in ``inference_config.yaml`` when not ``hf``); ``seat_agents``: a run's agents in seat order, to
    play them in each other's seats (:func:`~satseq.eval.targets.seat_checkpoints`). See the module docstring.
    """
    from satseq.utils.progress import progress_bar
    t_start = time.perf_counter()
    if n < 1:
        raise ConfigError(f"--n must be >= 1, got {n}")
    if batch_size < 1:
        raise ConfigError(f"--batch_size must be >= 1, got {batch_size}")
    if threads < 0:
        raise ConfigError(f"--threads must be >= 0, got {threads}")
    from satseq.registry import env_names as workflow_names

    if engine not in ("hf", "vllm"):
        raise ConfigError(f"--engine must be hf or vllm, got '{engine}'")
    if workflow is not None and workflow not in workflow_names():
        raise ConfigError(f"--workflow must be one of {', '.join(workflow_names())} (or left out), got '{workflow}'")
    ks = _resolve_ks(ks, n, console)
    if threads > 0:
        torch.set_num_threads(threads)
    out_dir = Path(output_dir) if output_dir is not None else default_output_dir(dataset)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--output_dir {out_dir} is a file")
    dev = _device(device)

    # Cheap checks first: the dataset and any existing output, before loading a model.
    problems, dataset_id = _load_dataset(dataset, data_dir=data_dir, limit=limit,
                                         env=env_of(checkpoint_dir, workflow),
                                         embedded_task=embedded_task_of(checkpoint_dir))
    if not problems:
        raise DataError(f"{dataset}: no problems to evaluate")
    ids = [problem_key(p.problem_id) for p in problems]
    if len(set(ids)) != len(ids):
        raise DataError(f"{dataset}: problem ids are not unique; resumable evaluation keys on them")
    rows = read_existing(out_dir)
    check_same_problems(out_dir, rows, problems)

    target = load_target(checkpoint_dir, stage=stage, device=dev, console=console, workflow=workflow,
                         seat_agents=seat_agents)
    sampling = resolve_sampling(n, temperature, top_p,
                                max_new_tokens if max_new_tokens is not None else target.default_max_new_tokens,
                                target.stop)
    config = {
        "model": target.model,
        "checkpoint_dir": str(checkpoint_dir),
        "stage": target.stage,
        "agents": list(target.agents),
        "workflow": target.workflow,
        "prompt_format": target.fmt.name,
        "dataset": dataset_id,
        "dataset_arg": str(dataset),
        "data_dir": None if data_dir is None else str(data_dir),
        "split": "test" if dataset != EMBEDDED_DATASET else "eval",
        "limit": limit,
        "n": n,
        "ks": ks,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_new_tokens": sampling.max_new_tokens,
        "stop": list(sampling.stop),
        "seed": seed,
        "batch_size": batch_size,
        "device": dev,
        "threads": threads,
        **({"engine": engine} if engine != "hf" else {}),
        **({"seat_agents": list(target.info["seat_agents"])} if "seat_agents" in target.info else {}),
        **({"run": target.info} if target.kind == "run" else {}),
        "command": _rerun_command(dataset, checkpoint_dir, out_dir, n, ks, sampling, limit, data_dir, batch_size,
                                  threads, target.stage, seed, workflow, engine, target.info.get("seat_agents")),
    }
    check_same_config(out_dir, config, rows)
    # Every prompt must fit the model's context before anything is written or generated.
    check_prompt_lengths(problems, target.fmt, context_length=context_length_of(target.pool.module(target.pool.names[0])),
                         max_new_tokens=sampling.max_new_tokens, what="--max_new_tokens")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(out_dir / CONFIG_FILE, config)

    done = {problem_key(r.get("problem_id")) for r in rows}
    todo = [(i, p) for i, p in enumerate(problems) if problem_key(p.problem_id) not in done]
    per_chunk = max(1, batch_size // n)
    wf = target.env.make_workflow(target.cfg, target.roles, target.fmt, sampling, options=target.options)
    if engine_factory is None:
        from satseq.rollout.engine import make_engine

        def engine_factory(tokenizer, *, batch_size, device):
            return make_engine(engine, tokenizer, batch_size=batch_size, device=device)
    rollout_engine = engine_factory(target.pool.tokenizer, batch_size=batch_size, device=dev)
    if rows and todo:
        console(f"[satseq] resuming {out_dir}: {len(problems) - len(todo)}/{len(problems)} problems already done")
    t_gen = time.perf_counter()
    with progress_bar(len(problems), f"eval {Path(str(dataset)).name}", enabled=show_progress) as bar:
        bar.advance(len(problems) - len(todo))
        correct_so_far = [sum(r["correct"]) / len(r["correct"]) for r in rows]
        # Chunks on a fixed grid over the problem list, each with its own generator: a resumed run
        # samples what an uninterrupted one would have.
        chunks: dict[int, list[tuple[int, Problem]]] = {}
        for i, p in todo:
            chunks.setdefault(i // per_chunk, []).append((i, p))
        for c, items in sorted(chunks.items()):
            chunk = [p for _, p in items]
            gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + c)
            episodes = wf.rollout(chunk, target.pool, rollout_engine, group_size=n, generator=gen)
            target.env.grade(episodes)
            for rec in records(target, chunk, episodes, n, ks, seed):
                append_jsonl(out_dir / PREDICTIONS, rec)
                correct_so_far.append(sum(rec["correct"]) / len(rec["correct"]))
            bar.advance(len(chunk))
            bar.set_postfix(f"acc {sum(correct_so_far) / len(correct_so_far):.3f}")
    gen_s = time.perf_counter() - t_gen

    all_rows = read_jsonl(out_dir / PREDICTIONS, allow_partial_last_line=True)
    metrics = compute_metrics(all_rows, ks, seed)
    outside = len({problem_key(r.get("problem_id")) for r in all_rows} - set(ids))
    if outside:
        console(f"[satseq] note: {PREDICTIONS} also holds {outside} problems outside this selection; "
                "metrics cover all of its lines")
    metrics = {
        "dataset": dataset_id, "model": target.model, "stage": target.stage, "agents": target.agents,
        "n": n, "temperature": sampling.temperature, "top_p": sampling.top_p,
        "max_new_tokens": sampling.max_new_tokens, **metrics,
        "time_s": _times(out_dir, todo, gen_s, time.perf_counter() - t_start),
    }
    write_json(out_dir / METRICS_FILE, metrics)
    if show_table:
        what = f"stage {target.stage} of {target.model}" if target.kind == "run" else target.model
        print_table(metrics, f"{dataset} — {what} — {metrics['n_problems']} problems × n={n}")
        console(f"[satseq] wrote {out_dir / PREDICTIONS}, {out_dir / METRICS_FILE}")
    return metrics


def _times(out_dir: Path, todo: list, gen_s: float, total_s: float) -> dict:
    """The invocation's times for metrics.json; a resume that generated nothing keeps the times already there.

    Otherwise re-running a finished evaluation (compare does, to read its metrics) would replace the time of
    the invocation that generated every problem with this one's zeros.
    """
    if not todo and (out_dir / METRICS_FILE).is_file():
        try:
            previous = json.loads((out_dir / METRICS_FILE).read_text()).get("time_s")
        except (OSError, ValueError, AttributeError):  # unreadable: this invocation's times replace it
            previous = None
        if isinstance(previous, dict):
            return previous
    return {"generation_this_invocation": round(gen_s, 3), "total_this_invocation": round(total_s, 3),
            "problems_generated_this_invocation": len(todo)}


def _rerun_command(dataset, checkpoint_dir, out_dir, n, ks, sampling: SamplingParams, limit, data_dir, batch_size,
                   threads, stage, seed, workflow=None, engine: str = "hf", seat_agents=None) -> str:
    import shlex

    parts = ["satseq", "eval", "--dataset", str(dataset), "--checkpoint_dir", str(checkpoint_dir),
             "--output_dir", str(out_dir), "--n", str(n)]
    for k in ks:
        parts += ["--k", str(k)]
    parts += ["--temperature", repr(sampling.temperature), "--top_p", repr(sampling.top_p),
              "--max_new_tokens", str(sampling.max_new_tokens), "--batch_size", str(batch_size),
              "--seed", str(seed)]
    if threads:
        parts += ["--threads", str(threads)]
    if limit is not None:
        parts += ["--limit", str(limit)]
    if data_dir is not None:
        parts += ["--data_dir", str(data_dir)]
    if stage is not None:
        parts += ["--stage", str(stage)]
    if workflow is not None:
        parts += ["--workflow", workflow]
    if engine != "hf":
        parts += ["--engine", engine]
    if seat_agents is not None:
        parts += ["--seat_agents", ",".join(seat_agents)]
    return " ".join(shlex.quote(p) for p in parts)
