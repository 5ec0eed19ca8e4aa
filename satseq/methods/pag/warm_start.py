"""PAG's embedded warm start: the base warm start, SFT continued on the solve / verify / revise
(and first-task coach / refine) transcripts of :mod:`satseq.data.multiturn`. Kept apart from the
base warm start so single-turn and SAT-Seq results do not change."""
from __future__ import annotations

from pathlib import Path

from satseq.data.arithmetic import ArithmeticTask
from satseq.models.warm_start import HELD_OUT_POOL, continue_sft, eval_exclusion
from satseq.models.sft import SFTConfig

MULTITURN_SFT = dict(steps=300, lr=1e-3, warmup_steps=10)


def multiturn_warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return Path(output_dir) / "embedded" / f"multiturn_seed{seed}"


def ensure_multiturn_warm_start(output_dir: str | Path, *, seed: int = 0, cfg: SFTConfig | None = None,
                                n_examples: int = 20000, eval_size: int = HELD_OUT_POOL, show_progress: bool = True,
                                console=print) -> Path:
    """The warm start for PAG (built on first use, atomically)."""
    from satseq.data.multiturn import MIX, multiturn_examples

    def examples():
        return multiturn_examples(n_examples, seed=seed, exclude=eval_exclusion(ArithmeticTask(seed=seed), eval_size))

    return continue_sft(output_dir, multiturn_warm_start_dir(output_dir, seed), examples,
                        cfg or SFTConfig(seed=seed, **MULTITURN_SFT), "solve/verify/revise/coach/refine",
                        {"task": "arithmetic-3digit-add multi-turn", "mix": MIX, "n_examples": n_examples},
                        seed=seed, eval_size=eval_size, show_progress=show_progress, console=console)
