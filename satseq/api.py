"""The Python API: train and evaluate from a notebook or a script, as with TRL's trainers.

    import satseq

    result = satseq.train("recipes/sat_seq/config/sat_seq.yaml", trainer__num_stages=20)
    result = satseq.train(method="grpo", overrides={"trainer.num_stages": 20, "ppo.lr": 1e-4})
    print(result.run_dir, result.final["rollout/vote_accuracy"])
    metrics = satseq.evaluate(result.run_dir, dataset="embedded", n=4)

Overrides use the CLI's dotted keys: as keyword arguments with ``__`` for the dots
(``trainer__num_stages=20``), or in ``overrides`` (a dict or a list of ``key=value`` strings). The
config is loaded and validated exactly as ``satseq train`` does (one-line :class:`ConfigError`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, Union

import yaml

if TYPE_CHECKING:
    from satseq.config import TrainConfig

ConfigLike = Union[None, str, os.PathLike, Mapping[str, Any], "TrainConfig"]  # noqa: F821


@dataclass
class TrainResult:
    """What :func:`train` returns: the run directory, its config, and every logged metrics row."""

    run_dir: Path
    config: Any
    metrics: list[dict] = field(default_factory=list)

    @property
    def final(self) -> dict:
        """The last stage's metrics row ({} if none was logged)."""
        return self.metrics[-1] if self.metrics else {}


def _yaml_value(v) -> str:
    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def _override_items(overrides, kwargs: dict) -> list[str]:
    items: list[str] = []
    if isinstance(overrides, Mapping):
        items += [f"{k}={_yaml_value(v)}" for k, v in overrides.items()]
    elif overrides:
        items += [str(x) for x in overrides]
    items += [f"{k.replace('__', '.')}={_yaml_value(v)}" for k, v in kwargs.items()]
    return items


def load(config: ConfigLike = None, overrides: Union[Mapping[str, Any], Sequence[str], None] = None, **kwargs):
    """A validated :class:`~satseq.config.TrainConfig` from a path, a dict, a config or defaults."""
    from satseq.config import TrainConfig, dump_config, load_config
    from satseq.config.loader import finalize
    from satseq.utils.io import write_yaml

    items = _override_items(overrides, kwargs)
    if isinstance(config, TrainConfig):
        if not items:
            return finalize(config)
        config = dump_config(config)
    if isinstance(config, Mapping):
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "config.yaml"
            write_yaml(path, dict(config))
            return load_config(path, items)
    return load_config(config, items)


def train(config: ConfigLike = None, overrides: Union[Mapping[str, Any], Sequence[str], None] = None, *,
          reward_fn: Optional[Callable[[str, str, str], float]] = None, console: Callable = print,
          **kwargs) -> TrainResult:
    """Train (or resume) the run the config describes; returns its :class:`TrainResult`.

    ``reward_fn(prompt, response, answer) -> float`` replaces correctness, as ``reward.custom``."""
    from satseq.tracking import read_metrics
    from satseq.loop import train as run_train

    cfg = load(config, overrides, **kwargs)
    run_dir = run_train(cfg, console=console, reward_fn=reward_fn)
    return TrainResult(run_dir=run_dir, config=cfg, metrics=read_metrics(run_dir))


def evaluate(checkpoint_dir: Union[str, os.PathLike] = "embedded", dataset: str = "embedded", **kwargs) -> dict:
    """Evaluate a run directory or a model on a dataset (the keyword arguments of ``satseq eval``:
    ``n``, ``ks``, ``temperature``, ``limit``, ``workflow``, ``output_dir``...); returns the metrics."""
    from satseq.eval.runner import run_evaluation

    kwargs.setdefault("show_table", False)
    kwargs.setdefault("show_progress", False)
    return run_evaluation(dataset, checkpoint_dir, **kwargs)
