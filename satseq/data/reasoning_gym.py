"""reasoning-gym's procedural generators as a training source, a held-out set and a scorer.

`reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ (``pip install 'satseq[reasoning-gym]'``, pinned
in ``constraints-cpu.txt``) has about a hundred generators; each makes problems ``{"question", "answer",
"metadata"}`` from a seed and grades an answer with its own ``score_answer(answer, entry)`` in [0, 1].
A dataset name selects one, with its settings, wherever satseq takes a dataset::

    data.train=reasoning_gym:chain_sum                      # the generator's default settings
    data.eval='reasoning_gym:chain_sum?min_terms=3&max_terms=4&seed=7'
    satseq eval --dataset 'reasoning_gym:number_sorting?max_numbers=5' ...

**Why one string, not a config section.** The spec is the dataset's whole identity. It goes wherever a
dataset name goes: ``data.train``, ``data.eval``, ``satseq eval --dataset`` and ``satseq compare``, with no
key that means something in one place and nothing in another. It is recorded verbatim in the run's
``train_config.yaml`` and in the evaluation's ``inference_config.yaml``. A resumed evaluation refuses
another one. The training and held-out sets can also differ, for example held-out problems with more
terms than the training ones, which one section shared by both could not say. Quote it in a shell
(``&``).

Grammar: ``reasoning_gym:<name>[?<key>=<value>[&<key>=<value>...]]``. A value is read as YAML (``3``,
``0.5``, ``true``, ``[+, -]``), then checked against the type of the generator's config dataclass field
(pydantic, lax: ``min_terms=3`` is an int). Then the config's own ``validate()`` runs. Two keys are
satseq's own:

* ``seed`` (int >= 0, default 0): the held-out split (``data.eval``, ``satseq eval``: any split but
  ``train``) is exactly reasoning-gym's ``create_dataset(name, seed=seed, size=n, **settings)``, items
  ``0..n-1``. The training split draws from the seed ``seed + TRAIN_SEED_OFFSET``. reasoning-gym seeds
  item ``i`` of a dataset with ``Random(seed + i)``, so the seeds ``s`` and ``s + 1`` share all but one
  problem (measured: chain_sum). Two splits need seeds more than a set's size apart, and the offset is
  10**6.
* ``held_out`` (int >= 0, default :data:`HELD_OUT_POOL` = 1000, the embedded tasks' held-out pool): the
  training split skips every problem whose question is among the first ``held_out`` held-out problems
  of the same seed and settings. So the training set and a held-out set of up to that size are
  disjoint by content, not only by seed (a generator with few distinct problems, such as chain_sum
  with two one-digit terms, repeats them across seeds). Generating the pool costs ``held_out`` items.
  That is a second for most generators, and minutes for the slow puzzles (knight_swap takes about 3 s
  an item): use ``held_out=<data.eval_size>`` there, or 0 for seed disjointness alone.

``size`` is not a setting. The number of problems is ``data.train_size`` / ``data.eval_size`` /
``--limit`` (``limit=None``: the config's default size, 500 for most generators). The same spec, split
and size always give the same problems. A problem's id is ``<name>-<reasoning-gym seed>-<index>``.

Scoring: a problem carries ``meta["scorer"] = "reasoning_gym"`` and ``meta["reasoning_gym"] = {"name",
"settings", "seed", "size", "entry"}``. These are plain, picklable values (Ray ships problems to its
actors). :func:`score_answer` re-creates the generator from name, settings, seed and size (cached per
process) and calls its ``score_answer(answer, entry)`` on the extracted final answer (see
:mod:`satseq.rewards.scorers` for how the score becomes ``correct`` and the reward).

Every error is one line: :class:`~satseq.errors.ConfigError` naming the key (or the spec) for an
unknown generator, an unknown setting or a bad value.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import typing
from functools import lru_cache
from typing import Any, Optional
from urllib.parse import unquote

from satseq.errors import ConfigError, DataError
from satseq.records import Problem

__all__ = ["PREFIX", "SCORER", "TRAIN_SEED_OFFSET", "HELD_OUT_POOL", "GymSpec", "is_spec", "parse_spec",
           "generator_names", "load_gym_problems", "score_answer"]

#: What a dataset name starts with to select a reasoning-gym generator.
PREFIX = "reasoning_gym:"
#: The scorer name its problems carry (``Problem.meta["scorer"]``, :mod:`satseq.rewards.scorers`).
SCORER = "reasoning_gym"
#: The training split's seed is the spec's ``seed`` plus this (far past any set's size: see the module doc).
TRAIN_SEED_OFFSET = 10**6
#: Default ``held_out``: held-out problems (by question) the training split never contains.
HELD_OUT_POOL = 1000
#: satseq's own spec keys (the rest are the generator's config fields).
_OWN_KEYS = ("seed", "held_out")
#: Draws the training split may make per problem it needs (beyond the pool) before it gives up.
_DRAWS_PER_PROBLEM = 20
_INSTALL = "pip install 'satseq[reasoning-gym]' (or pip install reasoning-gym)"


@dataclasses.dataclass(frozen=True)
class GymSpec:
    """A parsed ``reasoning_gym:<name>?...`` spec: the generator, its checked settings (JSON-able
    values as written, in ``settings_json``), ``seed`` and ``held_out``."""

    name: str
    settings_json: str
    seed: int = 0
    held_out: int = HELD_OUT_POOL

    @property
    def settings(self) -> dict[str, Any]:
        return json.loads(self.settings_json)

    def text(self) -> str:
        """The canonical spec string (keys sorted; ``seed``/``held_out`` only when not the default)."""
        parts = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(self.settings.items())]
        if self.seed != 0:
            parts.append(f"seed={self.seed}")
        if self.held_out != HELD_OUT_POOL:
            parts.append(f"held_out={self.held_out}")
        return PREFIX + self.name + ("?" + "&".join(parts) if parts else "")


def is_spec(source: Any) -> bool:
    """Whether a dataset name selects a reasoning-gym generator."""
    return isinstance(source, str) and source.startswith(PREFIX)


def _registry() -> dict:
    try:
        from reasoning_gym.factory import DATASETS  # noqa: WPS433 — optional extra 'gym'
        import reasoning_gym  # noqa: F401 — importing the package registers its generators
    except ImportError:
        raise ConfigError(f"reasoning_gym: datasets need the optional package reasoning-gym: {_INSTALL}") from None
    return DATASETS


def generator_names() -> list[str]:
    """Every generator name ``reasoning_gym:<name>`` accepts (reasoning-gym's registry)."""
    return sorted(_registry())


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def _unknown_name(where: str, name: str, names: list[str]) -> ConfigError:
    close = difflib.get_close_matches(name, names, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    listing = ", ".join(names)
    if len(listing) > 700:  # errors are one line of at most SatseqError.MAX_LENGTH characters
        listing = "python -m satseq.data.reasoning_gym lists them"
    return ConfigError(f"{_at(where)}unknown reasoning-gym generator {name!r}{hint}; the {len(names)} generators: "
                       f"{listing}")


def _fields(config_cls) -> dict[str, Any]:
    """The config's settings (every field but ``seed`` and ``size``) -> their types, resolved."""
    try:
        hints = typing.get_type_hints(config_cls)
    except Exception:  # noqa: BLE001 — an annotation that does not resolve: keep it as written
        hints = {}
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(config_cls) if f.name not in ("seed", "size")}


def _read_value(raw: str) -> Any:
    from satseq.utils.strict_yaml import YAMLRefused, load

    try:
        value = load(raw)
    except YAMLRefused:
        return raw
    return raw if value is None else value


def _check_value(where: str, name: str, field: str, tp: Any, value: Any) -> Any:
    """``value`` checked (and coerced, lax) against the field's type ``tp``; the value the config takes."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(tp).validate_python(value)
    except ValidationError as e:
        msg = e.errors()[0].get("msg", str(e)) if e.errors() else str(e)
        raise ConfigError(f"{_at(where)}reasoning_gym:{name} setting {field}={value!r}: {msg} "
                          f"(the field is {getattr(tp, '__name__', tp)})") from None
    except Exception as e:  # noqa: BLE001 — a type pydantic cannot build a validator for: pass it as written
        if type(e).__name__ == "PydanticSchemaGenerationError":
            return value
        raise


def _own_int(where: str, key: str, raw: str) -> int:
    value = _read_value(raw)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{_at(where)}{key}={raw!r} must be an integer >= 0")
    return value


def parse_spec(text: str, key: Optional[str] = None) -> GymSpec:
    """A :class:`GymSpec` from ``reasoning_gym:<name>?k=v&...``, its name and settings checked (nothing
    is generated). Errors begin with ``<key>=<text>: `` (``key``: the config key or option, e.g.
    ``--dataset``), with ``<text>: `` when ``key`` is None, and with nothing when it is ``""`` (the
    config loader names the key and the value itself)."""
    where = text if key is None else f"{key}={text}" if key else ""
    if not is_spec(text):
        raise ConfigError(f"{_at(where)}expected {PREFIX}<name>[?key=value&...]")
    body = text[len(PREFIX):]
    name, _, query = body.partition("?")
    name = name.strip()
    registry = _registry()
    if not name:
        raise _unknown_name(where, name, sorted(registry))
    if name not in registry:
        raise _unknown_name(where, name, sorted(registry))
    config_cls = registry[name][1]
    fields = _fields(config_cls)
    settings: dict[str, Any] = {}
    own = {"seed": 0, "held_out": HELD_OUT_POOL}
    for item in (query.split("&") if query else []):
        if not item:
            continue
        k, eq, raw = item.partition("=")
        k, raw = unquote(k.strip()), unquote(raw.strip())
        if not eq or not k:
            raise ConfigError(f"{_at(where)}expected key=value after '?', got {item!r}")
        if k in own:
            own[k] = _own_int(where, k, raw)
        elif k == "size":
            raise ConfigError(f"{_at(where)}size is not a setting: the number of problems is data.train_size / "
                              "data.eval_size / --limit")
        elif k not in fields:
            close = difflib.get_close_matches(k, list(fields), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"{_at(where)}reasoning_gym:{name} has no setting {k!r}{hint}; its settings: "
                              f"{', '.join(fields) or '(none)'}, and satseq's seed, held_out")
        elif k in settings:
            raise ConfigError(f"{_at(where)}setting {k!r} given twice")
        else:
            settings[k] = _read_value(raw)
    checked = {k: _check_value(where, name, k, fields[k], v) for k, v in settings.items()}
    _build_config(where, name, config_cls, checked, seed=own["seed"], size=1)
    try:
        settings_json = json.dumps(settings, sort_keys=True)
    except TypeError as e:
        raise ConfigError(f"{_at(where)}settings must be plain values ({e})") from None
    return GymSpec(name=name, settings_json=settings_json, seed=own["seed"], held_out=own["held_out"])


def _build_config(where: str, name: str, config_cls, checked: dict, *, seed: int, size: int):
    try:
        config = config_cls(**checked, seed=seed, size=size)
        if hasattr(config, "validate"):
            config.validate()
    except Exception as e:  # noqa: BLE001 — reasoning-gym's validate() asserts; report it in one line
        reason = str(e) or type(e).__name__
        raise ConfigError(f"{_at(where)}reasoning_gym:{name} rejects its settings: {reason}") from None
    return config


@lru_cache(maxsize=64)
def _dataset(name: str, settings_json: str, seed: int, size: int):
    """The generator object for these coordinates (cached per process: scoring re-creates it often)."""
    registry = _registry()
    if name not in registry:
        raise _unknown_name(PREFIX + name, name, sorted(registry))
    dataset_cls, config_cls = registry[name]
    fields = _fields(config_cls)
    settings = json.loads(settings_json)
    checked = {k: _check_value(PREFIX + name, name, k, fields[k], v) for k, v in settings.items() if k in fields}
    return dataset_cls(config=_build_config(PREFIX + name, name, config_cls, checked, seed=seed, size=size))


def _default_size(name: str) -> int:
    config_cls = _registry()[name][1]
    f = {f.name: f for f in dataclasses.fields(config_cls)}.get("size")
    return int(f.default) if f is not None and isinstance(f.default, int) else 500


def _problem(spec: GymSpec, seed: int, size: int, index: int, entry: dict) -> Problem:
    answer = entry.get("answer")
    meta = {"scorer": SCORER,
            "reasoning_gym": {"name": spec.name, "settings": spec.settings, "seed": seed, "size": size,
                              "index": index, "entry": entry}}
    return Problem(problem_id=f"{spec.name}-{seed}-{index}", problem=str(entry["question"]),
                   answer="" if answer is None else str(answer), meta=meta,
                   source=f"{PREFIX}{spec.name} seed {seed} item {index}")


@lru_cache(maxsize=8)
def _held_out_questions(name: str, settings_json: str, seed: int, n: int) -> frozenset[str]:
    if n == 0:
        return frozenset()
    ds = _dataset(name, settings_json, seed, n)
    return frozenset(str(ds[i]["question"]) for i in range(n))


def load_gym_problems(source: str | GymSpec, *, split: str = "test", limit: Optional[int] = None,
                      key: Optional[str] = None) -> list[Problem]:
    """``limit`` problems (None: the generator's default size) of a spec's ``split``: ``"train"`` is
    the training stream, anything else the held-out one (the module doc: seeds and disjointness)."""
    spec = source if isinstance(source, GymSpec) else parse_spec(source, key=key)
    n = _default_size(spec.name) if limit is None else int(limit)
    if n < 0:
        raise ConfigError(f"limit must be >= 0, got {n}")
    if split != "train":
        ds = _dataset(spec.name, spec.settings_json, spec.seed, max(n, 1))
        return [_problem(spec, spec.seed, max(n, 1), i, ds[i]) for i in range(n)]
    excluded = _held_out_questions(spec.name, spec.settings_json, spec.seed, spec.held_out)
    seed = spec.seed + TRAIN_SEED_OFFSET
    cap = _DRAWS_PER_PROBLEM * n + spec.held_out
    ds = _dataset(spec.name, spec.settings_json, seed, max(cap, 1))
    out: list[Problem] = []
    for i in range(cap):
        if len(out) == n:
            break
        entry = ds[i]
        if str(entry["question"]) not in excluded:
            out.append(_problem(spec, seed, max(cap, 1), i, entry))
    if len(out) < n:
        raise DataError(f"{spec.text()}: only {len(out)} of {n} training problems lie outside the "
                        f"{spec.held_out} held-out ones in {cap} draws: the generator has too few distinct "
                        "problems at these settings; widen them, lower data.train_size or held_out")
    return out


def score_answer(answer: Optional[str], problem: Problem) -> float:
    """The generator's own ``score_answer(answer, entry)`` of an extracted final answer, in [0, 1].

    The answer is made plain first (:func:`~satseq.rewards.plain_text.plain_text_answer`: ``\\text{...}``
    and ``$...$`` around the whole answer are dropped), since reasoning-gym's scorers compare text.
    None, an answer longer than :data:`~satseq.rewards.guard.MAX_ANSWER_CHARS`, a scorer that raises,
    and a score that is not a finite number all score 0. Scoring runs in-process. A scorer that parses
    the answer with sympy (the integration and polynomial tasks) has no timeout, unlike math-verify's
    killable worker.
    """
    from satseq.rewards.plain_text import plain_text_answer
    from satseq.rewards.guard import MAX_ANSWER_CHARS

    if answer is None or len(answer) > MAX_ANSWER_CHARS:
        return 0.0
    m = problem.meta.get("reasoning_gym")
    if not isinstance(m, dict) or not isinstance(m.get("entry"), dict):
        raise DataError(f"problem {problem.problem_id!r}: scorer reasoning_gym needs meta['reasoning_gym'] "
                        "with its entry (a problem from reasoning_gym:<name>)")
    ds = _dataset(m["name"], json.dumps(m.get("settings", {}), sort_keys=True), int(m["seed"]), int(m["size"]))
    try:
        value = float(ds.score_answer(plain_text_answer(answer), m["entry"]))
    except Exception:  # noqa: BLE001 — a scorer's failure on a model's answer is a wrong answer
        return 0.0
    if not math.isfinite(value):
        return 0.0
    return min(1.0, max(0.0, value))


def _main() -> None:  # pragma: no cover - a listing for people
    import sys

    if len(sys.argv) > 1:
        cls = _registry()[sys.argv[1]][1] if sys.argv[1] in _registry() else None
        if cls is None:
            raise SystemExit(f"error: {_unknown_name(sys.argv[1], sys.argv[1], generator_names())}")
        types = _fields(cls)
        for f in dataclasses.fields(cls):
            if f.name in types:
                default = f.default if f.default is not dataclasses.MISSING else "(factory)"
                print(f"{f.name}: {getattr(types[f.name], '__name__', types[f.name])} = {default!r}")
        return
    print("\n".join(generator_names()))


if __name__ == "__main__":  # pragma: no cover
    _main()
