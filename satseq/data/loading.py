"""Load math problems from a benchmark name, a local file, or a hub dataset.

``load_problems(source)`` accepts:

- a **benchmark name**: ``aime24``, ``math500``, ``math`` (the MATH test split), ``gsm8k``.
  Resolution is local first: ``<data_dir>/<name>/<split>.jsonl``, with ``data_dir`` from the
  argument, else ``$SATSEQ_DATA_DIR``, else ``./data`` (the seed's layout, ``data/aime24/test.jsonl``);
  then the hub through the optional ``datasets`` package (``pip install 'satseq[hub]'``), imported
  lazily. Offline (``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` set, ``datasets`` missing, or the hub
  unreachable) with no local copy raises :class:`OfflineError` naming the exact file to provide.

  ``math`` is the full MATH test split (5000 problems), which is NOT MATH-500: it resolves to
  ``math/<split>.jsonl``; if only ``math500/test.jsonl`` exists locally, that file is used instead
  (and ``meta["resolved_as"]`` says so), since MATH-500 is the usual stand-in for MATH test.
- a **path** to ``.jsonl``, ``.json`` (a list of objects, ``{"data": [...]}``, or JSON lines) or
  ``.parquet`` (needs ``pyarrow``);
- a **hub id** ``owner/name`` (not an existing path), loaded with ``datasets.load_dataset(id, split=split)``.

Record formats (one row -> one :class:`Problem`):

- ``{"problem", "answer"}`` (evaluation);
- ``{"question", "answer"}`` (GSM8K; ``"... #### 1,000"`` answers are parsed to ``"1000"``);
- ``{"prompt", "chosen", "rejected"}`` (the seed's DAPO training format): the answer is the last
  ``\\boxed{}`` of ``chosen`` if it has one, else the whole ``chosen`` text, stripped;
- verl-style rows, ``prompt`` as a chat-message list and ``reward_model.ground_truth``.

``problem_id`` is ``id``, ``problem_id`` or ``unique_id`` if present, else the 0-based row index;
ids must be unique (resumed evaluations key on them). Other fields go to ``Problem.meta``.
Every error is one line: :class:`DataError` naming ``file:line`` (``file:row i`` for JSON/parquet).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from satseq.errors import ConfigError, DataError, OfflineError
from satseq.rewards.extract import extract_boxed, parse_gsm8k_answer
from satseq.utils.io import read_jsonl
from satseq.records import Problem

__all__ = ["BENCHMARKS", "HUB_SOURCES", "load_problems", "resolve_data_dir"]

#: Benchmark names accepted by :func:`load_problems`.
BENCHMARKS = ("aime24", "math500", "math", "gsm8k")

#: Hub dataset for each benchmark: (repo id, config or None, split override or None).
HUB_SOURCES: dict[str, tuple[str, str | None, str | None]] = {
    "aime24": ("HuggingFaceH4/aime_2024", None, "train"),  # the hub copy has a single 'train' split
    "math500": ("HuggingFaceH4/MATH-500", None, None),
    "gsm8k": ("openai/gsm8k", "main", None),
    "math": ("EleutherAI/hendrycks_math", None, None),  # one config per subject, concatenated
}
_MATH_SUBJECTS = (
    "algebra", "counting_and_probability", "geometry", "intermediate_algebra",
    "number_theory", "prealgebra", "precalculus",
)
_EXTENSIONS = (".jsonl", ".json", ".parquet")
_PROBLEM_KEYS = ("problem", "question", "prompt")
_ID_KEYS = ("id", "problem_id", "unique_id")


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """``data_dir``, else ``$SATSEQ_DATA_DIR``, else ``./data``."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir)
    env = os.environ.get("SATSEQ_DATA_DIR")
    return Path(env) if env else Path("data")


def load_problems(
    source: str | os.PathLike,
    *,
    split: str = "test",
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
) -> list[Problem]:
    """Problems from a benchmark name, a local file or a hub id (see the module docstring).

    ``limit`` keeps the first ``limit`` problems (all rows are still validated).
    """
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    problems = _load(source, split=split, data_dir=data_dir)
    return problems if limit is None else problems[:limit]


def _load(source: str | os.PathLike, *, split: str, data_dir) -> list[Problem]:
    text = str(source)
    path = Path(text).expanduser()
    if text in BENCHMARKS and not path.is_file():
        return _load_benchmark(text, split=split, data_dir=data_dir)
    if path.is_dir():
        candidate = path / f"{split}.jsonl"
        if candidate.is_file():
            return load_file(candidate)
        raise DataError(f"{path}: is a directory without {split}.jsonl")
    if path.is_file() or path.suffix.lower() in _EXTENSIONS or text.startswith((".", "/", "~")):
        return load_file(path)
    if _looks_like_hub_id(text):
        return _load_hub_id(text, split=split)
    raise DataError(
        f"unknown dataset {text!r}: use one of {', '.join(BENCHMARKS)}, "
        "a path to a .jsonl/.json/.parquet file, or a hub id owner/name"
    )


def _looks_like_hub_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts)


# ----------------------------------------------------------------------------------------------
# Benchmark names
# ----------------------------------------------------------------------------------------------


def _load_benchmark(name: str, *, split: str, data_dir) -> list[Problem]:
    root = resolve_data_dir(data_dir)
    local = root / name / f"{split}.jsonl"
    if local.is_file():
        return load_file(local)
    if name == "math" and split == "test":
        fallback = root / "math500" / "test.jsonl"
        if fallback.is_file():
            problems = load_file(fallback)
            for p in problems:
                p.meta["resolved_as"] = "math500"
            return problems
    return _load_benchmark_from_hub(name, split=split, expected=local)


def _offline_message(name: str, expected: Path, reason: str) -> str:
    return (
        f"dataset {name!r} is not available locally and the hub cannot be reached: "
        f"put it at {expected} (fields problem, answer) or pass --data_dir / set SATSEQ_DATA_DIR"
        f" ({reason})"
    )


def _import_datasets_or_reason() -> tuple[Any, str | None]:
    """``(datasets module, None)`` or ``(None, why the hub cannot be used)``."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return None, f"{var} is set"
    try:
        import datasets  # noqa: WPS433 — optional extra 'hub'
    except ImportError:
        return None, "the optional package 'datasets' is not installed: pip install 'satseq[hub]'"
    return datasets, None


def _load_benchmark_from_hub(name: str, *, split: str, expected: Path) -> list[Problem]:
    datasets, reason = _import_datasets_or_reason()
    if datasets is None:
        raise OfflineError(_offline_message(name, expected, reason or "offline"))
    repo, config, split_override = HUB_SOURCES[name]
    hub_split = split_override or split
    where = f"hub:{repo}"
    try:
        if name == "math":
            rows: list[dict] = []
            for subject in _MATH_SUBJECTS:
                for r in datasets.load_dataset(repo, subject, split=hub_split):
                    r = dict(r)
                    r.setdefault("answer", extract_boxed(r.get("solution", "")) or "")
                    r.setdefault("subject", subject)
                    rows.append(r)
        else:
            rows = [dict(r) for r in datasets.load_dataset(repo, config, split=hub_split)]
    except Exception as e:  # noqa: BLE001 — connection errors come in many types
        raise OfflineError(_offline_message(name, expected, f"{type(e).__name__}: {e}")) from None
    return _rows_to_problems(rows, where, lambda i: f"{where}: row {i}")


def _load_hub_id(repo: str, *, split: str) -> list[Problem]:
    datasets, reason = _import_datasets_or_reason()
    if datasets is None:
        raise OfflineError(
            f"dataset {repo!r} is not a local file and the hub cannot be used ({reason}): "
            "download it to a .jsonl/.parquet file and pass its path"
        )
    try:
        rows = [dict(r) for r in datasets.load_dataset(repo, split=split)]
    except Exception as e:  # noqa: BLE001
        raise OfflineError(f"cannot load hub dataset {repo!r} split {split!r} ({type(e).__name__}: {e})") from None
    where = f"hub:{repo}"
    return _rows_to_problems(rows, where, lambda i: f"{where}: row {i}")


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def load_file(path: str | os.PathLike) -> list[Problem]:
    """Problems from one ``.jsonl``, ``.json`` or ``.parquet`` file."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in _EXTENSIONS:
        raise DataError(f"{path}: unsupported file type {suffix or '(none)'!r} (use .jsonl, .json or .parquet)")
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    if suffix == ".jsonl":
        rows = read_jsonl(path)
        line_of = _nonblank_line_numbers(path)
        return _rows_to_problems(rows, str(path), lambda i: f"{path}:{line_of[i]}")
    if suffix == ".json":
        rows, located = _read_json(path)
        return _rows_to_problems(rows, str(path), located)
    rows = _read_parquet(path)
    return _rows_to_problems(rows, str(path), lambda i: f"{path}: row {i}")


def _nonblank_line_numbers(path: Path) -> list[int]:
    """1-based line numbers of the non-blank lines (the rows ``read_jsonl`` returns, in order)."""
    with open(path, encoding="utf-8") as fh:
        return [i for i, line in enumerate(fh.readlines(), start=1) if line.strip()]


def _read_json(path: Path) -> tuple[list[dict], Callable[[int], str]]:
    text = path.read_text(encoding="utf-8")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # JSON lines in a .json file (what datasets' to_json writes)
            rows = read_jsonl(path)
            line_of = _nonblank_line_numbers(path)
            return rows, lambda i: f"{path}:{line_of[i]}"
        raise DataError(f"{path}:{e.lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
    if isinstance(obj, dict):
        lists = [v for k, v in obj.items() if k in ("data", "rows", "examples", "problems") and isinstance(v, list)]
        if not lists:
            raise DataError(f"{path}: expected a list of objects or {{\"data\": [...]}}")
        obj = lists[0]
    if not isinstance(obj, list):
        raise DataError(f"{path}: expected a list of objects, got {type(obj).__name__}")
    for i, r in enumerate(obj):
        if not isinstance(r, dict):
            raise DataError(f"{path}: row {i}: expected a JSON object, got {type(r).__name__}")
    return obj, lambda i: f"{path}: row {i}"


def _read_parquet(path: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq  # noqa: WPS433 — optional
    except ImportError:
        raise DataError(f"{path}: reading parquet needs pyarrow: pip install pyarrow") from None
    try:
        return pq.read_table(path).to_pylist()
    except Exception as e:  # noqa: BLE001
        raise DataError(f"{path}: cannot read parquet ({type(e).__name__}: {e})") from None


# ----------------------------------------------------------------------------------------------
# Rows -> problems
# ----------------------------------------------------------------------------------------------


def _rows_to_problems(rows: list[dict], where: str, locate: Callable[[int], str]) -> list[Problem]:
    if not rows:
        raise DataError(f"{where}: no rows")
    problems: list[Problem] = []
    seen: dict[Any, int] = {}
    for i, row in enumerate(rows):
        p = row_to_problem(row, i, locate(i))
        key = p.problem_id if isinstance(p.problem_id, (str, int)) else repr(p.problem_id)
        if key in seen:
            raise DataError(f"{locate(i)}: duplicate problem_id {p.problem_id!r} (first at {locate(seen[key])})")
        seen[key] = i
        problems.append(p)
    return problems


def _prompt_text(value: Any, loc: str) -> str:
    """A prompt string, or the last user message of a chat-message list."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        users = [m for m in value if m.get("role") == "user"] or value
        content = users[-1].get("content")
        if isinstance(content, str):
            return content
    raise DataError(f"{loc}: field 'prompt' must be a string or a list of chat messages")


def _answer_of(row: dict, loc: str) -> str:
    if "answer" in row and row["answer"] is not None:
        ans = row["answer"]
        if isinstance(ans, bool) or not isinstance(ans, (str, int, float)):
            raise DataError(f"{loc}: field 'answer' must be a string or a number")
        ans = str(ans)
        if "####" in ans:
            ans = parse_gsm8k_answer(ans) or ""
        ans = ans.strip()
        if not ans:
            raise DataError(f"{loc}: empty field 'answer'")
        return ans
    if "chosen" in row and row["chosen"] is not None:
        chosen = str(row["chosen"])
        ans = (extract_boxed(chosen) or chosen).strip()
        if not ans:
            raise DataError(f"{loc}: empty field 'chosen'")
        return ans
    rm = row.get("reward_model")
    if isinstance(rm, dict) and rm.get("ground_truth") not in (None, ""):
        return str(rm["ground_truth"]).strip()
    raise DataError(f"{loc}: missing field 'answer'")


def row_to_problem(row: dict, index: int, loc: str) -> Problem:
    """One record -> :class:`Problem` (formats in the module docstring); ``loc`` prefixes errors."""
    key = next((k for k in _PROBLEM_KEYS if row.get(k) is not None), None)
    if key is None:
        raise DataError(f"{loc}: missing field 'problem' (or 'question' / 'prompt')")
    text = _prompt_text(row[key], loc) if key == "prompt" else row[key]
    if not isinstance(text, str):
        raise DataError(f"{loc}: field {key!r} must be a string")
    if not text.strip():
        raise DataError(f"{loc}: empty field {key!r}")
    answer = _answer_of(row, loc)
    id_key = next((k for k in _ID_KEYS if row.get(k) is not None), None)
    problem_id = row[id_key] if id_key else index
    used = {key, "answer", id_key}
    meta = {k: v for k, v in row.items() if k not in used}
    return Problem(problem_id=problem_id, problem=text, answer=answer, meta=meta)
