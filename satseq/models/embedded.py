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


def eval_exclusion(seed: int = 0, eval_size: int = HELD_OUT_POOL) -> set[str]:
    """Problems of the held-out split, which neither SFT nor RL may train on."""
    return {p.problem for p in ArithmeticTask(seed=seed).problems(eval_size, split="eval")}


def warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return Path(output_dir) / "embedded" / f"warm_start_seed{seed}"


def ensure_warm_start(output_dir: str | Path, *, seed: int = 0, cfg: SFTConfig | None = None,
                      n_examples: int = 20000, eval_size: int = HELD_OUT_POOL, show_progress: bool = True,
                      console=print) -> Path:
    """Return the warm-start model dir, training it first if it does not exist yet."""
    out = warm_start_dir(output_dir, seed)
    if (out / "config.json").exists() and (out / "warm_start.json").exists():
        return out
    cfg = cfg or SFTConfig(seed=seed)
    console(f"[satseq] building the embedded warm start (tiny model, {cfg.steps} SFT steps) -> {out}")
    model, tok = build_tiny_model(seed=seed)
    task = ArithmeticTask(seed=seed)
    examples = task.sft_examples(n_examples, exclude=eval_exclusion(seed, eval_size))
    losses = run_sft(model, tok, examples, cfg, show_progress=show_progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        save_model_dir(model, tok, tmp)
        (tmp / "warm_start.json").write_text(json.dumps(
            {"task": "arithmetic-3digit-add", "seed": seed, "sft": cfg.__dict__, "n_examples": n_examples,
             "final_loss": losses[-1]}, indent=2))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
