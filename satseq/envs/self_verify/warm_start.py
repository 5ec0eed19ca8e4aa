"""PAG's embedded warm start: the base warm start, SFT continued on the solve / verify / revise
(and first-task coach / refine) transcripts of :mod:`satseq.data.multiturn`. Kept apart from the
base warm start so single-turn and SAT-Seq results do not change."""
from __future__ import annotations

from pathlib import Path

from satseq.data.arithmetic import ArithmeticTask
from satseq.models.warm_start import HELD_OUT_POOL, WarmStartRecipe, ensure_method_warm_start, method_warm_start_dir
from satseq.data.multiturn import pag_probes




#: SFT until the careful verification and the careful revision are each right on 90 % of the validation
#: probes (greedy, their first character forced), then 150 cool-down steps (docs/embedded_default.md).
#: Sampled, the warm start checks carefully about half the time and otherwise answers hastily
#: (over-trusting): RL has to select the careful check (issue 38: a verifier's warm start must sometimes
#: check carefully, or RL cannot learn checking). The earlier check, comparing two whole numbers, stayed
#: at chance under SFT (satseq/data/multiturn.py).
MULTITURN_RECIPE = WarmStartRecipe(probes=pag_probes, target=0.9, targeted=("careful_verify", "careful_revise"),
                                   lr=1e-3, max_new_tokens=48)


def multiturn_warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return method_warm_start_dir(output_dir, "multiturn", seed)


def ensure_multiturn_warm_start(output_dir: str | Path, *, seed: int = 0, n_examples: int = 20000,
                                eval_size: int = HELD_OUT_POOL, **kw) -> Path:
    from satseq.data.multiturn import MIX, multiturn_examples

    return ensure_method_warm_start(
        output_dir, stem="multiturn", task=ArithmeticTask(seed=seed), examples=multiturn_examples, recipe=MULTITURN_RECIPE,
        what="solve/verify/revise/coach/refine", info={"task": "arithmetic-3digit-add multi-turn", "mix": MIX},
        seed=seed, n_examples=n_examples, eval_size=eval_size, **kw)
