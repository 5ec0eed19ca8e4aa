"""The ``satseq compare`` YAML file: its schema, and reading it into one validated :class:`CompareSpec`.

    output_dir: outputs/compare_embedded   # or `satseq compare FILE --out DIR`
    budget: {tokens: 150000}               # or {seconds: 60}: exactly one, the same for every run
    seeds: [0, 1, 2]
    threads: 1                             # torch threads per run and per evaluation
    common: [trainer.train_batch_size=8]   # overrides for every run (a list of key=value, or a mapping)
    eval: {problems: 200, n: 4, k: 4, temperature: 1.0}
    sweep: {sat_seq.lr: [3e-5, 1e-4], ppo.lr: [3e-5, 1e-4]}   # optional: a grid crossed with the seeds
    runs:
      - {name: grpo, method: grpo}
      - {name: dr_grpo, method: grpo, overrides: [grpo.loss=dr_grpo]}
      - {name: pag, method: pag, config: recipes/apo_pag/config/apo_pag.yaml}
      - {name: sat_seq_no_is, method: sat_seq, sweep: {}}    # its own grid ({}: none) instead of the file's

**Sweeps.** A run's grid is its own ``sweep`` if it names one, else the file's. A key under a method's
update sections (:attr:`satseq.methods.base.Method.update_sections`: ``sat_seq`` and
``algorithm.kl_ctrl`` for SAT-Seq, ``sat_seq`` for the simultaneous update, ``grpo`` and ``ppo`` for
GRPO, ...) applies only to the runs whose method lists that section; any other key (``trainer.*``,
``rollout.*``, ...) to every run. In the file's ``sweep`` a key no run's method reads is an error; in
a run's own, a key of another method's section is. Every grid point of a run is a :class:`Cell`,
named ``<run>@<key>=<value>[,<key>=<value>...]`` (its directories ``<cell>_seed<seed>``), whose
overrides are the run's own then the point's ``key=value``; a run without a grid is one cell named
like the run.

Every cell is validated as ``satseq train`` would load it (``config`` file, then ``common``, then the
run's ``overrides``, then its grid point) before anything runs. Every problem is one
:class:`~satseq.errors.ConfigError` line naming the file and line (``FILE:LINE: key 'runs.1.method':
...``) or the run.
"""
from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from satseq.errors import ConfigError

#: Keys ``satseq compare`` sets itself for every run (and the spec key to use instead).
RESERVED = {"method": "runs[].method", "seed": "seeds", "run_name": "runs[].name", "output_dir": "output_dir",
            "threads": "threads", "resume": None, "trainer.num_stages": "max_stages",
            "trainer.eval_every": "curve_every", "trainer.progress": None}
Overrides = Union[list[str], dict[str, Any]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Budget(_Strict):
    """What every run may spend: generated tokens or generated samples (all turns, dropped groups
    included; a sample is one generated turn), or the summed stage time in seconds (rollout + update;
    held-out evaluation and checkpoint writing excluded). ``samples`` makes "equal samples" literal
    between methods whose turns differ in length (PAG's one-word verdicts, GRPO's solutions)."""

    tokens: Optional[int] = Field(None, ge=1)
    samples: Optional[int] = Field(None, ge=1)
    seconds: Optional[float] = Field(None, gt=0)

    @model_validator(mode="after")
    def _exactly_one(self):
        if sum(v is not None for v in (self.tokens, self.samples, self.seconds)) != 1:
            raise ValueError("give exactly one of budget.tokens, budget.samples or budget.seconds")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("tokens", "samples", "seconds") if getattr(self, k) is not None)

    @property
    def amount(self) -> float:
        return float(getattr(self, self.kind))

    def describe(self) -> str:
        if self.kind == "seconds":
            return f"{self.seconds:g} s of training (summed stage time)"
        return f"{int(self.amount):,} generated {self.kind}"


class EvalSpec(_Strict):
    """The held-out evaluation every run and every baseline gets (``satseq eval``'s settings)."""

    dataset: str = "embedded"
    data_dir: Optional[str] = None
    problems: int = Field(200, ge=1)
    n: int = Field(4, ge=1)
    k: int = Field(4, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: Optional[int] = Field(None, ge=1)  # None: satseq eval's default (each run's rollout.max_new_tokens)
    seed: int = 0
    batch_size: int = Field(32, ge=1)

    @model_validator(mode="after")
    def _k_le_n(self):
        if self.k > self.n:
            raise ValueError(f"eval.k ({self.k}) must be <= eval.n ({self.n}): pass@k needs k samples")
        return self


class RunSpec(_Strict):
    """One compared run: a name, a method, an optional ``satseq train`` config file and overrides."""

    name: str = Field(..., min_length=1, max_length=80)
    method: str
    config: Optional[str] = None
    overrides: Overrides = Field(default_factory=list)
    sweep: Optional[dict[str, Any]] = None  # this run's grid (None: the file's; {}: none)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError(f"run name {v!r}: use letters, digits, '_', '-', '.' (it names directories)")
        return v


class CompareSpec(_Strict):
    output_dir: Optional[str] = None
    budget: Budget
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    threads: int = Field(1, ge=0)
    max_stages: int = Field(10_000, ge=1)
    curve_every: int = Field(5, ge=0)
    common: Overrides = Field(default_factory=list)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    sweep: dict[str, Any] = Field(default_factory=dict)  # {config key: [values]}, crossed with the seeds
    runs: list[RunSpec] = Field(..., min_length=1)
    source: str = Field("", exclude=True)  # the file it was read from (messages)

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("seeds must be distinct")
        return v

    @field_validator("runs")
    @classmethod
    def _unique_names(cls, v: list[RunSpec]) -> list[RunSpec]:
        names = [r.name for r in v]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"run name {dup!r} appears twice")
        return v


def override_list(value: Overrides) -> list[str]:
    """``[key=value, ...]`` from a list of strings or a mapping (values written as YAML)."""
    if isinstance(value, dict):
        from satseq.api import _yaml_value

        return [f"{k}={_yaml_value(v)}" for k, v in value.items()]
    return [str(x) for x in value]


def _line_of(key: str, lines: dict[str, int]) -> Optional[int]:
    parts = key.split(".") if key else []
    while parts and ".".join(parts) not in lines:
        parts.pop()
    return lines[".".join(parts)] if parts else None


def _where(source: str, key: str, lines: dict[str, int]) -> str:
    line = _line_of(key, lines)
    return f"{source}:{line}" if line is not None else source


def _validation_line(err: ValidationError, source: str, lines: dict[str, int]) -> str:
    first = err.errors(include_url=False)[0]
    key = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    elif first["type"] == "missing":
        msg = "required key missing"
    elif "input" in first and not isinstance(first["input"], (dict, list)):
        msg += f" (got {str(first['input'])[:60]!r})"
    return f"{_where(source, key, lines)}: key {key!r}: {msg}" if key else f"{source}: {msg}"


def read_spec(path: str | Path) -> tuple[CompareSpec, dict[str, int]]:
    """The validated spec and each dotted key's line (``runs.1.method`` -> 12)."""
    from satseq.config.loader import _collect_key_lines
    from satseq.utils import strict_yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: comparison file not found" if not p.exists() else f"{p}: not a file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: unreadable ({e})") from None
    lines: dict[str, int] = {}
    try:
        data = strict_yaml.load(text, check=lambda node: _collect_key_lines(node, "", lines))
    except strict_yaml.YAMLRefused as e:
        raise ConfigError(f"{p}{'' if e.line is None else f':{e.line}'}: {e.message}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping (budget, runs, ...)")
    try:
        spec = CompareSpec.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_validation_line(e, str(p), lines)) from None
    spec.source = str(p)
    for run in spec.runs:  # a config file: from the working directory, else next to the comparison file
        if run.config and not Path(run.config).expanduser().exists() and (p.parent / run.config).exists():
            run.config = str(p.parent / run.config)
    return spec, lines


def run_overrides(spec: CompareSpec, run: RunSpec, seed: int, output_dir: Path) -> list[str]:
    """The ``satseq train`` overrides of one (run or cell, seed): compare's defaults (quiet; and in a file
    with a sweep ``trainer.step_kl=true`` for the stability statistics: its extra forward would count in
    a seconds budget, so files without a sweep train as before), ``common``, the run's own (a cell's:
    then its grid point), then the keys compare owns (method, seed, run name, output dir, threads, stage cap)."""
    quiet = ["trainer.save_every=0", "trainer.export_pt=false", "trainer.tensorboard=false"]
    if spec.sweep or any(r.sweep for r in spec.runs):
        quiet.append("trainer.step_kl=true")
    own = [f"method={run.method}", f"seed={seed}", f"run_name={run.name}_seed{seed}", f"output_dir={output_dir}",
           f"threads={spec.threads}", "resume=true", f"trainer.num_stages={spec.max_stages}",
           f"trainer.eval_every={spec.curve_every}", "trainer.progress=false"]
    return quiet + override_list(spec.common) + override_list(run.overrides) + own


class Cell(RunSpec):
    """One grid point of a run (the whole run when it has no grid): trained for every seed, resumably,
    exactly like a run of a comparison without sweeps. ``base`` is the run's name, ``point`` the swept
    ``{key: value}``; ``overrides`` are the run's own followed by the point's."""

    base: str = ""
    point: dict[str, Any] = Field(default_factory=dict)


def value_label(v: Any) -> str:
    """A swept value as it appears in a cell's name: ``3e-05``, ``4``, ``true``, ``greedy``."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def cell_name(run: str, point: dict[str, Any]) -> str:
    """``<run>@<key>=<value>,...`` (``<run>`` alone without a grid point)."""
    return run + ("@" + ",".join(f"{k}={value_label(v)}" for k, v in point.items()) if point else "")


def make_cell(run: RunSpec, point: dict[str, Any]) -> Cell:
    """The cell of ``run`` at ``point`` (built without re-validating the name: it carries ``@``)."""
    from satseq.api import _yaml_value

    fields = {k: getattr(run, k) for k in RunSpec.model_fields}
    fields.update(name=cell_name(run.name, point), base=run.name, point=dict(point),
                  overrides=override_list(run.overrides) + [f"{k}={_yaml_value(v)}" for k, v in point.items()])
    return Cell.model_construct(**fields)


def method_prefixes() -> set[str]:
    """Every registered method's update sections: the keys a sweep applies per method."""
    from satseq.registry import get_method, method_names

    return {p for n in method_names() for p in get_method(n).sections}


def _under(key: str, prefixes) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _check_grid(grid: dict[str, Any], where: str, src: str, lines: dict[str, int]) -> None:
    """Each key a dotted config key compare does not own; each value list non-empty, of scalars that
    can name a directory, distinct."""
    for key, values in grid.items():
        at = _where(src, f"{where}.{key}", lines)
        if key in RESERVED:
            raise ConfigError(f"{at}: sweep key {key!r} is set by satseq compare")
        if not re.fullmatch(r"[A-Za-z_]\w*(\.\w+)*", key):
            raise ConfigError(f"{at}: sweep key {key!r}: a config key (section.key)")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{at}: sweep key {key!r}: give a non-empty list of values")
        for v in values:
            if not isinstance(v, (bool, int, float, str)) or (
                    isinstance(v, str) and not re.fullmatch(r"[A-Za-z0-9_.+-]+", v)):
                raise ConfigError(f"{at}: sweep key {key!r}: value {v!r}: use numbers, true/false or names "
                                  "of letters, digits, '_', '.', '+', '-' (they name directories)")
        labels = [value_label(v) for v in values]
        dup = next((x for x in labels if labels.count(x) > 1), None)
        if dup is not None:
            raise ConfigError(f"{at}: sweep key {key!r}: value {dup} appears twice")


def run_grid(spec: CompareSpec, run: RunSpec, sections: tuple[str, ...], prefixes: set[str]) -> dict[str, list]:
    """The grid of ``run`` (whose method's update sections are ``sections``): its own ``sweep``, else
    the file's keys that apply to it."""
    if run.sweep is not None:
        return dict(run.sweep)
    return {k: v for k, v in spec.sweep.items() if not _under(k, prefixes) or _under(k, sections)}


def check_runs(spec: CompareSpec, lines: dict[str, int], output_dir: Path) -> list[Cell]:
    """Every cell's config loads (as ``satseq train`` would), no override or sweep sets a key compare
    owns, every sweep key applies to its runs; returns the cells in file order (run, then grid point)."""
    from satseq.config import load_config
    from satseq.registry import get_method

    src = spec.source
    for where, items in [("common", override_list(spec.common))] + [
            (f"runs.{i}.overrides", override_list(r.overrides)) for i, r in enumerate(spec.runs)]:
        for j, item in enumerate(items):
            key = item.split("=", 1)[0].strip()
            if "=" not in item:
                raise ConfigError(f"{_where(src, f'{where}.{j}', lines)}: override {item!r} is not key=value")
            if key in RESERVED:
                instead = RESERVED[key]
                raise ConfigError(f"{_where(src, f'{where}.{j}', lines)}: {key!r} is set by satseq compare"
                                  + (f" (use '{instead}' in the comparison file)" if instead else ""))
    _check_grid(spec.sweep, "sweep", src, lines)
    for i, run in enumerate(spec.runs):
        _check_grid(run.sweep or {}, f"runs.{i}.sweep", src, lines)
    prefixes = method_prefixes()
    cells: list[Cell] = []
    used: set[str] = set()
    for i, run in enumerate(spec.runs):
        try:
            load_config(run.config, run_overrides(spec, run, spec.seeds[0], output_dir))
        except ConfigError as e:
            raise ConfigError(f"{_where(src, f'runs.{i}', lines)}: run {run.name!r}: {e}") from None
        sections = get_method(run.method).sections
        grid = run_grid(spec, run, sections, prefixes)
        for key, values in grid.items():
            where = f"runs.{i}.sweep.{key}" if run.sweep is not None else f"sweep.{key}"
            if run.sweep is not None and _under(key, prefixes) and not _under(key, sections):
                raise ConfigError(f"{_where(src, where, lines)}: run {run.name!r}: sweep key {key!r}: method "
                                  f"{run.method!r} does not read it (its update settings: {', '.join(sections)})")
            for v in values:  # each value through the config loading, on its own line
                try:
                    load_config(run.config, run_overrides(spec, make_cell(run, {key: v}), spec.seeds[0], output_dir))
                except ConfigError as e:
                    raise ConfigError(f"{_where(src, where, lines)}: run {run.name!r}: sweep {key}="
                                      f"{value_label(v)}: {e}") from None
            used.add(key)
        for values in itertools.product(*grid.values()):
            cells.append(make_cell(run, dict(zip(grid, values))))
    unused = [k for k in spec.sweep if k not in used]
    if unused:
        raise ConfigError(f"{_where(src, f'sweep.{unused[0]}', lines)}: sweep key {unused[0]!r}: no run's method "
                          "reads it (a run whose method does names its own sweep, or add such a run)")
    return cells
