"""Tools (satseq/tools/registry.py) and tool-call parsers (satseq/tools/parsers.py): schemas from
signatures and docstrings, the hermes and python_block parsers on well-formed, malformed and several
calls, and the executor that turns every failure into text the model reads."""
from __future__ import annotations

import json

import pytest

from satseq.errors import ConfigError, SatseqError
from satseq.tools.parsers import (
    ToolCall,
    get_tool_parser,
    parse_tool_calls,
    register_tool_parser,
    tool_parser_names,
)
from satseq.tools.registry import (
    MAX_ERROR_CHARS,
    Tool,
    ToolUnavailable,
    assistant_message,
    execute_tool_call,
    tool_message,
    tool_schemas,
)


def add(a: int, b: int) -> int:
    """
    Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


def scale(values: list[float], factor: float = 2.0) -> list[float]:
    """
    Multiply every value by a factor.

    Args:
        values: The numbers to scale.
        factor: What to multiply them by.
    """
    return [v * factor for v in values]


def boom(message: str) -> str:
    """
    Always fails.

    Args:
        message: What the exception says.
    """
    raise RuntimeError(message)


def needs_setup(x: str) -> str:
    """
    A tool that cannot run on this machine.

    Args:
        x: Anything.
    """
    raise ToolUnavailable("this tool needs something that is not installed")


TOOLS = [add, scale, boom, needs_setup]


# ------------------------------------------------------------------------------------------ schemas


def test_schema_comes_from_the_signature_and_docstring():
    schema = Tool.from_callable(scale).schema
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "scale" and fn["description"] == "Multiply every value by a factor."
    props = fn["parameters"]["properties"]
    assert props["values"] == {"type": "array", "items": {"type": "number"}, "description": "The numbers to scale."}
    assert props["factor"]["type"] == "number" and props["factor"]["description"] == "What to multiply them by."
    assert fn["parameters"]["required"] == ["values"]  # factor has a default


def test_schemas_feed_a_chat_template():
    from transformers.utils.chat_template_utils import render_jinja_template

    template = ("{% for t in tools %}{{ t.function.name }}({{ t.function.parameters.required | join(',') }});"
                "{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}")
    rendered, _ = render_jinja_template(conversations=[[{"role": "user", "content": "hi"}]], tools=tool_schemas(TOOLS),
                                        chat_template=template)
    assert rendered[0] == "add(a,b);scale(values);boom(message);needs_setup(x);hi"


def test_an_undocumented_tool_is_a_one_line_error():
    def bare(x):
        return x

    def undocumented_arg(x: int) -> int:
        """Does something."""
        return x

    for fn in (bare, undocumented_arg):
        with pytest.raises(SatseqError, match=fn.__name__) as e:
            Tool.from_callable(fn)
        assert "\n" not in str(e.value)
    with pytest.raises(SatseqError, match="two tools are named 'add'"):
        tool_schemas([add, add])


# ------------------------------------------------------------------------------------------ hermes


def _hermes(name, arguments, key="arguments"):
    return "<tool_call>\n" + json.dumps({"name": name, key: arguments}) + "\n</tool_call>"


def test_hermes_reads_a_call():
    text = "Let me add them.\n" + _hermes("add", {"a": 2, "b": 3}) + "\n"
    (call,) = parse_tool_calls(text, "hermes")
    assert (call.name, call.arguments, call.error) == ("add", {"a": 2, "b": 3}, None)
    assert text[call.span[0]:call.span[1]].startswith("<tool_call>") and text[:call.span[1]].endswith("</tool_call>")


def test_hermes_reads_several_calls_in_order():
    text = _hermes("add", {"a": 1, "b": 2}) + " then " + _hermes("scale", {"values": [1.5]}, key="parameters") \
        + '<tool_call>{"name": "add", "arguments": "{\\"a\\": 5, \\"b\\": 6}"}</tool_call>'
    calls = parse_tool_calls(text, "hermes")
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("add", {"a": 1, "b": 2}, None), ("scale", {"values": [1.5]}, None), ("add", {"a": 5, "b": 6}, None)]
    assert [execute_tool_call(c, TOOLS) for c in calls] == ["3", "[3.0]", "11"]
    assert calls[0].span[1] <= calls[1].span[0] and calls[1].span[1] <= calls[2].span[0]


def test_no_call_is_no_call():
    assert parse_tool_calls("The answer is 5.", "hermes") == []
    assert parse_tool_calls("```\nprint(1)\n```", "python_block") == []  # a fence without a language


@pytest.mark.parametrize("body,error", [
    ('{"name": "add", "arguments": {"a": 1,}}', "does not parse"),
    ("[1, 2]", "JSON object"),
    ('{"arguments": {"a": 1}}', 'no "name"'),
    ('{"name": "add", "arguments": [1, 2]}', "must be a JSON object"),
    ('{"name": "add", "arguments": "not json"}', "not JSON"),
])
def test_hermes_malformed_calls_become_errors(body, error):
    (call,) = parse_tool_calls(f"<tool_call>{body}</tool_call>", "hermes")
    assert call.error is not None and error in call.error
    text = execute_tool_call(call, TOOLS)
    assert text.startswith("error: could not parse the tool call") and error in text


def test_hermes_unclosed_tags():
    calls = parse_tool_calls('<tool_call>{"name": "add"' + _hermes("add", {"a": 1, "b": 1}) + "<tool_call>{", "hermes")
    assert [c.error is None for c in calls] == [False, True, False]
    assert calls[1].arguments == {"a": 1, "b": 1}
    assert all("closing </tool_call>" in c.error for c in (calls[0], calls[2]))


# ------------------------------------------------------------------------------------- python_block


def test_python_blocks_are_python_calls():
    text = ("First:\n```python\nprint(1)\n```\nthen\n```py\nx = 2\nprint(x)\n```\n"
            "and a shell block that is not one:\n```bash\nls\n```\n````python\nprint('```')\n````\n")
    calls = parse_tool_calls(text, "python_block")
    assert [(c.name, c.arguments["code"]) for c in calls] == [
        ("python", "print(1)\n"), ("python", "x = 2\nprint(x)\n"), ("python", "print('```')\n")]


def test_an_unclosed_python_block_is_an_error():
    (call,) = parse_tool_calls("```python\nprint(1)\n", "python_block")
    assert call.error and "closing" in call.error
    assert execute_tool_call(call, TOOLS).startswith("error: could not parse the tool call")


# ----------------------------------------------------------------------------------------- executor


@pytest.mark.parametrize("call,expected", [
    (ToolCall("nope", {}), "error: unknown tool 'nope' (available: add, boom, needs_setup, scale)"),
    (ToolCall("add", {"a": 1}), "error: add: missing argument(s): b"),
    (ToolCall("add", {"a": 1, "b": 2, "c": 3}), "error: add: unexpected argument(s): c (the tool takes: a, b)"),
    (ToolCall("add", {"a": "1", "b": 2}), "error: add: argument 'a' must be integer, got str"),
    (ToolCall("add", {"a": True, "b": 2}), "error: add: argument 'a' must be integer, got bool"),
    (ToolCall("scale", {"values": 3}), "error: scale: argument 'values' must be array, got int"),
    (ToolCall("boom", {"message": "it broke"}), "error: boom raised RuntimeError: it broke"),
])
def test_every_failure_is_text_the_model_reads(call, expected):
    assert execute_tool_call(call, TOOLS) == expected


def limit(n: int | None = None) -> str:
    """
    Echo an optional limit.

    Args:
        n: The limit, or null for none.
    """
    return "none" if n is None else str(n)


def test_an_optional_argument_takes_null():
    assert execute_tool_call(ToolCall("limit", {"n": None}), [limit]) == "none"
    assert execute_tool_call(ToolCall("limit", {}), [limit]) == "none"
    assert execute_tool_call(ToolCall("limit", {"n": 4}), [limit]) == "4"
    assert execute_tool_call(ToolCall("limit", {"n": "4"}), [limit]) == "error: limit: argument 'n' must be integer, got str"
    assert execute_tool_call(ToolCall("add", {"a": None, "b": 1}), TOOLS) == "error: add: argument 'a' must be integer, got NoneType"


def test_results_are_text():
    assert execute_tool_call(ToolCall("scale", {"values": [1, 2], "factor": 0.5}), TOOLS) == "[0.5, 1.0]"
    assert execute_tool_call(ToolCall("add", {"a": 2, "b": 2}), {t.name: t for t in map(Tool.from_callable, TOOLS)}) == "4"
    long = execute_tool_call(ToolCall("boom", {"message": "x" * 10_000}), TOOLS)
    assert len(long) < MAX_ERROR_CHARS + 40 and long.endswith("...")


def test_a_tool_that_cannot_run_here_stops_the_run():
    with pytest.raises(ToolUnavailable, match="not installed"):
        execute_tool_call(ToolCall("needs_setup", {"x": "1"}), TOOLS)


def test_the_parser_registry():
    assert {"hermes", "python_block"} <= set(tool_parser_names())
    with pytest.raises(ConfigError, match=r"unknown tool parser 'xml' \(known: .*hermes.*python_block"):
        get_tool_parser("xml")

    @register_tool_parser("test_lines")
    def lines(text: str) -> list[ToolCall]:
        return [ToolCall(name=line.split()[0], arguments={"a": 1, "b": int(line.split()[1])})
                for line in text.splitlines() if line.startswith("add ")]

    try:
        assert [execute_tool_call(c, TOOLS) for c in parse_tool_calls("add 4\nno\nadd 9", "test_lines")] == ["5", "10"]
        with pytest.raises(ValueError, match="already registered"):
            register_tool_parser("hermes")(lines)
    finally:
        from satseq.tools import parsers

        parsers.TOOL_PARSERS.pop("test_lines")


def test_the_python_tool_runs_a_parsed_block():
    from satseq.tools.sandbox import python_tool

    (call,) = parse_tool_calls("```python\nprint(sum(range(101)))\n```", "python_block")
    assert execute_tool_call(call, [python_tool]) == "5050"
    (call,) = parse_tool_calls(_hermes("python", {"code": "import time\ntime.sleep(60)"}), "hermes")
    from satseq.tools.sandbox import make_python_tool

    assert execute_tool_call(call, [make_python_tool(timeout_s=1.0)]) == \
        "error: time limit exceeded (1 s); the program was stopped"


# Qwen2.5's chat template, its tool-call and tool-response parts (the hermes format), as transformers renders it
HERMES_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content }}"
    "{%- for tool_call in message.tool_calls | default([]) %}"
    "{%- set tool_call = tool_call.function if tool_call.function is defined else tool_call %}"
    "\n<tool_call>\n{\"name\": \"{{ tool_call.name }}\", \"arguments\": {{ tool_call.arguments | tojson }}}\n</tool_call>"
    "{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}"
)


def test_messages_round_trip_through_a_hermes_template():
    """What the template renders from assistant_message, the hermes parser reads back as the same calls;
    the tool messages carry execute_tool_call's text."""
    from transformers.utils.chat_template_utils import render_jinja_template

    completion = "I will compute.\n" + _hermes("add", {"a": 20, "b": 22}) + "\n" + _hermes("nope", {})
    calls = parse_tool_calls(completion, "hermes")
    results = [execute_tool_call(c, TOOLS) for c in calls]
    messages = [{"role": "user", "content": "20 + 22?"}, assistant_message("I will compute.", calls),
                *[tool_message(c, r) for c, r in zip(calls, results)]]
    rendered, _ = render_jinja_template(conversations=[messages], chat_template=HERMES_TEMPLATE)
    text = rendered[0]
    again = parse_tool_calls(text, "hermes")
    assert [(c.name, c.arguments) for c in again] == [(c.name, c.arguments) for c in calls]
    assert "<tool_response>\n42\n</tool_response>" in text
    assert "<tool_response>\nerror: unknown tool 'nope'" in text
    bad = parse_tool_calls("<tool_call>{oops</tool_call>", "hermes")
    assert "tool_calls" not in assistant_message("x", bad) and tool_message(bad[0], "e")["name"] == "unknown"
