"""Can SmolLM2-135M-Instruct check an answer? The base model as PAG's verifier, before any training.

    python bench/methods/smollm2_verify_probe.py [--problems 60] [--samples 4] [--threads 2] [--prompts two_shot] [--temperatures 1.0 0.5]

On the first ``--problems`` sums of ``recipes/smollm2/data/sum3_test.jsonl`` (``What is a + b + c?``), each
shown with a proposed solution ``a + b + c = X. The answer is X.`` whose X is the sum on half the problems
and a near miss (±1, ±2, ±10) on the others, the base model is asked to judge it, ``--samples`` times at
T = 1 (or each of ``--temperatures``) and once greedy (64 new tokens; the two-shot prompt's check cut at its newline), under two prompts:

* **pag_chat**: PAG's own verify prompt for instruction models (``ChatPAGFormat.verify``: the problem, the
  solution, "Check this solution step by step ... End your response with exactly "The answer is correct"
  or "The answer is wrong""), in the model's chat template: what ``method=pag`` sends it today;
* **two_shot**: two worked checks (one right, one wrong: recompute, compare, conclude) before the problem,
  no chat template (the style of ``recipes/smollm2/sum3.yaml``'s two-shot prompt).

Each verdict is read by PAG's parser (``parse_verdict``). Prints, per prompt and decoding: how often a
verdict is given at all, correct-recall (``correct`` on right solutions), wrong-recall (``wrong`` on wrong
ones), balanced accuracy (both constant verifiers score 0.5), and how often the response to a wrong
solution recomputes the sum (writes the right total): the careful check RL would have to select (shared/notes: RL on a tiny model
only selects behaviours its warm start samples), and how often a response to a wrong solution says "wrong" when it
recomputes the sum and when it does not (pooled over samples; a check worth selecting says "wrong" more often when
it recomputed). Means ± s.e. over problems.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TWO_SHOT = ("Q: What is 3 + 4 + 5? Proposed answer: 3 + 4 + 5 = 13. The answer is 13.\nCheck: 3 + 4 = 7. 7 + 5 = 12. "
            "12 is not 13. The answer is wrong.\n\nQ: What is 6 + 2 + 7? Proposed answer: 6 + 2 + 7 = 15. The answer "
            "is 15.\nCheck: 6 + 2 = 8. 8 + 7 = 15. 15 is 15. The answer is correct.\n\nQ: {problem} Proposed answer: "
            "{solution}\nCheck:")


def _mean_se(xs: list[float]) -> str:
    """``mean ± s.e.`` over problems (satseq.compare's :func:`mean_se`), ``—`` when there are none."""
    from satseq.utils.stats import format_mean_se

    return format_mean_se(xs)


def _rate(xs: list[bool]) -> str:
    """``share (of n)``, ``—`` when there are none."""
    return f"{sum(xs) / len(xs):.2f} (of {len(xs)})" if xs else "—"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=60)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0], help="sampled decodings (each --samples times)")
    ap.add_argument("--prompts", nargs="+", choices=("pag_chat", "two_shot"), default=["pag_chat", "two_shot"])
    args = ap.parse_args(argv)
    import torch

    from satseq.models.loading import load_causal_lm
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams
    from satseq.workflows.pag_prompts import ChatPAGFormat, parse_verdict

    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in (ROOT / "recipes/smollm2/data/sum3_test.jsonl").read_text().splitlines()]
    rows = rows[:args.problems]
    rng = random.Random(0)
    cases = []  # (problem, solution text, solution is right, the sum)
    for i, r in enumerate(rows):
        a, b, c = (int(x) for x in re.findall(r"\d+", r["problem"]))
        total, right = a + b + c, i % 2 == 0
        shown = total if right else total + rng.choice([-2, -1, 1, 2, 10, -10 if total > 10 else 10])
        cases.append((r["problem"], f"{a} + {b} + {c} = {shown}. The answer is {shown}.", right, total))
    model, tok = load_causal_lm("smollm2")
    tok.padding_side = "left"
    engine = HFEngine(tok)
    chat = ChatPAGFormat(tok, use_chat_template=True)
    prompts = {"pag_chat": [chat.verify(p, s) for p, s, _, _ in cases],
               "two_shot": [TWO_SHOT.format(problem=p, solution=s) for p, s, _, _ in cases]}
    prompts = {k: v for k, v in prompts.items() if k in args.prompts}
    stops = {"pag_chat": (), "two_shot": ("\n",)}  # the worked checks are one line each
    print(f"\n{len(cases)} problems (half shown with the right sum), {args.samples} samples each at T > 0\n")
    print("| prompt | decoding | a verdict given | correct-recall | wrong-recall | balanced accuracy | recomputes the sum (wrong solutions) "
          "| says wrong: recomputed / not (wrong solutions, samples) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, texts in prompts.items():
        modes = {f"T = {t:g}": (SamplingParams(temperature=t, max_new_tokens=64, stop=stops[name]), args.samples)
                 for t in args.temperatures}
        modes["greedy"] = (SamplingParams(temperature=0.0, max_new_tokens=64, stop=stops[name]), 1)
        for mode, (sp, n) in modes.items():
            ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts for _ in range(n)]
            gens = engine.generate(model, ids, sp, generator=torch.Generator().manual_seed(0))
            given, rec_c, rec_w, recomputed = [], [], [], []
            said_wrong = {True: [], False: []}  # wrong solutions: recomputed the sum? -> said "wrong"
            for k, (_, _, right, total) in enumerate(cases):
                out = [g.text for g in gens[k * n:(k + 1) * n]]
                verdicts = [parse_verdict(t) for t in out]
                given.append(sum(v is not None for v in verdicts) / n)
                ok = sum(v == ("correct" if right else "wrong") for v in verdicts) / n
                (rec_c if right else rec_w).append(ok)
                if not right:  # on a right solution the sum is also the shown answer: no evidence of a check
                    hits = [str(total) in re.findall(r"\d+", t) for t in out]
                    recomputed.append(sum(hits) / n)
                    for hit, v in zip(hits, verdicts):
                        said_wrong[hit].append(v == "wrong")
            bal = (sum(rec_c) / len(rec_c) + sum(rec_w) / len(rec_w)) / 2
            print(f"| {name} | {mode} | {_mean_se(given)} | {_mean_se(rec_c)} | {_mean_se(rec_w)} | {bal:.3f} "
                  f"| {_mean_se(recomputed)} | {_rate(said_wrong[True])} / {_rate(said_wrong[False])} |", flush=True)
        print(f"\nexample ({name}, greedy): {gens[0].text[:200]!r}\n")


if __name__ == "__main__":
    main()
