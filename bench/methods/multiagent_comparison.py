"""When do several agents beat one? SAT-Seq vs the simultaneous multi-agent update vs GRPO on an
embedded relay task, at equal generated samples and at equal wall-clock, over seeds.

    python bench/methods/multiagent_comparison.py --task relay --out DIR [--seeds 0 1 2] [--stages 50] [--threads 0]
    python bench/methods/multiagent_comparison.py --task chain --out DIR ...

Tasks: ``relay`` is the quickstart's (3-digit addition, each agent rewarded by its own correctness
plus the team's vote); ``chain`` is ``data.embedded_task=chain`` (a sum of three numbers that agents
can split into stages, so a later agent builds on an earlier one's answer; team reward only,
``reward.own=0``; satseq/data/relay_chain.py).

Budget (the quickstart's): ``--stages`` stages × 8 prompts × group 4, lr 3e-5, mini-batches of 16,
the same for every method (no method was tuned beyond these shared settings). SAT-Seq and the
simultaneous update generate 3 turns per episode, GRPO (one policy, one turn) 1, so GRPO's
equal-samples checkpoint is at 3 × ``--stages``. Equal wall-clock: SAT-Seq's summed stage time is the
budget; the other two run longer (1.6× and 4.8× ``--stages``, checkpoints every 5 stages) and are
read at the first checkpoint whose summed stage time reaches it. Every policy is evaluated as all
three relay agents (GRPO's one policy three times) on the task's 200 held-out problems, 2 sampled
episodes each at T = 1 ("vote"). SAT-Seq runs without its certificate batch (its cost would count
in its wall-clock); the warm start (seed 0) is shared by all runs. Stability: rejected and shrunk
updates and the largest KL quantile (SAT-Seq), and the largest drop of the training accuracy's
5-stage moving average below its running maximum (every method).

Writes ``DIR/multiagent_comparison_<task>.json`` (resumable: a finished seed is not redone),
``DIR/multiagent_comparison_<task>.png`` (training accuracy against generated samples, mean ± s.e.
band over seeds) and prints a markdown table (mean ± s.e. over seeds).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

PRESET = ["trainer.train_batch_size=8", "sat_seq.group_size=4", "grpo.group_size=4", "sat_seq.lr=3e-5",
          "ppo.lr=3e-5", "sat_seq.mini_batch_size=16", "ppo.mini_batch_size=16", "sat_seq.scheduler=random",
          "data.eval_size=200", "trainer.export_pt=false",
          "sat_seq.certificate.prompts=0", "trainer.progress=false", "trainer.eval_every=0"]
TASKS = {"relay": [], "chain": ["data.embedded_task=chain", "reward.own=0.0", "reward.team=1.0"]}
AGENTS = ["agent_1", "agent_2", "agent_3"]
EVERY = 5
TRAIN_ACC = {"sat_seq": "rollout/vote_accuracy", "simultaneous": "rollout/vote_accuracy", "grpo": "policy/accuracy"}
TURNS = {"sat_seq": 3, "simultaneous": 3, "grpo": 1}


def _drop(vals: list[float]) -> float:
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


def _equal_time_stage(stage_times: list[float], budget: float, last: int) -> int:
    """The first saved stage (every ``EVERY``) whose summed stage time reaches ``budget`` (else ``last``)."""
    spent = 0.0
    for i, t in enumerate(stage_times):
        spent += t
        if spent >= budget and (i + 1) % EVERY == 0:
            return i + 1
    return last


def _stage_dirs(run_dir: Path, name: str, stage: int) -> list[Path]:
    return [run_dir / f"{a}_stage_{stage}" for a in AGENTS] if name != "grpo" else [run_dir / f"policy_stage_{stage}"] * 3


def run_seed(out: Path, task: str, seed: int, stages: int, threads: int) -> dict:
    import satseq
    from satseq.registry import get_method
    from satseq.runtime import build_runtime

    base = PRESET + TASKS[task] + [f"output_dir={out}", f"seed={seed}", f"threads={threads}"]
    lengths = {"sat_seq": stages, "simultaneous": math.ceil(1.6 * stages / EVERY) * EVERY,
               "grpo": math.ceil(4.8 * stages / EVERY) * EVERY}
    equal_samples = {"sat_seq": stages, "simultaneous": stages, "grpo": 3 * stages}
    res: dict = {}
    for name, n in lengths.items():
        extra = [f"method={name}", f"trainer.num_stages={n}", f"trainer.save_every={0 if name == 'sat_seq' else EVERY}",
                 f"run_name={task}_{name}_seed{seed}"]
        t0 = time.perf_counter()
        result = satseq.train(overrides=base + extra, console=lambda *a: None)
        m = result.metrics
        curve = [r.get(TRAIN_ACC[name], float("nan")) for r in m]
        res[name] = {"run_dir": str(result.run_dir), "wall_s": time.perf_counter() - t0, "curve": curve,
                     "stage_time": [r.get("time/stage", 0.0) for r in m],
                     "max_drop": _drop(curve[: equal_samples[name]])}
        if name == "sat_seq":
            res[name]["rejected"] = sum(1 for r in m for a in AGENTS if r.get(f"{a}/accepted") == 0.0)
            res[name]["shrunk"] = sum(1 for r in m for a in AGENTS if r.get(f"{a}/backtracks", 0) > 0)
            res[name]["max_kl_quantile"] = max(r.get(f"{a}/kl_quantile", 0.0) for r in m for a in AGENTS)
    budget = sum(res["sat_seq"]["stage_time"])

    cfg = satseq.load(overrides=base + ["method=sat_seq", "run_name=eval_only"])
    rt = build_runtime(cfg, get_method("sat_seq"), console=lambda *a: None)
    warm = Path(out) / "embedded" / ("chain_seed0" if task == "chain" else "warm_start_seed0")
    res["warm_start"] = {"vote": _vote(rt, [warm] * 3, seed)}
    for name in lengths:
        run_dir = Path(res[name]["run_dir"])
        res[name]["vote_equal_samples"] = _vote(rt, _stage_dirs(run_dir, name, equal_samples[name]), seed)
        s_eq = equal_samples[name] if name == "sat_seq" else _equal_time_stage(res[name]["stage_time"], budget,
                                                                               lengths[name])
        res[name]["equal_time_stage"] = s_eq
        res[name]["equal_time_reached"] = sum(res[name]["stage_time"][:s_eq]) >= budget * 0.999
        res[name]["vote_equal_time"] = (res[name]["vote_equal_samples"] if s_eq == equal_samples[name]
                                        else _vote(rt, _stage_dirs(run_dir, name, s_eq), seed))
    return res


def _mse(xs, digits: int = 3) -> str:
    m = sum(xs) / len(xs)
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else float("nan")
    return f"{m:.{digits}f} ± {se:.{digits}f}"


def plot(rows: list[dict], stages: int, path: Path, task: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from satseq.utils.io import atomic_write

    fig, ax = plt.subplots(figsize=(7, 4.2))
    episodes = 8 * 4  # prompts × group per stage
    for name, color in (("sat_seq", "C0"), ("simultaneous", "C1"), ("grpo", "C2")):
        n = 3 * stages if name == "grpo" else stages
        ys = np.array([r[name]["curve"][:n] for r in rows], dtype=float)
        k = 5  # 5-stage moving average (per seed), then mean ± s.e. over seeds
        ys = np.array([np.convolve(y, np.ones(k) / k, mode="valid") for y in ys])
        x = (np.arange(ys.shape[1]) + k) * episodes * TURNS[name]
        mean, se = ys.mean(0), ys.std(0, ddof=1) / math.sqrt(len(ys)) if len(ys) > 1 else 0 * ys.mean(0)
        label = {"sat_seq": "SAT-Seq (vote)", "simultaneous": "simultaneous (vote)", "grpo": "GRPO (one turn)"}[name]
        ax.plot(x, mean, color=color, label=label)
        ax.fill_between(x, mean - se, mean + se, color=color, alpha=0.25)
    ax.set_xlabel("generated samples (turns)")
    ax.set_ylabel("training accuracy (5-stage moving average)")
    ax.set_title(f"embedded {task} task, {len(rows)} seeds (mean ± s.e.)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_write(path, "wb", encoding=None) as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def table(rows: list[dict], stages: int, task: str) -> str:
    def col(name, key):
        return _mse([r[name][key] for r in rows])

    lines = [f"| {task} task, held-out vote (200 × 2, T = 1), {len(rows)} seeds | equal samples | equal wall-clock "
             "| training time (s, summed stages) | stability |", "|---|---|---|---|---|"]
    lines.append(f"| warm start | {_mse([r['warm_start']['vote'] for r in rows])} | | | |")
    s = [r["sat_seq"] for r in rows]
    lines.append(f"| SAT-Seq, {stages} stages | {col('sat_seq', 'vote_equal_samples')} | (the budget) | "
                 f"{_mse([sum(x['stage_time']) for x in s], 1)} | rejected {sum(x['rejected'] for x in s)}, shrunk "
                 f"{sum(x['shrunk'] for x in s)} of {3 * stages * len(s)} agent-updates; max KL quantile "
                 f"{max(x['max_kl_quantile'] for x in s):.3f}; max drop {max(x['max_drop'] for x in s):.3f} |")
    for name, title, n in (("simultaneous", "simultaneous", stages), ("grpo", "GRPO (one policy)", 3 * stages)):
        x = [r[name] for r in rows]
        reached = "" if all(v["equal_time_reached"] for v in x) else " (budget not reached: last checkpoint)"
        lines.append(f"| {title}, {n} stages / at equal time stages {[v['equal_time_stage'] for v in x]}{reached} | "
                     f"{col(name, 'vote_equal_samples')} | {col(name, 'vote_equal_time')} | "
                     f"{_mse([sum(v['stage_time'][:n]) for v in x], 1)} | max drop {max(v['max_drop'] for v in x):.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--task", choices=sorted(TASKS), default="relay")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--stages", type=int, default=50)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"multiagent_comparison_{a.task}.json"
    done = json.loads(path.read_text()) if path.exists() else {}
    for seed in a.seeds:
        if str(seed) not in done:
            done[str(seed)] = run_seed(a.out, a.task, seed, a.stages, a.threads)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(done, indent=1))
            tmp.replace(path)
            r = done[str(seed)]
            print(f"seed {seed}: warm {r['warm_start']['vote']:.3f} " + " ".join(
                f"{n} {r[n]['vote_equal_samples']:.3f}/{r[n]['vote_equal_time']:.3f}" for n in TURNS), flush=True)
    rows = [done[str(s)] for s in a.seeds]
    plot(rows, a.stages, a.out / f"multiagent_comparison_{a.task}.png", a.task)
    print("\n" + table(rows, a.stages, a.task))


if __name__ == "__main__":
    main()
