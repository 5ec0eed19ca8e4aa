"""Strict inputs: every file of tests/malformed/ gets the outcome its MANIFEST.json documents.

Each entry goes through the reader the CLI uses (``load_problems`` / ``load_config``) and, for the
refused ones, through the CLI itself (``satseq eval --dataset F`` / ``satseq train F``): one line,
``error: FILE[:LINE]: ...``, exit status 2, no traceback, nothing written. Then the checks that need
a model (prompts longer than the context, in ``satseq eval`` and ``satseq train``) and the bounds
(an alias bomb costs well under a second; error messages stay short).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from satseq.cli import app
from satseq.config import load_config
from satseq.data import load_problems
from satseq.errors import ConfigError, DataError, SatseqError

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "malformed"
MANIFEST = json.loads((CORPUS / "MANIFEST.json").read_text(encoding="utf-8"))["entries"]
REFUSED = [e for e in MANIFEST if e["expect"] == "error"]


def _id(e: dict) -> str:
    return e["file"]


def _read(entry: dict, path: Path):
    return (load_problems if entry["reader"] == "dataset" else load_config)(path)


def _check_message(entry: dict, path: Path, msg: str) -> None:
    assert "\n" not in msg and "Traceback" not in msg, msg
    assert len(msg) <= SatseqError.MAX_LENGTH, len(msg)
    assert msg.startswith(str(path)), msg  # names the file first
    if "line" in entry:
        assert msg.startswith(f"{path}:{entry['line']}: "), msg
    for part in entry["contains"]:
        assert part in msg, (part, msg)


def test_the_manifest_covers_the_corpus():
    names = {e["file"] for e in MANIFEST}
    assert len(MANIFEST) >= 40 and len(names) == len(MANIFEST)
    on_disk = {p.name for p in CORPUS.iterdir() if p.name not in ("MANIFEST.json", "make_corpus.py", ".gitattributes")}
    assert on_disk == names
    assert {e["reader"] for e in MANIFEST} == {"dataset", "config"}
    assert all(e["expect"] in ("ok", "error") and (e["expect"] == "ok" or e["contains"]) for e in MANIFEST)


@pytest.mark.parametrize("entry", MANIFEST, ids=_id)
def test_reader_outcome(entry):
    path = CORPUS / entry["file"]
    if entry["expect"] == "ok":
        result = _read(entry, path)
        if entry["reader"] == "dataset":
            assert result and all(p.problem.strip() and p.answer for p in result)
        return
    error = DataError if entry["reader"] == "dataset" else ConfigError
    with pytest.raises(error) as exc:
        _read(entry, path)
    _check_message(entry, path, str(exc.value))


@pytest.fixture()
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


@pytest.mark.parametrize("entry", REFUSED, ids=_id)
def test_cli_refuses_in_one_line_and_writes_nothing(entry, in_tmp, tiny_dir):
    path = CORPUS / entry["file"]
    if entry["reader"] == "dataset":
        args = ["eval", "--dataset", str(path), "--checkpoint_dir", str(tiny_dir), "--output_dir", "out",
                "--threads", "1"]
    else:
        args = ["train", str(path), "output_dir=out"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    _check_message(entry, path, lines[0][len("error: "):])
    assert not (in_tmp / "out").exists() and not (in_tmp / "outputs").exists()


# ---------------------------------------------------------------------------- needs a model
def _long_dataset(tmp_path: Path) -> Path:
    f = tmp_path / "long.jsonl"
    f.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n"
                 + json.dumps({"problem": "1+" * 500_000 + "1", "answer": "2"}) + "\n", encoding="utf-8")
    return f


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    return env


def test_eval_a_prompt_longer_than_the_context_is_refused_before_any_output(tmp_path, tiny_dir):
    data, out = _long_dataset(tmp_path), tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "satseq.cli", "eval", "--dataset", str(data), "--checkpoint_dir",
                        str(tiny_dir), "--output_dir", str(out), "--threads", "1"],
                       capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert p.returncode == 2, p.stderr
    err = [x for x in p.stderr.strip().splitlines() if not x.startswith("Writing")]
    assert len(err) == 1 and err[0].startswith(f"error: {data}:2: the prompt is "), p.stderr
    assert "context length 256" in err[0] and "Traceback" not in p.stderr
    assert not (out / "inference_config.yaml").exists() and not out.exists()


def test_train_a_prompt_longer_than_the_context_is_refused_before_the_run_dir(in_tmp, tiny_dir):
    data = _long_dataset(in_tmp)
    result = CliRunner().invoke(app, ["train", "method=grpo", f"model.path={tiny_dir}", f"data.train={data}",
                                      "data.eval=embedded", "output_dir=out", "threads=1", "trainer.progress=false"])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {data}:2: the prompt is "), result.stderr
    assert "rollout.max_new_tokens" in lines[0]
    assert not (in_tmp / "out").exists()


def test_context_check_only_tokenizes_long_prompts():
    from satseq.data.context import check_prompt_lengths
    from satseq.records import Problem

    class Fmt:
        calls = 0

        def single(self, text):
            return f"<{text}>"

        def encode(self, text):
            Fmt.calls += 1
            return list(text)

    short = [Problem(i, "x" * 10, "1", source=f"f.jsonl:{i + 1}") for i in range(1000)]
    check_prompt_lengths(short, Fmt(), context_length=100, max_new_tokens=20)
    assert Fmt.calls == 0
    check_prompt_lengths(short, Fmt(), context_length=None, max_new_tokens=20)
    with pytest.raises(DataError, match=r"^g\.jsonl:3: the prompt is 82 tokens; with max_new_tokens 20"):
        check_prompt_lengths(short[:2] + [Problem(2, "y" * 80, "1", source="g.jsonl:3")], Fmt(),
                             context_length=100, max_new_tokens=20)
    with pytest.raises(ConfigError, match="leaves no room"):
        check_prompt_lengths(short, Fmt(), context_length=100, max_new_tokens=100)


# ---------------------------------------------------------------------------------- bounds
def test_alias_bomb_is_cheap(tmp_path):
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="aliases expand"):
        load_config(CORPUS / "alias_bomb.yaml")
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # a bound against an exponential expansion (minutes), not a timing: loose enough for a loaded machine
    assert elapsed < 10.0 and peak < 20 * 2**20, (elapsed, peak)


def test_a_large_aliased_value_in_an_error_is_shown_short(tmp_path):
    """Under the alias limit, but thousands of nodes: the message shows a few dozen characters."""
    items = ", ".join(f"k{i}: [1, 2, 3]" for i in range(1500))
    cfg = tmp_path / "big.yaml"
    cfg.write_text(f"x: &big {{{items}}}\nseed: *big\n", encoding="utf-8")
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    assert time.perf_counter() - t0 < 10.0  # a bound against rendering thousands of nodes, not a timing
    assert len(str(exc.value)) < 300 and "seed" in str(exc.value), str(exc.value)


def test_overrides_follow_the_same_rules():
    cases = {
        "algorithm.gamma=yes": "expected a number, got a boolean",
        "trainer.num_stages=off": "expected a number, got a boolean",
        "sat_seq.A_clip=.inf": "finite",
        "algorithm.gamma=nan": "finite",
        "seed=!!python/name:os.system": "tag",
        "run_name=[&a [1,2], *a, *a]": "run_name",
    }
    for item, part in cases.items():
        with pytest.raises(ConfigError) as exc:
            load_config(None, [item])
        assert part in str(exc.value) and "\n" not in str(exc.value), (item, str(exc.value))
    assert load_config(None, ["trainer.progress=no"]).trainer.progress is False
    assert load_config(None, ["ppo.lr=1e-5"]).ppo.lr == 1e-5
    # YAML reads `off` as false: a choice that offers "off" takes it as the choice, in a file too
    cfg = load_config(None, ["rollout.is_correction=off", "trainer.autocast=off"])
    assert (cfg.rollout.is_correction, cfg.trainer.autocast) == ("off", "off")
    with pytest.raises(ConfigError, match="rollout.is_correction"):
        load_config(None, ["rollout.is_correction=on"])  # true is no choice


def test_eval_sampling_options_must_be_finite():
    from satseq.eval.runner import resolve_sampling

    for kw in ({"temperature": float("nan")}, {"temperature": float("inf")}, {"top_p": float("nan")}):
        with pytest.raises(ConfigError):
            resolve_sampling(1, kw.get("temperature"), kw.get("top_p"), 8)


def test_train_on_the_embedded_model_refuses_before_building_the_warm_start(in_tmp):
    data = _long_dataset(in_tmp)
    result = CliRunner().invoke(app, ["train", f"data.train={data}", "output_dir=out", "threads=1",
                                      "trainer.progress=false"])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {data}:2: the prompt is "), result.stderr
    assert "context length 256" in lines[0]
    assert not (in_tmp / "out").exists()  # neither the run directory nor the warm start
