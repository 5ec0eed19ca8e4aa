"""Which task gives SmolLM2-135M-Instruct a regime RL can select from (pass@1 low, pass@k high)?

    python bench/methods/smollm2_task_probe.py [--problems 32] [--samples 8] [--threads 2]

Samples ``--samples`` answers at T = 1 (top-p 1, top-k off, 32 new tokens, cut at the first newline)
for the first ``--problems`` of each candidate task under the two-shot raw prompt of
``recipes/smollm2/grpo.yaml`` and under the chat template with the ``\\boxed{}`` instruction, and
grades them as training does (``correctness_reward``). Prints pass@1 and pass@k per (prompt, task).
The candidate problems are drawn here (seed 0); the chosen task's files come from
``recipes/smollm2/make_data.py``. Figures: docs/results.md, "SmolLM2-135M learning on CPU".
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMES, ITEMS = ["Tom", "Ana", "Sam", "Lia", "Ben", "Mia"], ["apples", "pencils", "stickers", "marbles", "books"]


def candidates(n: int) -> dict[str, list[tuple[str, str]]]:
    rng = random.Random(0)
    tasks: dict[str, list[tuple[str, str]]] = {"two-digit addition": [], "one-step word problem": [],
                                                "two-step word problem": [], "two-digit x one-digit": []}
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        tasks["two-digit addition"].append((f"What is {a} + {b}?", str(a + b)))
        who, it, x, y = rng.choice(NAMES), rng.choice(ITEMS), rng.randint(2, 20), rng.randint(2, 20)
        tasks["one-step word problem"].append((f"{who} has {x} {it} and gets {y} more. How many {it} does {who} have now?", str(x + y)))
        x, y, z = rng.randint(5, 30), rng.randint(2, 9), rng.randint(2, 9)
        tasks["two-step word problem"].append((f"{who} has {x} {it}. {who} buys {y} bags with {z} {it} in each bag. "
                                               f"How many {it} does {who} have now?", str(x + y * z)))
        a, b = rng.randint(11, 49), rng.randint(2, 9)
        tasks["two-digit x one-digit"].append((f"What is {a} * {b}?", str(a * b)))
    return tasks


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    from satseq.config import load_config
    from satseq.models.loading import load_causal_lm
    from satseq.rewards.grade import correctness_reward
    from satseq.workflows.prompts import BOXED_INSTRUCTION

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    few_shot = load_config(ROOT / "recipes/smollm2/grpo.yaml", []).data.prompt_template.replace("{previous}", "")
    model, tok = load_causal_lm("smollm2")
    tok.padding_side = "left"
    prompts = {
        "two-shot raw": lambda q: few_shot.replace("{problem}", q),
        "chat + boxed": lambda q: tok.apply_chat_template([{"role": "user", "content": f"{q}\n\n{BOXED_INSTRUCTION}"}],
                                                          tokenize=False, add_generation_prompt=True),
    }
    k = args.samples
    print(f"| prompt | task | pass@1 | pass@{k} |\n|---|---|---|---|")
    for pname, render in prompts.items():
        for task, rows in candidates(args.problems).items():
            enc = tok([render(q) for q, _ in rows], return_tensors="pt", padding=True)
            with torch.no_grad():
                out = model.generate(**enc, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=32,
                                     num_return_sequences=k, pad_token_id=tok.pad_token_id)
            texts = [t.split("\n")[0] if pname == "two-shot raw" else t
                     for t in tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)]
            right = [[correctness_reward(texts[i * k + j], a) for j in range(k)] for i, (_, a) in enumerate(rows)]
            p1 = sum(sum(r) / k for r in right) / len(rows)
            pk = sum(max(r) for r in right) / len(rows)
            print(f"| {pname} | {task} | {p1:.3f} | {pk:.3f} |", flush=True)


if __name__ == "__main__":
    main()
