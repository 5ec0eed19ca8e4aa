"""``satseq quickstart``: the whole flagship story on a laptop CPU in minutes.

1. warm start: the embedded tiny model, SFT on the arithmetic task (``satseq sft``);
2. "before": the warm start as all three relay agents on held-out problems it never trained on;
3. SAT-Seq: three agents, block-coordinate updates, quantile-KL check, certificate;
4. GRPO: one agent, the same number of stages, prompts per stage and group size;
5. a before/after table (vote and every agent), also written to ``<output_dir>/quickstart/``.

Accuracies are sampled at temperature 1 (``n`` relay episodes per problem): on a model this small
greedy accuracy is a step function of the first token, so it is shown beside, not instead.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from satseq.config import load_config
from satseq.eval.rollout_eval import evaluate_relay, evaluate_single
from satseq.models.agents import AgentPool
from satseq.rollout.types import SamplingParams
from satseq.utils.io import write_json, write_text

AGENTS = ["agent_1", "agent_2", "agent_3"]
PRESET = [  # the quickstart budget; every key is an ordinary config key
    "trainer.num_stages=50", "trainer.train_batch_size=8", "trainer.save_every=0", "trainer.export_pt=false",
    "sat_seq.group_size=4", "grpo.group_size=4", "sat_seq.lr=3e-5", "grpo.lr=3e-5",
    "sat_seq.mini_batch_size=16", "grpo.mini_batch_size=16", "sat_seq.scheduler=random",
    "data.eval_size=200", "rollout.max_new_tokens=48", "resume=false",
]
EVAL_SAMPLES = 2
PASS_AT_K_PROBLEMS = 100  # warm-start pass@1 / pass@8 (8 samples each)


def _config(output_dir: Path, method: str, stages: int | None, seed: int):
    overrides = PRESET + [f"output_dir={output_dir}", f"method={method}", f"seed={seed}",
                          f"run_name=quickstart_{method}"]
    if stages:
        overrides.append(f"trainer.num_stages={stages}")
    return load_config(None, overrides)


def _relay_eval(pool, rt, n, seed):
    sampled = evaluate_relay(pool, AGENTS, rt.fmt, rt.engine, rt.eval, n=n, sampling=rt.sampling,
                             generator=torch.Generator().manual_seed(seed + 1000))
    greedy = evaluate_relay(pool, AGENTS, rt.fmt, rt.engine, rt.eval, n=1,
                            sampling=SamplingParams(max_new_tokens=rt.sampling.max_new_tokens, temperature=0.0))
    return {k: {"sampled": sampled[k]["acc"], "greedy": greedy[k]["acc"]} for k in ["vote"] + AGENTS}


def run_quickstart(output_dir: Path = Path("outputs"), stages: int | None = None, seed: int = 0,
                   console=None) -> dict:
    from rich.console import Console
    from rich.table import Table

    from satseq.loop import build_run, train

    con = console or Console()
    t_start = time.perf_counter()
    results: dict = {"seed": seed, "timings_s": {}}

    # 1-2. warm start and the "before" numbers (the warm start plays all three agents)
    cfg = _config(output_dir, "sat_seq", stages, seed)
    t0 = time.perf_counter()
    rt = build_run(cfg, console=con.print).rt
    results["timings_s"]["warm_start"] = time.perf_counter() - t0
    warm = rt.pool
    single = evaluate_single(warm, AGENTS[0], rt.fmt, rt.engine, rt.eval[:PASS_AT_K_PROBLEMS], n=8, sampling=rt.sampling,
                             generator=torch.Generator().manual_seed(seed + 7), ks=(1, 8))
    results["warm_start"] = {"pass@1": single["pass@1"], "pass@8": single["pass@8"]}
    results["before"] = _relay_eval(warm, rt, EVAL_SAMPLES, seed)
    con.print(f"warm start (one agent alone, T=1, n=8, {PASS_AT_K_PROBLEMS} problems): pass@1 {single['pass@1']:.3f}, pass@8 {single['pass@8']:.3f}")

    # 3. SAT-Seq
    t0 = time.perf_counter()
    run_dir = train(cfg, console=con.print)
    results["timings_s"]["sat_seq_train"] = time.perf_counter() - t0
    trained = build_run(_config(output_dir, "sat_seq", stages, seed), console=con.print).rt
    from satseq.checkpoint import load_trainer_state

    load_trainer_state(run_dir, trained.pool)
    results["sat_seq"] = _relay_eval(trained.pool, trained, EVAL_SAMPLES, seed)

    # 4. GRPO, same budget, one agent; evaluated alone and as all three relay agents
    gcfg = _config(output_dir, "grpo", stages, seed)
    t0 = time.perf_counter()
    grun = train(gcfg, console=con.print)
    results["timings_s"]["grpo_train"] = time.perf_counter() - t0
    grt = build_run(_config(output_dir, "grpo", stages, seed), console=con.print).rt
    load_trainer_state(grun, grt.pool)
    policy = grt.pool.module(grt.pool.names[0])
    relay_pool = AgentPool.full(AGENTS, [policy] * len(AGENTS), grt.tokenizer)
    results["grpo"] = _relay_eval(relay_pool, grt, EVAL_SAMPLES, seed)
    results["timings_s"]["total"] = time.perf_counter() - t_start

    # 5. the table
    table = Table(title=f"held-out accuracy, {len(rt.eval)} problems never trained on "
                        f"(sampled T=1 over {EVAL_SAMPLES} relay episodes each; greedy in brackets)")
    table.add_column("")
    for col in ("SFT start", "after SAT-Seq", "after GRPO (1 agent, same budget)"):
        table.add_column(col, justify="right")
    fmt = lambda r: f"{r['sampled']:.3f} ({r['greedy']:.3f})"  # noqa: E731
    for row in ["vote"] + AGENTS:
        table.add_row(row, fmt(results["before"][row]), fmt(results["sat_seq"][row]), fmt(results["grpo"][row]))
    con.print(table)
    gain = results["sat_seq"]["vote"]["sampled"] - results["before"]["vote"]["sampled"]
    con.print(f"vote accuracy: {results['before']['vote']['sampled']:.3f} → {results['sat_seq']['vote']['sampled']:.3f} "
              f"({gain * 100:+.1f} points) · total {results['timings_s']['total']:.0f} s")
    out = Path(output_dir) / "quickstart"
    write_json(out / "results.json", results)
    md = ["| | SFT start | after SAT-Seq | after GRPO |", "|---|---|---|---|"]
    md += [f"| {row} | {fmt(results['before'][row])} | {fmt(results['sat_seq'][row])} | {fmt(results['grpo'][row])} |"
           for row in ["vote"] + AGENTS]
    write_text(out / "results.md", "\n".join(md) + "\n")
    return results
