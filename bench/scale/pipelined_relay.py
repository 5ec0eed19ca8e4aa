"""Rollout throughput of the pipelined relay against the sequential relay, two agents in two Ray
actors (``trainer.backend=ray``, one actor per agent, ``num_cpus=1``, one torch thread each).

    python bench/scale/pipelined_relay.py [--out /tmp/pipelined_relay] [--rounds 5] [--micro-batches 4]
                                    [--prompts 64] [--group 8] [--tokens 32] [--hidden 384] [--layers 6]

The model is a random-init tiny Qwen2 (satseq/models/tiny.py) made bigger (``--hidden``,
``--layers``) so that generation, not the driver, dominates; both agents start from it. One local
Ray cluster (loopback), one run built once, ``rollout.batch_size`` = all the episodes (the engine
does not cut the whole batch into smaller forwards); then, interleaved A, B, A, B, ... for ``--rounds``
rounds: A = the relay workflow over the whole batch (agent 2 waits for agent 1 to finish the
batch), B = the same rollout in ``--micro-batches`` concurrent micro-batches
(:mod:`satseq.scale.pipeline`: agent 2 works on micro-batch b while agent 1 works on b+1). Both
roll out the same prompts from the same run-generator seed, so they generate the very same tokens
(checked every round); the figure is the ratio of the median wall-clock times (= ratio of
tokens/s). The ideal on two free cores is 2 / (1 + 1/M) (1.6x at M = 4), reached only when a
micro-batch costs 1/M of the whole batch; on a CPU a decode step has a fixed cost besides its
per-row cost, so the batch is large (512 episodes: 128-row micro-batches); the machine's other load
lowers it further.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # the local cluster on the loopback address
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/pipelined_relay")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    args = ap.parse_args(argv)

    import ray
    import torch

    from satseq.config.loader import finalize, load_config
    from satseq.loop import build_run
    from satseq.models.tiny import build_tiny_model, save_model_dir
    from satseq.scale.pipeline import PipelinedWorkflow

    out = Path(args.out)
    model_dir = out / f"tiny_h{args.hidden}_l{args.layers}"
    if not (model_dir / "config.json").exists():
        model, tok = build_tiny_model(seed=0, hidden=args.hidden, layers=args.layers, ffn=4 * args.hidden,
                                      heads=args.hidden // 64, kv_heads=max(1, args.hidden // 192))
        save_model_dir(model, tok, model_dir)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    agents = '[{"name": "agent_1"}, {"name": "agent_2"}]'
    cfg = finalize(load_config(None, [
        f"model.path={model_dir}", f"sat_seq.agents={agents}", "trainer.backend=ray", "threads=1",
        f"rollout.max_new_tokens={args.tokens}", f"data.train_size={args.prompts}", "data.eval_size=4",
        "trainer.progress=false", f"output_dir={out}", "run_name=bench",
        f"rollout.batch_size={args.prompts * args.group}"]))
    run = build_run(cfg, console=lambda *a, **k: None)
    problems = run.rt.train[:args.prompts]
    sequential, pipelined = run.workflow, PipelinedWorkflow(run.workflow, args.micro_batches)

    def rollout(workflow, seed: int):
        t0 = time.perf_counter()
        eps = workflow.rollout(problems, run.rt.pool, run.rt.engine, group_size=args.group,
                               generator=torch.Generator().manual_seed(seed))
        return time.perf_counter() - t0, eps

    rollout(sequential, 0)  # warm-up (first calls in each actor)
    times: dict[str, list[float]] = {"sequential": [], "pipelined": []}
    tokens = 0
    with run.strategy:
        for r in range(args.rounds):
            ta, a = rollout(sequential, r + 1)
            tb, b = rollout(pipelined, r + 1)
            same = all(x.response_ids == y.response_ids for ea, eb in zip(a, b) for x, y in zip(ea.turns, eb.turns))
            if not same:
                sys.exit("bench/scale/pipelined_relay.py: the pipelined relay generated other tokens")
            tokens = sum(len(t.response_ids) for ep in a for t in ep.turns)
            times["sequential"].append(ta)
            times["pipelined"].append(tb)
            print(f"round {r}: sequential {ta:.2f} s, pipelined {tb:.2f} s, {tokens} tokens", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "args": vars(args), "tokens_per_rollout": tokens, "times": times,
        "tokens_per_s": {k: tokens / v for k, v in med.items()},
        "speedup_median": med["sequential"] / med["pipelined"],
        "ideal": 2 / (1 + 1 / args.micro_batches), "cpu_count": os.cpu_count(),
        "load_avg_1m_at_end": os.getloadavg()[0],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=2))
    print(f"sequential {result['tokens_per_s']['sequential']:.0f} tok/s, pipelined "
          f"{result['tokens_per_s']['pipelined']:.0f} tok/s: {result['speedup_median']:.2f}x "
          f"(ideal {result['ideal']:.2f}x; load average {result['load_avg_1m_at_end']:.1f} on {os.cpu_count()} cores)")
    ray.shutdown()


if __name__ == "__main__":
    main()
