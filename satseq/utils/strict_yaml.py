"""Strict YAML for configs: safe types only, no tags, no duplicate keys, bounded aliases.

:func:`load` parses one document with :class:`StrictLoader` (a ``yaml.SafeLoader``) and raises
:class:`YAMLRefused` (``message``, ``line``) for:

- any explicit tag (``!!python/object``, ``!!binary``, ``!custom``...);
- a duplicate key in a mapping (``<<`` merge keys may still be overridden, as YAML intends);
- aliases that expand past :data:`MAX_ALIAS_NODES` nodes in all (the "billion laughs"), or an
  alias inside its own anchor;
- anything the YAML parser itself rejects, and nesting too deep to parse.

``check(node)``, when given, sees the composed node tree (with line marks) before any Python value
is built, so a schema can refuse e.g. ``gamma: yes`` naming the line and the text as written.
"""
from __future__ import annotations

from typing import Any, Callable

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from satseq.utils.strict_io import clip, short

__all__ = ["MAX_ALIAS_NODES", "StrictLoader", "YAMLRefused", "load"]

#: Nodes that aliases may add to a document, in all (a config has a few hundred nodes).
MAX_ALIAS_NODES = 10_000
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YAMLRefused(Exception):
    """A YAML document that is malformed or breaks a rule above; ``line`` is 1-based or None."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line


def _line(mark) -> int | None:
    return None if mark is None else mark.line + 1


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses tags, duplicate keys, recursive aliases and alias bombs."""

    def __init__(self, stream):
        super().__init__(stream)
        self._open_anchors: list[str] = []
        self._alias_nodes = 0
        self._sizes: dict[int, int] = {}

    def _size(self, node: Node) -> int:
        """Nodes in ``node`` with every alias expanded (memoized: shared nodes are counted once each)."""
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        if isinstance(node, SequenceNode):
            size = 1 + sum(self._size(c) for c in node.value)
        elif isinstance(node, MappingNode):
            size = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
        else:
            size = 1
        self._sizes[id(node)] = size
        return size

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            if event.anchor in self._open_anchors:
                raise YAMLRefused(f"alias *{clip(event.anchor, 40)} refers to its own anchor (recursive)",
                                  _line(event.start_mark))
            node = self.anchors.get(event.anchor)
            if node is not None:
                self._alias_nodes += self._size(node)
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise YAMLRefused(f"aliases expand to more than {MAX_ALIAS_NODES} nodes "
                                      f"(at alias *{clip(event.anchor, 40)})", _line(event.start_mark))
            return super().compose_node(parent, index)
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise YAMLRefused(f"tag {clip(tag.replace('tag:yaml.org,2002:', '!!'), 60)} is not allowed (plain values only)", _line(event.start_mark))
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open_anchors.append(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            if anchor is not None:
                self._open_anchors.pop()

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, ScalarNode):
                    continue
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise YAMLRefused(f"duplicate key {short(key_node.value)} (first at line {seen[key]})",
                                      _line(key_node.start_mark))
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def load(text: str, *, check: Callable[[Node], None] | None = None) -> Any:
    """One YAML document (None if empty), strictly; :class:`YAMLRefused` otherwise."""
    loader = None
    try:
        loader = StrictLoader(text)  # the reader checks every character here
        node = loader.get_single_node()
        if node is None:
            return None
        if check is not None:
            check(node)
        return loader.construct_document(node)
    except YAMLRefused:
        raise
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "malformed"
        where = f" (column {mark.column + 1})" if mark is not None else ""
        raise YAMLRefused(f"invalid YAML: {clip(str(problem), 120)}{where}", _line(mark)) from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1 if isinstance(e.position, int) else None
        raise YAMLRefused(f"invalid YAML: unacceptable character #x{e.character:04x}"
                          if isinstance(e.character, int) else f"invalid YAML: {short(str(e), 120)}", line) from None
    except yaml.YAMLError as e:
        raise YAMLRefused(f"invalid YAML: {short(str(e), 120)}") from None
    except RecursionError:
        raise YAMLRefused("invalid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
