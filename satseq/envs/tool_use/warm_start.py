"""The tool environment's embedded warm start: the base warm start, SFT continued on whole episodes of
the product task (:mod:`satseq.envs.tool_use.task`), half of them calling the Python tool, half
answering in one pass. Built on first use into ``<output_dir>/embedded/tool_seed<seed>``
(``satseq sft --task tool_use``), atomically, like every environment's own warm start."""
from __future__ import annotations

from pathlib import Path

from satseq.envs.tool_use.task import P_TOOL, ProductTask, tool_examples, tool_probes
from satseq.models.warm_start import HELD_OUT_POOL, WarmStartRecipe, ensure_method_warm_start, method_warm_start_dir

STEM = "tool"

#: SFT until the call (the program, after its fence's first characters) and the copy of the printed
#: result are each right on 90 % of the validation probes (greedy), then 150 cool-down steps. The
#: direct one-pass answer is recorded at every check, not targeted: it stays near 0.
TOOL_RECIPE = WarmStartRecipe(probes=tool_probes, target=0.9, targeted=("call", "copy"), lr=2e-3, max_new_tokens=40)


def tool_warm_start_dir(output_dir: str | Path, seed: int = 0) -> Path:
    return method_warm_start_dir(output_dir, STEM, seed)


def ensure_tool_warm_start(output_dir: str | Path, *, seed: int = 0, n_examples: int = 20000,
                           eval_size: int = HELD_OUT_POOL, **kw) -> Path:
    return ensure_method_warm_start(
        output_dir, stem=STEM, task=ProductTask(seed=seed), examples=tool_examples, recipe=TOOL_RECIPE,
        what="product with / without the Python tool", info={"task": "embedded product, tool_use", "p_tool": P_TOOL},
        seed=seed, n_examples=n_examples, eval_size=eval_size, **kw)
