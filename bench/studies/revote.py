"""Recompute every kept evaluation's metrics from its ``predictions.jsonl`` with the current
evaluator (:func:`satseq.eval.report.compute_metrics`, the eval seed from ``inference_config.yaml``),
and compare with the kept ``metrics.json``.

    python bench/studies/revote.py            # every bench/studies/*/evals/*; exit 1 on an unexplained change
    python bench/studies/revote.py STUDY ...  # only these study directories

What it checks (issue 65, item 3): since maj@k of an even k breaks its ties with the eval seed's stream
(:func:`satseq.eval.metrics.vote_of`) instead of toward the first sample, only the ``maj@<even k>``
entries may differ from what was kept; everything else (accuracy, pass@k, avg@k, maj@<odd k>, per agent
and per turn) must come back bit-identical. Each changed ``maj@k`` is printed kept → now, and, per
study and run name (the part before ``_seed``), the mean ± s.e. over seeds of both (the s.e. of the
seeds' means, ddof = 1, as ``satseq compare`` reports it).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

STUDIES = Path(__file__).resolve().parent
EVEN_MAJ = re.compile(r"maj@(\d*[02468])$")


def _diff(kept, now, path: str, out: list) -> None:
    """(path, kept, now) for each leaf that differs; dict keys absent on either side count too."""
    if isinstance(kept, dict) and isinstance(now, dict):
        for k in sorted(set(kept) | set(now)):
            _diff(kept.get(k), now.get(k), f"{path}/{k}" if path else k, out)
    elif kept != now:
        out.append((path, kept, now))


def recompute(eval_dir: Path) -> tuple[list, list, dict]:
    """(allowed, unexplained) differences of one evaluation (allowed: maj@<even k> entries), and
    ``{key: (kept, now)}`` of its top-level maj@<even k> means (the final answer's)."""
    import yaml

    from satseq.eval.report import compute_metrics
    from satseq.utils.io import read_jsonl

    kept = json.loads((eval_dir / "metrics.json").read_text())
    seed = int(yaml.safe_load((eval_dir / "inference_config.yaml").read_text()).get("seed", 0))
    rows = read_jsonl(eval_dir / "predictions.jsonl", allow_partial_last_line=True)
    now = compute_metrics(rows, kept["ks"], seed)
    diffs: list = []
    _diff({k: kept.get(k) for k in now}, now, "", diffs)
    allowed = [d for d in diffs if any(EVEN_MAJ.match(part) for part in d[0].split("/"))]
    top = {k: (kept[k]["mean"], now[k]["mean"]) for k in now if EVEN_MAJ.match(k)}
    return allowed, [d for d in diffs if d not in allowed], top


def _mse(xs: list[float]) -> str:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return f"{m:.3f}"
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))
    return f"{m:.3f} ± {se:.3f}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("studies", nargs="*", type=Path, help="study directories (default: every bench/studies/*/evals)")
    a = ap.parse_args(argv)
    studies = a.studies or sorted(p for p in STUDIES.iterdir() if (p / "evals").is_dir())
    for study in studies:
        if not (study / "evals").is_dir():
            sys.exit(f"error: {study}: no evals/ directory (not a kept study)")
    bad = 0
    for study in studies:
        per_run: dict[tuple[str, str], list[tuple[float, float]]] = {}
        n = 0
        for d in sorted(p for p in (study / "evals").glob("*") if (p / "metrics.json").is_file()):
            n += 1
            allowed, unexplained, top = recompute(d)
            for path, a, b in unexplained:
                print(f"UNEXPLAINED {study.name}/{d.name}: {path}: kept {a!r}, now {b!r}")
                bad += 1
            for key, (a, b) in top.items():
                print(f"{study.name}/{d.name}: {key} {a:.3f} → {b:.3f}" + ("" if a != b else " (unchanged)"))
                per_run.setdefault((re.sub(r"_seed\d+$", "", d.name), key), []).append((a, b))
        for (run, key), pairs in sorted(per_run.items()):
            print(f"  {study.name} {run} {key} over {len(pairs)} seed(s): kept {_mse([a for a, _ in pairs])} "
                  f"→ now {_mse([b for _, b in pairs])}")
        print(f"{study.name}: {n} evaluations recomputed")
    print("all other figures bit-identical" if not bad else f"{bad} unexplained differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
