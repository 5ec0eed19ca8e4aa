"""How much does the embedded warm start depend on its floating-point path? Builds the base warm
start for each (SFT seed, thread count) and measures held-out pass@1 / pass@8.

    python bench/warm_start_spread.py --out DIR [--seeds 0 1 2] [--threads 1 2]

Each build is ``satseq sft --out DIR/s<seed>_t<threads> --seed <seed> --threads <threads>`` (the
quickstart's recipe: trained to the careful-chain validation target, docs/embedded_default.md); each is evaluated with ``satseq eval --workflow single --dataset
embedded --limit 200 --n 8 --k 1 8 --temperature 1 --top_p 1`` (200 held-out problems × 8 samples,
T = 1, one thread). Resumable: a built warm start and a finished evaluation are reused. Run it with
another venv's python to measure another library version (the versions are recorded per row). Writes
``DIR/warm_start_spread.json`` and prints a markdown table with the spread (max − min) of each figure.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SATSEQ = [str(Path(sys.executable).parent / "satseq")]


def _run(args: list[str], threads: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    subprocess.run(SATSEQ + args, check=True, env=env, stdout=subprocess.DEVNULL)


def measure(out: Path, seed: int, threads: int) -> dict:
    root = out / f"s{seed}_t{threads}"
    ws = root / "embedded" / f"warm_start_seed{seed}"
    t0 = time.perf_counter()
    _run(["sft", "--out", str(root), "--seed", str(seed), "--threads", str(threads)], threads)
    build_s = time.perf_counter() - t0
    ev = root / "eval"
    if not (ev / "metrics.json").exists():
        _run(["eval", "--checkpoint_dir", str(ws), "--workflow", "single", "--dataset", "embedded", "--limit", "200",
              "--n", "8", "--k", "1", "--k", "8", "--temperature", "1", "--top_p", "1", "--output_dir", str(ev)], 1)
    m = json.loads((ev / "metrics.json").read_text())
    info = json.loads((ws / "warm_start.json").read_text())
    import torch
    import transformers

    return {"seed": seed, "threads": threads, "build_s": build_s, "metrics": m, "sft_steps": info.get("steps"),
            "reached_target": info.get("reached_target"),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}


def _get(m: dict, key: str) -> float:
    """``pass@k``'s mean from the evaluator's metrics.json."""
    return float(m[key]["mean"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "warm_start_spread.json"
    done = json.loads(path.read_text()) if path.exists() else {}
    for seed in a.seeds:
        for threads in a.threads:
            key = f"{seed}/{threads}"
            if key not in done:
                done[key] = measure(a.out, seed, threads)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(done, indent=1))
                tmp.replace(path)
                print(key, _get(done[key]["metrics"], "pass@1"), _get(done[key]["metrics"], "pass@8"), flush=True)
    rows = [done[f"{s}/{t}"] for s in a.seeds for t in a.threads]
    print("\n| SFT seed | threads | transformers | SFT steps | pass@1 | pass@8 | build (s) |\n|---|---|---|---|---|---|---|")
    for r in rows:
        v = r.get("versions", {}).get("transformers", "?")
        print(f"| {r['seed']} | {r['threads']} | {v} | {r.get('sft_steps', '?')} | {_get(r['metrics'], 'pass@1'):.3f} "
              f"| {_get(r['metrics'], 'pass@8'):.3f} | {r['build_s']:.0f} |")
    for k in ("pass@1", "pass@8"):
        vals = [_get(r["metrics"], k) for r in rows]
        print(f"spread of {k}: {max(vals) - min(vals):.3f} (min {min(vals):.3f}, max {max(vals):.3f})")


if __name__ == "__main__":
    main()
