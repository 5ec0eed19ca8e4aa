"""Tools an agent can call: typed Python callables (their JSON schemas from transformers'
``get_json_schema``), the parsers that find tool calls in a completion, the executor that turns a
call into the tool message the model reads, and the sandbox for model-written Python.

- :mod:`satseq.tools.registry`: :class:`Tool`, :func:`tool_schemas`, :func:`execute_tool_call`;
- :mod:`satseq.tools.parsers`: ``@register_tool_parser``, ``hermes`` and ``python_block``;
- :mod:`satseq.tools.sandbox`: :func:`run_python` and the ``python`` tool (docs/sandbox.md).
"""
