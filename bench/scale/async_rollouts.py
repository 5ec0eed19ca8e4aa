"""Throughput of asynchronous rollouts (``trainer.max_staleness``) against the synchronous loop, on the
same cores: the synchronous loop at all of torch's threads, against s = 1 and s = 2 with the rollout
thread and the trainer's thread on half of them each.

    python bench/scale/async_rollouts.py --case chain [--stages 20] [--rounds 2] [--out DIR]
    python bench/scale/async_rollouts.py --case smollm2 [--stages 8] [--rounds 2] [--out DIR]

Cases: ``chain``: SAT-Seq on the embedded chain task (the quickstart's settings; its shipped warm start,
copied into ``DIR/embedded`` by the first run); ``smollm2``: GRPO with a LoRA adapter on SmolLM2-135M-Instruct
(``recipes/smollm2/grpo.yaml``). Each (setting, round) is a fresh ``satseq train`` process of
``--stages`` stages, settings interleaved within a round (s = 0, 1, 2, then again); run it alone on
the machine. Per setting, over rounds, the medians of: the wall time of the stages after the first
(the first carries start-up), its tokens per second (generated tokens / that time), the share of it
the trainer waited for its batch (``time/trainer_wait``; the synchronous loop's whole rollout is a
wait), and the share the rollout thread waited for weights (``time/rollout_wait`` over the thread's
busy + waiting time). Prints a Markdown table and writes ``DIR/async_rollouts_<case>.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CASES = {
    "chain": ["method=sat_seq", "data.embedded_task=chain", "reward.own=0.0", "reward.team=1.0",
              "trainer.train_batch_size=8", "sat_seq.group_size=4", "sat_seq.lr=3e-5", "sat_seq.mini_batch_size=16",
              "sat_seq.scheduler=random", "sat_seq.certificate.prompts=0", "data.eval_size=50"],
    "smollm2": [str(ROOT / "recipes/smollm2/grpo.yaml")],
}


def run_once(case: str, s: int, stages: int, out: Path, round_: int) -> dict:
    name = f"{case}_s{s}_r{round_}"
    shutil.rmtree(out / name, ignore_errors=True)
    config, *keys = CASES[case] if case == "smollm2" else [None, *CASES[case]]
    cmd = [str(BIN / "satseq"), "train", *([config] if config else []), *keys, f"output_dir={out}", f"run_name={name}",
           f"trainer.num_stages={stages}", f"trainer.max_staleness={s}", "trainer.eval_every=0", "trainer.save_every=0",
           "trainer.export_pt=false", "trainer.progress=false", "trainer.tensorboard=false", "resume=false"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"error: `{' '.join(cmd)}` exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (out / name / "metrics.jsonl").read_text().splitlines()]
    later = rows[1:]
    t = sum(r["time/stage"] for r in later)
    waits = sum(r.get("time/trainer_wait", r["time/rollout"]) for r in later)
    thread_busy = sum(r.get("time/rollout_thread", 0.0) for r in later)
    thread_wait = sum(r.get("time/rollout_wait", 0.0) for r in later)
    return {"stage_s": t / len(later), "tokens_per_s": sum(r["rollout/generated_tokens"] for r in later) / t,
            "trainer_wait_share": waits / t,
            "rollout_wait_share": thread_wait / (thread_busy + thread_wait) if thread_busy else None,
            "process_wall_s": wall}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=sorted(CASES), required=True)
    ap.add_argument("--stages", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="/tmp/async_rollouts")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[int, list[dict]] = {0: [], 1: [], 2: []}
    for r in range(args.rounds):
        for s in results:
            results[s].append(run_once(args.case, s, args.stages, out, r))
            print(f"round {r} s={s}: {results[s][-1]}", flush=True)
    med = {s: {k: statistics.median(x[k] for x in v) if v[0][k] is not None else None for k in v[0]}
           for s, v in results.items()}
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    print(f"\n{args.case}: {args.stages} stages × {args.rounds} rounds, interleaved; {os.cpu_count()} cores ({cpu})\n")
    print("| setting | stage (s) | tokens/s | × synchronous | trainer waits | rollout thread waits |\n|---|---|---|---|---|---|")
    for s, m in med.items():
        label = "synchronous, all threads" if s == 0 else f"s = {s}, half the threads each"
        rw = "-" if m["rollout_wait_share"] is None else f"{m['rollout_wait_share']:.0%}"
        print(f"| {label} | {m['stage_s']:.2f} | {m['tokens_per_s']:.0f} | {med[0]['stage_s'] / m['stage_s']:.2f} | "
              f"{m['trainer_wait_share']:.0%} | {rw} |")
    (out / f"async_rollouts_{args.case}.json").write_text(json.dumps({"runs": results, "median": med}, indent=1))


if __name__ == "__main__":
    main()
