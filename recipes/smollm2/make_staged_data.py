"""Write the staged relay's problems: two two-digit numbers plus a one-digit number, ``What is 47 + 38 + 6?``
(issue 63's third task; docs/sat_seq.md, "The first task": the base SmolLM2-135M-Instruct's one pass is right
0.000 of the time, each stage alone 0.300 / 0.169 at T = 1 under the stages prompt).

``python recipes/smollm2/make_staged_data.py`` rewrites ``data/staged_test.jsonl`` (300 problems) and
``data/staged_train.jsonl`` (2,000, disjoint from the test set and from the prompt's worked examples),
deterministically (seed 2026); the files are committed, so the recipes need no step before training.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKED = {(12, 25, 31), (40, 16, 23), (12, 25, 7), (40, 16, 3)}  # the prompt templates' examples


def problems(n: int, rng: random.Random, taken: set) -> list[dict]:
    out = []
    while len(out) < n:
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(1, 9)
        if (a, b, c) in taken:
            continue
        taken.add((a, b, c))
        out.append({"problem": f"What is {a} + {b} + {c}?", "answer": str(a + b + c)})
    return out


def main() -> None:
    rng, taken = random.Random(2026), set(WORKED)
    for name, n in (("staged_test", 300), ("staged_train", 2000)):
        rows = problems(n, rng, taken)
        path = HERE / "data" / f"{name}.jsonl"
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(path)
        print(f"wrote {path} ({len(rows)} problems)")


if __name__ == "__main__":
    main()
