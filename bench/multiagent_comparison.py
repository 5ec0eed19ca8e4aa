"""When do several agents beat one? SAT-Seq vs the simultaneous multi-agent update vs GRPO on the
embedded relay task, at equal generated samples and at equal wall-clock, over seeds.

    python bench/multiagent_comparison.py --out DIR [--seeds 0 1 2] [--stages 50] [--threads 0]

Budget (the quickstart's): ``--stages`` stages × 8 prompts × group 4, lr 3e-5, mini-batches of 16.
SAT-Seq and the simultaneous update generate 3 turns per episode; GRPO (one policy) runs 3× the
stages, so all three generate the same number of samples. GRPO's checkpoint at equal wall-clock is
the first saved stage (every 10) whose summed stage time reaches SAT-Seq's. Every policy is
evaluated as all three relay agents (GRPO's one policy three times) on the 200 held-out problems,
2 sampled episodes each at T = 1 (the quickstart's "vote"). SAT-Seq runs without its certificate
batch here (its cost would count in its wall-clock); the warm start (seed 0) is shared by all runs.
Stability: rejected updates and the largest KL quantile (SAT-Seq), and the largest drop of the
training vote accuracy's 5-stage moving average below its running maximum (every method).
Writes ``DIR/multiagent_comparison.json`` and prints a markdown table (mean ± s.e. over seeds).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

PRESET = ["trainer.train_batch_size=8", "sat_seq.group_size=4", "grpo.group_size=4", "sat_seq.lr=3e-5",
          "grpo.lr=3e-5", "sat_seq.mini_batch_size=16", "grpo.mini_batch_size=16", "sat_seq.scheduler=random",
          "data.eval_size=200", "rollout.max_new_tokens=48", "trainer.export_pt=false",
          "sat_seq.certificate.prompts=0", "trainer.progress=false"]
AGENTS = ["agent_1", "agent_2", "agent_3"]


def _drop(rows) -> float:
    vals = [r["rollout/vote_accuracy"] for r in rows if "rollout/vote_accuracy" in r]
    ma = [sum(vals[max(0, i - 4): i + 1]) / len(vals[max(0, i - 4): i + 1]) for i in range(len(vals))]
    best, worst = -1.0, 0.0
    for v in ma:
        best = max(best, v)
        worst = max(worst, best - v)
    return worst


def _vote(rt, dirs: list[Path], seed: int) -> float:
    import torch

    from satseq.eval.rollout_eval import evaluate_relay
    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm

    models = [load_causal_lm(str(d))[0].eval() for d in dirs]
    pool = AgentPool.full(AGENTS, models, rt.tokenizer)
    r = evaluate_relay(pool, AGENTS, rt.fmt, rt.engine, rt.eval, n=2, sampling=rt.sampling,
                       generator=torch.Generator().manual_seed(seed + 1000))
    return r["vote"]["acc"]


def run_seed(out: Path, seed: int, stages: int, threads: int) -> dict:
    import satseq
    from satseq.registry import get_method
    from satseq.runtime import build_runtime

    base = PRESET + [f"output_dir={out}", f"seed={seed}", f"threads={threads}"]
    res: dict = {}
    runs = {"sat_seq": ["method=sat_seq", f"trainer.num_stages={stages}", "trainer.save_every=0"],
            "simultaneous": ["method=simultaneous", f"trainer.num_stages={stages}", "trainer.save_every=0"],
            "grpo": ["method=grpo", f"trainer.num_stages={3 * stages}", "trainer.save_every=10"]}
    results = {}
    for name, extra in runs.items():
        t0 = time.perf_counter()
        results[name] = satseq.train(overrides=base + extra + [f"run_name={name}_seed{seed}"], console=lambda *a: None)
        res[name] = {"train_s": time.perf_counter() - t0,
                     "stage_time_s": sum(r.get("time/stage", 0.0) for r in results[name].metrics),
                     "max_vote_drop": _drop(results[name].metrics)}
    s = results["sat_seq"].metrics
    res["sat_seq"]["rejected"] = sum(1 for r in s for a in AGENTS if r.get(f"{a}/accepted") == 0.0)
    res["sat_seq"]["max_kl_quantile"] = max(r.get(f"{a}/kl_quantile", 0.0) for r in s for a in AGENTS)
    res["sat_seq"]["backtracked"] = sum(1 for r in s for a in AGENTS if r.get(f"{a}/backtracks", 0) > 0)

    cfg = satseq.load(overrides=base + ["method=sat_seq", "run_name=eval_only"])
    rt = build_runtime(cfg, get_method("sat_seq"), console=lambda *a: None)
    warm = Path(out) / "embedded" / "warm_start_seed0"
    res["warm_start"] = {"vote": _vote(rt, [warm] * 3, seed)}
    for name in ("sat_seq", "simultaneous"):
        run_dir = results[name].run_dir
        res[name]["vote"] = _vote(rt, [run_dir / f"{a}_stage_{stages}" for a in AGENTS], seed)
    g = results["grpo"]
    res["grpo"]["vote_equal_samples"] = _vote(rt, [g.run_dir / f"policy_stage_{3 * stages}"] * 3, seed)
    budget, spent, stage_eq = res["sat_seq"]["stage_time_s"], 0.0, 3 * stages
    for r in g.metrics:
        spent += r.get("time/stage", 0.0)
        if spent >= budget and (r["step"] + 1) % 10 == 0:
            stage_eq = r["step"] + 1
            break
    res["grpo"]["equal_time_stage"] = stage_eq
    res["grpo"]["vote_equal_time"] = _vote(rt, [g.run_dir / f"policy_stage_{stage_eq}"] * 3, seed)
    return res


def _mse(xs):
    m = sum(xs) / len(xs)
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else float("nan")
    return f"{m:.3f} ± {se:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--stages", type=int, default=50)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "multiagent_comparison.json"
    done = json.loads(path.read_text()) if path.exists() else {}
    for seed in a.seeds:
        if str(seed) not in done:
            done[str(seed)] = run_seed(a.out, seed, a.stages, a.threads)
            path.write_text(json.dumps(done, indent=2))
            print(f"seed {seed}: {json.dumps(done[str(seed)])}", flush=True)
    rows = [done[str(s)] for s in a.seeds]
    print(f"\n| held-out vote (200 × 2, T = 1), {len(rows)} seeds | accuracy | training time (s, summed stages) | stability |")
    print("|---|---|---|---|")
    print(f"| warm start | {_mse([r['warm_start']['vote'] for r in rows])} | | |")
    print(f"| SAT-Seq, {a.stages} stages | {_mse([r['sat_seq']['vote'] for r in rows])} | "
          f"{_mse([r['sat_seq']['stage_time_s'] for r in rows])} | rejected {sum(r['sat_seq']['rejected'] for r in rows)}, "
          f"shrunk {sum(r['sat_seq']['backtracked'] for r in rows)} agent-updates; max KL quantile "
          f"{max(r['sat_seq']['max_kl_quantile'] for r in rows):.3f}; max vote drop "
          f"{max(r['sat_seq']['max_vote_drop'] for r in rows):.3f} |")
    print(f"| simultaneous, {a.stages} stages | {_mse([r['simultaneous']['vote'] for r in rows])} | "
          f"{_mse([r['simultaneous']['stage_time_s'] for r in rows])} | max vote drop "
          f"{max(r['simultaneous']['max_vote_drop'] for r in rows):.3f} |")
    print(f"| GRPO, equal samples ({3 * a.stages} stages) | {_mse([r['grpo']['vote_equal_samples'] for r in rows])} | "
          f"{_mse([r['grpo']['stage_time_s'] for r in rows])} | max vote drop {max(r['grpo']['max_vote_drop'] for r in rows):.3f} |")
    print(f"| GRPO, equal wall-clock (stages {[r['grpo']['equal_time_stage'] for r in rows]}) | "
          f"{_mse([r['grpo']['vote_equal_time'] for r in rows])} | | |")


if __name__ == "__main__":
    main()
