"""Loading problems from names, files and the hub (satseq.data.loading)."""
from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from satseq.data import load_problems
from satseq.errors import DataError, OfflineError
from satseq.rewards.extract import normalize_answer
from satseq.rewards.grade import _math_verify_equal, correctness_reward

SHARED = Path(os.environ.get("SATSEQ_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
needs_shared = pytest.mark.skipif(not (SHARED / "aime24" / "test.jsonl").is_file(),
                                  reason=f"shared benchmark data not found at {SHARED} (set SATSEQ_SHARED_DATA)")


@pytest.fixture(autouse=True)
def _no_env_data_dir(monkeypatch):
    monkeypatch.delenv("SATSEQ_DATA_DIR", raising=False)


def write_jsonl(path: Path, rows: list, blank_lines_at: tuple[int, ...] = ()) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    for i in blank_lines_at:
        lines.insert(i, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# The real benchmark files
# --------------------------------------------------------------------------------------------


@needs_shared
@pytest.mark.parametrize("name,count", [("aime24", 30), ("math500", 500), ("gsm8k", 1319)])
def test_benchmarks_load_by_name_with_data_dir(name, count):
    problems = load_problems(name, data_dir=SHARED)
    assert len(problems) == count
    assert len({p.problem_id for p in problems}) == count
    assert all(p.problem.strip() and p.answer.strip() for p in problems)


@needs_shared
def test_benchmark_details_and_env_data_dir(monkeypatch):
    monkeypatch.setenv("SATSEQ_DATA_DIR", str(SHARED))
    aime = load_problems("aime24")
    assert aime[0].problem_id == 60 and aime[0].answer == "204" and "url" in aime[0].meta
    gsm = load_problems("gsm8k")
    assert gsm[0].problem_id == 0 and gsm[0].answer == "18"
    assert len(load_problems("gsm8k", split="train")) == 7473
    m500 = load_problems("math500", limit=5)
    assert len(m500) == 5 and m500[0].problem_id == "test/precalculus/807.json"
    assert m500[0].meta["subject"] == "Precalculus"
    # 'math' (MATH test) falls back to MATH-500 when only that is present locally
    math = load_problems("math")
    assert len(math) == 500 and math[0].meta["resolved_as"] == "math500"
    # a path works as well as a name
    assert len(load_problems(SHARED / "aime24" / "test.jsonl")) == 30
    assert len(load_problems(str(SHARED / "gsm8k"))) == 1319  # a directory holding test.jsonl


@needs_shared
@pytest.mark.parametrize("name", ["aime24", "math500", "gsm8k"])
def test_every_reference_answer_grades_correct_against_itself(name):
    problems = load_problems(name, data_dir=SHARED)
    failures = [p.answer for p in problems
                if correctness_reward(f"Therefore the final answer is $\\boxed{{{p.answer}}}$.", p.answer) != 1.0]
    assert failures == []


@needs_shared
def test_math500_answers_parse_and_verify_in_math_verify():
    # bypass the string fast path: math-verify must accept each raw answer against its normalized form
    problems = load_problems("math500", data_dir=SHARED)
    failures = [p.answer for p in problems if not _math_verify_equal(normalize_answer(p.answer), p.answer, 5.0)]
    assert failures == []


# --------------------------------------------------------------------------------------------
# Record formats
# --------------------------------------------------------------------------------------------


def test_record_formats(tmp_path):
    path = write_jsonl(tmp_path / "mixed.jsonl", [
        {"problem": "1+1?", "answer": "2", "id": "a"},
        {"question": "How many?", "answer": "We add.\n#### 1,234", "problem_id": 7},
        {"prompt": "Solve x", "chosen": "Work... so $\\boxed{\\frac{1}{2}}$.", "rejected": "\\boxed{3}"},
        {"prompt": "Solve y", "chosen": "  42 \n", "rejected": "41"},
        {"prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Solve z"}],
         "reward_model": {"ground_truth": "9"}, "unique_id": "u9"},
        {"problem": "string answer", "answer": "17"},
    ])
    ps = load_problems(path)
    assert [p.problem_id for p in ps] == ["a", 7, 2, 3, "u9", 5]
    assert [p.answer for p in ps] == ["2", "1234", "\\frac{1}{2}", "42", "9", "17"]
    assert ps[0].source == f"{path}:1"
    assert [p.problem for p in ps][:5] == ["1+1?", "How many?", "Solve x", "Solve y", "Solve z"]
    assert ps[2].meta["rejected"] == "\\boxed{3}"
    assert len(load_problems(path, limit=2)) == 2


def test_json_and_parquet(tmp_path):
    rows = [{"problem": f"p{i}", "answer": str(i)} for i in range(3)]
    (tmp_path / "list.json").write_text(json.dumps(rows))
    (tmp_path / "wrapped.json").write_text(json.dumps({"data": rows}))
    (tmp_path / "lines.json").write_text("\n".join(json.dumps(r) for r in rows))
    for name in ["list.json", "wrapped.json", "lines.json"]:
        assert [p.answer for p in load_problems(tmp_path / name)] == ["0", "1", "2"], name
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    ps = load_problems(tmp_path / "t.parquet")
    assert [(p.problem_id, p.problem, p.answer) for p in ps] == [(0, "p0", "0"), (1, "p1", "1"), (2, "p2", "2")]
    pq.write_table(pa.Table.from_pylist([{"problem": "p"}]), tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"bad\.parquet: row 0: missing field 'answer'"):
        load_problems(tmp_path / "bad.parquet")


# --------------------------------------------------------------------------------------------
# Errors: one line, naming the file (and line)
# --------------------------------------------------------------------------------------------


def _error(source, **kw) -> str:
    with pytest.raises(DataError) as exc:
        load_problems(source, **kw)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_malformed_json_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"problem": "a", "answer": "1"}, "{not json"], blank_lines_at=(1,))
    assert _error(path).startswith(f"{path}:3: malformed JSON")


def test_missing_fields_name_the_line(tmp_path):
    path = write_jsonl(tmp_path / "noans.jsonl", [{"problem": "a", "answer": "1"}, {"problem": "b"}], blank_lines_at=(0,))
    assert _error(path) == f"{path}:3: missing field 'answer'"
    path = write_jsonl(tmp_path / "noprob.jsonl", [{"answer": "1"}])
    assert _error(path) == f"{path}:1: missing field 'problem' (or 'question' / 'prompt')"
    path = write_jsonl(tmp_path / "emptyans.jsonl", [{"problem": "a", "answer": "  "}])
    assert _error(path) == f"{path}:1: empty field 'answer'"
    path = write_jsonl(tmp_path / "dup.jsonl", [{"problem": "a", "answer": "1", "id": 1}, {"problem": "b", "answer": "2", "id": 1}])
    assert _error(path) == f"{path}:2: duplicate problem_id 1 (first at {path}:1)"


def test_empty_unsupported_and_missing_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert _error(empty) == f"{empty}: no rows"
    (tmp_path / "empty.json").write_text("[]")
    assert _error(tmp_path / "empty.json") == f"{tmp_path / 'empty.json'}: no rows"
    csv = tmp_path / "data.csv"
    csv.write_text("problem,answer\n1+1,2\n")
    assert _error(csv) == f"{csv}: unsupported file type '.csv' (use .jsonl, .json or .parquet)"
    missing = tmp_path / "nope.jsonl"
    assert _error(missing) == f"{missing}: file not found"
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('[{"problem": "a",\n "answer": }]')
    assert _error(bad_json).startswith(f"{bad_json}:2: malformed JSON")
    assert _error("no_such_benchmark").startswith("unknown dataset 'no_such_benchmark'")


# --------------------------------------------------------------------------------------------
# Name resolution: offline, and a (fake) hub
# --------------------------------------------------------------------------------------------


def test_offline_name_resolution_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OfflineError) as exc:
        load_problems("aime24", data_dir=tmp_path)
    msg = str(exc.value)
    assert msg.startswith(
        f"dataset 'aime24' is not available locally and the hub cannot be reached: put it at "
        f"{tmp_path}/aime24/test.jsonl (fields problem, answer) or pass --data_dir / set SATSEQ_DATA_DIR"
    )
    assert "HF_HUB_OFFLINE" in msg and "\n" not in msg
    # the env var is used when no data_dir is given
    monkeypatch.setenv("SATSEQ_DATA_DIR", str(tmp_path / "d"))
    with pytest.raises(OfflineError, match=r"put it at .*/d/gsm8k/train\.jsonl"):
        load_problems("gsm8k", split="train")


def test_offline_without_datasets_package(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(OfflineError, match=r"math500/test\.jsonl .*pip install 'satseq\[hub\]'"):
        load_problems("math500", data_dir=tmp_path)


def test_hub_fallback_with_a_fake_datasets_module(tmp_path, monkeypatch):
    calls = []

    def load_dataset(repo, config=None, split=None):
        calls.append((repo, config, split))
        if repo == "openai/gsm8k":
            return [{"question": "q1", "answer": "x\n#### 1,500"}]
        if repo == "HuggingFaceH4/aime_2024":
            return [{"id": 60, "problem": "p", "answer": "204"}]
        if repo == "EleutherAI/hendrycks_math":
            return [{"problem": f"{config} p", "solution": "so $\\boxed{\\frac{1}{2}}$", "level": "Level 1"}]
        raise ConnectionError("no route to host")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    gsm = load_problems("gsm8k", data_dir=tmp_path)
    assert [(p.problem, p.answer) for p in gsm] == [("q1", "1500")]
    assert load_problems("aime24", data_dir=tmp_path)[0].answer == "204"
    math = load_problems("math", data_dir=tmp_path)
    assert len(math) == 7 and all(p.answer == "\\frac{1}{2}" for p in math)
    assert calls[:2] == [("openai/gsm8k", "main", "test"), ("HuggingFaceH4/aime_2024", None, "train")]
    with pytest.raises(OfflineError, match=r"math500/test\.jsonl .*ConnectionError: no route to host"):
        load_problems("math500", data_dir=tmp_path)
    # a local file wins over the hub
    (tmp_path / "gsm8k").mkdir()
    write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [{"problem": "local", "answer": "1"}])
    assert load_problems("gsm8k", data_dir=tmp_path)[0].problem == "local"


def test_the_shipped_dapo_example_is_the_generators_and_trains(tiny_dir, tmp_path):
    """data/dapo/train.jsonl (the seed's example TRAIN_FILE) is what data/dapo/make_train.py writes, holds
    no held-out problem, and the seed's command trains on it."""
    import importlib.util
    import subprocess

    from satseq.data.arithmetic import ArithmeticTask
    from satseq.data.loading import load_file
    from satseq.models.warm_start import eval_exclusion

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("make_train", root / "data" / "dapo" / "make_train.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    shipped = (root / "data" / "dapo" / "train.jsonl").read_text(encoding="utf-8")
    assert shipped == "".join(json.dumps(r) + "\n" for r in gen.rows())
    problems = load_file(root / "data" / "dapo" / "train.jsonl")
    assert len(problems) == gen.ROWS and all(str(int(p.answer)) == p.answer for p in problems)
    assert not {p.problem for p in problems} & eval_exclusion(ArithmeticTask(seed=0))
    env = dict(os.environ, TRAIN_FILE="data/dapo/train.jsonl", NUM_STAGES="1", TRAIN_BATCH_SIZE="2",
               AGENT1_PATH=str(tiny_dir), AGENT2_PATH=str(tiny_dir), AGENT3_PATH=str(tiny_dir), OMP_NUM_THREADS="1")
    r = subprocess.run(["bash", "recipes/sat_seq/train_dapo.sh", f"output_dir={tmp_path}", "rollout.max_new_tokens=4",
                        "sat_seq.group_size=2", "data.eval_size=2", "sat_seq.certificate.prompts=0",
                        "trainer.tensorboard=false", "trainer.progress=false"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]
    assert (tmp_path / "sat_seq_dapo" / "agent_1_stage_1.pt").is_file()
