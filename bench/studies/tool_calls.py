"""How often a run's rollouts called the tool, early and late in training: per build of a kept study, the mean
over seeds (± s.e.) of ``tools/calls`` (calls per episode, from each run's metrics.jsonl) over the first and the
last ``--stages`` stages.

    python bench/studies/tool_calls.py bench/studies/embedded_tool [--run grpo_tool] [--stages 3]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def rates(run_dir: Path, stages: int) -> tuple[float, float] | None:
    f = run_dir / "metrics.jsonl"
    if not f.is_file():
        return None
    rows = [r for r in map(json.loads, f.read_text().splitlines()) if "tools/calls" in r]
    if not rows:
        return None
    mean = lambda xs: sum(xs) / len(xs)
    return mean([r["tools/calls"] for r in rows[:stages]]), mean([r["tools/calls"] for r in rows[-stages:]])


def _mean_se(xs: list[float]) -> str:
    from satseq.utils.stats import format_mean_se

    return format_mean_se(xs, digits=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study", type=Path, help="a kept study: build*/<run>_seed*/metrics.jsonl (or <run>_seed* directly)")
    ap.add_argument("--run", default="grpo_tool")
    ap.add_argument("--stages", type=int, default=3)
    a = ap.parse_args()
    builds = sorted(a.study.glob("build*")) or [a.study]
    print(f"| build | {a.run}: tool calls per episode, first {a.stages} stages | last {a.stages} stages | seeds |")
    print("|---|---|---|---|")
    for b in builds:
        got = [r for r in (rates(d, a.stages) for d in sorted(b.glob(f"{a.run}_seed*"))) if r]
        if got:
            print(f"| {b.name} | {_mean_se([x for x, _ in got])} | {_mean_se([y for _, y in got])} | {len(got)} |")


if __name__ == "__main__":
    main()
