"""How much does an embedded warm start depend on its floating-point path? Builds it for each (SFT
seed, thread count) and measures the regime it lands in.

    python bench/methods/warm_start_spread.py --out DIR [--task base|chain|mlmt|pag] [--seeds 0 1 2] [--threads 1 2]

Each build is ``satseq sft --task <task> --out DIR/s<seed>_t<threads> --seed <seed> --threads <threads>``
(trained to the task's validation target, docs/embedded_default.md); a method's warm start builds on the
base warm start of the same seed and thread count, built once in that directory for every task. Each is evaluated on the task's
held-out problems at T = 1 (one thread):

* ``base``: ``satseq eval --workflow single --dataset embedded --limit 200 --n 8`` — pass@1, pass@8;
* ``chain``: the relay of three copies, 200 problems × 4 episodes — the vote's avg@4 (pass@1) and
  pass@4, each position's accuracy and behaviour shares (``chain/<agent>/<behaviour>``);
* ``mlmt``: ``satseq eval --workflow coach --dataset embedded --limit 100 --n 4`` — turn 1, turn 3, the coach,
  and per turn each behaviour's share and its accuracy (``mlmt/<turn>/<behaviour>``, ``.../<behaviour> acc``,
  from the evaluation's ``predictions.jsonl``);
* ``pag``: ``satseq eval --workflow self_verify --dataset embedded --limit 100 --n 4`` — Acc@t1,
  Acc@final, the verifier.

Resumable: a built warm start and a finished evaluation are reused. Runs for other seeds or thread
counts may share ``DIR`` at the same time (one per core); each adds its rows to the JSON. Run it with another venv's python
to measure another library version (the versions are recorded per row). Writes
``DIR/warm_start_spread_<task>.json`` and prints a markdown table with the spread (max − min) of
each figure.
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
STEMS = {"base": "warm_start", "chain": "chain", "mlmt": "mlmt", "pag": "multiturn"}
#: task -> (satseq eval workflow, problems, samples) for the tasks evaluated by ``satseq eval``
EVAL = {"base": ("single", 200, 8), "mlmt": ("coach", 100, 4), "pag": ("self_verify", 100, 4)}


def _run(args: list[str], threads: int, log: Path | None = None) -> None:
    """``satseq <args>`` at ``threads`` threads; its output appended to ``log`` (validation checks, progress)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with open(log or os.devnull, "a") as out:
        subprocess.run(SATSEQ + args, check=True, env=env, stdout=out, stderr=subprocess.STDOUT if log else None)


def chain_regime(root: Path, seed: int, n: int = 4) -> dict:
    """The chain warm start as three relay agents: vote avg@n / pass@n, per-position accuracy and behaviours."""
    import torch

    import satseq
    from satseq.data.relay_chain import behaviour_shares
    from satseq.eval.rollout_eval import evaluate_relay
    from satseq.registry import get_method
    from satseq.runtime import build_runtime

    torch.set_num_threads(1)
    ws = root / "embedded" / f"chain_seed{seed}"  # this seed's (model.path=embedded means seed 0's)
    cfg = satseq.load(overrides=["method=sat_seq", "data.embedded_task=chain", "data.eval_size=200",
                                 f"model.path={ws}", f"output_dir={root}", f"seed={seed}",
                                 "trainer.progress=false", "run_name=regime"])
    rt = build_runtime(cfg, get_method("sat_seq"), console=lambda *a: None)
    agents = rt.pool.names
    r = evaluate_relay(rt.pool, agents, rt.fmt, rt.engine, rt.eval, n=n, sampling=rt.sampling,
                       generator=torch.Generator().manual_seed(seed + 1000), ks=(1, n))
    out = {"vote": r["vote"]["acc"], f"vote pass@{n}": r["vote"][f"pass@{n}"]}
    out.update({f"{a} acc": r[a]["acc"] for a in agents})
    out.update(behaviour_shares(r["episodes"]))
    return out


def mlmt_behaviours(predictions: Path) -> dict[str, float]:
    """Per turn (solver, coach, refine) of the coach loop's evaluation: each behaviour's share of the
    turns (``mlmt/<turn>/<behaviour>``) and the share of those whose answer is right (``... acc``)."""
    from satseq.data.sum_of_three import behaviour

    turns = (("solver", "turn1_correct"), ("coach", "coach_correct"), ("refine", "correct"))
    n: dict[str, int] = {}
    right: dict[str, int] = {}
    total = 0
    for line in predictions.read_text().splitlines():
        row = json.loads(line)
        for i, texts in enumerate(row["responses"]):
            total += 1
            for (turn, key), text in zip(turns, texts):
                k = f"mlmt/{turn}/{behaviour(text)}"
                n[k] = n.get(k, 0) + 1
                right[k] = right.get(k, 0) + bool(row[key][i])
    out = {k: v / total for k, v in sorted(n.items())}
    out.update({f"{k} acc": right[k] / v for k, v in sorted(n.items()) if v >= 20})  # too few turns: no rate
    return out


def measure(out: Path, task: str, seed: int, threads: int) -> dict:
    root = out / f"s{seed}_t{threads}"  # shared by every task: the base warm start is built once
    ws = root / "embedded" / f"{STEMS[task]}_seed{seed}"
    t0 = time.perf_counter()
    _run(["sft", "--task", task, "--out", str(root), "--seed", str(seed), "--threads", str(threads)], threads,
         log=root / f"sft_{task}.log")
    build_s = time.perf_counter() - t0
    ev = root / f"eval_{task}"
    if task == "chain":
        metrics = chain_regime(root, seed)
    else:
        workflow, limit, n = EVAL[task]
        if not (ev / "metrics.json").exists():
            ks = ["--k", "1", "--k", str(n)]
            _run(["eval", "--checkpoint_dir", str(ws), "--workflow", workflow, "--dataset", "embedded", "--limit",
                  str(limit), "--n", str(n), *ks, "--temperature", "1", "--top_p", "1", "--output_dir", str(ev),
                  "--seed", str(seed)], 1)
        metrics = _flat(json.loads((ev / "metrics.json").read_text()))
    info = json.loads((ws / "warm_start.json").read_text())
    import torch
    import transformers

    return {"seed": seed, "threads": threads, "build_s": build_s, "metrics": metrics, "sft_steps": info.get("steps"),
            "reached_target": info.get("reached_target"),
            "validation": (info.get("checks") or [{}])[-1].get("behaviours") or (info.get("checks") or [{}])[-1].get("score"),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}


def _flat(m: dict) -> dict:
    """The evaluator's metrics.json as ``{name: number}`` (a ``{"mean": ...}`` entry reads as its mean)."""
    out = {}
    for k, v in m.items():
        if isinstance(v, dict) and "mean" in v:
            out[k] = float(v["mean"])
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--task", choices=sorted(STEMS), default="base")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--metrics", nargs="*", default=None, help="columns of the table (default: all measured)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"warm_start_spread_{a.task}.json"
    done = json.loads(path.read_text()) if path.exists() else {}
    for seed in a.seeds:
        for threads in a.threads:
            key = f"{seed}/{threads}"
            if key not in done:
                done[key] = measure(a.out, a.task, seed, threads)
                # merged with what another run of this script (other seeds or threads, same DIR) wrote meanwhile
                done = {**(json.loads(path.read_text()) if path.exists() else {}), key: done[key]}
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(done, indent=1))
                tmp.replace(path)
                print(key, json.dumps(done[key]["metrics"]), flush=True)
    rows = [done[f"{s}/{t}"] for s in a.seeds for t in a.threads]
    if a.task == "mlmt":  # read again from each build's predictions (cheap; rows measured before had none)
        for r in rows:
            preds = a.out / f"s{r['seed']}_t{r['threads']}" / "eval_mlmt" / "predictions.jsonl"
            if preds.exists():
                r["metrics"].update(mlmt_behaviours(preds))
    cols = a.metrics or sorted({k for r in rows for k in r["metrics"]})
    print(f"\n{a.task} warm start\n\n| SFT seed | threads | transformers | SFT steps | "
          + " | ".join(cols) + " | build (s) |\n|" + "---|" * (len(cols) + 5))
    for r in rows:
        v = r.get("versions", {}).get("transformers", "?")
        print(f"| {r['seed']} | {r['threads']} | {v} | {r.get('sft_steps', '?')} | "
              + " | ".join(f"{r['metrics'].get(c, float('nan')):.3f}" for c in cols) + f" | {r['build_s']:.0f} |")
    for c in cols:
        vals = [r["metrics"][c] for r in rows if c in r["metrics"]]
        print(f"spread of {c}: {max(vals) - min(vals):.3f} (min {min(vals):.3f}, max {max(vals):.3f})")


if __name__ == "__main__":
    main()
