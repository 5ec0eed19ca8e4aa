"""bench/studies/builds.py: a recipe started from one warm-start build, and the report's spread over builds
beside the spread over seeds, with a claim checked on each build."""
import importlib.util
import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("builds", ROOT / "bench" / "studies" / "builds.py")
builds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(builds)


def test_build_recipe_starts_every_run_from_the_build(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"budget": {"tokens": 60000}, "common": ["a=1", "model.path=old"],
                                      "runs": [{"name": "x", "method": "grpo"}]}))
    out = builds.build_recipe(recipe, Path("/w/build1"), tokens=30000)
    assert out["common"] == ["a=1", "model.path=/w/build1"]
    assert out["budget"] == {"tokens": 30000}
    assert builds.build_recipe(recipe, Path("/w"))["budget"] == {"tokens": 60000}


def _run(d: Path, name: str, seed: int, acc: float) -> None:
    r = d / f"{name}_seed{seed}"
    r.mkdir(parents=True)
    (r / "compare_result.json").write_text(json.dumps({"eval": {"accuracy": {"mean": acc}}}))


def test_report_gives_each_build_and_the_spread_over_builds(tmp_path):
    for b, (a, c) in enumerate([([0.8, 0.9, 1.0], [0.5, 0.6, 0.7]), ([0.5, 0.5, 0.5], [0.6, 0.6, 0.6])]):
        for seed, (x, y) in enumerate(zip(a, c)):
            _run(tmp_path / f"build{b}", "a", seed, x)
            _run(tmp_path / f"build{b}", "c", seed, y)
    figs = builds.build_figures(tmp_path)
    assert figs == {0: {"a": [0.8, 0.9, 1.0], "c": [0.5, 0.6, 0.7]}, 1: {"a": [0.5] * 3, "c": [0.6] * 3}}
    text = builds.report(tmp_path, ["a>c"])
    row = next(line for line in text.splitlines() if line.startswith("| a |"))
    assert "0.900 ± 0.058 (0.800, 0.900, 1.000)" in row and "0.500 ± 0.000" in row
    assert "| 0.500–0.900 |" in row  # the builds' means
    assert "build 0 holds, build 1 fails — does not hold on every build" in text
