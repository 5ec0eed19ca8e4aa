"""Strict reading of user input files: bytes -> text -> JSON, every refusal one line.

What is refused, whatever the reader (datasets, configs):

- bytes that are not UTF-8 text: gzip/zip/bzip2/xz/zstd/parquet data, UTF-16/UTF-32 (with or
  without a byte-order mark), NUL bytes, invalid UTF-8 (the message names the line of the first bad
  byte). A UTF-8 byte-order mark is accepted and dropped; CRLF line ends are accepted.
- in JSON: duplicate keys in an object, ``NaN`` / ``Infinity`` / ``-Infinity`` and numbers that
  overflow to infinity (``1e400``), integers longer than 4000 digits, strings that cannot be
  written as UTF-8 (lone surrogates such as ``"\\ud800"``), nesting too deep to parse.

:func:`read_text` returns the decoded text; :func:`loads` parses one JSON document and raises
:class:`JSONRefused` (``message``, and ``line`` where known) for anything above; :func:`short`
renders a value for an error message without ever rendering more than a few dozen characters of it.
"""
from __future__ import annotations

import json
import json.decoder
import json.scanner
import math
import re
import reprlib
from pathlib import Path
from typing import Any

from satseq.errors import DataError

__all__ = ["JSONRefused", "array_item_lines", "clip", "describe_binary", "loads", "read_text", "short"]

_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_INT_DIGITS = 4000

_repr = reprlib.Repr()
_repr.maxstring = 50
_repr.maxother = 50
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 4
_repr.maxlevel = 2


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, computed lazily (a huge or deeply shared value
    costs no more than a small one)."""
    try:
        text = _repr.repr(value)
    except Exception:  # noqa: BLE001 — a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int = 60) -> str:
    """``text`` itself (no quotes), cut to ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------------------------ bytes
_MAGIC = (
    (b"\x1f\x8b", "gzip"), (b"PK\x03\x04", "zip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"), (b"PAR1", "parquet"), (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"),
    (b"\x89PNG", "PNG"), (b"%PDF", "PDF"), (b"\x7fELF", "an executable"),
)


def describe_binary(data: bytes) -> str | None:
    """What ``data`` looks like when it is clearly not UTF-8 text (``"gzip"``...), else None."""
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    head = data[:4096]
    if b"\x00" in head:
        even, odd = head[0::2].count(0), head[1::2].count(0)
        if odd > len(head) // 4 and even < odd // 8 or even > len(head) // 4 and odd < even // 8:
            return "UTF-16"
        return "binary data (NUL bytes)"
    return None


def read_text(path: str | Path, error: type[Exception] = DataError) -> str:
    """The file as text: strict UTF-8, an optional BOM dropped; one-line ``error`` otherwise."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise error(f"{path}: is a directory, expected a file") from None
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
    kind = describe_binary(data)
    if kind is not None:
        raise error(f"{path}: not UTF-8 text (looks like {kind})")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{path}:{line}: not UTF-8 text (invalid byte 0x{data[e.start]:02x})") from None


# ------------------------------------------------------------------------------------- JSON
class JSONRefused(ValueError):
    """A JSON document that is malformed or breaks a rule above. ``line`` is 1-based (None if unknown)."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line
        self.pos: int | None = None
        self.extra_data = False  # valid JSON followed by more: JSON lines, perhaps


class _NonFinite:
    """What ``NaN``/``Infinity``/``1e400`` parse to, so the enclosing object can name its key."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def _parse_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text[:20])


def _parse_int(text: str) -> Any:
    if len(text) > _MAX_INT_DIGITS:
        raise JSONRefused(f"integer with {len(text)} digits (at most {_MAX_INT_DIGITS})")
    return int(text)


def _bad_value(value: Any) -> str | None:
    """Why a parsed value (not a dict: objects check themselves) is refused, or None."""
    if isinstance(value, str):
        return "a string with a lone surrogate (not valid Unicode)" if _SURROGATE.search(value) else None
    if isinstance(value, _NonFinite):
        return f"{value.text} is not allowed (numbers must be finite)"
    if isinstance(value, list):
        for item in value:
            why = _bad_value(item)
            if why:
                return why
    return None


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if _SURROGATE.search(key):
            raise JSONRefused(f"key {short(key)} has a lone surrogate (not valid Unicode)")
        if key in out:
            raise JSONRefused(f"duplicate key {short(key)}")
        why = _bad_value(value)
        if why:
            raise JSONRefused(f"key {short(key)}: {why}")
        out[key] = value
    return out


def _decoder(locating: bool = False) -> json.JSONDecoder:
    dec = json.JSONDecoder(object_pairs_hook=_pairs_hook, parse_float=_parse_float, parse_int=_parse_int,
                           parse_constant=_NonFinite)
    if locating:  # the pure-Python scanner, whose objects know where they start
        def parse_object(s_and_end, *args, **kwargs):
            try:
                return json.decoder.JSONObject(s_and_end, *args, **kwargs)
            except JSONRefused as e:
                if e.pos is None:
                    e.pos = s_and_end[1] - 1
                raise

        dec.parse_object = parse_object
        dec.scan_once = json.scanner.py_make_scanner(dec)
    return dec


_FAST = _decoder()


def loads(text: str, *, first_line: int = 1) -> Any:
    """One strict JSON document. Raises :class:`JSONRefused`; its ``line`` counts from ``first_line``
    (a refused object's line is where the innermost object holding the offence starts)."""
    try:
        obj = _FAST.decode(text)
    except JSONRefused as e:
        pos = _locate(text)
        e.line = first_line + text.count("\n", 0, pos) if pos is not None else first_line
        raise
    except json.JSONDecodeError as e:
        err = JSONRefused(f"malformed JSON ({e.msg} at column {e.colno})", first_line + e.lineno - 1)
        err.extra_data = e.msg == "Extra data"
        raise err from None
    except RecursionError:
        raise JSONRefused("malformed JSON (nested too deeply)", first_line) from None
    except ValueError as e:  # e.g. an integer too long for int()
        raise JSONRefused(f"malformed JSON ({short(str(e), 80)})", first_line) from None
    why = _bad_value(obj)
    if why:
        raise JSONRefused(why, first_line)
    return obj


def _locate(text: str) -> int | None:
    """Offset of the innermost object holding what :data:`_FAST` refused (slow: errors only)."""
    try:
        _decoder(locating=True).decode(text)
    except JSONRefused as e:
        return e.pos
    except (ValueError, RecursionError):
        return None
    return None


_JSON_WS = re.compile(r"[ \t\n\r]*")


def array_item_lines(text: str) -> list[int] | None:
    """1-based line where each item of a top-level JSON array starts (``text`` already validated)."""
    dec = json.JSONDecoder()
    i = _JSON_WS.match(text, 0).end()
    if text[i:i + 1] != "[":
        return None
    i = _JSON_WS.match(text, i + 1).end()
    lines: list[int] = []
    line, counted = 1, 0
    while i < len(text) and text[i] != "]":
        line += text.count("\n", counted, i)
        counted = i
        lines.append(line)
        try:
            _, i = dec.raw_decode(text, i)
        except ValueError:
            return None
        i = _JSON_WS.match(text, i).end()
        if text[i:i + 1] == ",":
            i = _JSON_WS.match(text, i + 1).end()
    return lines
