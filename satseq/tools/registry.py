"""A tool is a typed Python callable; its JSON schema comes from its signature and docstring
through ``transformers.utils.get_json_schema`` (the helper behind ``apply_chat_template(tools=…)``),
never written by hand.

:func:`execute_tool_call` turns one parsed call (:class:`satseq.tools.parsers.ToolCall`) into the
content of the tool message the model reads next. Whatever goes wrong on the model's side is text
in that message and the episode goes on: an unknown tool, arguments that are not the tool's
(missing, unexpected, of the wrong JSON type), a call the parser could not read, an exception in
the tool, and a timeout (the sandbox reports its own). Only :class:`ToolUnavailable` (a tool that
cannot run on this machine at all, such as the sandbox without bubblewrap) is raised: the run stops
with its one line.
"""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from satseq.errors import SatseqError

__all__ = ["Tool", "ToolUnavailable", "as_tool", "tool_schemas", "tools_by_name", "execute_tool_call",
           "assistant_message", "tool_message", "MAX_ERROR_CHARS"]

#: Longest exception text put into a tool message.
MAX_ERROR_CHARS = 500

_JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
               "array": (list, tuple), "object": (dict,), "null": (type(None),)}


class ToolUnavailable(SatseqError):
    """A tool cannot run on this machine (e.g. the sandbox's bubblewrap is missing): the run stops."""


@dataclass(frozen=True)
class Tool:
    """A callable and its JSON schema (``{"type": "function", "function": {name, description,
    parameters, …}}``, the shape chat templates take in ``tools=``)."""

    fn: Callable[..., Any]
    schema: dict = field(compare=False)

    @property
    def name(self) -> str:
        return self.schema["function"]["name"]

    @classmethod
    def from_callable(cls, fn: Callable[..., Any]) -> "Tool":
        """``fn``'s schema from transformers' ``get_json_schema``: every argument typed, a Google-style
        docstring with a description and an ``Args:`` line per argument; else a one-line error."""
        from transformers.utils import get_json_schema

        try:
            schema = get_json_schema(fn)
        except Exception as e:  # noqa: BLE001 — transformers raises its own DocstringParsingException / TypeHintParsingException
            name = getattr(fn, "__name__", repr(fn))
            raise SatseqError(f"tool {name!r}: no JSON schema from its signature and docstring ({e})") from None
        return cls(fn=fn, schema=schema)


def as_tool(tool: Tool | Callable[..., Any]) -> Tool:
    return tool if isinstance(tool, Tool) else Tool.from_callable(tool)


def tools_by_name(tools: Iterable[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    """``{name: Tool}``; a one-line error when two tools share a name."""
    out: dict[str, Tool] = {}
    for t in map(as_tool, tools):
        if t.name in out:
            raise SatseqError(f"two tools are named {t.name!r}")
        out[t.name] = t
    return out


def tool_schemas(tools: Iterable[Tool | Callable[..., Any]]) -> list[dict]:
    """The schemas, in order, for a chat template's ``tools=``."""
    return [t.schema for t in tools_by_name(tools).values()]


def _argument_error(tool: Tool, arguments: Any) -> str | None:
    """Why ``arguments`` do not fit ``tool``'s schema (required, unexpected, JSON type); None if they do."""
    if not isinstance(arguments, Mapping):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    params = tool.schema["function"].get("parameters", {})
    props = params.get("properties", {})
    missing = [k for k in params.get("required", []) if k not in arguments]
    if missing:
        return f"missing argument(s): {', '.join(missing)}"
    extra = [k for k in arguments if k not in props]
    if extra and not _takes_kwargs(tool.fn):
        return f"unexpected argument(s): {', '.join(extra)} (the tool takes: {', '.join(props) or 'none'})"
    for k, v in arguments.items():
        spec = props.get(k, {})
        types = spec.get("type")
        if types is None or (v is None and spec.get("nullable")):  # Optional[...] arguments: None fits
            continue
        names = [types] if isinstance(types, str) else list(types)
        allowed = tuple(t for n in names for t in _JSON_TYPES.get(n, (object,)))
        if isinstance(v, bool) and "boolean" not in names:
            allowed = ()
        if not isinstance(v, allowed):
            return f"argument {k!r} must be {' or '.join(names)}, got {type(v).__name__}"
    return None


def _takes_kwargs(fn: Callable[..., Any]) -> bool:
    try:
        return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False


def execute_tool_call(call, tools: Mapping[str, Tool] | Iterable[Tool | Callable[..., Any]]) -> str:
    """The tool message content for ``call`` (a :class:`~satseq.tools.parsers.ToolCall`): the tool's
    result as text, or ``error: …`` (module doc). ``tools``: ``{name: Tool}`` or tools/callables."""
    table = tools if isinstance(tools, Mapping) else tools_by_name(tools)
    if call.error is not None:
        return f"error: could not parse the tool call: {call.error}"
    tool = table.get(call.name)
    if tool is None:
        return f"error: unknown tool {call.name!r} (available: {', '.join(sorted(table)) or 'none'})"
    why = _argument_error(tool, call.arguments)
    if why is not None:
        return f"error: {tool.name}: {why}"
    try:
        result = tool.fn(**call.arguments)
    except ToolUnavailable:
        raise
    except Exception as e:  # noqa: BLE001 — the model's call failed: it reads why
        text = f"{type(e).__name__}: {e}"
        if len(text) > MAX_ERROR_CHARS:
            text = text[: MAX_ERROR_CHARS - 3] + "..."
        return f"error: {tool.name} raised {text}"
    return result if isinstance(result, str) else _to_text(result)


def assistant_message(content: str, calls) -> dict:
    """The assistant turn that made ``calls`` (readable ones), in the shape transformers' chat templates
    take (``{"role": "assistant", "content", "tool_calls": [{"type": "function", "function": {"name",
    "arguments"}}]}``)."""
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    made = [{"type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
            for c in calls if c.error is None]
    if made:
        msg["tool_calls"] = made
    return msg


def tool_message(call, content: str) -> dict:
    """The tool turn that answers ``call`` with ``content`` (:func:`execute_tool_call`'s text):
    ``{"role": "tool", "name", "content"}``."""
    return {"role": "tool", "name": call.name or "unknown", "content": content}


def _to_text(result: Any) -> str:
    try:
        return json.dumps(result, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(result)
