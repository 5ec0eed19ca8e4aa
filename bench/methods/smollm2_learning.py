"""Held-out accuracy of SmolLM2-135M runs from recipes/smollm2, before and after RL, beside the
trivial baselines: the warm start (the model as shipped) sampled at T = 1, its greedy answer, and
its best-of-k (pass@k). Sharpening a policy is what a lower temperature does for free, so a trained
run is only worth its cost where it beats the warm start's greedy answer too.

    python bench/methods/smollm2_learning.py --runs outputs/smollm2_grpo outputs/smollm2_sat_seq --out outputs/smollm2_eval

For every run directory: its warm start (``satseq compare``'s stage-0 run: fresh LoRA adapters, the
base model exactly, in the run's own workflow and prompt) and its latest complete stage, each on
the first ``--problems`` problems of the run's ``data.eval`` with ``--n`` samples at T = 1 and once
greedily. Means ± standard errors over problems. Writes ``OUT/summary.json`` (atomically) and
prints a Markdown table; evaluations already written under OUT are reused (resumable).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _evaluate(target: Path, out: Path, *, dataset: str, n: int, temperature: float, problems: int,
              max_new: int, threads: int, stage: int | None) -> dict:
    from satseq.eval.runner import run_evaluation

    done = out / "metrics.json"
    if done.is_file():
        m = json.loads(done.read_text())
        if m.get("n_problems") == problems:
            return m
    return run_evaluation(dataset, target, out, n=n, ks=sorted({1, n}), temperature=temperature, top_p=1.0,
                          max_new_tokens=max_new, limit=problems, threads=threads, stage=stage, seed=0,
                          show_progress=False, show_table=False, console=lambda *a, **k: None)


def _cell(m: dict, key: str) -> str:
    v = m.get(key) or {}
    if v.get("mean") is None:
        return "–"
    return f"{v['mean']:.3f} ± {v['se']:.3f}" if v.get("se") is not None else f"{v['mean']:.3f}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", required=True, help="run directories trained from recipes/smollm2")
    ap.add_argument("--out", default="outputs/smollm2_eval")
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--only", choices=["warm", "trained"], help="evaluate only the warm starts (e.g. while training) or the trained runs")
    args = ap.parse_args(argv)

    from satseq.compare.baselines import warm_start_run
    from satseq.config import load_config
    from satseq.utils.io import write_json

    out = Path(args.out)
    rows = []
    for run in map(Path, args.runs):
        cfg = load_config(run / "train_config.yaml", [], saved=True)
        warm = warm_start_run(run, out)
        rows_run = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        stats = rows_run[-1]
        common = dict(dataset=str(ROOT / cfg.data.eval) if not Path(cfg.data.eval).is_absolute() else cfg.data.eval,
                      problems=args.problems, max_new=cfg.rollout.max_new_tokens, threads=args.threads)
        for label, target, stage in (("warm start", warm, 0), ("trained", run, None)):
            if args.only and args.only != ("warm" if stage == 0 else "trained"):
                continue
            key = f"{run.name}_{'warm' if stage == 0 else 'trained'}"
            sampled = _evaluate(target, out / key / "t1", n=args.n, temperature=1.0, stage=stage, **common)
            greedy = _evaluate(target, out / key / "greedy", n=1, temperature=0.0, stage=stage, **common)
            rows.append({"run": run.name, "method": cfg.method, "policy": label, "stage": sampled.get("stage"),
                         "train_s": sum(r.get("time/stage", 0.0) for r in rows_run) if stage is None else 0.0,
                         "stages": int(stats["step"]) + 1 if stage is None else 0,
                         "sampled": sampled, "greedy": greedy})
            print(f"[smollm2] {run.name} {label}: T=1 {_cell(sampled, 'accuracy')}, "
                  f"greedy {_cell(greedy, 'accuracy')}", flush=True)
    n = args.n
    lines = [f"| run | policy | stages | train time | T = 1 accuracy | pass@{n} | greedy |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        t = f"{r['train_s'] / 60:.0f} min" if r["train_s"] else "–"
        lines.append(f"| {r['run']} | {r['policy']} | {r['stages']} | {t} | {_cell(r['sampled'], 'accuracy')} | "
                     f"{_cell(r['sampled'], f'pass@{n}')} | {_cell(r['greedy'], 'accuracy')} |")
    table = "\n".join(lines)
    print(table)
    write_json(out / "summary.json", {"problems": args.problems, "n": n, "rows": [
        {k: v for k, v in r.items() if k not in ("sampled", "greedy")} |
        {"sampled": {k: r["sampled"].get(k) for k in ("accuracy", f"pass@{n}", "agents")},
         "greedy": {k: r["greedy"].get(k) for k in ("accuracy",)}} for r in rows], "table": table})


if __name__ == "__main__":
    main()
