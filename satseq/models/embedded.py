"""The embedded default policy: the tiny model warm-started on the arithmetic task.

``ensure_warm_start`` builds it once (tiny model from scratch → SFT on the mixed careful/hasty
corpus) and stores it as an ordinary HF model directory; later runs reuse it. The directory is
written atomically, so an interrupted SFT never leaves a half-made warm start behind.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from satseq.data.arithmetic import ArithmeticTask
from satseq.models.tiny import build_tiny_model, save_model_dir
from satseq.trainers.sft import SFTConfig, run_sft

EMBEDDED = "embedded"
HELD_OUT_POOL = 1000  # the first N problems of the "eval" stream are never trained on


def eval_exclusion(seed: int = 0, eval_size: int = HELD_OUT_POOL, method: str | None = None) -> set[str]:
    """Problems of the held-out split of ``method``'s task, which neither SFT nor RL may train on."""
    return {p.problem for p in embedded_task(method, seed).problems(eval_size, split="eval")}


def warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return Path(output_dir) / "embedded" / f"warm_start_seed{seed}"


def ensure_warm_start(output_dir: str | Path, *, seed: int = 0, cfg: SFTConfig | None = None,
                      n_examples: int = 20000, eval_size: int = HELD_OUT_POOL, show_progress: bool = True,
                      console=print) -> Path:
    """Return the warm-start model dir, training it first if it does not exist yet."""
    out = warm_start_dir(output_dir, seed)
    if _complete(out):
        return out
    cfg = cfg or SFTConfig(seed=seed)
    console(f"[satseq] building the embedded warm start (tiny model, {cfg.steps} SFT steps) -> {out}")
    model, tok = build_tiny_model(seed=seed)
    task = ArithmeticTask(seed=seed)
    examples = task.sft_examples(n_examples, exclude=eval_exclusion(seed, eval_size))
    losses = run_sft(model, tok, examples, cfg, show_progress=show_progress)
    _save_atomically(model, tok, out, {"task": "arithmetic-3digit-add", "seed": seed, "sft": cfg.__dict__,
                                       "n_examples": n_examples, "final_loss": losses[-1]})
    return out


def multiturn_warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return Path(output_dir) / "embedded" / f"multiturn_seed{seed}"


def mlmt_warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return Path(output_dir) / "embedded" / f"mlmt_seed{seed}"


MULTITURN_SFT = dict(steps=300, lr=1e-3, warmup_steps=10)
MLMT_SFT = dict(steps=400, lr=2e-3, warmup_steps=10)
SUM_OF_THREE_USERS = ("mlmt", "coach")  # the method and the workflow that use the three-operand task


def embedded_task(method_or_workflow: str | None = None, seed: int = 0):
    """The embedded task a method (or evaluation workflow) trains and is evaluated on: MLMT and the
    ``coach`` workflow use :class:`~satseq.data.sum_of_three.SumOfThreeTask`, everything else the
    two-operand :class:`~satseq.data.arithmetic.ArithmeticTask`."""
    if method_or_workflow in SUM_OF_THREE_USERS:
        from satseq.data.sum_of_three import SumOfThreeTask

        return SumOfThreeTask(seed=seed)
    return ArithmeticTask(seed=seed)


def ensure_for(method_or_workflow: str | None, output_dir: str | Path, **kw) -> Path:
    """The warm start that knows the roles of ``method_or_workflow`` (built on first use)."""
    if method_or_workflow in SUM_OF_THREE_USERS:
        return ensure_mlmt_warm_start(output_dir, **kw)
    if method_or_workflow in ("pag", "self_verify"):
        return ensure_multiturn_warm_start(output_dir, **kw)
    return ensure_warm_start(output_dir, **kw)


def ensure_multiturn_warm_start(output_dir: str | Path, *, seed: int = 0, cfg: SFTConfig | None = None,
                                n_examples: int = 20000, eval_size: int = HELD_OUT_POOL, show_progress: bool = True,
                                console=print) -> Path:
    """The warm start for PAG: the base warm start, SFT continued on the transcripts of
    :mod:`satseq.data.multiturn` (solve, verify, revise, coach, refine). Kept apart from the base
    warm start so single-turn and SAT-Seq results do not change."""
    from satseq.data.multiturn import MIX, multiturn_examples

    def examples():
        return multiturn_examples(n_examples, seed=seed, exclude=eval_exclusion(seed, eval_size))

    return _continue_sft(output_dir, multiturn_warm_start_dir(output_dir, seed), examples,
                         cfg or SFTConfig(seed=seed, **MULTITURN_SFT), "solve/verify/revise/coach/refine",
                         {"task": "arithmetic-3digit-add multi-turn", "mix": MIX, "n_examples": n_examples},
                         seed=seed, eval_size=eval_size, show_progress=show_progress, console=console)


def ensure_mlmt_warm_start(output_dir: str | Path, *, seed: int = 0, cfg: SFTConfig | None = None,
                           n_examples: int = 30000, eval_size: int = HELD_OUT_POOL, show_progress: bool = True,
                           console=print) -> Path:
    """The warm start for MLMT: the base warm start, SFT continued on the three-operand solver, coach
    and refine transcripts of :mod:`satseq.data.sum_of_three` (~6 minutes on 2 CPU cores, once)."""
    from satseq.data.sum_of_three import MIX, mlmt_examples

    def examples():
        return mlmt_examples(n_examples, seed=seed, exclude=eval_exclusion(seed, eval_size, "mlmt"))

    return _continue_sft(output_dir, mlmt_warm_start_dir(output_dir, seed), examples,
                         cfg or SFTConfig(seed=seed, **MLMT_SFT), "three-operand solver/coach/refine",
                         {"task": "sum-of-three MLMT", "mix": MIX, "n_examples": n_examples},
                         seed=seed, eval_size=eval_size, show_progress=show_progress, console=console)


def _continue_sft(output_dir, out: Path, examples, cfg: SFTConfig, what: str, info: dict, *, seed: int,
                  eval_size: int, show_progress: bool, console) -> Path:
    from satseq.models.loading import load_causal_lm

    if _complete(out):
        return out
    base = ensure_warm_start(output_dir, seed=seed, eval_size=eval_size, show_progress=show_progress, console=console)
    console(f"[satseq] building a warm start ({cfg.steps} SFT steps on {what} transcripts) -> {out}")
    model, tok = load_causal_lm(str(base))
    losses = run_sft(model, tok, examples(), cfg, show_progress=show_progress)
    _save_atomically(model, tok, out, {**info, "seed": seed, "base": str(base), "sft": cfg.__dict__,
                                       "final_loss": losses[-1]})
    return out


def _complete(out: Path) -> bool:
    return (out / "config.json").exists() and (out / "warm_start.json").exists()


def _save_atomically(model, tok, out: Path, info: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        save_model_dir(model, tok, tmp)
        (tmp / "warm_start.json").write_text(json.dumps(info, indent=2))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
