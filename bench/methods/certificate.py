"""The SAT-Seq certificate measured: validity where it can fail, usefulness where it should help.

    python bench/methods/certificate.py toys                       # coverage on the exact toys (2,000 trials each)
    python bench/methods/certificate.py embedded --out DIR [key=value ...]

``toys``: the relay bandit (vote reward; coin flips with π_new overfitting them, true change 0) and
the two-turn MDP of ``tests/test_certificate.py``: coverage of the lower bound and of the certified
improvement, and the mean slack J − LB.

``embedded``: trains SAT-Seq on the embedded task (the quickstart preset plus the given overrides;
the certificate after the last stage), then, for the warm start and the trained agents, draws 41
independent certificate batches (256 prompts each, the run's pool and sampling): each batch's lower
bound is compared with the vote accuracy estimated from the other 40 batches (10,240 episodes), and
the certified improvement of every trained batch over every warm-start batch with the difference of
those estimates. Prints a table and writes ``DIR/certificate_bench.json``.
"""
from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRESET = ["trainer.num_stages=50", "trainer.train_batch_size=8", "trainer.save_every=0", "trainer.export_pt=false",
          "sat_seq.group_size=4", "sat_seq.lr=3e-5", "sat_seq.mini_batch_size=16", "sat_seq.scheduler=random",
          "data.eval_size=200", "trainer.eval_every=10"]
BATCHES = 41


def toys() -> dict:
    spec = importlib.util.spec_from_file_location("toys", REPO / "tests" / "test_certificate.py")
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)
    out = {}
    for name, coin in (("relay bandit, vote reward", False), ("relay bandit, coin flips (overfit)", True)):
        lower, improvement = t._coverage_bandit(coin, seed=1 + coin)
        out[name] = {"lower": lower, "improvement": improvement}
    import numpy as np

    rng, env = np.random.default_rng(3), t.TwoTurnMDP(m=2)
    held = imp = 0
    for _ in range(t.TRIALS):
        cur = (rng.normal(0, 0.5, size=(2, 3)), rng.normal(0, 0.5, size=(2, 3, 3)))
        data, _ = env.sample(cur, 16, rng)
        new = env.fit(cur, data, lr=20.0)
        _, un, _, uc = *env.sample(new, 128, rng), *env.sample(cur, 128, rng)
        held += t.bound(un, t.DELTA).lower <= env.J(new)
        imp += t.improvement_lower_bound(t.bound(un, t.DELTA / 2), t.bound(uc, t.DELTA / 2)) <= env.J(new) - env.J(cur)
    out["two-turn MDP"] = {"lower": held / t.TRIALS, "improvement": imp / t.TRIALS}
    for k, v in out.items():
        print(f"{k:40s} coverage: lower bound {v['lower']:.4f}, improvement {v['improvement']:.4f} "
              f"({t.TRIALS} trials, δ = {t.DELTA})")
    return out


def embedded(out: Path, overrides: list[str]) -> dict:
    import satseq
    from satseq.checkpoint import load_trainer_state
    from satseq.loop import build_run
    from satseq.methods.sat_seq.monitor.certificate import bound

    out.mkdir(parents=True, exist_ok=True)
    args = PRESET + [f"output_dir={out}", "run_name=cert", "trainer.progress=false", *overrides]
    t0 = time.perf_counter()
    result = satseq.train(overrides=args, console=lambda *a: None)
    train_s = time.perf_counter() - t0
    delta = result.config.sat_seq.certificate.delta
    report: dict = {"overrides": overrides, "train_s": train_s, "final": {k: v for k, v in result.final.items()
                                                                       if k.startswith(("certificate/", "eval/"))}}
    scores = {}
    for which in ("warm_start", "trained"):
        run = build_run(result.config, console=lambda *a: None)
        if which == "trained":
            load_trainer_state(result.run_dir, run.rt.pool)
        cert = run.updater.certificate
        t1 = time.perf_counter()
        scores[which] = [cert.scores(10_000 + b)[0] for b in range(BATCHES)]  # other seeds than the run's
        report[f"{which}_s"] = time.perf_counter() - t1
    for which, batches in scores.items():
        means = [sum(b) / len(b) for b in batches]
        truth_loo = [(sum(means) - m) / (len(means) - 1) for m in means]
        lbs = [bound(b, delta).lower for b in batches]
        report[which] = {"truth": sum(means) / len(means), "episodes": sum(len(b) for b in batches),
                         "coverage": sum(lb <= t for lb, t in zip(lbs, truth_loo)) / len(lbs),
                         "mean_gap": sum(t - lb for lb, t in zip(lbs, truth_loo)) / len(lbs),
                         "max_gap": max(t - lb for lb, t in zip(lbs, truth_loo))}
    w, tr = scores["warm_start"], scores["trained"]
    true_gain = report["trained"]["truth"] - report["warm_start"]["truth"]
    imps = [bound(a, delta / 2).lower - bound(b, delta / 2).upper for a in tr[:10] for b in w[:10]]
    report["improvement"] = {"true_gain": true_gain, "certified_mean": sum(imps) / len(imps),
                             "certified_min": min(imps), "positive": sum(i > 0 for i in imps) / len(imps),
                             "valid": sum(i <= true_gain for i in imps) / len(imps)}
    (out / "certificate_bench.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) < 2 or sys.argv[1] not in ("toys", "embedded"):
        sys.exit(__doc__)
    if sys.argv[1] == "toys":
        toys()
    else:
        if "--out" not in sys.argv:
            sys.exit("embedded needs --out DIR")
        i = sys.argv.index("--out")
        embedded(Path(sys.argv[i + 1]), sys.argv[2:i] + sys.argv[i + 2:])
