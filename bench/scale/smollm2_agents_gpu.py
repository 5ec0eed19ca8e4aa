"""Helpers of bench/scale/gpu_smollm2_agents.sh: the grid's best learning rates, the final budget, stage times.

    python bench/scale/smollm2_agents_gpu.py best GRID_DIR RECIPE OUT_RECIPE [--tokens N]
        RECIPE (recipes/compare/smollm2_agents.yaml) with each run's learning rate replaced by its grid cell
        with the highest final held-out accuracy (GRID_DIR/comparison.json, the same run names; the
        ensemble, not in the grid, takes SAT-Seq's), and its
        budget set to N tokens if given; written to OUT_RECIPE, comments kept.
    python bench/scale/smollm2_agents_gpu.py tokens GRID_SECONDS SECONDS_LEFT [--grid-tokens 6000 --max 18000]
        The largest final budget (a multiple of 3,000 tokens, at most --max) whose runs fit SECONDS_LEFT,
        predicted from the grid's wall time: the final has as many (run, seed) pairs as the grid has cells,
        so its time grows with its budget per run.
    python bench/scale/smollm2_agents_gpu.py stages RUN_DIR [RUN_DIR ...]
        Median seconds per stage (rollout, updates and KL checks summed over the agents, whole stage) of each run's metrics.jsonl.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

LR_KEYS = ("sat_seq.lr", "ppo.lr")
#: final runs outside the grid that take a grid run's best rate (the relay-off ensemble takes SAT-Seq's)
SAME_RATE = {"sat_seq": ("ensemble",)}


def best_cells(grid_dir: Path) -> dict[str, tuple[str, str, float]]:
    """run name → (key, value, final accuracy) of its best grid cell (satseq.compare.report.best_cells)."""
    from satseq.compare.report import best_cells as best_of

    data = json.loads((grid_dir / "comparison.json").read_text())
    out = {}
    for run, (cell, acc) in best_of(data).items():
        key, value = cell.split("@", 1)[1].split("=", 1)
        out[run] = (key, value, acc)
    return out


def write_best(grid_dir: Path, recipe: Path, out: Path, tokens: int | None) -> dict:
    best = best_cells(grid_dir)
    text = recipe.read_text()
    for run, (key, value, acc) in best.items():
        for name in (run, *SAME_RATE.get(run, ())):
            line = re.search(rf"^  - \{{name: {re.escape(name)},.*$", text, flags=re.M)
            if line is None:
                continue
            new = re.sub(rf"{re.escape(key)}=[^,\]\s]+", f"{key}={value}", line.group(0))
            text = text[:line.start()] + new + text[line.end():]
    if tokens is not None:
        text = re.sub(r"^(  tokens: )\d+", rf"\g<1>{tokens}", text, count=1, flags=re.M)
    out.write_text(text)
    return {run: {"key": k, "value": v, "grid_final": a} for run, (k, v, a) in best.items()}


def final_tokens(grid_s: float, left_s: float, grid_tokens: int = 6000, most: int = 18000) -> int:
    per_token = 1.15 * grid_s / grid_tokens  # the final's evaluation is twice the grid's (200 problems, not 100)
    fit = int(left_s / per_token) // 3000 * 3000
    return max(3000, min(most, fit))


def stage_times(run_dir: Path) -> dict:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    out = {"stages": len(rows)}
    for key in ("time/rollout", "time/stage"):
        vals = [r[key] for r in rows if key in r]
        if vals:
            out[key] = statistics.median(vals)
    for prefix in ("time/update", "time/kl_check"):  # summed over the agents
        per_stage = [sum(v for k, v in r.items() if k.startswith(prefix)) for r in rows]
        if any(per_stage):
            out[prefix] = statistics.median(per_stage)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("best")
    b.add_argument("grid_dir", type=Path)
    b.add_argument("recipe", type=Path)
    b.add_argument("out", type=Path)
    b.add_argument("--tokens", type=int)
    t = sub.add_parser("tokens")
    t.add_argument("grid_seconds", type=float)
    t.add_argument("seconds_left", type=float)
    t.add_argument("--grid-tokens", type=int, default=6000)
    t.add_argument("--max", type=int, default=18000)
    s = sub.add_parser("stages")
    s.add_argument("run_dirs", type=Path, nargs="+")
    a = ap.parse_args(argv)
    if a.cmd == "best":
        print(json.dumps(write_best(a.grid_dir, a.recipe, a.out, a.tokens), indent=1))
    elif a.cmd == "tokens":
        print(final_tokens(a.grid_seconds, a.seconds_left, a.grid_tokens, a.max))
    else:
        for d in a.run_dirs:
            print(d, json.dumps(stage_times(d)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
