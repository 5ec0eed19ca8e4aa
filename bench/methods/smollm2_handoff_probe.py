"""Does SmolLM2-135M-Instruct use an earlier agent's answer? The base model on two-digit addition, alone
against shown a right or a wrong earlier answer, before any training.

    python bench/methods/smollm2_handoff_probe.py [--problems 40] [--samples 4] [--threads 1] [--template NAME]

A relay helps only if a later agent does better with the earlier answers than without them, and RL selects
only what the warm start samples (shared/notes): if the base model, shown a right answer, is right no more
often than alone, the hand-off is not in its reach. On the first ``--problems`` of
``recipes/smollm2/data/test.jsonl``, for each template below and each way the relay shows earlier work
(``sat_seq.show_previous``: ``answers``, the extracted number; ``responses``, the earlier agent's whole line),
the later agent's prompt is built by satseq's relay format (:meth:`ChatFormat.relay`, what training uses)
with one earlier turn:

* **alone**: shown nothing (the first seat);
* **shown right**: the earlier turn is ``a + b = s. The answer is s.`` with the right sum;
* **shown wrong**: the same with ``s + 10`` (a near miss the base model makes).

``--samples`` answers at T = 1 (32 new tokens, cut at the first newline, satseq's engine), graded as
training grades; "copies" is the share whose answer equals the shown one. Prints one Markdown table per
template: mean ± s.e. over problems. Figures: docs/sat_seq.md, "Several agents or one policy on SmolLM2".
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.methods.smollm2_stages_probe import TEMPLATES as STAGES_TEMPLATES, _mean_se, _shares  # noqa: E402  (one copy, both probes)

#: the candidate prompts; {problem} and {previous} as data.prompt_template takes them
TEMPLATES = {
    # recipes/smollm2/grpo.yaml's two-shot prompt, with the relay's {previous}
    "two_shot": STAGES_TEMPLATES["two_shot"],
    # worked examples that show an earlier answer, kept when right, corrected when wrong: the later seats'
    # prompt of recipes/smollm2/relay.yaml (one copy)
    "handoff": yaml.safe_load((ROOT / "recipes" / "smollm2" / "relay.yaml").read_text())["sat_seq"]["previous_template"],
}


class _ShownFormat:
    """A prompt format whose single turn is the relay's later seat, shown ``shown[problem]`` as the earlier turn."""

    def __init__(self, fmt, shown: dict[str, tuple[str, str] | None]):
        self.fmt, self.shown = fmt, shown

    def single(self, problem: str) -> str:
        prev = self.shown[problem]
        return self.fmt.relay(problem, [prev] if prev else [])

    def encode(self, text: str) -> list[int]:
        return self.fmt.encode(text)

    def __getattr__(self, name):
        return getattr(self.fmt, name)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--template", choices=sorted(TEMPLATES), action="append",
                    help="probe these templates only (default: all)")
    args = ap.parse_args(argv)
    import torch

    from satseq.eval.rollout_eval import evaluate_single
    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm
    from satseq.records import Problem
    from satseq.rewards.grade import is_equivalent
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams
    from satseq.workflows.prompts import make_format

    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in (ROOT / "recipes/smollm2/data/test.jsonl").read_text().splitlines()]
    rows = rows[:args.problems]
    problems = [Problem(i, r["problem"], r["answer"]) for i, r in enumerate(rows)]

    def turn(r, total: int) -> tuple[str, str]:
        a, b = re.findall(r"\d+", r["problem"])[:2]
        return str(total), f"{a} + {b} = {total}. The answer is {total}."

    conditions = {
        "alone": {r["problem"]: None for r in rows},
        "shown right": {r["problem"]: turn(r, int(r["answer"])) for r in rows},
        "shown wrong": {r["problem"]: turn(r, int(r["answer"]) + 10) for r in rows},
    }
    model, tok = load_causal_lm("smollm2")
    tok.padding_side = "left"
    engine = HFEngine(tok)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=32, stop=("\n",))
    pool = AgentPool.full(["a"], [model], tok)
    for name in args.template or sorted(TEMPLATES):
        print(f"\n**template `{name}`** ({len(rows)} problems × {args.samples} samples, T = 1)\n")
        print("| shown as | condition | right | copies the shown answer |\n|---|---|---|---|")
        for show in ("answers", "responses"):
            fmt = make_format("chat", tok, chat_template="never", show_previous=show, template=TEMPLATES[name])
            for cond, shown in conditions.items():
                if cond == "alone" and show != "answers":
                    continue  # the same prompt whatever is shown
                res = evaluate_single(pool, "a", _ShownFormat(fmt, shown), engine, problems, n=args.samples,
                                      sampling=sampling, generator=torch.Generator().manual_seed(0))
                eps = res["episodes"]
                right = _mean_se(_shares(eps, lambda e: e.turns[0].correct))
                copies = "-" if shown[rows[0]["problem"]] is None else _mean_se(_shares(
                    eps, lambda e: e.turns[0].answer is not None
                    and is_equivalent(e.turns[0].answer, shown[e.problem.problem][0])))
                print(f"| {show if cond != 'alone' else '-'} | {cond} | {right} | {copies} |", flush=True)


if __name__ == "__main__":
    main()
