"""MLMT's embedded warm start: the base warm start, SFT continued on the three-operand solver, coach
and refine transcripts of :mod:`satseq.data.sum_of_three` (~9 minutes on 2 CPU cores, once)."""
from __future__ import annotations

from pathlib import Path

from satseq.data.sum_of_three import SumOfThreeTask
from satseq.models.warm_start import HELD_OUT_POOL, ensure_method_warm_start, method_warm_start_dir

# 1000 steps: on the base warm start trained to its target (docs/embedded_default.md) 400 steps left the
# coach's two-stage chain unlearned (held-out greedy: turn 1 0.09, turn 3 0.15, coach 0.16); 1000 steps
# give, at T = 1: turn 1 0.10, turn 3 0.51, coach 0.74 — the regime MLMT's figures were measured in.
MLMT_SFT = dict(steps=1000, lr=2e-3, warmup_steps=10)


def mlmt_warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return method_warm_start_dir(output_dir, "mlmt", seed)


def ensure_mlmt_warm_start(output_dir: str | Path, *, seed: int = 0, n_examples: int = 30000,
                           eval_size: int = HELD_OUT_POOL, **kw) -> Path:
    from satseq.data.sum_of_three import MIX, mlmt_examples

    return ensure_method_warm_start(
        output_dir, stem="mlmt", task=SumOfThreeTask(seed=seed), examples=mlmt_examples, sft=MLMT_SFT,
        what="three-operand solver/coach/refine", info={"task": "sum-of-three MLMT", "mix": MIX},
        seed=seed, n_examples=n_examples, eval_size=eval_size, **kw)
