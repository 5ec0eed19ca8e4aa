"""Keep a `satseq compare` study's finished work in git, and put it back, so that a study longer than
a session (or a machine) goes on where it stopped.

    python bench/studies/keep.py save OUT bench/studies/<study>      # after (or while) the study runs
    python bench/studies/keep.py restore bench/studies/<study> OUT   # then: satseq compare RECIPE --out OUT

What is kept: each finished run directory (one holding ``compare_result.json``) without its weights
(``trainer_state/``, checkpoints, TensorBoard), and each finished evaluation (``evals/*/`` holding
``metrics.json``: ``predictions.jsonl``, ``metrics.json``, ``inference_config.yaml``), and the study's
``comparison.md`` when compare has written it. An evaluation already kept with the same predictions is left
as it is: a resumed, already complete evaluation rewrites its ``metrics.json`` with this invocation's
(zero) generation time, and the kept one holds the time it took. A run not yet
finished is not kept: after a restore it trains again from its start (its checkpoint is not in git).
The warm starts' baseline directories are not kept either: `satseq compare` rebuilds them (LoRA
adapters at their initialisation) and finds their evaluations complete.

`satseq compare` refuses a run directory made with other settings (its fingerprint holds the full
config, ``--out`` included), so restore into the same OUT the study was run with: the kept
``study.json`` records it, and ``restore`` refuses another.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

RUN_FILES = ("compare_run.json", "compare_result.json", "metrics.jsonl", "run_info.json", "train_config.yaml")
EVAL_FILES = ("predictions.jsonl", "metrics.json", "inference_config.yaml")


def _copy(src: Path, dst: Path, names: tuple[str, ...]) -> int:
    dst.mkdir(parents=True, exist_ok=True)
    n = 0
    for name in names:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)
            n += 1
    return n


def save(out: Path, keep: Path) -> None:
    out = out.resolve()
    runs = sorted(d for d in out.iterdir() if (d / "compare_result.json").is_file())
    evals = sorted(d for d in (out / "evals").glob("*") if (d / "metrics.json").is_file())
    for d in runs:
        _copy(d, keep / d.name, RUN_FILES)
    for d in evals:
        kept = keep / "evals" / d.name / "predictions.jsonl"
        if kept.is_file() and kept.read_bytes() == (d / "predictions.jsonl").read_bytes():
            continue
        _copy(d, keep / "evals" / d.name, EVAL_FILES)
    if (out / "comparison.md").is_file():
        shutil.copy2(out / "comparison.md", keep / "comparison.md")
    (keep / "study.json").write_text(json.dumps({"out": str(out), "runs_finished": [d.name for d in runs],
                                                 "evals_finished": [d.name for d in evals]}, indent=1) + "\n")
    print(f"kept {len(runs)} finished runs and {len(evals)} finished evaluations of {out} in {keep}")


def restore(keep: Path, out: Path) -> None:
    study = json.loads((keep / "study.json").read_text())
    if Path(study["out"]) != out.resolve():
        sys.exit(f"error: {keep} was run with --out {study['out']}; satseq compare refuses its runs under another "
                 f"directory (the fingerprint holds the path): restore into {study['out']}")
    n = 0
    for name in study["runs_finished"]:
        if not (out / name / "compare_result.json").is_file():
            n += _copy(keep / name, out / name, RUN_FILES) > 0
    for name in study["evals_finished"]:
        if not (out / "evals" / name / "metrics.json").is_file():
            _copy(keep / "evals" / name, out / "evals" / name, EVAL_FILES)
    print(f"restored {n} finished runs into {out} ({len(study['runs_finished'])} kept); "
          "now run the study's satseq compare command with this --out")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save", help="OUT -> KEEP")
    s.add_argument("out", type=Path)
    s.add_argument("keep", type=Path)
    r = sub.add_parser("restore", help="KEEP -> OUT")
    r.add_argument("keep", type=Path)
    r.add_argument("out", type=Path)
    a = ap.parse_args()
    if a.cmd == "save":
        if not a.out.is_dir():
            sys.exit(f"error: {a.out}: no such study directory")
        save(a.out, a.keep)
    else:
        if not (a.keep / "study.json").is_file():
            sys.exit(f"error: {a.keep / 'study.json'}: not found (nothing kept there)")
        restore(a.keep, a.out)


if __name__ == "__main__":
    main()
