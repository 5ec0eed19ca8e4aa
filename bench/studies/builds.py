"""Run a `satseq compare` recipe on several warm-start builds (SFT seeds), keep each build's study, and
report the spread over builds beside the spread over RL seeds (issue 65, item 4).

    python bench/studies/builds.py run RECIPE --out DIR --builds 0 1 [--task base|self_verify|...] [--runs a,b] [--tokens N]
    python bench/studies/builds.py report DIR [--claim RUN>RUN ...]
    python bench/studies/builds.py save DIR bench/studies/<study>
    python bench/studies/builds.py restore bench/studies/<study> DIR      # then `run` again goes on where it stopped

``run`` builds each warm start once (`satseq sft --seed B --task TASK --threads 1 --out DIR/warm_starts/build<B>`:
every build is trained to its validation target from its own SFT seed, docs/embedded_default.md), writes
``DIR/build<B>/recipe.yaml`` (RECIPE with ``model.path=<that build>`` added to ``common``: every run and the
warm-start rows start from it) and runs `satseq compare` on it into ``DIR/build<B>`` (resumable: a finished
run is reused). ``report`` reads each build's finished runs (``compare_result.json``, and ``evals/*/metrics.json``
for ``--metric maj@k``): per run, each build's mean ± s.e. over its seeds, the spread over builds (the builds' means: min–max), and for each ``--claim A>B`` whether A's mean is
above B's on every build. ``save`` / ``restore`` are bench/studies/keep.py's, once per build (no weights).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import keep  # noqa: E402  (bench/studies/keep.py)

def _satseq() -> str:
    return str(Path(sys.executable).with_name("satseq"))


def warm_start_path(warm_root: Path, task: str, build: int) -> Path:
    """Where `satseq sft --out warm_root --task task --seed build` puts its warm start."""
    from satseq.models.warm_start import method_warm_start_dir, warm_start_dir

    if task == "base":
        return warm_start_dir(warm_root, build)
    from satseq.cli import _env_warm_starts  # the stems `satseq sft --task` writes

    stem, _ = _env_warm_starts()[task]
    return method_warm_start_dir(warm_root, stem, build)


def build_recipe(recipe: Path, warm: Path, tokens: int | None = None) -> dict:
    """RECIPE with every run started from ``warm`` (``model.path`` appended to ``common``), and its budget
    ``tokens`` generated tokens a run when given."""
    spec = yaml.safe_load(recipe.read_text())
    if tokens:
        spec["budget"] = {"tokens": tokens}
    common = spec.get("common") or []
    if isinstance(common, dict):
        common = [f"{k}={v}" for k, v in common.items()]
    spec["common"] = [c for c in common if not str(c).startswith("model.path=")] + [f"model.path={warm}"]
    return spec


def run(recipe: Path, out: Path, builds: list[int], task: str, runs: str | None, jobs: int,
        warm_root: Path | None = None, tokens: int | None = None) -> None:
    out = out.resolve()
    warm_root = (warm_root or out / "warm_starts").resolve()
    for b in builds:
        warm = warm_start_path(warm_root / f"build{b}", task, b)  # one directory a build: builds lock theirs
        if not (warm / "config.json").is_file():
            subprocess.run([_satseq(), "sft", "--out", str(warm_root / f"build{b}"), "--task", task, "--seed", str(b),
                            "--threads", "1"], check=True, cwd=ROOT)
        d = out / f"build{b}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "recipe.yaml").write_text(f"# {recipe} on warm-start build {b} (bench/studies/builds.py)\n"
                                       + yaml.safe_dump(build_recipe(recipe, warm, tokens), sort_keys=False))
        cmd = [_satseq(), "compare", str(d / "recipe.yaml"), "--out", str(d), "--no_progress", "--jobs", str(jobs)]
        if runs:
            cmd += ["--runs", runs]
        subprocess.run(cmd, check=True, cwd=ROOT)


def _mean_se(xs: list[float]) -> tuple[float, float]:
    """(mean, s.e.) of :func:`~satseq.utils.stats.mean_se`; s.e. NaN for one value."""
    from satseq.utils.stats import mean_se

    r = mean_se(xs)
    return r["mean"], (r["se"] if r["se"] is not None else float("nan"))


def _metric(run_dir: Path, evals: Path, metric: str) -> float:
    """One run's final held-out figure: ``accuracy`` (compare_result.json: the final answer's) or a key of
    its evaluation's metrics.json (``maj@2``, ``pass@4``, ...: the mean)."""
    if metric == "accuracy":
        return json.loads((run_dir / "compare_result.json").read_text())["eval"]["accuracy"]["mean"]
    kept = json.loads((evals / run_dir.name / "metrics.json").read_text())
    if metric in kept:
        return kept[metric]["mean"]
    return _recomputed(evals / run_dir.name, metric)


def _recomputed(eval_dir: Path, metric: str) -> float:
    """``maj@k`` / ``pass@k`` / ``avg@k`` of a k the evaluation did not report, from its kept predictions
    (the current evaluator, its eval seed: bench/studies/revote.py's way)."""
    from satseq.eval.report import compute_metrics
    from satseq.utils.io import read_jsonl

    k = int(metric.split("@")[1])
    seed = int(yaml.safe_load((eval_dir / "inference_config.yaml").read_text()).get("seed", 0))
    rows = read_jsonl(eval_dir / "predictions.jsonl", allow_partial_last_line=True)
    return compute_metrics(rows, [1, k], seed)[metric]["mean"]


def build_figures(out: Path, metric: str = "accuracy") -> dict[int, dict[str, list[float]]]:
    """{build: {run: [the metric per seed, in seed order]}} from each build's finished runs (a study kept
    by ``save`` reads the same as the one it was saved from)."""
    res: dict[int, dict[str, list[float]]] = {}
    for d in sorted(out.glob("build*")):
        runs: dict[str, list[tuple[int, float]]] = {}
        for r in sorted(d.glob("*_seed*")):
            if (r / "compare_result.json").is_file():
                name, seed = r.name.rsplit("_seed", 1)
                runs.setdefault(name, []).append((int(seed), _metric(r, d / "evals", metric)))
        if runs:
            res[int(d.name[len("build"):])] = {n: [v for _, v in sorted(xs)] for n, xs in runs.items()}
    return res


def report(out: Path, claims: list[str], metric: str = "accuracy") -> str:
    acc = build_figures(out, metric)
    builds = sorted(acc)
    names = [n for n in acc[builds[0]] if all(n in acc[b] for b in builds)]
    lines = [f"{metric}, per run:", "", "| run | " + " | ".join(f"build {b}: mean ± s.e. over seeds (seeds)" for b in builds)
             + " | spread over builds (the builds' means) | all build × seed runs: mean ± s.e. |",
             "|---" * (len(builds) + 3) + "|"]
    for n in names:
        cells = []
        for b in builds:
            m, se = _mean_se(acc[b][n])
            cells.append(f"{m:.3f} ± {se:.3f} ({', '.join(f'{x:.3f}' for x in acc[b][n])})")
        means = [_mean_se(acc[b][n])[0] for b in builds]
        m, se = _mean_se([x for b in builds for x in acc[b][n]])
        lines.append(f"| {n} | " + " | ".join(cells) + f" | {min(means):.3f}–{max(means):.3f} | {m:.3f} ± {se:.3f} |")
    for c in claims:
        a, b_ = c.split(">")
        held = [_mean_se(acc[b][a])[0] > _mean_se(acc[b][b_])[0] for b in builds]
        lines.append(f"\nclaim {a} > {b_}: " + ", ".join(f"build {b} {'holds' if h else 'fails'}"
                                                           for b, h in zip(builds, held))
                     + (" — holds on every build" if all(held) else " — does not hold on every build"))
    return "\n".join(lines)


def _warm_roots(out: Path) -> list[Path]:
    """The warm starts the builds' recipes start from (their ``model.path``)."""
    paths = []
    for r in sorted(out.glob("build*/recipe.yaml")):
        paths += [Path(c.split("=", 1)[1]) for c in yaml.safe_load(r.read_text())["common"] if c.startswith("model.path=")]
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("recipe", type=Path)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--builds", type=int, nargs="+", default=[0, 1])
    r.add_argument("--task", default="base", help="satseq sft --task of the warm start every run starts from")
    r.add_argument("--runs", default=None, help="satseq compare --runs")
    r.add_argument("--jobs", type=int, default=1)
    r.add_argument("--warm-root", type=Path, default=None, help="where the warm starts are built (default OUT/warm_starts)")
    r.add_argument("--tokens", type=int, default=None, help="the budget in generated tokens a run, instead of the recipe's")
    p = sub.add_parser("report")
    p.add_argument("out", type=Path)
    p.add_argument("--claim", nargs="*", default=[], help="RUN>RUN: checked on each build")
    p.add_argument("--metric", default="accuracy", help="accuracy (the final answer's) or an evaluation key: maj@2, ...")
    s = sub.add_parser("save")
    s.add_argument("out", type=Path)
    s.add_argument("keep", type=Path)
    t = sub.add_parser("restore")
    t.add_argument("keep", type=Path)
    t.add_argument("out", type=Path)
    a = ap.parse_args()
    if a.cmd == "run":
        run(a.recipe, a.out, a.builds, a.task, a.runs, a.jobs, a.warm_root, a.tokens)
    elif a.cmd == "report":
        print(report(a.out, a.claim, a.metric))
    elif a.cmd == "save":
        for d in sorted(a.out.glob("build*")):
            if (d / "recipe.yaml").is_file():
                (a.keep / d.name).mkdir(parents=True, exist_ok=True)  # a build with nothing finished yet too
                keep.save(d, a.keep / d.name)
                for name in ("recipe.yaml", "comparison.md"):
                    if (d / name).is_file():
                        (a.keep / d.name / name).write_bytes((d / name).read_bytes())
        for w in sorted(_warm_roots(a.out)):
            if (w / "warm_start.json").is_file():  # how each build was made (no weights)
                dst = a.keep / "warm_starts" / w.name
                dst.mkdir(parents=True, exist_ok=True)
                (dst / "warm_start.json").write_bytes((w / "warm_start.json").read_bytes())
    else:
        for d in sorted(a.keep.glob("build*")):
            keep.restore(d, a.out / d.name)


if __name__ == "__main__":
    main()
