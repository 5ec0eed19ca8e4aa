"""Train one (run, seed) of a comparison to its budget, resumably, and evaluate it on the held-out set.

:func:`train_and_evaluate` is the whole job for one (run, seed), in ``OUT/<name>_seed<seed>/``:

A sweep's grid point is a cell (:class:`~satseq.compare.spec.Cell`), trained exactly like a run:
its name ``<run>@<key>=<value>`` names its directories, and its swept value is in its training config,
hence in its fingerprint.

1. ``compare_run.json`` records the run's fingerprint (:func:`settings`: the resolved training config's
   values that differ from the schema's defaults, and the budget; a key the schema gains later, at its
   default, leaves it unchanged). A run directory made with other settings is refused, never resumed
   into. A mark of the older scheme (the full config, defaults included) is accepted when the run's saved
   ``train_config.yaml`` has the same settings, and rewritten.
2. ``compare_result.json`` present with that fingerprint: the job is done; nothing is redone.
3. Otherwise the trainer runs (or resumes exactly from ``trainer_state/`` after a kill: the loop's
   own resume) until the budget is spent: :class:`BudgetStop` sums ``rollout/generated_tokens`` or
   ``time/stage`` over the logged stages and ends the run at the first stage that reaches it, with a
   checkpoint of that stage. ``max_stages`` caps a run that never reaches it (reported as such).
4. The final checkpoint is evaluated with :func:`evaluate` (``satseq eval``'s runner: resumable,
   ``OUT/evals/<name>_seed<seed>/``), and the summary goes to ``compare_result.json`` (atomically).

Curve points (held-out accuracy against generated samples / tokens / summed stage time) come from the
trainer's own held-out evaluation every ``curve_every`` stages (``trainer.eval_every``; one sampled
episode per ``data.eval`` problem), read from ``metrics.jsonl``.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Optional

from satseq.compare.spec import CompareSpec, RunSpec, run_overrides
from satseq.errors import ConfigError

RESULT = "compare_result.json"
FINGERPRINT = "compare_run.json"
#: The held-out metric the trainer logs for each workflow's final answer, in order of preference.
CURVE_KEYS = ("eval/vote_accuracy", "eval/acc_final", "eval/acc_t3", "eval/policy/accuracy")


def _quiet(*_a, **_k) -> None:
    return None


def read_json_if_exists(path: Path) -> Optional[dict]:
    """The JSON object at ``path``, or None when absent or unreadable (a torn write counts as absent)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


#: the metric each budget kind sums over a run's logged stages
BUDGET_KEYS = {"tokens": "rollout/generated_tokens", "samples": "rollout/generated_samples", "seconds": "time/stage"}


def budget_used(row: dict, kind: str) -> float:
    """What one logged stage spent: its generated tokens or samples (turns), or its stage time in seconds."""
    return float(row.get(BUDGET_KEYS[kind], 0))


class BudgetStop:
    """``stop_when`` for :func:`satseq.loop.train`: True at the first stage whose cumulative spend
    (stages logged before a resume included) reaches the budget. ``on_stage(stage, used)`` reports."""

    def __init__(self, run_dir: Path, kind: str, amount: float, on_stage: Optional[Callable] = None):
        self.run_dir, self.kind, self.amount, self.on_stage = Path(run_dir), kind, amount, on_stage
        self.used: Optional[float] = None

    def __call__(self, stage: int, metrics: dict) -> bool:
        if self.used is None:  # first stage of this process: what earlier processes spent
            from satseq.tracking import read_metrics

            self.used = sum(budget_used(r, self.kind) for r in read_metrics(self.run_dir)
                            if isinstance(r.get("step"), (int, float)) and r["step"] < stage)
        self.used += budget_used(metrics, self.kind)
        if self.on_stage is not None:
            self.on_stage(stage, self.used)
        return self.used >= self.amount


def curve_key(rows: list[dict]) -> Optional[str]:
    """The held-out accuracy key of these metrics rows (the final answer's), or None."""
    keys = {k for r in rows for k in r}
    for k in CURVE_KEYS:
        if k in keys:
            return k
    for suffix in ("/acc_final", "/acc_t3", "accuracy"):  # a method's own namespace: eval/pag/acc_final ...
        found = next((k for k in sorted(keys) if k.startswith("eval/") and k.endswith(suffix)), None)
        if found:
            return found
    return None


def training_summary(rows: list[dict], kind: str, amount: float) -> dict:
    """Totals and the held-out curve of a run's metrics rows (cumulative samples, tokens, seconds)."""
    key = curve_key(rows)
    samples = tokens = seconds = 0.0
    curve: dict[str, list] = {"samples": [], "tokens": [], "seconds": [], "acc": []}
    for r in sorted(rows, key=lambda r: r.get("step", 0)):
        samples += float(r.get("rollout/generated_samples", 0))
        tokens += float(r.get("rollout/generated_tokens", 0))
        seconds += float(r.get("time/stage", 0.0))
        if key is not None and isinstance(r.get(key), (int, float)):
            for name, v in (("samples", samples), ("tokens", tokens), ("seconds", seconds), ("acc", r[key])):
                curve[name].append(v)
    used = {"tokens": tokens, "samples": samples, "seconds": seconds}[kind]
    return {"stages": len(rows), "samples": int(samples), "tokens": int(tokens), "train_s": seconds,
            "budget_reached": used >= amount, "curve_key": key, "curve": curve}


def run_config(spec: CompareSpec, run: RunSpec, seed: int, out: Path):
    """The validated training config of one (run, seed)."""
    from satseq.config import load_config

    return load_config(run.config, run_overrides(spec, run, seed, out))


def settings(cfg) -> dict:
    """The config's values that differ from the schema's defaults (what a run was set to do)."""
    return cfg.model_dump(mode="json", exclude_defaults=True)


def fingerprint(cfg, spec: CompareSpec) -> str:
    text = json.dumps({"settings": settings(cfg), "budget": spec.budget.model_dump()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _saved_settings_match(run_dir: Path, cfg) -> bool:
    """The run's saved ``train_config.yaml`` read by this schema has ``cfg``'s settings (a mark of the older
    fingerprint scheme, whose hash changed with every key the schema gained). A key ``cfg`` leaves to the
    trainer (None or ``auto``, e.g. ``rollout.engine``) may be saved resolved."""
    from satseq.config import load_config
    from satseq.errors import SatseqError

    path = run_dir / "train_config.yaml"
    if not path.is_file():
        return False
    try:
        saved = settings(load_config(str(path), []))
    except (SatseqError, ValueError, OSError):
        return False
    return _same(settings(cfg), saved)


def _same(want, saved) -> bool:
    if isinstance(want, dict) and isinstance(saved, dict):
        return all(_same(want.get(k), saved.get(k)) for k in set(want) | set(saved))
    return want == saved or want is None or want == "auto"


def evaluate(spec: CompareSpec, target: Path, out_dir: Path, stage: Optional[int] = None) -> tuple[dict, list[dict]]:
    """``satseq eval`` of a run directory (its latest complete stage, or ``stage``) with the spec's
    held-out settings; returns the metrics and the ``predictions.jsonl`` lines."""
    from satseq.eval.predictions_io import PREDICTIONS
    from satseq.eval.runner import run_evaluation
    from satseq.utils.io import read_jsonl

    e = spec.eval
    metrics = run_evaluation(e.dataset, target, out_dir, n=e.n, ks=sorted({1, e.k}), temperature=e.temperature,
                             top_p=e.top_p, max_new_tokens=e.max_new_tokens, limit=e.problems, data_dir=e.data_dir, batch_size=e.batch_size,
                             threads=spec.threads, stage=stage, seed=e.seed, show_progress=False, show_table=False,
                             console=_quiet)
    return metrics, read_jsonl(out_dir / PREDICTIONS, allow_partial_last_line=True)


def _already_trained(run_dir: Path, rows: list[dict], kind: str, amount: float, max_stages: int) -> bool:
    """The budget (or the stage cap) was reached and the last logged stage has its checkpoint: a
    process killed after that stage but before its evaluation need not train again."""
    from satseq.checkpoint import latest_agent_checkpoints

    if not rows:
        return False
    try:
        agents = json.loads((run_dir / "run_info.json").read_text())["agents"]
    except (OSError, ValueError, KeyError):
        return False
    last = int(max(r.get("step", -1) for r in rows)) + 1
    spent = sum(budget_used(r, kind) for r in rows)
    found = latest_agent_checkpoints(run_dir, agents)
    return (spent >= amount or last >= max_stages) and found is not None and found[0] == last


def cell_fields(run: RunSpec) -> dict:
    """The run a cell belongs to and its grid point (a plain run: itself, no point)."""
    return {"run": getattr(run, "base", "") or run.name, "point": dict(getattr(run, "point", {}) or {})}


def train_and_evaluate(spec: CompareSpec, run: RunSpec, seed: int, out: Path, *, console: Callable = print,
                       on_stage: Optional[Callable] = None) -> dict:
    """The result of one (run, seed), trained and evaluated now or read back (see the module docstring)."""
    from satseq.compare.baselines import summarize_eval
    from satseq.loop import train
    from satseq.tracking import read_metrics
    from satseq.utils.io import write_json

    cfg = run_config(spec, run, seed, out)
    run_dir = Path(cfg.run_dir)
    fp = fingerprint(cfg, spec)
    mark = read_json_if_exists(run_dir / FINGERPRINT)
    if mark is not None and mark.get("fingerprint") != fp and mark.get("scheme") != "settings" \
            and _saved_settings_match(run_dir, cfg):
        old = mark["fingerprint"]
        mark = {**mark, "fingerprint": fp, "scheme": "settings"}
        write_json(run_dir / FINGERPRINT, mark)
        done = read_json_if_exists(run_dir / RESULT)
        if done is not None and done.get("fingerprint") == old:
            write_json(run_dir / RESULT, {**done, "fingerprint": fp})
    if mark is not None and mark.get("fingerprint") != fp:
        raise ConfigError(f"{run_dir} was made with other settings (config or budget changed since): "
                          "delete it, or give the run another name")
    done = read_json_if_exists(run_dir / RESULT)
    if done is not None and done.get("fingerprint") == fp:
        console(f"[compare] {run.name} seed {seed}: done earlier, not redone")
        # the totals and curve are re-read from metrics.jsonl (cheap), so a report follows this code's reading
        return {**done, **cell_fields(run), **training_summary(read_metrics(run_dir), spec.budget.kind,
                                                                spec.budget.amount)}
    if mark is None:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json(run_dir / FINGERPRINT, {"fingerprint": fp, "scheme": "settings", "name": run.name, "seed": seed,
                                           "method": run.method})
    kind, amount = spec.budget.kind, spec.budget.amount
    rows = read_metrics(run_dir)
    if not _already_trained(run_dir, rows, kind, amount, spec.max_stages):
        if rows:
            console(f"[compare] {run.name} seed {seed}: resuming after {len(rows)} logged stages")
        train(cfg, console=console, stop_when=BudgetStop(run_dir, kind, amount, on_stage))
        rows = read_metrics(run_dir)
    result = {"name": run.name, "seed": seed, "method": run.method, "run_dir": str(run_dir), "fingerprint": fp,
              **cell_fields(run), **training_summary(rows, kind, amount)}
    metrics, preds = evaluate(spec, run_dir, out / "evals" / run_dir.name)
    result["stage"] = metrics.get("stage")
    result["eval"] = summarize_eval(metrics, preds, spec.eval.k)
    write_json(run_dir / RESULT, result)
    acc = result["eval"]["accuracy"]
    console(f"[compare] {run.name} seed {seed}: {result['stages']} stages, {result['tokens']:,} tokens, "
            f"{result['train_s']:.1f} s; held-out {acc['mean']:.3f} ± {acc['se'] or 0:.3f}")
    return result
