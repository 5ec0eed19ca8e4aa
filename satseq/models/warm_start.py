"""The embedded default policy: the tiny model warm-started on the arithmetic task.

``ensure_warm_start`` builds it once (tiny model from scratch → SFT on the mixed careful/hasty
corpus) and stores it as an ordinary HF model directory; later runs reuse it. The directory is
written atomically, so an interrupted SFT never leaves a half-made warm start behind.
:func:`continue_sft` builds a method's own warm start on top of it (PAG's multi-turn transcripts,
MLMT's sum-of-three roles: ``satseq/methods/<name>/warm_start.py``); which task and warm start a
method uses is the method's choice (:meth:`satseq.methods.base.Method.embedded_task`).
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

from satseq.data.arithmetic import ArithmeticTask
from satseq.models.tiny import build_tiny_model, save_model_dir
from satseq.errors import SatseqError
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


def probe_answer(text: str) -> str:
    """What a probe's completion concluded: its last ``\\boxed{}``, else what follows its last ``;``
    (a verification's ``ok`` / ``no``)."""
    from satseq.rewards.extract import extract_boxed

    boxed = extract_boxed(text)
    return boxed if boxed is not None else text.rsplit(";", 1)[-1].strip()


def probe_scores(model, tokenizer, probes, engine=None, max_new_tokens: int = 96) -> dict[str, float]:
    """Greedy accuracy per behaviour (``Probe.kind``): each probe's prompt plus its forced ``head``,
    decoded greedily, right when :func:`probe_answer` of ``head + completion`` is ``Probe.answer``."""
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams

    ids = [tokenizer(p.prompt + p.head, add_special_tokens=False)["input_ids"] for p in probes]
    gens = (engine or HFEngine(tokenizer)).generate(model, ids, SamplingParams(max_new_tokens=max_new_tokens,
                                                                                temperature=0.0))
    right: dict[str, list[bool]] = {}
    for p, g in zip(probes, gens):
        right.setdefault(p.kind, []).append(probe_answer(p.head + g.text) == p.answer)
    return {k: sum(v) / len(v) for k, v in right.items()}


def careful_chain_accuracy(model, tokenizer, problems, engine=None) -> float:
    """Greedy accuracy of the careful column chain: the prompt plus the chain's first character
    (so the hasty style is ruled out), decoded greedily, graded on the last box."""
    from satseq.data.arithmetic import careful_probes

    return probe_scores(model, tokenizer, careful_probes(problems), engine, max_new_tokens=40)["careful"]


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
    with one_builder(out):
        if _complete(out):  # another process built it while this one waited
            return out
        return _build_warm_start(out, seed=seed, cfg=cfg, n_examples=n_examples, eval_size=eval_size,
                                 show_progress=show_progress, console=console)


def _build_warm_start(out: Path, *, seed: int, cfg: SFTConfig | None, n_examples: int, eval_size: int,
                      show_progress: bool, console) -> Path:
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
        raise SatseqError(f"the embedded warm start did not reach careful-chain accuracy {cfg.target} in {cfg.steps} "
                          f"SFT steps (last {res.checks[-1]['score']:.2f}); nothing was written to {out}: "
                          "lower the target (satseq sft --target) or train a fixed length (--steps)")
    _save_atomically(model, tok, out, {"task": "arithmetic-3digit-add", "seed": seed, "sft": cfg.__dict__,
                                       "n_examples": n_examples, "final_loss": res.losses[-1], "steps": res.steps,
                                       "reached_target": res.reached_target, "checks": res.checks})
    return out


def method_warm_start_dir(output_dir: str | Path, stem: str, seed: int = 0) -> Path:
    return Path(output_dir) / "embedded" / f"{stem}_seed{seed}"


@dataclass(frozen=True)
class WarmStartRecipe:
    """How a method's warm start is trained to its validation target (docs/embedded_default.md).

    SFT continues from the base warm start at constant ``lr`` until the *weakest* behaviour of
    ``probes(validation problems)`` is right on ``target`` of its probes (greedy, checked every
    ``check_every`` steps), then a ``cooldown_steps`` cosine cool-down; at most ``max_steps`` steps.
    Reaching the cap first is an error: the warm start would land outside the regime its figures
    were measured in."""

    probes: Callable[..., list]  # (validation problems, seed=) -> [Probe]
    target: float = 0.9
    targeted: Optional[tuple[str, ...]] = None  # the probe kinds the target is on (None: all; others only recorded)
    lr: float = 2e-3
    settle_lr: Optional[float] = None  # then constant at this lr until every ``settled`` kind reaches the target too
    settled: Optional[tuple[str, ...]] = None  # (None: every probed kind)
    warmup_steps: int = 10
    check_every: int = 50
    cooldown_steps: int = 150
    max_steps: int = 3000
    max_new_tokens: int = 96

    def sft_config(self, seed: int) -> SFTConfig:
        return SFTConfig(seed=seed, steps=self.max_steps, lr=self.lr, warmup_steps=self.warmup_steps,
                         target=self.target, check_every=self.check_every, cooldown_steps=self.cooldown_steps,
                         settle_lr=self.settle_lr)


def weakest(scores: dict[str, float], kinds: Optional[tuple[str, ...]] = None) -> float:
    """A warm start's validation score: its weakest probed behaviour (of ``kinds``, default all)."""
    return min(v for k, v in scores.items() if kinds is None or k in kinds)


def ensure_method_warm_start(output_dir: str | Path, *, stem: str, task, examples, recipe: WarmStartRecipe,
                             what: str, info: dict, seed: int = 0, cfg: SFTConfig | None = None,
                             n_examples: int = 20000, eval_size: int = HELD_OUT_POOL, show_progress: bool = True,
                             console=print) -> Path:
    """A method's own warm start, ``<output_dir>/embedded/<stem>_seed<seed>``: the base warm start, SFT
    continued on ``examples(n, seed=, exclude=)`` transcripts (never a problem of ``task``'s held-out or
    validation split) until ``recipe``'s probes reach its target. ``cfg`` without a target trains a fixed
    number of steps instead (tests, experiments). Built on first use, atomically."""
    out = method_warm_start_dir(output_dir, stem, seed)
    if _complete(out):
        return out
    if cfg is None and not os.environ.get("SATSEQ_NO_SHIPPED"):
        from satseq.models.shipped import copy_shipped, shipped_warm_start

        src = shipped_warm_start(stem, seed, n_examples=n_examples, eval_size=eval_size)
        if src is not None:
            with one_builder(out):
                if not _complete(out):
                    console(f"[satseq] using the {what} warm start shipped with satseq ({src}; "
                            f"`satseq sft --task {stem} --force` rebuilds it here) -> {out}")
                    copy_shipped(src, out)
            return out
    cfg = cfg or recipe.sft_config(seed)
    held_out = eval_exclusion(task, eval_size)
    valid = task.problems(VALIDATION_SIZE, split="valid", exclude=held_out)
    probes = recipe.probes(valid, seed=seed)
    unseen = held_out | {p.problem for p in valid}
    return continue_sft(output_dir, out, lambda: examples(n_examples, seed=seed, exclude=unseen), cfg, what,
                        {**info, "n_examples": n_examples}, seed=seed, eval_size=eval_size,
                        show_progress=show_progress, console=console,
                        validate=lambda m, tok: probe_scores(m, tok, probes, max_new_tokens=recipe.max_new_tokens),
                        targeted=recipe.targeted, settled=recipe.settled)


def continue_sft(output_dir, out: Path, examples, cfg: SFTConfig, what: str, info: dict, *, seed: int,
                 eval_size: int, show_progress: bool, console, validate=None,
                 targeted: Optional[tuple[str, ...]] = None, settled: Optional[tuple[str, ...]] = None) -> Path:
    """SFT continued from the base warm start; ``validate(model, tokenizer) -> {behaviour: score}`` with
    ``cfg.target`` trains to the target (the weakest ``targeted`` behaviour's score; default all), and with
    ``cfg.settle_lr`` then at that rate until the weakest ``settled`` one (default all) reaches it too."""
    if _complete(out):
        return out
    base = ensure_warm_start(output_dir, seed=seed, eval_size=eval_size, show_progress=show_progress, console=console)
    with one_builder(out):
        if _complete(out):  # another process built it while this one waited
            return out
        return _continue_sft(base, out, examples, cfg, what, info, seed=seed, validate=validate,
                             targeted=targeted, settled=settled, show_progress=show_progress, console=console)


def _continue_sft(base: Path, out: Path, examples, cfg: SFTConfig, what: str, info: dict, *, seed: int, validate,
                  targeted, settled=None, show_progress: bool, console) -> Path:
    from satseq.models.loading import load_causal_lm

    to_target = cfg.target is not None and validate is not None
    settling = f", then at lr {cfg.settle_lr} until every one does" if cfg.settle_lr is not None else ""
    length = (f"SFT until its weakest validation behaviour reaches {cfg.target}{settling} + {cfg.cooldown_steps} "
              f"cool-down steps, at most {cfg.steps}" if to_target else f"{cfg.steps} SFT steps")
    console(f"[satseq] building a warm start ({length} on {what} transcripts) -> {out}")
    model, tok = load_causal_lm(str(base))
    per_check: list[dict] = []

    def check_on(kinds):
        def check(m) -> float:
            scores = validate(m, tok)
            per_check.append(scores)
            console(f"[satseq] {out.name} validation check {len(per_check)}: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in scores.items()))
            return weakest(scores, kinds)
        return check

    res = run_sft(model, tok, examples(), cfg if to_target else replace(cfg, target=None, settle_lr=None),
                  show_progress=show_progress, validate=check_on(targeted) if to_target else None,
                  settle=check_on(settled) if to_target and cfg.settle_lr is not None else None)
    for c, scores in zip(res.checks, per_check):
        c["behaviours"] = scores
    if res.reached_target is False:
        raise SatseqError(f"the {what} warm start did not reach its validation target {cfg.target} in {cfg.steps} "
                          f"SFT steps (weakest behaviour at the end {res.checks[-1]['score']:.2f}: "
                          f"{res.checks[-1]['behaviours']}); nothing was written to {out}")
    _save_atomically(model, tok, out, {**info, "seed": seed, "base": str(base), "sft": cfg.__dict__,
                                       "final_loss": res.losses[-1], "steps": res.steps,
                                       "reached_target": res.reached_target, "checks": res.checks})
    return out


@contextmanager
def one_builder(out: Path):
    """An exclusive lock on building into ``out``'s directory (``fcntl.flock`` on the directory itself: no
    file is left behind; released when the process ends, however it ends): runs that start together
    (``satseq compare --jobs``, two trainings sharing an ``output_dir``) build a warm start once; the
    others wait, then reuse it. Builds in one directory take turns; never nest two."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


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
