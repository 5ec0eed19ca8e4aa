"""Behaviour fingerprint: every registered method's run on the tiny model, hashed, to prove that a
refactor changes nothing (issue 36: "bit-identical metrics and weights before and after").

Each method trains 2 stages on the same randomly initialised tiny model (full fine-tuning) in each
layout: ``local`` (one process), ``lora`` (one process, LoRA agents), ``replicate`` and ``fsdp2``
(``torchrun --nproc_per_node 2``, Gloo) and ``ray`` (``trainer.backend=ray``, a local Ray cluster).
A run is recorded as its metrics (every row, ``time/*`` dropped, floats exact) and the SHA-256 of
every exported weight tensor (``agent_k_stage_2.pt``, gathered by rank 0 under fsdp2). A layout a
method refuses is recorded as its one-line error, which must then stay the same too.

    python bench/methods/behaviour_fingerprint.py record before.json      # at the old commit
    python bench/methods/behaviour_fingerprint.py record after.json       # at the new one
    python bench/methods/behaviour_fingerprint.py compare before.json after.json

The runs use the code of the checkout this script sits in (its root goes first on PYTHONPATH), so
``git worktree add /tmp/old <commit>`` and that copy of the script record an older commit. Compare
records made on one machine only: another CPU's kernels differ in the last bits.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAST = ["trainer.train_batch_size=2", "grpo.group_size=2", "sat_seq.group_size=2", "rollout.max_new_tokens=6",
        "data.train_size=8", "data.eval_size=4", "threads=1", "trainer.tensorboard=false",
        "trainer.progress=false", "trainer.num_stages=2", "trainer.eval_every=2", "ppo.lr=1e-3", "sat_seq.lr=1e-3",
        "sat_seq.certificate.prompts=4", "sat_seq.certificate.samples=2", "apo.n_samples=2", "run_name=r"]
LAYOUTS = {"local": (1, []), "lora": (1, ["model.lora.enabled=true"]),
           "replicate": (2, ["trainer.strategy=replicate"]), "fsdp2": (2, ["trainer.strategy=fsdp2"]),
           "ray": (1, ["trainer.backend=ray"])}


def _env() -> dict:
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + (os.pathsep + path if path else ""))


def _methods() -> list[str]:
    code = "from satseq.registry import method_names; print(' '.join(method_names()))"
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True)
    return out.stdout.split()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tiny(out: Path) -> Path:
    code = ("import sys; from satseq.models.tiny import build_tiny_model, save_model_dir; "
            "m, t = build_tiny_model(seed=1); save_model_dir(m, t, sys.argv[1])")
    subprocess.run([sys.executable, "-c", code, str(out)], env=_env(), check=True)
    return out


def _weights_sha(run: Path) -> dict:
    import torch

    out = {}
    for f in sorted(run.glob("*_stage_2.pt")):
        state = torch.load(f)
        for k in sorted(state):
            t = state[k].contiguous()
            out[f"{f.stem}/{k}"] = hashlib.sha256(t.view(-1).view(torch.uint8).numpy().tobytes()
                                                  + str((t.dtype, tuple(t.shape))).encode()).hexdigest()[:16]
    return out


def _one(method: str, layout: str, model: Path, work: Path) -> dict:
    ranks, extra = LAYOUTS[layout]
    out = work / f"{method}-{layout}"
    launch = [sys.executable, "-m", "satseq.cli"] if ranks == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_addr",
        "127.0.0.1", "--master_port", str(_port()), "-m", "satseq.cli"]
    t0 = time.perf_counter()
    r = subprocess.run([*launch, "train", f"model.path={model}", f"method={method}", *FAST, *extra,
                        f"output_dir={out}"], env=_env(), capture_output=True, text=True, timeout=900)
    rec = {"seconds": round(time.perf_counter() - t0, 1)}
    if r.returncode != 0:
        lines = [x for x in (r.stderr + r.stdout).splitlines() if "Error" in x or "error" in x]
        rec["error"] = lines[-1].strip() if lines else f"exit {r.returncode}"
        return rec
    rows = [json.loads(x) for x in (out / "r" / "metrics.jsonl").read_text().splitlines()]
    rec["metrics"] = [{k: v for k, v in row.items() if not k.startswith("time/") and k not in ("time", "wall_time")}
                      for row in rows]
    rec["weights"] = _weights_sha(out / "r")
    return rec


def record(path: Path, methods: list[str], layouts: list[str]) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"commit": commit, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="fingerprint.") as tmp:
        model = _tiny(Path(tmp) / "tiny")
        for m in methods:
            for lay in layouts:
                rec = _one(m, lay, model, Path(tmp))
                result["runs"][f"{m}/{lay}"] = rec
                what = rec.get("error") or f"{len(rec['metrics'])} rows, {len(rec['weights'])} tensors"
                print(f"[fingerprint] {m:>14} {lay:<9} {rec['seconds']:6.1f} s  {what}", flush=True)
    tmp_out = path.with_name(path.name + ".tmp")
    tmp_out.write_text(json.dumps(result, indent=1, sort_keys=True))
    os.replace(tmp_out, path)
    print(f"[fingerprint] wrote {path} ({len(result['runs'])} runs at {commit})")


def compare(a: Path, b: Path, common_only: bool = False) -> int:
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    bad = 0
    keys = set(ra["runs"]) & set(rb["runs"]) if common_only else set(ra["runs"]) | set(rb["runs"])
    for key in sorted(keys):
        x, y = ra["runs"].get(key), rb["runs"].get(key)
        if x is None or y is None:
            print(f"{key:<26} only in {'the second' if x is None else 'the first'}")
            bad += 1
            continue
        x, y = {k: v for k, v in x.items() if k != "seconds"}, {k: v for k, v in y.items() if k != "seconds"}
        if x == y:
            print(f"{key:<26} identical" + (f" (both: {x['error']})" if "error" in x else ""))
            continue
        bad += 1
        if "error" in x or "error" in y:
            print(f"{key:<26} DIFFERS: {x.get('error', 'ran')} -> {y.get('error', 'ran')}")
        else:
            keys = sorted({k for r1, r2 in zip(x["metrics"], y["metrics"]) for k in set(r1) | set(r2)
                           if r1.get(k) != r2.get(k)})
            wk = sorted(k for k in set(x["weights"]) | set(y["weights"]) if x["weights"].get(k) != y["weights"].get(k))
            print(f"{key:<26} DIFFERS: metrics {keys[:6]}{'…' if len(keys) > 6 else ''}; "
                  f"{len(wk)} of {len(x['weights'])} tensors")
    print(f"{ra['commit']} -> {rb['commit']}: " + ("bit-identical" if not bad else f"{bad} run(s) differ"))
    return 1 if bad else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="run every method in every layout and write the fingerprint")
    r.add_argument("out", type=Path)
    r.add_argument("--methods", default="all", help="comma-separated (default: every registered method)")
    r.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma-separated, of {', '.join(LAYOUTS)}")
    c = sub.add_parser("compare", help="compare two fingerprints; exit 1 if any run differs")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--common-only", action="store_true", help="compare only the runs both records hold")
    args = p.parse_args()
    if args.cmd == "compare":
        return compare(args.a, args.b, args.common_only)
    layouts = args.layouts.split(",")
    unknown = [x for x in layouts if x not in LAYOUTS]
    if unknown:
        p.error(f"--layouts: unknown {unknown} (known: {', '.join(LAYOUTS)})")
    methods = _methods() if args.methods == "all" else args.methods.split(",")
    record(args.out, methods, layouts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
