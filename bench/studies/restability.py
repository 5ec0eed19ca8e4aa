"""Re-render the Stability section of each kept ``comparison.md`` (and ``comparison.json``'s
``stability``) from the study's kept files with the current rule (:mod:`satseq.compare.stability`),
nothing re-run: each run's ``metrics.jsonl`` and ``compare_result.json`` (final accuracy, periodic curve),
and its warm start's kept evaluation.

    python bench/studies/restability.py            # every bench/studies/*/comparison.md: rewrite it
    python bench/studies/restability.py --check    # print what would change, write nothing

The warm start of each run is the one its ``↳ warm start`` row names (``start of a, b``); that row's
accuracy and pass@k pick the kept ``evals/warm_start_*`` evaluation (exactly one must match), whose
unrounded accuracy is what the rule compares with, as ``satseq compare`` does. Before writing, every
column of the recomputed table except ``collapsed seeds`` and ``collapse reasons`` (what the rule
decides) must equal the kept table's, so the rewrite changes nothing but the verdict (exit 1 otherwise).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

STUDIES = Path(__file__).resolve().parent
HEADER = "| run | collapsed seeds |"
DECIDED = (1, 11)  # the columns the rule decides: collapsed seeds, collapse reasons


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def warm_accuracies(study: Path, md: str) -> dict[str, float]:
    """``{run name: its warm start's unrounded held-out accuracy}`` from the ``↳ warm start`` rows."""
    evals = {}
    for d in sorted((study / "evals").glob("warm_start_*")):
        m = json.loads((d / "metrics.json").read_text())
        k = max(m["ks"])
        evals[d.name] = (m["accuracy"]["mean"], m[f"pass@{k}"])
    out = {}
    for line in md.splitlines():
        if not line.startswith("| ↳ warm start |"):
            continue
        c = _cells(line)
        names = re.search(r"start of ([^;]+);", c[-1]).group(1).split(", ")
        passk = c[3].split(" ± ")
        found = {round(a, 6) for name, (a, p) in evals.items()
                 if f"{a:.3f}" == c[1] and f"{p['mean']:.3f}" == passk[0] and f"{p['se']:.3f}" == passk[1]}
        if len(found) != 1:
            raise SystemExit(f"error: {study.name}: the warm start row {c[1]} matches {len(found)} kept evaluations")
        acc = next(a for a, _ in evals.values() if round(a, 6) in found)
        out.update({n: acc for n in names})
    return out


def recompute(study: Path) -> tuple[list[str], dict]:
    from satseq.compare.report import stability_lines
    from satseq.compare.stability import over_seeds, run_stability
    from satseq.tracking import read_metrics

    md = (study / "comparison.md").read_text()
    warm = warm_accuracies(study, md)
    results: dict[str, list[dict]] = {}
    for d in sorted(p for p in study.iterdir() if (p / "compare_result.json").is_file()):
        r = json.loads((d / "compare_result.json").read_text())
        results.setdefault(r["name"], []).append(
            run_stability(read_metrics(d), r["eval"]["accuracy"]["mean"], warm.get(r["name"]), r["curve"]["acc"]))
    lines = md.splitlines()
    i = next(j for j, line in enumerate(lines) if line.startswith(HEADER))
    kept = [_cells(row)[0] for row in lines[i + 2:] if row.startswith("|")]
    stab = {name: over_seeds(results[name]) for name in kept}
    return stability_lines(stab), stab


def rewrite(study: Path, check: bool) -> bool:
    """True when the study's file changed (or would)."""
    from satseq.compare.report import STABILITY_NOTE
    from satseq.utils.io import write_json

    path = study / "comparison.md"
    lines = path.read_text().splitlines()
    new, stab = recompute(study)
    i = next(j for j, line in enumerate(lines) if line.startswith(HEADER))
    end = i
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    for old_row, new_row in zip(lines[i + 2:end], new[2:]):
        a, b = _cells(old_row), _cells(new_row)
        same = [x for j, x in enumerate(a) if j not in DECIDED] == [x for j, x in enumerate(b) if j not in DECIDED]
        if not same:
            raise SystemExit(f"error: {study.name}: the recomputed row differs beyond the verdict:\n  kept {old_row}\n"
                             f"  now  {new_row}")
        if old_row != new_row:
            print(f"{study.name}: {a[0]}: collapsed {a[1]} → {b[1]}; reasons {a[11]!r} → {b[11]!r}")
    note = next(j for j, line in enumerate(lines) if line.startswith("Collapsed: "))
    out = lines[:note] + [STABILITY_NOTE] + lines[note + 1:i] + new + lines[end:]
    changed = out != lines
    if changed and not check:
        path.write_text("\n".join(out) + "\n")
        js = study / "comparison.json"
        if js.is_file():
            data = json.loads(js.read_text())
            data["stability"] = stab
            write_json(js, data)
    return changed


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="print what would change, write nothing")
    check = ap.parse_args(argv).check
    for study in sorted(p.parent for p in STUDIES.glob("*/comparison.md")):
        changed = rewrite(study, check)
        print(f"{study.name}: {'changed' if changed else 'unchanged'}{' (not written: --check)' if check and changed else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
