"""The base model in each role of an environment, before any training (issue 63: "first measure the base
model in each role, greedy and T = 1, and pick settings where each role alone has signal").

    python bench/methods/roles_probe.py CONFIG [--problems 50] [--samples 2] [--threads 1] [--seed 0]
        [--out FILE.json] [key=value ...]

CONFIG is a ``satseq train`` config (a recipe under ``recipes/smollm2/``) and the overrides are applied as
``satseq train`` applies them; the run is built exactly as training builds it (its environment, prompts,
sampling settings and held-out set: ``data.eval``, the first ``--problems``), with ``method=shared_policy``
(one fresh LoRA adapter, i.e. the base model, in every seat) unless the overrides name another method. Each
held-out problem is played ``--samples`` times at the config's temperature (T = 1 in the recipes) and
once greedy, and graded as training grades (:meth:`Environment.grade`). The figures are the
environment's own per-seat metrics (:meth:`Environment.rollout_metrics`: ``checker/balanced_accuracy``,
``code/output_correct``, ...), each role's accuracy over its turns, and the final answer's accuracy, each
with a standard error from 400 bootstrap resamples of the problems (the metrics are rates over episodes
of a problem set, not means of independent problems). Prints one Markdown table; ``--out`` also writes
the figures and the command as JSON (the evidence kept under ``bench/studies/roles_probe/``).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def figures(env, cfg, episodes) -> dict:
    """The environment's per-seat metrics, each role's accuracy over its turns, the final accuracy."""
    out = dict(env.rollout_metrics(cfg, episodes))
    for role in sorted({t.role for ep in episodes for t in ep.turns}):
        if any(k.startswith(f"{role}/") for k in out):  # the environment's own figures for it
            continue
        turns = [t for ep in episodes for t in ep.turns if t.role == role]
        out[f"{role}/accuracy"] = sum(bool(t.correct) for t in turns) / len(turns)
    out["final/accuracy"] = sum(bool(ep.prediction_correct) for ep in episodes) / max(1, len(episodes))
    out["turns_per_episode"] = sum(len(ep.turns) for ep in episodes) / max(1, len(episodes))
    out["generated_tokens_per_episode"] = sum(len(t.response_ids) for ep in episodes for t in ep.turns) / max(1, len(episodes))
    return out


def bootstrap(env, cfg, episodes, point: dict, reps: int = 400, seed: int = 0) -> dict:
    """Standard error of each figure over ``reps`` resamples of the problems (episode groups)."""
    groups: dict = {}
    for ep in episodes:
        groups.setdefault(ep.group, []).append(ep)
    keys = list(groups)
    rng = random.Random(seed)
    draws: dict = {k: [] for k in point}
    for _ in range(reps):
        sample = [ep for g in (rng.choice(keys) for _ in keys) for ep in groups[g]]
        m = figures(env, cfg, sample)
        for k in point:
            if k in m:
                draws[k].append(m[k])
    out = {}
    for k, v in point.items():
        d = draws[k]
        mean = sum(d) / len(d) if d else float("nan")
        out[k] = {"value": v, "se": math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1)) if len(d) > 1 else None}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--problems", type=int, default=50)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import dataclasses

    import torch

    from satseq.api import load
    from satseq.registry import get_method
    from satseq.runtime import build_runtime

    overrides = list(args.overrides)
    if not any(o.startswith("method=") for o in overrides):
        overrides.append("method=shared_policy")
    overrides += [f"threads={args.threads}", f"data.eval_size={args.problems}", "output_dir=/tmp/roles_probe",
                  "run_name=probe"]
    cfg = load(args.config, overrides)
    method = get_method(cfg.method)
    rt = build_runtime(cfg, method, console=lambda *_: None)
    env = method.environment(rt.cfg)
    problems = rt.eval[:args.problems]
    roles = method.roles(rt.cfg, rt.pool.names)
    result = {"config": args.config, "overrides": args.overrides, "problems": len(problems),
              "command": "python bench/methods/roles_probe.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "env": env.name, "method": cfg.method, "modes": {}}
    for mode, temperature, n in (("T = %g" % rt.sampling.temperature, rt.sampling.temperature, args.samples),
                                 ("greedy", 0.0, 1)):
        sampling = dataclasses.replace(rt.sampling, temperature=temperature)
        wf = env.make_workflow(rt.cfg, roles, rt.fmt, sampling, options=env.workflow_options(rt.cfg))  # satseq eval's: nothing journaled
        t0 = time.perf_counter()
        episodes = wf.rollout(problems, rt.pool, rt.engine, group_size=n,
                              generator=torch.Generator().manual_seed(args.seed))
        env.grade(episodes)
        point = figures(env, rt.cfg, episodes)
        result["modes"][mode] = {"samples": n, "seconds": round(time.perf_counter() - t0, 1),
                                 "figures": bootstrap(env, rt.cfg, episodes, point, seed=args.seed),
                                 "examples": [[{"role": t.role, "prompt_tail": t.prompt_text[-160:], "text": t.text,
                                                "answer": t.answer, "correct": bool(t.correct),
                                                **{k: t.info[k] for k in ("verdict", "tool_results", "output") if k in t.info}}
                                               for t in ep.turns] for ep in episodes[:4]]}
    modes = list(result["modes"])
    keys = sorted({k for m in result["modes"].values() for k in m["figures"]})
    print(f"\n{env.name} × base model ({cfg.model.path}), {len(problems)} held-out problems of {cfg.data.eval}\n")
    print("| figure | " + " | ".join(modes) + " |\n|---|" + "---|" * len(modes))

    def cell(f):
        if f is None:
            return "-"
        return f"{f['value']:.3f}" + (f" ± {f['se']:.3f}" if f["se"] is not None else "")

    for k in keys:
        print(f"| {k} | " + " | ".join(cell(result["modes"][m]["figures"].get(k)) for m in modes) + " |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
