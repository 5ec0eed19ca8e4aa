"""Do the headline figures still reproduce? Re-runs the cheap ones and reports each against its
documented spread (``docs/headlines.json``).

    python bench/figures/reproduce.py --out DIR [--only quickstart chain pag mlmt] [--headlines docs/headlines.json]

By default it runs the cases the headlines file documents (docs/headlines.json: quickstart, pag; the chain and
MLMT cases' figures were removed in issue 65, their commands still run with ``--only``).

Run it before a change to a warm start, the sampler, the engine or the trainer's forward lands. The
cases (each the command its figures were documented with; all share ``DIR``, so the base warm start is
built once, in ``DIR/embedded``):

* ``quickstart``: ``satseq quickstart --output-dir DIR`` (the chain task; ~14 min on 2 cores with the warm
  starts, which the other cases then reuse);
* ``chain``: ``python bench/methods/multiagent_comparison.py --task chain --out DIR --seeds 0 --threads 1``
  (SAT-Seq vs the simultaneous update vs GRPO on the chain relay task, one seed);
* ``pag``: ``satseq compare recipes/compare/pag.yaml --out DIR`` with seed 0 alone;
* ``mlmt``: ``satseq compare recipes/compare/mlmt.yaml --out DIR/mlmt`` with seed 0 alone (its
  ``embedded`` directory is ``DIR/embedded``: the same base warm start).

Each case is resumable as its command is (a finished one is read back, not redone). Prints one row per
headline: the documented figure (mean ± s.e. over its seeds), the range this check accepts (the
documented seeds' min..max widened by 2 evaluation standard errors, stated per figure in the JSON), the
value measured now and whether it is inside; exits 1 if any is outside. Writes ``DIR/reproduce.json``
and ``DIR/reproduce.md`` (atomically).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(cmd: list[str], threads: int | None = None) -> None:
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    print("$ " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    if rc:
        sys.exit(f"error: `{' '.join(cmd)}` exited with status {rc} (its output is above)")


def quickstart(out: Path) -> dict:
    res = out / "quickstart" / "results.json"
    if not res.exists():
        _run([str(BIN / "satseq"), "quickstart", "--output-dir", str(out)])
    r = json.loads(res.read_text())
    return {"vote before": r["before"]["vote"], "vote SAT-Seq": r["sat_seq"]["vote"],
            "vote shared policy": r["shared_policy"]["vote"],
            "one pass before": r["before"]["one_pass"], "one pass GRPO": r["grpo"]["one_pass"],
            "vote GRPO": r["grpo"]["vote"]}


def chain(out: Path) -> dict:
    res = out / "multiagent_comparison_chain.json"
    if not (res.exists() and "0" in json.loads(res.read_text())):
        _run([sys.executable, "bench/methods/multiagent_comparison.py", "--task", "chain", "--out", str(out), "--seeds", "0",
              "--threads", "1"], threads=1)
    r = json.loads(res.read_text())["0"]
    return {"warm vote": r["warm_start"]["vote"], "SAT-Seq vote": r["sat_seq"]["vote_equal_samples"],
            "simultaneous vote": r["simultaneous"]["vote_equal_samples"], "GRPO vote": r["grpo"]["vote_equal_samples"]}


def _compare_seed0(preset: str, out: Path) -> dict:
    """``satseq compare recipes/compare/<preset>.yaml`` with seed 0 alone into ``out``; its comparison.json."""
    import yaml

    spec = yaml.safe_load((ROOT / f"recipes/compare/{preset}.yaml").read_text())
    spec["seeds"] = [0]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{preset}_seed0.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    if not (out / "comparison.json").exists():  # --out DIR: the warm starts in DIR/embedded
        _run([str(BIN / "satseq"), "compare", str(path), "--out", str(out), "--no_progress"], threads=1)
    return json.loads((out / "comparison.json").read_text())


def pag(out: Path) -> dict:
    r = _compare_seed0("pag", out)
    out_ = {f"{name} Acc@final": seeds[0]["eval"]["accuracy"]["mean"] for name, seeds in r["runs"].items()}
    warm = next(w for w in r["warm_start"].values() if w)
    out_["warm Acc@final"] = warm["eval"]["accuracy"]["mean"]
    return out_


def mlmt(out: Path) -> dict:
    shared = out / "mlmt" / "embedded"  # the base warm start built once, for every case
    if not shared.exists():
        (out / "embedded").mkdir(parents=True, exist_ok=True)
        shared.parent.mkdir(parents=True, exist_ok=True)
        shared.symlink_to(out / "embedded", target_is_directory=True)
    r = _compare_seed0("mlmt", out / "mlmt")
    run, warm = r["runs"]["mlmt"][0]["eval"], r["warm_start"]["mlmt"]["eval"]
    return {"warm turn 3": warm["accuracy"]["mean"], "MLMT turn 3": run["accuracy"]["mean"],
            "MLMT copy the coach": run["coach"]["copy_coach"]["mean"]}


CASES = {"quickstart": quickstart, "chain": chain, "pag": pag, "mlmt": mlmt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="+", choices=sorted(CASES), default=None,
                    help="cases to run (default: every case the headlines file documents)")
    ap.add_argument("--headlines", type=Path, default=ROOT / "docs" / "headlines.json")
    a = ap.parse_args()
    headlines = json.loads(a.headlines.read_text())
    a.only = a.only or [c for c in CASES if c in headlines]
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    rows, measured = [], {}
    missing = [c for c in a.only if c not in headlines]
    if missing:
        sys.exit(f"error: {a.headlines}: no documented figures for {', '.join(missing)}")
    for case in a.only:
        measured[case] = CASES[case](a.out)
        for fig in headlines[case]["figures"]:
            v = measured[case].get(fig["name"])
            ok = v is not None and fig["lo"] <= v <= fig["hi"]
            rows.append({"case": case, **fig, "measured": v, "within": ok})
    from satseq.utils.io import write_json, write_text

    def num(v) -> str:
        return "—" if v is None else f"{v:.3f}"

    md = ["| case | figure | documented | accepted range | now | within |", "|---|---|---|---|---|---|"]
    md += [f"| {r['case']} | {r['name']} | {r['documented']} | {r['lo']:.3f}–{r['hi']:.3f} | {num(r['measured'])} | "
           f"{'yes' if r['within'] else '**no**'} |" for r in rows]
    write_json(a.out / "reproduce.json", {"rows": rows, "measured": measured})
    write_text(a.out / "reproduce.md", "\n".join(md) + "\n")
    print("\n".join(md))
    sys.exit(0 if all(r["within"] for r in rows) else 1)


if __name__ == "__main__":
    main()
