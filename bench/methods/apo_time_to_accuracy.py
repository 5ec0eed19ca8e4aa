"""A*-PO against GRPO: wall-clock to a held-out accuracy, from a comparison's curves and idle stage times.

    .venv/bin/python bench/methods/apo_time_to_accuracy.py --compare /work/studies/apo [--targets 0.9 0.95]

Reads a finished ``satseq compare recipes/compare/apo.yaml`` (``--compare``: its output directory) and
takes each method's best grid cell (highest final held-out accuracy over its seeds,
:func:`satseq.compare.report.best_cells`). Two measurements, combined:

1. **Samples to a target**, per seed, from the comparison's curves (held-out accuracy on
   ``data.eval_size`` problems every ``curve_every`` stages): the first curve point at or above the
   target, as a number of training stages.
2. **Seconds per stage, idle and interleaved**: each best cell's own config (its seed-0
   ``train_config.yaml``) trained again for ``--stages`` stages, GRPO and A*-PO in turn for ``--rounds``
   rounds, one process, ``--threads`` threads; the median stage time. A*-PO's stage 1 (V*: ``apo.n_samples``
   samples of every training prompt by the warm start) is timed on its own, and counted once, as A*-PO's
   cost before its first stage.

Time to a target = stages × seconds per stage (+ stage 1 for A*-PO); the ratio is per seed (seed i's
A*-PO over seed i's GRPO), mean ± s.e. over seeds. A seed whose curve never reaches the target is
reported as not reaching it. Run it alone on an idle machine: it times. Writes ``<out>/apo_tta.json``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path


def _stage_seconds(cell_dir: Path, out: Path, name: str, stages: int, threads: int) -> tuple[list[float], float]:
    """Train ``cell_dir``'s config again for ``stages`` stages; (stage times, stage-1 seconds or 0)."""
    from satseq.config import load_config
    from satseq.loop import train
    from satseq.registry import get_method

    run = out / name
    shutil.rmtree(run, ignore_errors=True)  # no checkpoint, no V* cache of an earlier round
    cfg = load_config(str(cell_dir / "train_config.yaml"),
                      [f"output_dir={out}", f"run_name={name}", f"trainer.num_stages={stages}", "trainer.save_every=0",
                       "trainer.eval_every=0", "trainer.progress=false", "trainer.tensorboard=false",
                       "trainer.export_pt=false", "resume=false", f"threads={threads}"])
    quiet = lambda *a, **k: None  # noqa: E731
    stage1 = 0.0
    if cfg.method == "apo":
        from satseq.update.vstar_stage import cache_path, compute_vstar
        from satseq.runtime import build_runtime

        rt = build_runtime(cfg, get_method("apo"), quiet)
        cache, stage1 = compute_vstar(cfg, rt, rt.pool.names[0], console=quiet)
        cache.save(cache_path(cfg))
        del rt
    train(cfg, console=quiet)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r["time/stage"] for r in rows], stage1


def _stages_to(curve: dict, per_stage: float, target: float):
    for samples, acc in zip(curve["samples"], curve["acc"]):
        if acc >= target:
            return samples / per_stage
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compare", required=True, type=Path, help="the output directory of satseq compare apo.yaml")
    ap.add_argument("--targets", type=float, nargs="+", default=[0.9, 0.95])
    ap.add_argument("--stages", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("/tmp/apo_tta"))
    a = ap.parse_args()

    import torch

    from satseq.utils.stats import mean_se
    from satseq.compare.report import best_cells

    torch.set_num_threads(a.threads)
    data = json.loads((a.compare / "comparison.json").read_text())
    best = best_cells(data)
    cells = {m: best[m][0] for m in ("grpo", "apo")}
    a.out.mkdir(parents=True, exist_ok=True)
    if not (a.out / "embedded").exists():  # the comparison's warm start
        (a.out / "embedded").symlink_to((a.compare / "embedded").resolve())
    times: dict[str, list[float]] = {"grpo": [], "apo": []}
    stage1: list[float] = []
    for r in range(a.rounds):
        for m in ("grpo", "apo"):
            ts, s1 = _stage_seconds(a.compare / f"{cells[m]}_seed0", a.out, m, a.stages, a.threads)
            times[m] += ts[1:]  # the first stage pays one-time costs (allocations, the fused weights)
            if m == "apo":
                stage1.append(s1)
            print(f"round {r}: {m} median stage {statistics.median(ts[1:]):.3f} s" + (f", stage 1 {s1:.1f} s" if s1 else ""),
                  flush=True)
    sec = {m: statistics.median(v) for m, v in times.items()}
    s1 = statistics.median(stage1)
    result = {"cells": cells, "final": {m: best[m][1] for m in cells}, "seconds_per_stage": sec, "stage1_s": s1,
              "targets": {}}
    print(f"\nbest cells: {cells}; idle median stage: GRPO {sec['grpo']:.3f} s, A*-PO {sec['apo']:.3f} s; "
          f"A*-PO stage 1 {s1:.1f} s ({a.rounds} rounds, {a.threads} thread(s))\n")
    print("| target | GRPO stages | GRPO time (s) | A*-PO stages | A*-PO time incl. stage 1 (s) | A*-PO / GRPO time |")
    print("|---|---|---|---|---|---|")
    for target in a.targets:
        per = {}
        for m in ("grpo", "apo"):
            c = data["runs"][cells[m]]
            per_stage = c[0]["samples"] / c[0]["stages"]
            per[m] = [_stages_to(seed["curve"], per_stage, target) for seed in c]
        ratios, t_g, t_a = [], [], []
        for g, p in zip(per["grpo"], per["apo"]):
            if g is None or p is None:
                continue
            t_g.append(g * sec["grpo"])
            t_a.append(p * sec["apo"] + s1)
            ratios.append(t_a[-1] / t_g[-1])
        missed = {m: sum(x is None for x in v) for m, v in per.items()}
        row = {"stages": per, "grpo_s": mean_se(t_g), "apo_s": mean_se(t_a), "ratio": mean_se(ratios),
               "seeds_not_reaching": missed}
        result["targets"][str(target)] = row

        def f(v, d=1):
            return "-" if not v or v.get("mean") is None else f"{v['mean']:.{d}f} ± {(v.get('se') or 0):.{d}f}"
        print(f"| {target} | {[None if x is None else round(x) for x in per['grpo']]} | {f(row['grpo_s'])} | "
              f"{[None if x is None else round(x) for x in per['apo']]} | {f(row['apo_s'])} | {f(row['ratio'], 2)} |")
    (a.out / "apo_tta.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
