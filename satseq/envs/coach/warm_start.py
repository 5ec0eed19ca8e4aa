"""MLMT's embedded warm start: the base warm start, SFT continued on the three-operand solver, coach
and refine transcripts of :mod:`satseq.data.sum_of_three` (~9 minutes on 2 CPU cores, once)."""
from __future__ import annotations

from pathlib import Path

from satseq.data.sum_of_three import SumOfThreeTask
from satseq.models.warm_start import HELD_OUT_POOL, WarmStartRecipe, ensure_method_warm_start, method_warm_start_dir
from satseq.data.sum_of_three import mlmt_probes


#: SFT at lr 2e-3 until the coach's two-stage demonstration and the refining solver's copy of the hint
#: are each right on 90 % of the validation probes (greedy, opening forced); then at lr 5e-4 until the
#: three-operand single pass (turn 1, and the refining solver's re-solve) is too, with the first two
#: still there; then 150 cool-down steps (docs/embedded_default.md)
MLMT_RECIPE = WarmStartRecipe(probes=mlmt_probes, target=0.9, targeted=("coach_two_stage", "refine_copy"), lr=2e-3,
                              settle_lr=5e-4, max_new_tokens=96)


def mlmt_warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return method_warm_start_dir(output_dir, "mlmt", seed)


def ensure_mlmt_warm_start(output_dir: str | Path, *, seed: int = 0, n_examples: int = 30000,
                           eval_size: int = HELD_OUT_POOL, **kw) -> Path:
    from satseq.data.sum_of_three import MIX, mlmt_examples

    return ensure_method_warm_start(
        output_dir, stem="mlmt", task=SumOfThreeTask(seed=seed), examples=mlmt_examples, recipe=MLMT_RECIPE,
        what="three-operand solver/coach/refine", info={"task": "sum-of-three MLMT", "mix": MIX},
        seed=seed, n_examples=n_examples, eval_size=eval_size, **kw)
