"""Per-call cost of the grader: the in-process fast path, and math-verify through the worker pool.

    OMP_NUM_THREADS=1 .venv/bin/python bench/rollout/grader_timeout.py [--n 300] [--json out.json]

Measures, in this one process (about 20 s):

- fast path: ``is_equivalent`` on distinct plain-integer pairs (uncached: what a training stage
  grades) and on a repeated pair (cached);
- pool overhead: the same math-verify comparison run in-process (``mv_engine.compare``) and through
  the worker (``grading_pool.run``), interleaved; overhead = the median of the per-pair differences
  (pickling, pipe round trip, ``poll``); and the bare round trip of an empty request (a ping);
- worker start-up (cold, sympy import included) and the replacement after a kill;
- the timeout: a pathological answer (``(x+1)^{9999}``, which sympy grinds on for over a minute)
  graded with ``timeout=1`` from the main thread and from a worker thread: time to return.
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time


def _median_us(fn, n: int) -> float:
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300, help="calls per measurement")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()

    from satseq.rewards import grade, grading_pool
    from satseq.rewards.grade import is_equivalent

    out: dict[str, float] = {}
    t0 = time.perf_counter()
    assert grading_pool.warm(60.0)
    out["worker_cold_start_s"] = time.perf_counter() - t0

    grade.clear_caches()
    out["fast_path_uncached_us"] = _median_us(lambda i: is_equivalent(str(i), str(i + (i % 2))), args.n)
    out["fast_path_cached_us"] = _median_us(lambda i: is_equivalent("42", "42.0"), args.n)
    out["fast_path_fraction_us"] = _median_us(lambda i: is_equivalent(f"\\frac{{{i}}}{{7}}", f"{i / 7:.3f}"), args.n)

    from satseq.rewards import mv_engine  # in this process too, for the in-process reference

    pairs = [(f"x+{i}", f"{i}+x", (), ()) for i in range(args.n)]
    for p in pairs[:5]:
        mv_engine.compare(*p)
    local, pooled = [], []
    for i in range(args.n):  # interleaved, so load changes hit both alike
        t = time.perf_counter()
        mv_engine.compare(*pairs[i])
        local.append(time.perf_counter() - t)
        t = time.perf_counter()
        grading_pool.run(pairs[i], 10.0)
        pooled.append(time.perf_counter() - t)
    out["math_verify_in_process_us"] = statistics.median(local) * 1e6
    out["math_verify_via_pool_us"] = statistics.median(pooled) * 1e6
    out["pool_overhead_us"] = statistics.median(p - q for p, q in zip(pooled, local)) * 1e6
    out["pool_round_trip_us"] = _median_us(lambda i: grading_pool.run((), 10.0), args.n)  # a ping
    grade.clear_caches()
    out["is_equivalent_math_verify_us"] = _median_us(lambda i: is_equivalent(f"x+{i}", f"{i}+x", timeout=10), args.n)

    def pathological(tag: str) -> float:
        t = time.perf_counter()
        assert is_equivalent(f"({tag}+1)^{{9999}}", "7", timeout=1.0) is False
        return time.perf_counter() - t

    out["timeout_1s_main_thread_s"] = pathological("x")
    t = time.perf_counter()
    assert grading_pool.warm(60.0)  # the replacement started at the kill: time until it answers
    out["replacement_ready_after_kill_s"] = time.perf_counter() - t
    res = {}
    th = threading.Thread(target=lambda: res.update(s=pathological("y")))
    th.start()
    th.join()
    out["timeout_1s_worker_thread_s"] = res["s"]
    out["timeouts_counted"] = grade.timeout_count()

    for k, v in out.items():
        print(f"{k:34s} {v:10.1f}" if k.endswith("us") else f"{k:34s} {v:10.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
