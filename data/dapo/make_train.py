"""Writes ``data/dapo/train.jsonl``: a small DAPO-format example file (``{"prompt", "chosen", "rejected"}``,
the SAT-Seq seed's training format) made by satseq from its own embedded arithmetic task — 3-digit
additions, never a problem of the task's held-out pool — so that the seed's example command runs on a
fresh clone:

    TRAIN_FILE=data/dapo/train.jsonl bash recipes/sat_seq/train_dapo.sh

``chosen`` is the careful column-by-column solution ending in ``\\boxed{sum}`` (the answer satseq reads),
``rejected`` a near miss. Deterministic: ``python data/dapo/make_train.py`` rewrites the same bytes
(tests/test_data_loading.py checks it). Replace the file with your own data of the same format.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

ROWS = 256


def rows(n: int = ROWS) -> list[dict]:
    from satseq.data.arithmetic import ArithmeticTask, careful_solution, near_miss
    from satseq.models.warm_start import eval_exclusion

    task = ArithmeticTask(seed=0)
    rng = random.Random("dapo-example")
    out = []
    for p in task.problems(n, split="train", exclude=eval_exclusion(task)):
        a, b = p.meta["a"], p.meta["b"]
        out.append({"id": f"dapo-{len(out)}", "prompt": p.problem, "chosen": careful_solution(a, b),
                    "rejected": f"\\boxed{{{near_miss(a + b, rng)}}}"})
    return out


def main() -> None:
    path = Path(__file__).with_name("train.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows()), encoding="utf-8")
    print(f"wrote {path} ({ROWS} rows)")


if __name__ == "__main__":
    main()
