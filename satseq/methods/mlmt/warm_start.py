"""MLMT's embedded warm start: the base warm start, SFT continued on the three-operand solver, coach
and refine transcripts of :mod:`satseq.data.sum_of_three` (~6 minutes on 2 CPU cores, once)."""
from __future__ import annotations

from pathlib import Path

from satseq.data.sum_of_three import SumOfThreeTask
from satseq.models.warm_start import HELD_OUT_POOL, continue_sft, eval_exclusion
from satseq.models.sft import SFTConfig

MLMT_SFT = dict(steps=400, lr=2e-3, warmup_steps=10)


def mlmt_warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return Path(output_dir) / "embedded" / f"mlmt_seed{seed}"


def ensure_mlmt_warm_start(output_dir: str | Path, *, seed: int = 0, cfg: SFTConfig | None = None,
                           n_examples: int = 30000, eval_size: int = HELD_OUT_POOL, show_progress: bool = True,
                           console=print) -> Path:
    """The warm start for MLMT (built on first use, atomically)."""
    from satseq.data.sum_of_three import MIX, mlmt_examples

    def examples():
        return mlmt_examples(n_examples, seed=seed, exclude=eval_exclusion(SumOfThreeTask(seed=seed), eval_size))

    return continue_sft(output_dir, mlmt_warm_start_dir(output_dir, seed), examples,
                        cfg or SFTConfig(seed=seed, **MLMT_SFT), "three-operand solver/coach/refine",
                        {"task": "sum-of-three MLMT", "mix": MIX, "n_examples": n_examples},
                        seed=seed, eval_size=eval_size, show_progress=show_progress, console=console)
