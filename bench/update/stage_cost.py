"""What one SAT-Seq stage (K = 3 agents: three relay turns, three updates with the quantile-KL
check) costs next to one GRPO step, at the same prompts per stage, on the embedded task.

    python bench/update/stage_cost.py --out /tmp/stage_cost [--batch 8 16] [--stages 6] [--repeats 2]

Interleaved in one run (GRPO, SAT-Seq, GRPO, SAT-Seq, ...), one thread each, every run a fresh
``satseq train`` process from the embedded warm start (built in OUT on first use, not timed; copy
an existing ``embedded/`` into OUT to skip that). Stage 0 is dropped (warm-up); the figure is the
ratio of the medians of ``time/stage`` and of the update time (``time/stage - time/rollout``).
The last columns split off the quantile-KL checks (``time/kl_check_<agent>``, one forward of each
updated agent over its turns, docs/sat_seq.md): what a stage costs besides them, against the GRPO step.
No certificate batch (``sat_seq.certificate.prompts=0``): its cost is its own line in the docs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

COMMON = ["trainer.save_every=0", "trainer.export_pt=false", "trainer.progress=false", "trainer.tensorboard=false",
          "resume=false", "threads=1", "rollout.max_new_tokens=48", "data.eval_size=10"]
METHODS = {
    "grpo": ["method=grpo", "grpo.group_size=4", "ppo.lr=3e-5"],
    "sat_seq": ["method=sat_seq", "sat_seq.group_size=4", "sat_seq.lr=3e-5", "sat_seq.certificate.prompts=0"],
}


def run(method: str, batch: int, stages: int, out: Path, tag: str) -> list[dict]:
    mb = 4 * batch  # one on-policy mini-batch per update for both
    args = [*COMMON, *METHODS[method], f"trainer.train_batch_size={batch}", f"trainer.num_stages={stages}",
            f"{'grpo' if method == 'grpo' else 'sat_seq'}.mini_batch_size={mb}", f"output_dir={out}",
            f"run_name={method}_b{batch}_{tag}"]
    r = subprocess.run([sys.executable, "-m", "satseq.cli", "train", *args], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode != 0:
        sys.exit(f"bench/update/stage_cost.py: {method} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    rows = [json.loads(x) for x in (out / f"{method}_b{batch}_{tag}" / "metrics.jsonl").read_text().splitlines()]
    return rows[1:]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/stage_cost")
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--stages", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    out = Path(args.out)
    print("| prompts per stage | GRPO step | SAT-Seq stage (K = 3) | ratio | GRPO update | SAT-Seq updates | ratio "
          "| SAT-Seq KL checks | stage less the checks | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for batch in args.batch:
        t = {m: [] for m in METHODS}
        u = {m: [] for m in METHODS}
        kl = []
        for rep in range(args.repeats):
            for m in METHODS:  # interleaved: A, B, A, B
                for row in run(m, batch, args.stages, out, f"r{rep}"):
                    t[m].append(row["time/stage"])
                    u[m].append(row["time/stage"] - row.get("time/rollout", 0.0))
                    if m == "sat_seq":
                        kl.append(sum(v for k, v in row.items() if k.startswith("time/kl_check_")))
        mt = {m: statistics.median(v) for m, v in t.items()}
        mu = {m: statistics.median(v) for m, v in u.items()}
        less = statistics.median(s - k for s, k in zip(t["sat_seq"], kl))
        print(f"| {batch} × 4 | {mt['grpo']:.2f} s | {mt['sat_seq']:.2f} s | {mt['sat_seq'] / mt['grpo']:.2f}× | "
              f"{mu['grpo']:.2f} s | {mu['sat_seq']:.2f} s | {mu['sat_seq'] / mu['grpo']:.2f}× | "
              f"{statistics.median(kl):.2f} s | {less:.2f} s | {less / mt['grpo']:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
