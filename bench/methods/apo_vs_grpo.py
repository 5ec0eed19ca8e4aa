"""A*-PO vs GRPO on the embedded task: wall-clock to a held-out accuracy, same seed, same prompts.

    .venv/bin/python bench/methods/apo_vs_grpo.py [--out /tmp/apo_vs_grpo] [--apo key=value ...] [--grpo key=value ...]

Both start from the embedded warm start (built first if missing, not timed) and see the same
prompt budget (``trainer.num_stages`` × ``trainer.train_batch_size`` draws from the same
``data.train_size`` training problems). Timed in this one process: GRPO training; A*-PO stage 1
(V*: ``apo.n_samples`` reference samples per training prompt) and stage 2 (one sample per prompt),
reported separately and summed. Held-out: ``--eval_problems`` never-trained problems × ``--eval_n``
samples at T = 1 (not timed). ``--seeds 0 1 2`` repeats the comparison per seed (the task and warm
start stay those of seed 0; the seed changes sampling and data order). Prints a markdown table
(mean ± sd over seeds); writes ``<out>/seed<k>/apo_vs_grpo.json`` and ``<out>/apo_vs_grpo_seeds.json``.
Run it alone: the 2 cores are easily oversubscribed.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

COMMON = ["data.train_size=100", "trainer.save_every=0",
          "trainer.export_pt=false", "trainer.progress=false", "trainer.tensorboard=false", "resume=false"]
GRPO = ["method=grpo", "trainer.num_stages=50", "trainer.train_batch_size=8", "grpo.group_size=4", "ppo.lr=3e-5", "ppo.mini_batch_size=16"]
APO = ["method=apo", "trainer.num_stages=25", "trainer.train_batch_size=16", "apo.n_samples=4", "apo.beta1=0", "apo.beta2=0.1",
       "apo.lr=3e-5", "apo.mini_batch_size=4"]


def _held_out(run_dir: Path, out: Path, n: int, problems: int, stages: int) -> float:
    import shutil

    from satseq.eval.runner import run_evaluation

    shutil.rmtree(out, ignore_errors=True)  # a fresh evaluation, never the resumed predictions of an earlier run
    m = run_evaluation("embedded", run_dir / f"policy_stage_{stages}", out, n=n, temperature=1.0, top_p=1.0,
                       limit=problems, show_progress=False, show_table=False, console=lambda *a: None)
    return m["accuracy"]["mean"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/apo_vs_grpo")
    ap.add_argument("--apo", nargs="*", default=[], help="extra overrides for A*-PO")
    ap.add_argument("--grpo", nargs="*", default=[], help="extra overrides for GRPO")
    ap.add_argument("--eval_n", type=int, default=4)
    ap.add_argument("--eval_problems", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reuse_grpo", action="store_true", help="reuse the GRPO run and figures already in --out")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="one comparison per seed; mean and spread")
    a = ap.parse_args()

    import torch

    from satseq.models.warm_start import ensure_warm_start

    torch.set_num_threads(a.threads)
    root = Path(a.out)
    ensure_warm_start(root, show_progress=False)
    all_res = [_one(a, root, seed) for seed in a.seeds]
    (root / "apo_vs_grpo_seeds.json").write_text(json.dumps(all_res, indent=2))

    def stat(xs):
        m = sum(xs) / len(xs)
        sd = (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else 0.0
        return f"{m:.3f}" + (f" ± {sd:.3f}" if len(xs) > 1 else "")

    g = [r["grpo"] for r in all_res]
    p = [r["apo"] for r in all_res]
    print(f"seeds {a.seeds}\n| | wall-clock (s) | held-out pass@1 |\n|---|---|---|")
    print(f"| GRPO | {stat([x['train_s'] for x in g])} | {stat([x['held_out'] for x in g])} |")
    print(f"| A*-PO (stage 1 {stat([x['stage1_s'] for x in p])} + stage 2 {stat([x['stage2_s'] for x in p])}) | "
          f"{stat([x['train_s'] for x in p])} | {stat([x['held_out'] for x in p])} |")
    print(f"time ratio A*-PO / GRPO: {stat([r['time_ratio'] for r in all_res])}")


def _one(a, root: Path, seed: int) -> dict:
    import shutil

    from satseq.config import load_config
    from satseq.methods.apo.stage1 import cache_path, compute_vstar
    from satseq.registry import get_method
    from satseq.loop import train
    from satseq.runtime import build_runtime

    out = root / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "embedded").exists():  # share the warm start (seed 0 of the task) between seeds
        (out / "embedded").symlink_to((root / "embedded").resolve())
    base = COMMON + [f"output_dir={out}", f"threads={a.threads}", f"seed={seed}"]
    quiet = lambda *x: None  # noqa: E731
    res: dict = {}

    gcfg = load_config(None, base + GRPO + a.grpo + ["run_name=grpo"])
    previous = out / "apo_vs_grpo.json"
    if a.reuse_grpo and previous.exists():
        res["grpo"] = json.loads(previous.read_text())["grpo"]
    else:
        t = time.perf_counter()
        train(gcfg, console=quiet)
        res["grpo"] = {"train_s": time.perf_counter() - t}

    acfg = load_config(None, base + APO + a.apo + ["run_name=apo"])
    shutil.rmtree(acfg.run_dir, ignore_errors=True)  # no stale checkpoints or V* cache of an earlier trial
    t = time.perf_counter()
    rt = build_runtime(acfg, get_method("apo"), quiet)
    cache, _ = compute_vstar(acfg, rt, rt.pool.names[0], console=quiet)
    cache.save(cache_path(acfg))
    stage1 = time.perf_counter() - t
    del rt
    t = time.perf_counter()
    train(acfg, console=quiet)
    res["apo"] = {"stage1_s": stage1, "stage2_s": time.perf_counter() - t}
    res["apo"]["train_s"] = stage1 + res["apo"]["stage2_s"]

    stages = {"grpo": gcfg.trainer.num_stages, "apo": acfg.trainer.num_stages}
    for name in ("apo",) if "held_out" in res["grpo"] else ("grpo", "apo"):
        res[name]["held_out"] = _held_out(out / name, out / f"eval_{name}", a.eval_n, a.eval_problems, stages[name])
    res["time_ratio"] = res["apo"]["train_s"] / res["grpo"]["train_s"]
    res["seed"] = seed
    res["overrides"] = {"common": COMMON, "grpo": GRPO + a.grpo, "apo": APO + a.apo}
    (out / "apo_vs_grpo.json").write_text(json.dumps(res, indent=2))
    return res

if __name__ == "__main__":
    main()
