"""Atomic file output and line-checked JSONL input.

Every file satseq writes goes through :func:`atomic_write` (write to a temporary file in the same
directory, fsync, ``os.replace``), so an interrupted run never leaves a half-written file.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from satseq.errors import DataError


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """Open a temporary sibling of ``path`` for writing; move it over ``path`` on success only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        kwargs = {"encoding": encoding} if "b" not in mode else {}
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling directory of ``path`` to fill; on success it replaces ``path`` (an
    existing ``path`` is removed first), on any error it is removed and ``path`` is left as it was."""
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as fh:
        fh.write(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=2, sort_keys=False, default=str)
        fh.write("\n")


def write_yaml(path: str | os.PathLike, obj: Any) -> None:
    with atomic_write(path) as fh:
        yaml.safe_dump(obj, fh, sort_keys=False)


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    with atomic_write(path) as fh:
        for row in rows:
            fh.write(json.dumps(row, default=str) + "\n")


def append_jsonl(path: str | os.PathLike, row: dict) -> None:
    """Append one complete line (a single ``write`` of the whole line, then fsync)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(row, default=str) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl(path: str | os.PathLike, *, allow_partial_last_line: bool = False) -> list[dict]:
    """Read a JSONL file; a malformed line is a :class:`DataError` naming ``file:line``.

    ``allow_partial_last_line`` drops a final line without a newline that does not parse (a line
    being written when a process was killed) instead of failing; used for resumable outputs.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    rows: list[dict] = []
    with open(path, encoding="utf-8") as fh:
        lines = fh.readlines()
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            if allow_partial_last_line and i == len(lines) and not line.endswith("\n"):
                break
            raise DataError(f"{path}:{i}: malformed JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{i}: expected a JSON object, got {type(obj).__name__}")
        rows.append(obj)
    return rows


def replace_marked_block(page: str | os.PathLike, begin: str, end: str, block: str) -> None:
    """Replace what lies between the marker lines ``begin`` and ``end`` of ``page`` with ``block``
    (atomically): how a docs page carries a bench script's output instead of a retyped copy. A page
    without exactly one of each marker is a :class:`DataError` naming it."""
    page = Path(page)
    text = page.read_text(encoding="utf-8")
    if text.count(begin) != 1 or text.count(end) != 1:
        raise DataError(f"{page}: needs exactly one {begin} and one {end} line")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    body = block.rstrip("\n")
    write_text(page, f"{head}{begin}\n{body}\n{end}{tail}")
