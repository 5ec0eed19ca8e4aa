"""The embedded default policy: the tiny model warm-started on the arithmetic task.

``ensure_warm_start`` builds it once (tiny model from scratch → SFT on the mixed careful/hasty
corpus) and stores it as an ordinary HF model directory; later runs reuse it. The directory is
written atomically, so an interrupted SFT never leaves a half-made warm start behind.
:func:`continue_sft` builds a method's own warm start on top of it (PAG's multi-turn transcripts,
MLMT's sum-of-three roles: ``satseq/methods/<name>/warm_start.py``); which task and warm start a
method uses is the method's choice (:meth:`satseq.methods.base.Method.embedded_task`).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from satseq.data.arithmetic import ArithmeticTask
from satseq.models.tiny import build_tiny_model, save_model_dir
from satseq.models.sft import SFTConfig, run_sft

EMBEDDED = "embedded"
HELD_OUT_POOL = 1000  # the first N problems of the "eval" stream are never trained on
VALIDATION_SIZE = 100  # problems of the "valid" stream the base SFT is validated on (never trained on)


def base_sft_config(seed: int = 0) -> SFTConfig:
    """The base warm start's recipe: constant lr until the careful chain is right on 85 % of the
    validation problems (greedy), then a 150-step cosine cool-down; at most 1500 steps.

    Why a target and not a step count: at a fixed 400 steps the careful chain's accuracy depended on
    the floating-point path (0.25-0.8 across SFT seeds and thread counts, so held-out pass@1 0.07-0.44,
    docs/results.md). Every batch holds 32 careful and 32 hasty examples, so the careful/hasty split
    ends near the corpus's ½ instead of wherever the last batches' sampling noise left it.
    """
    return SFTConfig(seed=seed, steps=1500, target=0.85, check_every=50, cooldown_steps=150)


def careful_chain_accuracy(model, tokenizer, problems, engine=None) -> float:
    """Greedy accuracy of the careful column chain: the prompt plus the chain's first character
    (so the hasty style is ruled out), decoded greedily, graded on the last box."""
    from satseq.data.arithmetic import careful_solution, render_prompt
    from satseq.rewards.extract import extract_boxed
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams

    heads = [careful_solution(p.meta["a"], p.meta["b"])[0] for p in problems]
    ids = [tokenizer(render_prompt(p.problem) + h, add_special_tokens=False)["input_ids"] for p, h in zip(problems, heads)]
    gens = (engine or HFEngine(tokenizer)).generate(model, ids, SamplingParams(max_new_tokens=40, temperature=0.0))
    return sum((extract_boxed(h + g.text) or "") == p.answer for p, h, g in zip(problems, heads, gens)) / len(problems)


def eval_exclusion(task, eval_size: int = HELD_OUT_POOL) -> set[str]:
    """Problems of the held-out split of an embedded ``task``, which neither SFT nor RL may train on."""
    return {p.problem for p in task.problems(eval_size, split="eval")}


def warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return Path(output_dir) / "embedded" / f"warm_start_seed{seed}"


def ensure_warm_start(output_dir: str | Path, *, seed: int = 0, cfg: SFTConfig | None = None,
                      n_examples: int = 20000, eval_size: int = HELD_OUT_POOL, show_progress: bool = True,
                      console=print) -> Path:
    """Return the warm-start model dir, training it first if it does not exist yet."""
    out = warm_start_dir(output_dir, seed)
    if _complete(out):
        return out
    cfg = cfg or base_sft_config(seed)
    length = (f"SFT to careful-chain validation accuracy {cfg.target} + {cfg.cooldown_steps} cool-down steps, "
              f"at most {cfg.steps}" if cfg.target is not None else f"{cfg.steps} SFT steps")
    console(f"[satseq] building the embedded warm start (tiny model, {length}) -> {out}")
    model, tok = build_tiny_model(seed=seed)
    task = ArithmeticTask(seed=seed)
    held_out = eval_exclusion(task, eval_size)
    valid = task.problems(VALIDATION_SIZE, split="valid", exclude=held_out)
    examples = task.sft_examples(n_examples, exclude=held_out | {p.problem for p in valid})
    styles = [int(c.startswith("\\boxed")) for _, c in examples]  # 1 = hasty; every batch holds ½ of each
    res = run_sft(model, tok, examples, cfg, show_progress=show_progress, strata=styles,
                  validate=(lambda m: careful_chain_accuracy(m, tok, valid)) if cfg.target is not None else None)
    if res.reached_target is False:
        console(f"[satseq] warning: the warm start did not reach careful-chain accuracy {cfg.target} in "
                f"{cfg.steps} steps (last {res.checks[-1]['score']:.2f}); RL figures from it are not comparable")
    _save_atomically(model, tok, out, {"task": "arithmetic-3digit-add", "seed": seed, "sft": cfg.__dict__,
                                       "n_examples": n_examples, "final_loss": res.losses[-1], "steps": res.steps,
                                       "reached_target": res.reached_target, "checks": res.checks})
    return out


def method_warm_start_dir(output_dir: str | Path, stem: str, seed: int = 0) -> Path:
    return Path(output_dir) / "embedded" / f"{stem}_seed{seed}"


def ensure_method_warm_start(output_dir: str | Path, *, stem: str, task, examples, sft: dict, what: str,
                             info: dict, seed: int = 0, cfg: SFTConfig | None = None, n_examples: int = 20000,
                             eval_size: int = HELD_OUT_POOL, show_progress: bool = True, console=print) -> Path:
    """A method's own warm start, ``<output_dir>/embedded/<stem>_seed<seed>``: the base warm start, SFT
    continued (``sft`` defaults) on ``examples(n, seed=, exclude=)`` transcripts that never show a
    problem of ``task``'s held-out split. Built on first use, atomically."""

    def make():
        return examples(n_examples, seed=seed, exclude=eval_exclusion(task, eval_size))

    return continue_sft(output_dir, method_warm_start_dir(output_dir, stem, seed), make,
                        cfg or SFTConfig(seed=seed, **sft), what, {**info, "n_examples": n_examples},
                        seed=seed, eval_size=eval_size, show_progress=show_progress, console=console)


def continue_sft(output_dir, out: Path, examples, cfg: SFTConfig, what: str, info: dict, *, seed: int,
                  eval_size: int, show_progress: bool, console) -> Path:
    from satseq.models.loading import load_causal_lm

    if _complete(out):
        return out
    base = ensure_warm_start(output_dir, seed=seed, eval_size=eval_size, show_progress=show_progress, console=console)
    console(f"[satseq] building a warm start ({cfg.steps} SFT steps on {what} transcripts) -> {out}")
    model, tok = load_causal_lm(str(base))
    res = run_sft(model, tok, examples(), cfg, show_progress=show_progress)
    _save_atomically(model, tok, out, {**info, "seed": seed, "base": str(base), "sft": cfg.__dict__,
                                       "final_loss": res.losses[-1]})
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
