"""Tool-call parsers, a registry of them: a completion's text -> the calls in it, in order.

- ``hermes``: the JSON calls that chat templates declare (Qwen2.5/Qwen3, Hermes, SmolLM3 and
  others; vLLM's and SGLang's ``hermes`` tool parser read the same):
  ``<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>``. ``arguments`` may
  also be called ``parameters`` (Llama 3.x's JSON calls) or be a JSON string holding the object
  (the OpenAI API's encoding).
- ``python_block``: fenced Python (```` ```python … ``` ````, or ```` ```py ````) for models without
  a tool format; each block is a call of the ``python`` tool with ``{"code": …}``.

A call that cannot be read (JSON that does not parse, no name, an unclosed tag or fence) is still
a :class:`ToolCall`, with ``error`` set: :func:`satseq.tools.registry.execute_tool_call` makes it
an error message the model reads, so a malformed call costs a turn, not the episode.

``@register_tool_parser("name")`` adds a parser (a function ``str -> list[ToolCall]``);
:func:`get_tool_parser` looks one up (a one-line ConfigError listing the known names otherwise).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from satseq.errors import ConfigError

__all__ = ["ToolCall", "register_tool_parser", "get_tool_parser", "tool_parser_names", "parse_tool_calls",
           "TOOL_PARSERS"]


@dataclass(frozen=True)
class ToolCall:
    """One call: the tool's ``name`` and its ``arguments``; ``error``: why it could not be read
    (then ``name``/``arguments`` are whatever was recovered); ``span``: its ``(start, end)`` in the text."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    span: tuple[int, int] = (0, 0)


Parser = Callable[[str], "list[ToolCall]"]
TOOL_PARSERS: dict[str, Parser] = {}


def register_tool_parser(name: str) -> Callable[[Parser], Parser]:
    """Decorator: register a tool-call parser under ``name``."""
    def deco(fn: Parser) -> Parser:
        old = TOOL_PARSERS.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"tool parser '{name}' is already registered by {old.__module__}.{old.__qualname__}")
        TOOL_PARSERS[name] = fn
        return fn

    return deco


def tool_parser_names() -> list[str]:
    return sorted(TOOL_PARSERS)


def get_tool_parser(name: str, key: str = "tools.parser") -> Parser:
    """The parser registered as ``name``; else a one-line ConfigError naming config key ``key``."""
    try:
        return TOOL_PARSERS[name]
    except KeyError:
        raise ConfigError(f"config key '{key}': unknown tool parser '{name}' (known: {', '.join(tool_parser_names())})") \
            from None


def parse_tool_calls(text: str, parser: str) -> list[ToolCall]:
    return get_tool_parser(parser)(text)


# ---------------------------------------------------------------------------------------- hermes
_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"


def _hermes_body(body: str, span: tuple[int, int]) -> ToolCall:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCall(name="", error=f"the JSON inside <tool_call> does not parse ({e.msg} at char {e.pos})", span=span)
    if not isinstance(obj, dict):
        return ToolCall(name="", error=f"<tool_call> must hold a JSON object, got {type(obj).__name__}", span=span)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(name="", error='the call has no "name" string', span=span)
    key = "arguments" if "arguments" in obj else "parameters" if "parameters" in obj else None
    args = obj.get(key, {}) if key else {}
    if isinstance(args, str):  # the OpenAI encoding: the object as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return ToolCall(name=name, error=f'"{key}" is a string that is not JSON ({e.msg})', span=span)
    if not isinstance(args, dict):
        return ToolCall(name=name, error=f'"{key}" must be a JSON object, got {type(args).__name__}', span=span)
    return ToolCall(name=name, arguments=args, span=span)


@register_tool_parser("hermes")
def parse_hermes(text: str) -> list[ToolCall]:
    """Every ``<tool_call>…</tool_call>`` in ``text``, in order (module doc)."""
    calls, pos = [], 0
    while True:
        start = text.find(_HERMES_OPEN, pos)
        if start < 0:
            return calls
        body_start = start + len(_HERMES_OPEN)
        end = text.find(_HERMES_CLOSE, body_start)
        nxt = text.find(_HERMES_OPEN, body_start)
        if end < 0 or (0 <= nxt < end):
            stop = nxt if nxt >= 0 else len(text)
            calls.append(ToolCall(name="", error="<tool_call> without its closing </tool_call>", span=(start, stop)))
            pos = stop
            continue
        calls.append(_hermes_body(text[body_start:end].strip(), (start, end + len(_HERMES_CLOSE))))
        pos = end + len(_HERMES_CLOSE)


# ---------------------------------------------------------------------------------- python_block
#: The opening fence: three or more backticks, ``python`` or ``py``, then the end of the line.
_FENCE_OPEN = re.compile(r"^([ \t]*)(`{3,})[ \t]*(?:python3?|py)[ \t]*\r?\n", re.MULTILINE | re.IGNORECASE)


@register_tool_parser("python_block")
def parse_python_block(text: str) -> list[ToolCall]:
    """Every fenced Python block in ``text``, in order, as a call of the ``python`` tool (module doc).
    A block ends at a line holding a fence of at least as many backticks (CommonMark's rule)."""
    calls, pos = [], 0
    while True:
        m = _FENCE_OPEN.search(text, pos)
        if m is None:
            return calls
        ticks = len(m.group(2))
        close = re.compile(r"^[ \t]*`{%d,}[ \t]*$" % ticks, re.MULTILINE).search(text, m.end())
        if close is None:
            calls.append(ToolCall(name="python", error="a ```python block without its closing ```",
                                  span=(m.start(), len(text))))
            return calls
        code = text[m.end():close.start()]
        calls.append(ToolCall(name="python", arguments={"code": code}, span=(m.start(), close.end())))
        pos = close.end()
