"""The quickstart's spread over seeds: ``satseq quickstart --seed S`` for each seed, one at a time.

    python bench/methods/quickstart_spread.py --dir DIR [--seeds 0 1 2] [--warm-starts OUTPUTS | --model-path CHAIN] [--write docs/results.md]

Seed S runs in ``DIR/seed<S>`` (the RL seed: sampling, the agents' update order, the evaluation's
draws). The warm starts are SFT seed 0's (the quickstart's default), built by the first seed's run,
or taken from ``OUTPUTS/embedded`` (an earlier quickstart's), and shared through
``DIR/seed<S>/embedded``. ``--model-path`` starts every run from another chain warm start instead (another
build: `satseq sft --task chain --seed B --out W` makes ``W/embedded/chain_seed<B>``; passed to the quickstart
as ``model.path=``). The table reports each run's wall time and the part of it that built warm
starts (0 when they were reused): a fresh clone's ``make quickstart`` costs both, after the install.
Resumable: a seed whose ``quickstart/results.json`` exists is not rerun; each seed records the commit
it ran at, and the table names those. Run it alone on the machine.

Prints, and with ``--write`` puts between ``<!-- quickstart-spread:begin -->`` and
``<!-- quickstart-spread:end -->`` of that page (atomically): each seed's row (the vote of the three
agents before / after SAT-Seq, one shared policy trained in the three seats, one agent in one pass before / after GRPO, GRPO's policy in all three
seats, SAT-Seq's certified vote and improvement, wall time) and the mean ± s.e. over seeds.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- quickstart-spread:begin -->", "<!-- quickstart-spread:end -->"
COLS = [("three agents: warm start", lambda r: r["before"]["vote"]),
        ("after SAT-Seq", lambda r: r["sat_seq"]["vote"]),
        ("one shared policy in the three seats (same samples)", lambda r: r["shared_policy"]["vote"]),
        ("one agent, one pass: warm start", lambda r: r["before"]["one_pass"]),
        ("after GRPO", lambda r: r["grpo"]["one_pass"]),
        ("GRPO's policy in all three seats", lambda r: r["grpo"]["vote"]),
        ("SAT-Seq certified vote ≥", lambda r: r["certificate"]["vote_lower"]),
        ("certified gain ≥", lambda r: r["certificate"]["vote_improvement_lower"])]


def run(d: Path, seed: int, first: Path | None, threads: int, model_path: Path | None = None) -> dict:
    out = d / f"seed{seed}"
    res = out / "quickstart" / "results.json"
    if not res.exists():
        out.mkdir(parents=True, exist_ok=True)
        if first is not None and not (out / "embedded").exists():
            (out / "embedded").symlink_to(first / "embedded", target_is_directory=True)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        cmd = [str(Path(sys.executable).parent / "satseq"), "quickstart", "--output-dir", str(out), "--seed", str(seed)]
        if model_path is not None:
            cmd.append(f"model.path={model_path}")
        print("$ " + " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, env=env).returncode
        if rc:
            sys.exit(f"error: `{' '.join(cmd)}` exited with status {rc} (its output is above)")
        (out / "quickstart" / "wall_s").write_text(f"{time.perf_counter() - t0:.1f}\n")
        (out / "quickstart" / "commit").write_text(_head() + "\n")  # the code this seed was measured on
    r = json.loads(res.read_text())
    wall = out / "quickstart" / "wall_s"
    r["wall_s"] = float(wall.read_text()) if wall.exists() else r["timings_s"]["total"]
    commit = out / "quickstart" / "commit"
    r["commit"] = commit.read_text().strip() if commit.exists() else "not recorded"
    return r


def _head() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _mean_se(vals: list[float]) -> str:
    """satseq.compare's ``mean ± s.e.``, bold when there are several seeds."""
    from satseq.utils.stats import format_mean_se

    return format_mean_se(vals) if len(vals) < 2 else f"**{format_mean_se(vals)}**"


def table(results: dict[int, dict], threads: int, reused: bool = False, model_path: Path | None = None) -> str:
    seeds = sorted(results)
    commit = " / ".join(sorted({results[s]["commit"] for s in seeds}))
    flag = " --warm-starts OUTPUTS" if reused else f" --model-path {model_path}" if model_path else ""
    warm = f"every run from {Path(model_path).name}" if model_path else "the warm starts (SFT seed 0) shared"
    lines = [f"`python bench/methods/quickstart_spread.py --dir DIR --seeds {' '.join(map(str, seeds))}{flag}` at commit {commit}, "
             f"{threads} threads, one run at a time, {warm}; wall: the whole command, "
             "of which building the warm starts (0 s where reused).", "",
             "| seed | " + " | ".join(name for name, _ in COLS) + " | wall (warm starts) |",
             "|---|" + "---|" * (len(COLS) + 1)]
    for s in seeds:
        r = results[s]
        lines.append(f"| {s} | " + " | ".join(f"{get(r):.3f}" for _, get in COLS) + f" | {r['wall_s']:.0f} s ({r['timings_s']['warm_starts']:.0f} s) |")
    lines.append("| mean ± s.e. | " + " | ".join(_mean_se([get(results[s]) for s in seeds]) for _, get in COLS) + " | |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warm-starts", type=Path, help="an output directory whose embedded/ holds the warm starts to reuse")
    ap.add_argument("--model-path", type=Path, help="a chain warm start every run starts from (another build)")
    ap.add_argument("--write", type=Path, help="a docs page whose quickstart-spread block is replaced")
    a = ap.parse_args()
    a.dir = a.dir.resolve()
    a.dir.mkdir(parents=True, exist_ok=True)
    first = a.warm_starts.resolve() if a.warm_starts else None
    results = {}
    for s in a.seeds:
        results[s] = run(a.dir, s, first, a.threads, a.model_path.resolve() if a.model_path else None)
        first = first or a.dir / f"seed{s}"
    block = table(results, a.threads, reused=a.warm_starts is not None, model_path=a.model_path)
    print(block)
    if a.write:
        from satseq.errors import SatseqError
        from satseq.utils.io import replace_marked_block

        try:
            replace_marked_block(a.write, BEGIN, END, block)
        except SatseqError as e:
            sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
