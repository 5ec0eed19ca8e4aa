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
- a **hub id** ``owner/name`` (not an existing path), loaded with ``datasets.load_dataset(id, split=split)``;
- a **reasoning-gym generator** ``reasoning_gym:<name>[?key=value&...]`` (:mod:`satseq.data.reasoning_gym`):
  ``limit`` problems generated from its seed (``split="train"``: the training stream, else the held-out one),
  each graded by the generator's own scorer.

Record formats (one row -> one :class:`Problem`):

- ``{"problem", "answer"}`` (evaluation);
- ``{"question", "answer"}`` (GSM8K; ``"... #### 1,000"`` answers are parsed to ``"1000"``);
- ``{"prompt", "chosen", "rejected"}`` (the seed's DAPO training format): the answer is the last
  ``\\boxed{}`` of ``chosen`` if it has one, else the whole ``chosen`` text, stripped;
- verl-style rows, ``prompt`` as a chat-message list and ``reward_model.ground_truth``.

``problem_id`` is ``id``, ``problem_id`` or ``unique_id`` if present, else the 0-based row index;
ids must be unique (resumed evaluations key on them). Other fields go to ``Problem.meta``.
Every error is one line: :class:`DataError` naming ``file:line`` (``file: row i`` for parquet and
``{"data": [...]}`` files).

Strict reading (files): the bytes must be UTF-8 text (a BOM and CRLF are fine; gzip, UTF-16,
invalid UTF-8 are refused, see :mod:`satseq.utils.strict_io`); JSON must have no duplicate keys,
no ``NaN``/``Infinity``, no lone surrogates; ``problem``/``question``/``prompt`` and ``answer``
must be non-blank strings (``"answer": 27`` is refused; hub rows may have numeric answers); a
``chosen``/``rejected`` row needs both, as non-blank strings; ``id`` is a non-empty string or an
integer. Extra fields are kept in ``Problem.meta``; ``Problem.source`` is the ``file:line``.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable

from satseq.errors import ConfigError, DataError, OfflineError
from satseq.rewards.extract import extract_boxed, parse_gsm8k_answer
from satseq.utils.strict_io import JSONRefused, array_item_lines, read_text, short
from satseq.utils.strict_io import loads as strict_loads
from satseq.records import Problem
from satseq.data.reasoning_gym import is_spec as is_reasoning_gym, load_gym_problems

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
_SURROGATE = re.compile("[\ud800-\udfff]")


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
    if is_reasoning_gym(source):  # generated: the limit is how many
        return load_gym_problems(str(source), split=split, limit=limit)
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
    return _rows_to_problems(rows, where, lambda i: f"{where}: row {i}", strict=False)


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
    return _rows_to_problems(rows, where, lambda i: f"{where}: row {i}", strict=False)


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def load_file(path: str | os.PathLike) -> list[Problem]:
    """Problems from one ``.jsonl``, ``.json`` or ``.parquet`` file (strict: see "Strict reading")."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in _EXTENSIONS:
        raise DataError(f"{path}: unsupported file type {suffix or '(none)'!r} (use .jsonl, .json or .parquet)")
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    if suffix == ".parquet":
        rows = _read_parquet(path)
        return _rows_to_problems(rows, str(path), lambda i: f"{path}: row {i}")
    text = read_text(path)
    if suffix == ".jsonl":
        rows, line_of = _jsonl_rows(path, text)
        return _rows_to_problems(rows, str(path), lambda i: f"{path}:{line_of[i]}")
    rows, located = _read_json(path, text)
    return _rows_to_problems(rows, str(path), located)


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
            bool: "a boolean", type(None): "null"}.get(type(value), type(value).__name__)


def _jsonl_rows(path: Path, text: str) -> tuple[list[dict], list[int]]:
    """The objects of a JSON-lines text and their 1-based line numbers (blank lines skipped)."""
    rows: list[dict] = []
    lines: list[int] = []
    for i, line in enumerate(_LINE_END.split(text), start=1):
        if not line.strip():
            continue
        try:
            obj = strict_loads(line, first_line=i)
        except JSONRefused as e:
            raise DataError(f"{path}:{e.line}: {e.message}") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{i}: expected a JSON object, got {_json_type(obj)}")
        rows.append(obj)
        lines.append(i)
    return rows, lines


def _read_json(path: Path, text: str) -> tuple[list[dict], Callable[[int], str]]:
    try:
        obj = strict_loads(text)
    except JSONRefused as e:
        if e.extra_data:  # JSON lines in a .json file (what datasets' to_json writes)
            rows, line_of = _jsonl_rows(path, text)
            return rows, lambda i: f"{path}:{line_of[i]}"
        raise DataError(f"{path}:{e.line}: {e.message}") from None
    item_lines = None
    if isinstance(obj, dict):
        lists = [v for k, v in obj.items() if k in ("data", "rows", "examples", "problems") and isinstance(v, list)]
        if not lists:
            raise DataError(f"{path}: expected a list of objects or {{\"data\": [...]}}")
        obj = lists[0]
    elif isinstance(obj, list):
        item_lines = array_item_lines(text)
    if not isinstance(obj, list):
        raise DataError(f"{path}: expected a list of objects, got {_json_type(obj)}")

    def located(i: int) -> str:
        return f"{path}:{item_lines[i]}" if item_lines else f"{path}: row {i}"

    for i, r in enumerate(obj):
        if not isinstance(r, dict):
            raise DataError(f"{located(i)}: expected a JSON object, got {_json_type(r)}")
    return obj, located


_LINE_END = re.compile(r"\r\n|\r|\n")  # never inside a JSON string (raw CR/LF there are malformed JSON)


def _read_parquet(path: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq  # noqa: WPS433 — optional
    except ImportError:
        raise DataError(f"{path}: reading parquet needs pyarrow: pip install pyarrow") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001
        raise DataError(f"{path}: cannot read parquet ({type(e).__name__}: {short(str(e), 120)})") from None
    names = table.column_names
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise DataError(f"{path}: duplicate column {short(dup)}")
    return table.to_pylist()


# ----------------------------------------------------------------------------------------------
# Rows -> problems
# ----------------------------------------------------------------------------------------------


def _rows_to_problems(rows: list[dict], where: str, locate: Callable[[int], str], *,
                      strict: bool = True) -> list[Problem]:
    if not rows:
        raise DataError(f"{where}: no rows")
    problems: list[Problem] = []
    seen: dict[Any, int] = {}
    for i, row in enumerate(rows):
        p = row_to_problem(row, i, locate(i), strict=strict)
        key = p.problem_id if isinstance(p.problem_id, (str, int)) else repr(p.problem_id)
        if key in seen:
            raise DataError(f"{locate(i)}: duplicate problem_id {short(p.problem_id)} (first at {locate(seen[key])})")
        seen[key] = i
        problems.append(p)
    return problems


def _text_field(value: Any, key: str, loc: str) -> str:
    """A required string field: not a number, not null, not blank, valid Unicode."""
    if value is None:
        raise DataError(f"{loc}: empty field {key!r} (null)")
    if not isinstance(value, str):
        raise DataError(f"{loc}: field {key!r} must be a string, got {_json_type(value)} ({short(value)})")
    if _SURROGATE.search(value):
        raise DataError(f"{loc}: field {key!r} is not valid Unicode (lone surrogate)")
    if not value.strip():
        raise DataError(f"{loc}: empty field {key!r}")
    return value


def _prompt_text(value: Any, loc: str) -> str:
    """A prompt string, or the last user message of a chat-message list."""
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        users = [m for m in value if m.get("role") == "user"] or value
        return _text_field(users[-1].get("content"), "prompt", loc)
    if isinstance(value, (str, type(None))):
        return _text_field(value, "prompt", loc)
    raise DataError(f"{loc}: field 'prompt' must be a string or a list of chat messages, got {_json_type(value)}")


def _answer_of(row: dict, loc: str, strict: bool = True) -> str:
    if "chosen" in row or "rejected" in row:  # the DAPO format: both, as text
        for key in ("chosen", "rejected"):
            if key not in row:
                raise DataError(f"{loc}: missing field {key!r} (the prompt/chosen/rejected format needs both)")
            _text_field(row[key], key, loc)
    if "answer" in row and row["answer"] is not None:
        ans = row["answer"]
        if not strict and isinstance(ans, (int, float)) and not isinstance(ans, bool):
            ans = str(ans)  # hub datasets with numeric answer columns
        ans = _text_field(ans, "answer", loc)
        if "####" in ans:
            ans = parse_gsm8k_answer(ans) or ""
        ans = ans.strip()
        if not ans:
            raise DataError(f"{loc}: empty field 'answer'")
        return ans
    if "chosen" in row:
        chosen = row["chosen"]
        ans = (extract_boxed(chosen) or chosen).strip()
        if not ans:
            raise DataError(f"{loc}: empty field 'chosen'")
        return ans
    rm = row.get("reward_model")
    if isinstance(rm, dict) and "ground_truth" in rm:
        gt = rm["ground_truth"]
        if not strict and isinstance(gt, (int, float)) and not isinstance(gt, bool):
            gt = str(gt)
        return _text_field(gt, "reward_model.ground_truth", loc).strip()
    if "answer" in row:
        raise DataError(f"{loc}: empty field 'answer' (null)")
    raise DataError(f"{loc}: missing field 'answer'")


def row_to_problem(row: dict, index: int, loc: str, *, strict: bool = True) -> Problem:
    """One record -> :class:`Problem` (formats in the module docstring); ``loc`` prefixes errors.
    ``strict`` (files): answers must be strings; hub rows may have numeric answers."""
    key = next((k for k in _PROBLEM_KEYS if row.get(k) is not None), None)
    if key is None:
        present = next((k for k in _PROBLEM_KEYS if k in row), None)
        if present is not None:
            raise DataError(f"{loc}: empty field {present!r} (null)")
        raise DataError(f"{loc}: missing field 'problem' (or 'question' / 'prompt')")
    text = _prompt_text(row[key], loc) if key == "prompt" else _text_field(row[key], key, loc)
    answer = _answer_of(row, loc, strict)
    id_key = next((k for k in _ID_KEYS if row.get(k) is not None), None)
    problem_id = row[id_key] if id_key else index
    if id_key and (isinstance(problem_id, bool) or not isinstance(problem_id, (str, int))
                   or isinstance(problem_id, str) and not problem_id.strip()):
        raise DataError(f"{loc}: field {id_key!r} must be a non-empty string or an integer, got {short(problem_id)}")
    used = {key, "answer", id_key}
    meta = {k: v for k, v in row.items() if k not in used}
    if "scorer" in meta:  # a row may name the scorer that grades it (satseq.rewards.scorers)
        from satseq.rewards.scorers import scorer_names

        if meta["scorer"] not in scorer_names():
            raise DataError(f"{loc}: unknown scorer {short(meta['scorer'])}: known scorers are {', '.join(scorer_names())}")
    return Problem(problem_id=problem_id, problem=text, answer=answer, meta=meta, source=loc)
