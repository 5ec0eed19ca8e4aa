"""Metric logging: always a JSONL file in the run directory; TensorBoard, W&B, MLflow when wanted.

``run_dir/metrics.jsonl`` holds one line ``{"step": N, **metrics}`` per :meth:`Tracker.log` call
and is the source of truth (plots and reports read it with :func:`read_metrics`). TensorBoard
events go to ``run_dir/tensorboard`` when the ``tensorboard`` package is importable (else skipped
silently). W&B and MLflow are used only when enabled *and* installed; enabled but missing gives
one warning line, never a crash. Console output is not this module's job.

Resuming: pass ``resume_step`` (the first step the resumed run will log); lines with
``step >= resume_step`` left by the interrupted run are dropped first (atomic rewrite), and
TensorBoard purges its events from that step on, so a resumed run never duplicates points.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional

from satseq.utils.io import append_jsonl, atomic_write, read_jsonl, write_text

_logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


def _plain(value: Any) -> Any:
    """numpy / torch scalars -> Python scalars; everything else unchanged."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError, RuntimeError):
            return value
    return value


def _numeric(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _truncate_jsonl(path: Path, resume_step: int) -> None:
    """Keep only the complete, parseable lines with step < resume_step (atomic rewrite)."""
    if not path.exists():
        return
    kept: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                continue  # a line being written when the process died
            try:
                row = json.loads(line)
                step = row["step"]
            except (json.JSONDecodeError, TypeError, KeyError):
                continue
            if isinstance(step, (int, float)) and step < resume_step:
                kept.append(line)
    with atomic_write(path) as fh:
        fh.writelines(kept)


def wandb_configured() -> bool:
    """``trainer.wandb=auto``: the wandb package is installed and the user has W&B set up
    (``WANDB_API_KEY``, ``WANDB_MODE`` offline/online, or a ``wandb login`` entry in ~/.netrc)."""
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        return False
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE") in ("offline", "online"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False


class Tracker:
    """Log scalar metrics per step to JSONL and the enabled, installed backends."""

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        tensorboard: bool = True,
        wandb: bool | str = False,
        wandb_project: str = "satseq",
        mlflow: bool = False,
        config: Optional[dict] = None,
        console: bool = True,
        resume_step: Optional[int] = None,
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.console = console  # kept for callers; this class never prints metrics
        self._closed = False
        if resume_step is not None:
            _truncate_jsonl(self.metrics_path, resume_step)

        self._tb = None
        if tensorboard:
            self._tb = self._open_tensorboard(resume_step)
        self._wandb = None
        if wandb == "auto":
            wandb = wandb_configured()
        if wandb:
            self._wandb = self._open_wandb(wandb_project, config, resume_step)
        self._mlflow = None
        if mlflow:
            self._mlflow = self._open_mlflow(config, resume_step)

    # ------------------------------------------------------------------------------- backends
    def _open_tensorboard(self, resume_step: Optional[int]):
        try:
            import tensorboard  # noqa: F401  (torch's writer needs it; skip silently without)
            from torch.utils.tensorboard import SummaryWriter
        except Exception:  # ImportError, or a broken install
            return None
        try:
            return SummaryWriter(log_dir=str(self.run_dir / TENSORBOARD_DIR), purge_step=resume_step)
        except Exception as e:  # pragma: no cover - unwritable dir etc.
            _logger.warning("tensorboard logging disabled: %s", " ".join(str(e).split()))
            return None

    def _open_wandb(self, project: str, config: Optional[dict], resume_step: Optional[int]):
        try:
            import wandb
        except Exception:
            _logger.warning("trainer.wandb is on but the wandb package is not installed (pip install wandb); "
                        "W&B logging skipped")
            return None
        id_file = self.run_dir / "wandb_run_id.txt"
        run_id = id_file.read_text().strip() if (resume_step is not None and id_file.exists()) else None
        try:
            run = wandb.init(project=project, name=self.run_dir.name, dir=str(self.run_dir), config=config or {},
                             id=run_id, resume="allow" if run_id else None)
            write_text(id_file, str(run.id) + "\n")
            return run
        except Exception as e:
            _logger.warning("W&B logging disabled: %s", " ".join(str(e).split()))
            return None

    def _open_mlflow(self, config: Optional[dict], resume_step: Optional[int]):
        try:
            import mlflow
        except Exception:
            _logger.warning("trainer.mlflow is on but the mlflow package is not installed (pip install mlflow); "
                        "MLflow logging skipped")
            return None
        id_file = self.run_dir / "mlflow_run_id.txt"
        try:
            if not os.environ.get("MLFLOW_TRACKING_URI"):
                mlflow.set_tracking_uri((self.run_dir / "mlruns").resolve().as_uri())
            run_id = id_file.read_text().strip() if (resume_step is not None and id_file.exists()) else None
            run = mlflow.start_run(run_id=run_id, run_name=None if run_id else self.run_dir.name)
            if config and not run_id:
                params = {k: str(v)[:500] for k, v in _flatten(config).items()}
                mlflow.log_params(params)
            write_text(id_file, run.info.run_id + "\n")
            return mlflow
        except Exception as e:
            _logger.warning("MLflow logging disabled: %s", " ".join(str(e).split()))
            return None

    # ---------------------------------------------------------------------------------- public
    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Append ``{"step": step, **metrics}`` to metrics.jsonl; numeric values go to the backends."""
        row: dict[str, Any] = {"step": int(step)}
        for k, v in metrics.items():
            if k != "step":
                row[str(k)] = _plain(v)
        append_jsonl(self.metrics_path, row)

        scalars = {k: x for k, v in row.items() if k != "step" and (x := _numeric(v)) is not None}
        if not scalars:
            return
        if self._tb is not None:
            for k, x in scalars.items():
                self._tb.add_scalar(k, x, global_step=int(step))
        if self._wandb is not None:
            try:
                self._wandb.log(scalars, step=int(step))
            except Exception as e:  # never let a remote logger kill training
                _logger.warning("W&B log failed, disabling: %s", " ".join(str(e).split()))
                self._wandb = None
        if self._mlflow is not None:
            try:
                finite = {re.sub(r"[^\w\-./ ]", "_", k): x for k, x in scalars.items() if math.isfinite(x)}
                self._mlflow.log_metrics(finite, step=int(step))
            except Exception as e:
                _logger.warning("MLflow log failed, disabling: %s", " ".join(str(e).split()))
                self._mlflow = None

    def flush(self) -> None:
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        """Flush and close every backend (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._tb is not None:
            self._tb.flush()
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            try:
                self._wandb.finish()
            except Exception:  # pragma: no cover
                pass
            self._wandb = None
        if self._mlflow is not None:
            try:
                self._mlflow.end_run()
            except Exception:  # pragma: no cover
                pass
            self._mlflow = None

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """All rows of ``run_dir/metrics.jsonl`` (``[]`` if absent; a torn last line is dropped)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    return read_jsonl(path, allow_partial_last_line=True)


__all__ = ["METRICS_FILE", "TENSORBOARD_DIR", "Tracker", "read_metrics"]


class NoTracker:
    """What workers other than the main one log metrics to: nothing (the main one logs the same,
    gathered metrics)."""

    def __enter__(self) -> "NoTracker":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def log(self, metrics, step: int) -> None:
        pass
