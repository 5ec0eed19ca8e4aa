"""Data-parallel scaling inside an agent: one SAT-Seq stage on 1 rank vs N ranks (torchrun, Gloo, CPU).

    python bench/scale/scaling.py --out /tmp/scaling [--ranks 2] [--stages 4] [--repeats 3]
    python bench/scale/scaling.py --out /tmp/scaling --strategies     # N ranks: replicate vs fsdp2

A rollout-heavy stage: K = 3 relay agents (full copies of the tiny model, randomly initialised and
saved in OUT, so every response runs to ``rollout.max_new_tokens``: generation dominates),
``--batch`` prompts × ``--group`` episodes. Every run is a fresh process tree, one thread per rank
(``OMP_NUM_THREADS=1``, ``threads=1``): ``python -m satseq.cli train ...`` for 1 rank,
``python -m torch.distributed.run --nproc_per_node N -m satseq.cli train ...`` for N. Runs are
interleaved (1, N, 1, N, ...); stage 0 is dropped (warm-up); the figure is the ratio of the medians
of ``time/stage`` (rank 0's clock: rollout, gathers, rewards, updates), with the medians of
``time/rollout`` and of the rest of the stage (the three updates) beside it. The 1-rank and N-rank
runs must generate the same number of tokens per stage (they sample the same tokens), or it stops.
No certificate batch and no held-out evaluation (they are their own lines in the docs). The machine's
other load is not controlled: report the figure with the load it was measured under.

``--strategies`` compares the two ways of training inside an agent on N ranks instead
(``trainer.strategy=replicate`` vs ``fsdp2``, interleaved the same way; they sample the same tokens):
the figure is fsdp2's speed relative to replicate, the ratio of the medians of ``time/stage``.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMON = ["method=sat_seq", "trainer.save_every=0", "trainer.export_pt=false", "trainer.progress=false",
          "trainer.tensorboard=false", "resume=false", "threads=1", "sat_seq.certificate.prompts=0",
          "trainer.eval_every=0", "data.eval_size=8", "data.train_size=512"]


def tiny_model(out: Path) -> Path:
    d = out / "tiny_random"
    if not (d / "config.json").exists():
        from satseq.models.tiny import build_tiny_model, save_model_dir

        model, tok = build_tiny_model(seed=1)
        save_model_dir(model, tok, d)
    return d


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(ranks: int, args: list[str], out: Path, name: str) -> list[dict]:
    launch = [sys.executable, "-m", "satseq.cli"] if ranks == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_addr", "127.0.0.1",
        "--master_port", str(_free_port()), "-m", "satseq.cli"]
    r = subprocess.run([*launch, "train", *args, f"output_dir={out}", f"run_name={name}"], capture_output=True,
                       text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode != 0:
        sys.exit(f"bench/scale/scaling.py: {ranks} rank(s) failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    rows = [json.loads(x) for x in (out / name / "metrics.jsonl").read_text().splitlines()]
    return rows[1:]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/scaling")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16, help="prompts per stage")
    ap.add_argument("--group", type=int, default=4, help="episodes per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--strategies", action="store_true", help="N ranks: trainer.strategy replicate vs fsdp2")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    args = [*COMMON, f"model.path={tiny_model(out)}", f"trainer.train_batch_size={a.batch}",
            f"sat_seq.group_size={a.group}", f"sat_seq.mini_batch_size={a.batch * a.group}",
            f"rollout.max_new_tokens={a.max_new_tokens}", f"trainer.num_stages={a.stages}"]
    if a.strategies:  # N ranks, the all-reduce path vs FSDP2 (satseq/scale/fsdp.py)
        variants = {"replicate": (a.ranks, ["trainer.strategy=replicate"]),
                    "fsdp2": (a.ranks, ["trainer.strategy=fsdp2"])}
    else:
        variants = {"1": (1, []), str(a.ranks): (a.ranks, [])}
    stage = {v: [] for v in variants}
    rollout = {v: [] for v in variants}
    tokens = {v: [] for v in variants}
    t0 = time.time()
    for rep in range(a.repeats):
        for v, (n, extra) in variants.items():  # interleaved: A, B, A, B, ...
            for row in run(n, [*args, *extra], out, f"{v}_r{rep}"):
                stage[v].append(row["time/stage"])
                rollout[v].append(row["time/rollout"])
                tokens[v].append(row["rollout/generated_tokens"])
    first, second = list(variants)
    if tokens[first] != tokens[second]:
        sys.exit(f"bench/scale/scaling.py: the {first} and {second} runs generated different tokens")
    med = {n: statistics.median(v) for n, v in stage.items()}
    med_r = {n: statistics.median(v) for n, v in rollout.items()}
    med_u = {n: statistics.median(s - r for s, r in zip(stage[n], rollout[n])) for n in stage}
    print(f"SAT-Seq K=3, {a.batch} prompts x {a.group} episodes, max_new_tokens={a.max_new_tokens} "
          f"({statistics.median(tokens[first]):.0f} generated tokens per stage), {a.repeats} interleaved repeats x "
          f"{a.stages - 1} timed stages, one thread per rank; load average at the end "
          f"{os.getloadavg()[0]:.2f}; wall {time.time() - t0:.0f} s")
    label = "ranks / strategy" if a.strategies else "ranks"
    print(f"| {label} | time/stage | speed-up | time/rollout | speed-up | rest of the stage (updates) | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for v, (n, _) in variants.items():
        name = f"{n} / {v}" if a.strategies else v
        print(f"| {name} | {med[v]:.2f} s | {med[first] / med[v]:.2f}x | {med_r[v]:.2f} s | "
              f"{med_r[first] / med_r[v]:.2f}x | {med_u[v]:.2f} s | {med_u[first] / med_u[v]:.2f}x |")


if __name__ == "__main__":
    main()
