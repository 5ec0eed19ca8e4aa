"""Per-seat figures of a `satseq compare` study on tasks whose roles differ (issue 63), from its evaluations.

    python bench/studies/roles_seats.py OUT        # a study's output, or its kept copy under bench/studies/<study>

Reads every ``OUT/evals/<run>_seed<s>/predictions.jsonl`` and, by the shape of its lines:

* ``code_answer`` (lines with ``output_correct``): the coder, its program printed the answer; the answerer, its
  answer is right; the answerer copies the program's output (its answer is what was printed) when it is right;
* ``check_revise`` (lines with ``roles`` and ``verdicts``): the solver's accuracy (``turn1_correct``), the
  checker's balanced accuracy ((correct-recall + wrong-recall) / 2; a missing verdict counts as wrong) and its
  programs per episode, the revision rate and P(revision right | attempt wrong), the final accuracy;
* the relay (lines with ``agent_correct``): each seat's own accuracy and the vote's;
* anything else: the final accuracy.

Each figure is computed per evaluation (seed) over its problems × samples, then reported as mean ± s.e. over
seeds (s.e. = sample std / √seeds; one seed: no s.e.), one Markdown row per run (``<run>`` or ``<cell>``).
The warm starts' evaluations (``evals/`` names without ``_seed``) are rows of their own.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _rate(num: float, den: float):
    return num / den if den else None


def seat_figures(lines: list[dict]) -> dict:
    """The per-seat figures of one evaluation's prediction lines (module docstring)."""
    out: dict = {"final": _rate(sum(sum(map(bool, r["correct"])) for r in lines), sum(len(r["correct"]) for r in lines))}
    first = lines[0]
    if "output_correct" in first:
        coder = [bool(c) for r in lines for c in r["output_correct"]]
        out["coder"] = _rate(sum(coder), len(coder))
        out["answerer"] = out["final"]
        right = [(a, o) for r in lines for a, o, c in zip(r["answers"], r["output"], r["correct"]) if c]
        out["answerer_copies"] = _rate(sum(str(a).strip() == str(o).strip() for a, o in right), len(right))
    elif "verdicts" in first and "roles" in first:
        solver = [bool(c) for r in lines for c in r["turn1_correct"]]
        out["solver"] = _rate(sum(solver), len(solver))
        pairs = [(bool(a), (v[0] if v else None)) for r in lines for a, v in zip(r["turn1_correct"], r["verdicts"])]
        right = [v for a, v in pairs if a]
        wrong = [v for a, v in pairs if not a]
        cr, wr = _rate(sum(v == "correct" for v in right), len(right)), _rate(sum(v == "wrong" for v in wrong), len(wrong))
        out["checker_balanced"] = (cr + wr) / 2 if cr is not None and wr is not None else None
        out["checker_programs"] = _rate(sum(len(c) for r in lines for c in r["tool_calls"]),
                                        sum(len(r["tool_calls"]) for r in lines))
        revised = [(bool(a), bool(c)) for r in lines for a, c, rv in zip(r["turn1_correct"], r["correct"], r["revised"]) if rv]
        out["revision_rate"] = _rate(len(revised), len(pairs))
        out["reviser_fixed"] = _rate(sum(c for a, c in revised if not a), sum(not a for a, _ in revised))
    elif "agent_correct" in first:
        n_seats = len(first["agent_correct"][0])
        for i in range(n_seats):
            seat = [bool(s[i]) for r in lines for s in r["agent_correct"]]
            out[f"agent_{i + 1}"] = _rate(sum(seat), len(seat))
    return out


def mean_se(values: list) -> str:
    """``mean ± s.e.`` over the values that are not None (satseq.compare's), ``-`` when there are none."""
    from satseq.utils.stats import format_mean_se

    return format_mean_se([x for x in values if x is not None], empty="-")


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("out", type=Path, help="a satseq compare study's --out (its evals/*/predictions.jsonl)")
    out = ap.parse_args(argv).out
    runs: dict = {}
    for pred in sorted(out.glob("evals/*/predictions.jsonl")):
        name = re.sub(r"_seed\d+$", "", pred.parent.name)
        lines = [json.loads(x) for x in pred.read_text().splitlines() if x.strip()]
        if lines:
            runs.setdefault(name, []).append(seat_figures(lines))
    if not runs:
        raise SystemExit(f"{out}: no evals/*/predictions.jsonl")
    keys = []
    for figs in runs.values():
        for f in figs:
            keys += [k for k in f if k not in keys]
    print("| run | seeds | " + " | ".join(keys) + " |\n|---|---|" + "---|" * len(keys))
    for name, figs in runs.items():
        print(f"| {name} | {len(figs)} | " + " | ".join(mean_se([f.get(k) for f in figs]) for k in keys) + " |")


if __name__ == "__main__":
    main()
