"""Load a :class:`TrainConfig` from YAML plus ``a.b.c=value`` overrides; save it back.

Every problem is a one-line :class:`~satseq.errors.ConfigError`:

- ``cfg.yaml:7: invalid YAML: mapping values are not allowed here``
- ``unknown config key 'sat_seq.foo' (in cfg.yaml); did you mean 'sat_seq.epsilon'?``
- ``cfg.yaml:7: config key 'grpo.epsilon_high' moved to 'ppo.epsilon_high'`` (a key a method's section
  gave up, :attr:`satseq.methods.base.Method.moved_keys`)
- ``config key 'sat_seq.epsilon': Input should be a valid number (got 'abc')``
"""
from __future__ import annotations

import copy
import difflib
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from pydantic import BaseModel, ValidationError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from satseq.config.schema import TrainConfig, train_config_model
from satseq.errors import ConfigError
from satseq.utils import strict_yaml
from satseq.utils.io import write_yaml
from satseq.utils.strict_io import read_text, short

_MISSING = object()


# ------------------------------------------------------------------------------------- reading
def _read_yaml(path: Path, key_lines: dict[str, int] | None = None) -> dict:
    """The YAML mapping at ``path``; ``key_lines`` (if given) gets each dotted key's line."""
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, expected a YAML config file")
    text = read_text(path, ConfigError)

    def check(node: Node) -> None:
        _check_numbers(node)
        if key_lines is not None:
            _collect_key_lines(node, "", key_lines)

    try:
        data = strict_yaml.load(text, check=check)
    except strict_yaml.YAMLRefused as e:
        raise ConfigError(f"{path}{'' if e.line is None else f':{e.line}'}: {e.message}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of config sections, got {_type_name(data)}")
    return data


def _collect_key_lines(node: Node, prefix: str, out: dict[str, int]) -> None:
    """``out[dotted key] = 1-based line`` for every mapping key and list item under ``node``."""
    if len(out) > 100_000:
        return
    if isinstance(node, MappingNode):
        for key_node, value in node.value:
            if isinstance(key_node, ScalarNode):
                key = prefix + key_node.value
                out.setdefault(key, key_node.start_mark.line + 1)
                _collect_key_lines(value, key + ".", out)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            out.setdefault(f"{prefix}{i}", item.start_mark.line + 1)
            _collect_key_lines(item, f"{prefix}{i}.", out)


def _is_numeric(annotation: Any) -> bool:
    alts = _unwrap(annotation)
    return any(a in (int, float) for a in alts) and bool not in alts


def _check_numbers(node: Node, model: type[BaseModel] | None = None, prefix: str = "") -> None:
    """Before any value is built: a numeric key holding a YAML boolean (``yes``, ``off``...) or a
    non-finite float (``.inf``, ``.nan``) is refused with its line and the text as written."""
    model = model or train_config_model()
    if not isinstance(node, MappingNode):
        return
    for key_node, value in node.value:
        if isinstance(key_node, ScalarNode) and key_node.value in model.model_fields:
            _check_value(value, model.model_fields[key_node.value].annotation, prefix + key_node.value)


def _finite(text: str) -> bool:
    text = text.lower().replace("_", "")
    if "inf" in text or "nan" in text:
        return False
    try:
        return math.isfinite(float(text))
    except ValueError:  # e.g. the sexagesimal 1:30.5: finite
        return True


def _check_value(node: Node, annotation: Any, key: str) -> None:
    if isinstance(node, ScalarNode) and _is_numeric(annotation):
        as_written = node.value if len(node.value) <= 40 else node.value[:37] + "..."
        if node.tag == "tag:yaml.org,2002:bool":
            raise strict_yaml.YAMLRefused(f"{key}: expected a number, got a boolean ({as_written})",
                                          node.start_mark.line + 1)
        if node.tag == "tag:yaml.org,2002:float" and not _finite(node.value):
            raise strict_yaml.YAMLRefused(f"{key}: expected a finite number, got {as_written}",
                                          node.start_mark.line + 1)
    for alt in _unwrap(annotation):
        if isinstance(alt, type) and issubclass(alt, BaseModel) and isinstance(node, MappingNode):
            _check_numbers(node, alt, key + ".")
        elif typing.get_origin(alt) is list and isinstance(node, SequenceNode) and typing.get_args(alt):
            for i, item in enumerate(node.value):
                _check_value(item, typing.get_args(alt)[0], f"{key}.{i}")


def _type_name(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), type(value).__name__)


# ----------------------------------------------------------------------------------- overrides
def _parse_value(text: str) -> Any:
    try:
        return strict_yaml.load(text)
    except strict_yaml.YAMLRefused as e:
        if e.message.startswith("invalid YAML"):
            return text  # e.g. "a: b: c" -- keep the raw string; the schema decides
        raise ConfigError(f"config override value {_short(text)}: {e.message}") from None


def _default_at(parts: Sequence[str]) -> Any:
    """The default config's value at a dotted path, or _MISSING."""
    node: Any = train_config_model()().model_dump(mode="json")
    for p in parts:
        if isinstance(node, dict) and p in node:
            node = node[p]
        elif isinstance(node, list) and p.isdigit() and int(p) < len(node):
            node = node[int(p)]
        else:
            return _MISSING
    return node


def _apply_override(data: dict, item: str) -> str:
    """Set ``data[a][b][c] = value`` for ``item = "a.b.c=value"``; return the dotted key."""
    if "=" not in item:
        raise ConfigError(f"config override {item!r}: expected key=value (e.g. sat_seq.epsilon=0.1)")
    key, _, raw = item.partition("=")
    key = key.strip()
    parts = key.split(".")
    if not key or any(not p for p in parts):
        raise ConfigError(f"config override {item!r}: malformed key {key!r}")
    value = _parse_value(raw)
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        parent = ".".join(parts[:i])
        if isinstance(node, list):
            if not part.isdigit():
                raise ConfigError(f"config override {item!r}: {parent!r} is a list; "
                                  f"index it with a number, not {part!r}")
            k: Any = int(part)
            if k > len(node):
                raise ConfigError(f"config override {item!r}: index {k} out of range "
                                  f"({parent!r} has {len(node)} items)")
            if k == len(node):  # one past the end appends a new item
                node.append({})
        elif isinstance(node, dict):
            k = part
            if not last and (k not in node or node[k] is None):
                # a list starts from its default items (sat_seq.agents.0.path=...); a section starts
                # empty, so that its other keys stay unset and method defaults / presets still apply
                default = _default_at(parts[: i + 1])
                if default is not _MISSING and default is not None and not isinstance(default, (dict, list)):
                    raise ConfigError(f"config override {item!r}: {key.rsplit('.', len(parts) - i - 1)[0]!r} "
                                      f"is a single value, it has no key {parts[i + 1]!r}")
                node[k] = copy.deepcopy(default) if isinstance(default, list) else {}
        else:
            raise ConfigError(f"config override {item!r}: {parent!r} is a single value, it has no key {part!r}")
        if last:
            node[k] = value
        else:
            node = node[k]
    return key


# --------------------------------------------------------------------------------- validation
def _unwrap(tp: Any) -> list[Any]:
    """The concrete alternatives of a (possibly Optional/Union) annotation."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        out: list[Any] = []
        for arg in typing.get_args(tp):
            out.extend(_unwrap(arg))
        return out
    return [tp]


def _clean_loc(loc: Sequence[Any], *, keep_last: bool) -> tuple[str, list[str]]:
    """Map a pydantic error location onto config keys.

    Drops union-member tags (``literal['auto']``, ``bool``...) by walking the schema. Returns the
    dotted key and, for a key unknown to its section, that section's valid keys.
    """
    keys: list[str] = []
    types: list[Any] = [train_config_model()]
    siblings: list[str] = []
    for n, comp in enumerate(loc):
        nxt: list[Any] = []
        matched = False
        for tp in types:
            for alt in _unwrap(tp):
                origin = typing.get_origin(alt)
                if isinstance(comp, int) and origin in (list, tuple):
                    nxt.append(typing.get_args(alt)[0] if typing.get_args(alt) else Any)
                    matched = True
                elif isinstance(alt, type) and issubclass(alt, BaseModel) and isinstance(comp, str):
                    if comp in alt.model_fields:
                        nxt.append(alt.model_fields[comp].annotation)
                        matched = True
                    else:
                        siblings = list(alt.model_fields)
        if matched:
            keys.append(str(comp))
            types = nxt
        elif keep_last and n == len(loc) - 1:
            keys.append(str(comp))
            break
        else:
            break
    return ".".join(keys), siblings


def _short(value: Any, limit: int = 60) -> str:
    return short(value, limit)  # lazily: never renders more of a huge value than it shows


def _format_validation_error(err: ValidationError, source: str, override_keys: dict[str, str],
                             key_lines: dict[str, int] | None = None) -> str:
    """One line: ``FILE:LINE: <message naming the key>`` (the line where the key is, when the key
    comes from the file; overrides are named as such)."""
    msg = _validation_message(err, source, override_keys)
    if not key_lines:
        return msg
    key, _ = _clean_loc(err.errors(include_url=False)[0]["loc"], keep_last=True)
    if any(k == key or k.startswith(key + ".") for k in override_keys):
        return msg
    parts = key.split(".") if key else []
    while parts and ".".join(parts) not in key_lines:
        parts.pop()
    if parts:
        return f"{source}:{key_lines['.'.join(parts)]}: {msg}"
    return msg if source in msg else f"{source}: {msg}"


def _validation_message(err: ValidationError, source: str, override_keys: dict[str, str]) -> str:
    errors = err.errors(include_url=False)
    first = errors[0]
    if first["type"] == "extra_forbidden":
        key, siblings = _clean_loc(first["loc"], keep_last=True)
        origin = next((item for k, item in override_keys.items() if k == key or k.startswith(key + ".")), None)
        where = f"from override {origin!r}" if origin is not None else f"in {source}"
        msg = f"unknown config key {key!r} ({where})"
        parent, _, leaf = key.rpartition(".")
        close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
        if close:
            msg += f"; did you mean {(parent + '.' if parent else '') + close[0]!r}?"
        return msg
    key, _ = _clean_loc(first["loc"], keep_last=False)
    # A union (e.g. lora.enabled: "auto" | bool) reports one error per member: merge them.
    messages: list[str] = []
    for e in errors:
        if e["type"] != "extra_forbidden" and _clean_loc(e["loc"], keep_last=False)[0] == key:
            m = e["msg"]
            if m.startswith("Value error, "):
                m = m[len("Value error, "):]
            if messages and m.startswith("Input should be ") and messages[0].startswith("Input should be "):
                m = m[len("Input should be "):]
            if m not in messages:
                messages.append(m)
    msg = " or ".join(messages) if messages else first["msg"]
    label = f"config key {key!r}" if key else "config"
    if first["type"] == "missing":
        return f"{label}: required key missing ({source})"
    got = first.get("input", _MISSING)
    if isinstance(got, (dict, list)) and first["type"] not in ("list_type", "dict_type", "model_type"):
        return f"{label}: {msg}"
    return f"{label}: {msg}" + ("" if got is _MISSING or "got " in msg else f" (got {_short(got)})")


# ------------------------------------------------------------------------------------- public
def load_config(path: Optional[str | os.PathLike], overrides: Iterable[str] = (), *,
                saved: bool = False) -> TrainConfig:
    """Read ``path`` (None = all defaults), apply ``key.sub=value`` overrides, validate.

    Override values are parsed as YAML (``3``, ``1.5e-5``, ``true``, ``[a, b]``, ``null``); list
    items are addressed by index (``sat_seq.agents.0.path=/x``; one past the end appends). Raises
    :class:`ConfigError` with a one-line message naming the file/line or the config key. A key left
    at a place it moved from (:attr:`~satseq.methods.base.Method.moved_keys`) is such an error, naming
    its new place. ``saved``: ``path`` is a run's own ``train_config.yaml``, which an earlier version
    may have written; its moved keys are read at their new place (an override's still are errors).
    """
    source = str(path) if path is not None else "defaults"
    key_lines: dict[str, int] = {}
    data: dict = _drop_retired(_read_yaml(Path(path), key_lines)) if path is not None else {}
    if saved:
        _move_keys(data)
    override_keys: dict[str, str] = {}
    for item in overrides:
        key = _apply_override(data, str(item))
        override_keys[key] = str(item)
    _refuse_moved(data, source, override_keys, key_lines)
    try:
        cfg = train_config_model().model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, source, override_keys, key_lines)) from None
    return finalize(cfg)


# Keys of retired features that train_config.yaml files written by earlier versions still hold:
# dropped when such a file is read (an override naming one is an unknown key, as any other).
RETIRED_KEYS = (("sat_seq", "certificate", "w_max"),)  # the S - OCC - BIAS - FS certificate's truncation


def _drop_retired(data: dict) -> dict:
    for path in RETIRED_KEYS:
        node = data
        for p in path[:-1]:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return data


def moved_keys() -> dict[str, str]:
    """Old dotted key -> its new place, of every registered method
    (:attr:`~satseq.methods.base.Method.moved_keys`)."""
    from satseq.registry import METHODS, discover

    discover()
    out: dict[str, str] = {}
    for m in list(METHODS.values()):
        out.update(m.moved_keys)
    return out


def _node_of(data: dict, dotted: str, create: bool = False) -> tuple[Optional[dict], str]:
    """(the mapping holding the last part of ``dotted``, that part); None when a parent is missing or
    not a mapping (``create``: missing parents become empty mappings)."""
    *parents, leaf = dotted.split(".")
    node: Any = data
    for p in parents:
        if create and isinstance(node, dict) and node.get(p) is None:
            node[p] = {}
        node = node.get(p) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), leaf


def _move_keys(data: dict) -> None:
    """A saved config written before a key moved: its value goes to the new place (unless that is set)."""
    for old, new in moved_keys().items():
        node, leaf = _node_of(data, old)
        if node is None or leaf not in node:
            continue
        value = node.pop(leaf)
        dest, new_leaf = _node_of(data, new, create=True)
        if dest is not None:
            dest.setdefault(new_leaf, value)


def _refuse_moved(data: dict, source: str, override_keys: dict[str, str], key_lines: dict[str, int]) -> None:
    """One line naming a key set at a place it moved from (an override's first, else the file's
    first), and its new place."""
    hits = []
    for old, new in moved_keys().items():
        node, leaf = _node_of(data, old)
        if node is None or leaf not in node:
            continue
        origin = next((item for k, item in override_keys.items() if k == old or k.startswith(old + ".")), None)
        if origin is not None:
            raise ConfigError(f"config key {old!r} moved to {new!r} (from override {origin!r})")
        hits.append((key_lines.get(old, 0), old, new))
    if hits:
        line, old, new = min(hits)
        raise ConfigError(f"{source}{f':{line}' if line else ''}: config key {old!r} moved to {new!r}")


def split_config_args(args: list[str]) -> tuple[str | None, list[str]]:
    """``[CONFIG.yaml] key=value ...`` as the CLI takes them: (path or None, overrides)."""
    if args and "=" not in args[0]:
        return args[0], args[1:]
    return None, list(args)


def finalize(cfg: TrainConfig) -> TrainConfig:
    """The method's and the environment's part of loading: ``method`` and ``env.name`` must be registered;
    defaults fill the keys the user left unset: the named embedded task's
    (:func:`satseq.envs.tasks.task_config_defaults`), then the environment's (``rollout.max_new_tokens``
    for the coach: :meth:`~satseq.envs.base.Environment.config_defaults`), then the method's (``run_name``;
    the keys of GRPO's baseline preset ``grpo.loss``: :meth:`~satseq.methods.base.Method.defaults`); the
    method checks its settings and the environment's (:meth:`satseq.methods.base.Method.validate`). Idempotent."""
    from satseq.registry import get_method

    method = get_method(cfg.method)
    if "run_name" not in cfg.model_fields_set:
        cfg.__dict__["run_name"] = method.default_run_name  # plain set: stays "unset" for a reload
    from satseq.envs.tasks import task_config_defaults

    env = method.environment(cfg)  # env.name (a one-line error when unknown), else the method's own
    defaults = {**task_config_defaults(cfg.data.embedded_task, cfg), **env.config_defaults(cfg), **method.defaults(cfg)}
    for key, value in defaults.items():
        *parents, leaf = key.split(".")
        node = cfg
        for p in parents:
            node = getattr(node, p)
        if leaf not in node.model_fields_set:
            node.__dict__[leaf] = value
    method.validate(cfg)
    from satseq.models.quantize import check_config as check_quantization
    from satseq.registry import get_strategy

    check_quantization(cfg)  # model.quantization with what it cannot run with: one line naming the key

    get_strategy(cfg.trainer.strategy)  # a registered strategy (one-line error naming the key)
    return cfg


def dump_config(cfg: TrainConfig) -> dict:
    """The full config as plain YAML/JSON-able data (every key, defaults included)."""
    return cfg.model_dump(mode="json")


def save_config(cfg: TrainConfig, path: str | os.PathLike) -> None:
    """Write the full config as YAML, atomically; :func:`load_config` reads it back identically."""
    write_yaml(path, dump_config(cfg))
