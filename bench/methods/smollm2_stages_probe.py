"""Can SmolLM2-135M-Instruct work in stages? The base model on the sum of three two-digit numbers,
one pass against each stage alone and against a relay, before any training.

    python bench/methods/smollm2_stages_probe.py [--problems 60] [--samples 4] [--threads 2] [--template NAME]
        [--numbers 1-9,1-9,1-9] [--seats 3]

On ``--problems`` sums ``What is a + b + c?`` (the first of ``recipes/smollm2/data/sum3_test.jsonl`` with the
default ``--numbers``; otherwise drawn here, seed 0, each number from its range), under
each prompt template below (``--template`` picks one), with satseq's engine, ``--samples`` answers at
T = 1 and one greedy answer (32 new tokens, cut at the first newline), graded as training grades:

* **one pass**: ``a + b + c`` in one answer (what GRPO trains);
* **stage 1 alone**: ``What is a + b?``;
* **stage 2 alone, given the right partial sum**: ``What is (a+b) + c?`` as a two-number problem;
* **the relay of ``--seats`` agents** (the base model in every seat, ``show_previous: answers``: a later
  agent sees the earlier agents' extracted answers inline at ``{previous}``), scored by the vote
  (ties toward the later agent) and per seat; agent 1's answer is also graded against the partial
  sum ``a + b`` (did it do stage 1?);
* the same relays with ``show_previous: none``: the agents do not see each other (an ensemble voted).

Prints one Markdown table per template: mean ± s.e. over problems. Figures: docs/sat_seq.md, "Several
agents or one policy on SmolLM2".
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: the candidate prompts; {problem} and {previous} as data.prompt_template takes them
TEMPLATES = {
    # recipes/smollm2/grpo.yaml's two-shot prompt (one step per worked example)
    "two_shot": "Q: Ana has 4 pencils and gets 3 more. How many pencils does Ana have now?\nA: 4 + 3 = 7. The answer "
                "is 7.\n\nQ: What is 12 + 25?\nA: 12 + 25 = 37. The answer is 37.\n\nQ: {problem}{previous}\nA:",
    # worked examples of the sum of three: in one pass, and continuing from an earlier agent's partial sum
    "stages": "Q: What is 12 + 25 + 31?\nA: 12 + 25 = 37. 37 + 31 = 68. The answer is 68.\n\nQ: What is 40 + 16 + 23? "
              "Earlier agents answered: 56 (they may be wrong).\nA: 56 + 23 = 79. The answer is 79.\n\n"
              "Q: {problem}{previous}\nA:",
}


def _mean_se(xs: list[float]) -> str:
    from satseq.utils.stats import mean_se

    r = mean_se(xs)
    return f"{r['mean']:.3f} ± {r['se'] if r['se'] is not None else float('nan'):.3f}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=60)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--template", choices=sorted(TEMPLATES), action="append",
                    help="probe these templates only (default: all)")
    ap.add_argument("--numbers", default="1-9,1-9,1-9", help="the three numbers' ranges")
    ap.add_argument("--seats", type=int, nargs="+", default=[3], help="relay sizes to probe")
    args = ap.parse_args(argv)
    import torch

    from satseq.eval.rollout_eval import evaluate_relay, evaluate_single
    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm
    from satseq.records import Problem
    from satseq.rewards.grade import is_equivalent
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams
    from satseq.workflows.prompts import make_format

    torch.set_num_threads(args.threads)
    if args.numbers == "1-9,1-9,1-9":
        rows = [json.loads(line) for line in (ROOT / "recipes/smollm2/data/sum3_test.jsonl").read_text().splitlines()]
        rows = rows[:args.problems]
    else:
        import random

        rng, spans = random.Random(0), [tuple(int(x) for x in r.split("-")) for r in args.numbers.split(",")]
        drawn = [[rng.randint(lo, hi) for lo, hi in spans] for _ in range(args.problems)]
        rows = [{"problem": f"What is {a} + {b} + {c}?", "answer": str(a + b + c)} for a, b, c in drawn]
    nums = [[int(x) for x in re.findall(r"\d+", r["problem"])] for r in rows]
    tasks = {
        "one pass: a + b + c": [Problem(i, r["problem"], r["answer"]) for i, r in enumerate(rows)],
        "stage 1 alone: a + b": [Problem(i, f"What is {a} + {b}?", str(a + b)) for i, (a, b, _) in enumerate(nums)],
        "stage 2 alone: (a+b) + c": [Problem(i, f"What is {a + b} + {c}?", str(a + b + c))
                                     for i, (a, b, c) in enumerate(nums)],
    }
    model, tok = load_causal_lm("smollm2")
    tok.padding_side = "left"
    engine = HFEngine(tok)
    base = dict(max_new_tokens=32, stop=("\n",))
    modes = {"T = 1": (SamplingParams(temperature=1.0, **base), args.samples), "greedy": (SamplingParams(temperature=0.0, **base), 1)}
    for name in args.template or sorted(TEMPLATES):
        print(f"\n**template `{name}`**, numbers {args.numbers} ({len(rows)} problems; T = 1: {args.samples} samples "
              "each)\n")
        print("| what | T = 1 | greedy |\n|---|---|---|")
        for task, problems in tasks.items():
            fmt = make_format("chat", tok, chat_template="never", show_previous="answers", template=TEMPLATES[name])
            pool = AgentPool.full(["a"], [model], tok)
            cells = [_mean_se(_shares(evaluate_single(pool, "a", fmt, engine, problems, n=n, sampling=sp,
                                                      generator=torch.Generator().manual_seed(0))["episodes"],
                                      lambda e: e.turns[0].correct)) for sp, n in modes.values()]
            print(f"| {task} | {cells[0]} | {cells[1]} |", flush=True)
        for show in ("answers", "none"):
            fmt = make_format("chat", tok, chat_template="never", show_previous=show, template=TEMPLATES[name])
            for k in args.seats:
                agents = [f"agent_{i}" for i in range(1, k + 1)]
                pool = AgentPool.full(agents, [model] * k, tok)
                out = {}
                for mode, (sp, n) in modes.items():
                    res = evaluate_relay(pool, agents, fmt, engine, tasks["one pass: a + b + c"], n=n, sampling=sp,
                                         generator=torch.Generator().manual_seed(0))
                    eps = res["episodes"]
                    per = lambda f: _mean_se(_shares(eps, f))  # noqa: E731
                    partial = [str(a + b) for a, b, _ in nums]
                    out[mode] = {"vote": per(lambda e: e.prediction_correct),
                                 **{a: per(lambda e, j=j: e.turns[j].correct) for j, a in enumerate(agents)},
                                 "agent 1 = a + b": per(lambda e: e.turns[0].answer is not None
                                                        and is_equivalent(e.turns[0].answer, partial[e.problem.problem_id]))}
                label = f"relay of {k}, shown {'earlier answers' if show == 'answers' else 'nothing'}"
                for key in out["T = 1"]:
                    print(f"| {label}: {key} | {out['T = 1'][key]} | {out['greedy'][key]} |", flush=True)


def _shares(episodes, key) -> list[float]:
    """Each problem's (episode group's) share of episodes for which ``key`` holds."""
    groups: dict = {}
    for e in episodes:
        groups.setdefault(e.group, []).append(bool(key(e)))
    return [sum(v) / len(v) for v in groups.values()]


if __name__ == "__main__":
    main()
