"""Does the quickstart reproduce? ``make quickstart`` on a fresh clone, once per thread count.

    python bench/quickstart_spread.py --dir DIR [--threads 1 2]

Clones this repository to ``DIR/clone`` (fresh: venv and install included, as a new user would),
then for each thread count runs ``OMP_NUM_THREADS=<t> make quickstart`` with a clean ``outputs/``
(the warm start is rebuilt each time) and keeps it as ``DIR/outputs_t<t>``. Resumable: a thread
count whose ``quickstart/results.json`` exists is not rerun. Prints the warm start's pass@1 / pass@8
and the vote before / after SAT-Seq and after GRPO for every thread count, with the spread
(max − min) of each, beside the documented spread (docs/results.md, "Quickstart").
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROWS = [("warm start pass@1", lambda r: r["warm_start"]["pass@1"]),
        ("warm start pass@8", lambda r: r["warm_start"]["pass@8"]),
        ("vote, warm start", lambda r: r["before"]["vote"]["sampled"]),
        ("vote after SAT-Seq", lambda r: r["sat_seq"]["vote"]["sampled"]),
        ("vote after GRPO", lambda r: r["grpo"]["vote"]["sampled"])]


def run(d: Path, threads: int) -> dict:
    kept = d / f"outputs_t{threads}"
    if not (kept / "quickstart" / "results.json").exists():
        clone = d / "clone"
        if not clone.exists():
            subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        shutil.rmtree(clone / "outputs", ignore_errors=True)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        t0 = time.perf_counter()
        subprocess.run(["make", "quickstart"], cwd=clone, env=env, check=True)
        print(f"threads {threads}: make quickstart {time.perf_counter() - t0:.0f} s wall", flush=True)
        shutil.rmtree(kept, ignore_errors=True)
        shutil.move(str(clone / "outputs"), kept)
    return json.loads((kept / "quickstart" / "results.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    results = {t: run(a.dir, t) for t in a.threads}
    print("\n| | " + " | ".join(f"{t} thread(s)" for t in a.threads) + " | spread |")
    print("|---|" + "---|" * (len(a.threads) + 1))
    for name, get in ROWS:
        vals = [get(results[t]) for t in a.threads]
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in vals) + f" | {max(vals) - min(vals):.3f} |")
    print("\ndocumented spread: docs/results.md, 'Quickstart'")


if __name__ == "__main__":
    main()
