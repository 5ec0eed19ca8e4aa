"""``AStarPO_PAG_Trainer_WithMetrics``: the A*-PO + PAG seed notebook's trainer object, a thin front on
:func:`satseq.train` (the seed: ``../shared/seeds/apo_pag_readme.md``; the method: docs/apo_pag.md).

    from satseq import AStarPO_PAG_Trainer_WithMetrics

    trainer = AStarPO_PAG_Trainer_WithMetrics(model=model, ref_model=ref_model, tokenizer=tokenizer,
                                              train_problems=train_problems[:50], beta1=0.5, beta2=0.001,
                                              n_samples_v_star=8)
    trained_model = trainer.train(n_epochs=10, batch_size=4)
    trainer.metrics["acc_t1"], trainer.plot_metrics()

It trains nothing itself: the seed's arguments become config keys of the recipe's config
(``recipes/apo_pag/config/apo_pag.yaml``: ``method=pag``, ``pag.update=apo``), and satseq's loop runs
the run in ``<output_dir>/<run_name>`` as ``satseq train`` would:

============================  ============================================================================
seed                          config
============================  ============================================================================
``model``                     ``model.path``: a model name or path, ``"embedded"`` (the demo model), or a
                              loaded Hugging Face model, saved to ``<run_dir>/start_model`` first
``tokenizer``                 ``model.tokenizer`` (None: the model's own; a loaded one is saved beside it)
``ref_model``                 none: A*-PO's reference π_ref is the starting policy (the policy before
                              its first update), so ``ref_model`` must be that model (None, the same
                              object or name, or a copy with equal weights)
``train_problems``            ``data.train`` / ``data.train_size``: ``{"problem", "answer"}`` dicts written
                              to ``<run_dir>/train_problems.jsonl``, or a path or dataset name
``beta1``                     ``apo.beta1``: V*(x) = β1 · ln E_{y~π_ref}[exp(r(x, y) / β1)]
``beta2``                     ``apo.beta2``: the regression (β2 · ln π/π_ref − (r − V*))²
``n_samples_v_star``          ``apo.n_samples``: reference samples per prompt for V*
``load_in_8bit``              ``model.quantization=int8`` (also for a model loaded in 8-bit: satseq loads it
                              again from its ``name_or_path``); LoRA on the frozen 8-bit base
``train(n_epochs, bs)``       ``trainer.train_batch_size = bs``, ``trainer.num_stages = ⌈n_epochs · N / bs⌉``
                              (N training problems: each problem is seen n_epochs times, as the seed's loop
                              over batches does; a second ``train`` call continues the run)
============================  ============================================================================

Any other config key passes through as in :func:`satseq.train` (``overrides={...}`` or keyword
arguments with ``__`` for the dots, e.g. ``apo__lr=1e-6``). The seed's plots read :attr:`metrics`
(one list per metric, by stage) and :attr:`v_star`; :meth:`plot_metrics` writes the six plots as PNG
files (:func:`satseq.plotting.dashboard.plot_panels`) and the dashboard.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from satseq.errors import ConfigError

#: the recipe's config, the base of every run (``config=`` replaces it; ``{}`` = satseq's defaults)
RECIPE_CONFIG = Path(__file__).resolve().parents[2] / "recipes" / "apo_pag" / "config" / "apo_pag.yaml"

#: the seed's metric names (its plots) -> satseq's logged metric (``{agent}``: the policy agent)
SEED_METRICS = {
    "loss": "{agent}/loss",
    "acc_t1": "pag/acc_t1",
    "acc_final": "pag/acc_final",
    "verifier_acc": "pag/verifier_acc",
    "answer_change_ratio": "pag/answer_change_ratio",
    "revision_rate": "pag/revision_rate",
}
DEFAULT_RUN_NAME = "astarpo_pag"
PROBLEMS_FILE = "train_problems.jsonl"
START_MODEL_DIR = "start_model"

PathLike = Union[str, os.PathLike]


class AStarPO_PAG_Trainer_WithMetrics:  # noqa: N801 - the seed's name
    """The seed's trainer: its arguments as config keys (see the module docstring), trained by
    :func:`satseq.train`. The config is loaded and validated here, so a bad argument is a one-line
    :class:`~satseq.errors.ConfigError` before anything runs.

    ``run_name`` None: ``astarpo_pag`` (``astarpo_pag_2``, ... when taken), a fresh run per object; a
    ``run_name`` given continues that run (its next :meth:`train` adds stages, resumed as ``satseq
    train`` resumes)."""

    def __init__(self, model: Any = "embedded", ref_model: Any = None, tokenizer: Any = None,
                 train_problems: Union[None, PathLike, Sequence[Mapping[str, Any]]] = "embedded",
                 beta1: float = 0.5, beta2: float = 0.001, n_samples_v_star: int = 8, *,
                 load_in_8bit: bool = False, config: Any = None, output_dir: PathLike = "outputs",
                 run_name: Optional[str] = None, overrides: Optional[Mapping[str, Any]] = None,
                 console: Callable = print, **kwargs):
        self.console = console
        self.base_config = self._base_config(config)
        self.output_dir = Path(output_dir)
        self.run_dir = self._reserve_run_dir(self.output_dir, run_name)
        _check_ref_model(ref_model, model)
        keys: dict[str, Any] = {"method": "pag", "pag.update": "apo", "output_dir": str(self.output_dir),
                                "run_name": self.run_dir.name, "apo.beta1": beta1, "apo.beta2": beta2,
                                "apo.n_samples": n_samples_v_star}
        keys.update(_model_keys(model, tokenizer, load_in_8bit, self.run_dir))
        keys.update(_data_keys(train_problems, self.run_dir))
        self._keys = {**keys, **dict(overrides or {}), **{k.replace("__", "."): v for k, v in kwargs.items()}}
        self.config = self._load()
        self.tokenizer = tokenizer  # after train(): the trained policy's tokenizer
        self.result = None          # the last train()'s satseq.TrainResult
        self.trained_model = None   # the policy after the last train()
        steps = [r["step"] for r in self.history if isinstance(r.get("step"), int)]
        self._stages_done = max(steps) + 1 if steps else 0  # run_name= of a run that has trained: it continues

    # ------------------------------------------------------------------ config
    @staticmethod
    def _base_config(config):
        if config is not None:
            return config
        if not RECIPE_CONFIG.is_file():
            raise ConfigError(f"config: the recipe's config {RECIPE_CONFIG} is not in this install (a checkout of "
                              "satseq has it); pass config=PATH, or config={} for satseq's defaults")
        return str(RECIPE_CONFIG)

    @staticmethod
    def _reserve_run_dir(output_dir: Path, run_name: Optional[str]) -> Path:
        if run_name is not None:
            return output_dir / run_name
        output_dir.mkdir(parents=True, exist_ok=True)
        for i in range(1, 10_000):
            d = output_dir / (DEFAULT_RUN_NAME if i == 1 else f"{DEFAULT_RUN_NAME}_{i}")
            try:
                d.mkdir()
                return d
            except FileExistsError:
                continue
        raise ConfigError(f"run_name: {output_dir} holds 9999 {DEFAULT_RUN_NAME} runs; pass run_name=")

    def _load(self, **extra):
        from satseq.api import load

        return load(self.base_config, overrides={**self._keys, **extra})

    # ------------------------------------------------------------------ stage 1 and training
    def estimate_v_star(self) -> dict:
        """A*-PO stage 1 alone (the seed's V* estimation cell): ``apo.n_samples`` reference samples per
        training prompt, V* written to ``<run_dir>/vstar.json``, which :meth:`train` then uses. It is
        the run's own stage 1 (the method's ``prepare``, as the loop calls it). Returns :attr:`v_star`."""
        from satseq.registry import get_method
        from satseq.runtime import build_runtime

        method = get_method(self.config.method)
        rt = build_runtime(self.config, method, self.console)
        method.prepare(rt.cfg, rt, None, self.console)
        return self.v_star

    def train(self, n_epochs: int = 10, batch_size: int = 4):
        """Train ``n_epochs`` passes over the training problems in batches of ``batch_size`` prompts
        (``trainer.num_stages = ⌈n_epochs · N / batch_size⌉`` more stages; the first call starts the run,
        later calls continue it). Returns the trained policy (a Hugging Face model, as the seed's
        ``trained_model``); the run's record is :attr:`result`, its metrics :attr:`metrics`."""
        from satseq.api import train

        for name, v in (("n_epochs", n_epochs), ("batch_size", batch_size)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name}: expected a positive integer, got {v!r}")
        stages = self._stages_done + math.ceil(n_epochs * self.n_problems() / batch_size)
        self.result = train(self.base_config, overrides={
            **self._keys, "trainer.num_stages": stages, "trainer.train_batch_size": batch_size, "resume": True},
            console=self.console)
        self.config = self.result.config
        self._stages_done = stages
        self.trained_model = self._load_policy()
        return self.trained_model

    def n_problems(self) -> int:
        """N, the number of training problems a run draws from (``data.train`` limited by ``data.train_size``)."""
        cfg = self.config
        if cfg.data.train == "embedded":
            return cfg.data.train_size
        from satseq.data.loading import load_problems

        return len(load_problems(cfg.data.train, split="train", data_dir=cfg.data.data_dir, limit=cfg.data.train_size))

    def _load_policy(self):
        from satseq.eval.targets import load_target

        device = self.config.device
        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        target = load_target(self.run_dir, device=device, console=self.console)
        self.tokenizer = target.pool.tokenizer
        return target.pool.module(target.agents[0])

    @property
    def start_model(self) -> str:
        """The model the run starts from, as ``satseq.evaluate`` takes it (``embedded``: the method's
        warm start under ``output_dir``, built on first use)."""
        cfg = self.config
        if cfg.model.path != "embedded":
            return cfg.model.path
        from satseq.envs.tasks import warm_start_for
        from satseq.registry import env_of

        return str(warm_start_for(cfg.data.embedded_task, env_of(cfg), cfg.output_dir,
                                  show_progress=cfg.trainer.progress, console=self.console))

    def evaluate(self, dataset: str = "embedded", **kwargs) -> dict:
        """:func:`satseq.evaluate` of the run's latest checkpoint (solve, verify, revise)."""
        from satseq.api import evaluate

        return evaluate(self.run_dir, dataset=dataset, **kwargs)

    # ------------------------------------------------------------------ metrics
    @property
    def history(self) -> list[dict]:
        """Every logged metrics row of the run (``metrics.jsonl``), one per stage."""
        from satseq.tracking import read_metrics

        return read_metrics(self.run_dir)

    @property
    def metrics(self) -> dict[str, list[float]]:
        """The seed's metrics by stage: ``step``, ``loss``, ``acc_t1``, ``acc_final``, ``verifier_acc``,
        ``answer_change_ratio``, ``revision_rate`` (NaN where a stage logged none: e.g. no revised
        episode), and ``v_star`` (one value per training prompt)."""
        rows = self.history
        agent = self._policy_agent()
        out: dict[str, list[float]] = {"step": [r.get("step") for r in rows]}
        for name, key in SEED_METRICS.items():
            key = key.format(agent=agent)
            out[name] = [_number(r.get(key)) for r in rows]
        out["v_star"] = list(self.v_star.values())
        return out

    @property
    def v_star(self) -> dict:
        """V* per training prompt id, from ``<run_dir>/vstar.json`` ({} before stage 1)."""
        path = Path(self.config.apo.vstar_cache or self.run_dir / "vstar.json")
        if not path.is_file():
            return {}
        obj = json.loads(path.read_text(encoding="utf-8"))
        return dict(zip(obj["problem_ids"], obj["vstar"]))

    def collapse_warning(self) -> Optional[str]:
        """The seed's "Answer Change Ratio should be > 0.5" check over the last logged stages (None: fine)."""
        from satseq.plotting.common import collapse_warning

        return collapse_warning(self.history, threshold=self.config.pag.collapse_threshold)

    def plot_metrics(self, out_dir: Optional[PathLike] = None) -> list[Path]:
        """The seed's six plots, one PNG each, and the six-panel ``dashboard.png``, in ``out_dir``
        (default the run directory); returns the seven paths. Prints the collapse warning if any."""
        from satseq.plotting.dashboard import plot_dashboard, plot_panels

        out = Path(out_dir) if out_dir is not None else self.run_dir
        paths = plot_panels(self.run_dir, out) + [plot_dashboard(self.run_dir, out / "dashboard.png")]
        warning = self.collapse_warning()
        if warning:
            self.console(f"warning: {warning}")
        return paths

    def _policy_agent(self) -> str:
        info = self.run_dir / "run_info.json"
        if info.is_file():
            agents = json.loads(info.read_text(encoding="utf-8")).get("agents") or []
            if agents and isinstance(agents[0], str):
                return agents[0]
        return "policy"


def embedded_problems(n_train: int, n_eval: int) -> tuple[list[dict], list[dict]]:
    """The embedded task's training and held-out problems as the seed's ``{"problem", "answer"}`` dicts,
    the ones ``data.train=embedded`` / ``data.eval=embedded`` draw (disjoint): the only problems the
    embedded demo model reads (3-digit sums, ``347+589``)."""
    from satseq.api import load
    from satseq.registry import env_of
    from satseq.runtime import load_datasets

    cfg = load(method="pag", data__train_size=n_train, data__eval_size=n_eval)
    train, held_out = load_datasets(cfg, env_of(cfg))
    return ([{"problem": p.problem, "answer": p.answer} for p in train],
            [{"problem": p.problem, "answer": p.answer} for p in held_out])


# ---------------------------------------------------------------------- the seed's arguments
def _number(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")


def _is_path(x) -> bool:
    return isinstance(x, (str, os.PathLike))


def _quantized_kind(model) -> Optional[str]:
    """``int8`` / ``nf4`` for a model loaded quantized by bitsandbytes, else None."""
    if getattr(model, "is_loaded_in_8bit", False):
        return "int8"
    if getattr(model, "is_loaded_in_4bit", False):
        return "nf4"
    return None


def _model_keys(model, tokenizer, load_in_8bit: bool, run_dir: Path) -> dict:
    """``model.*`` keys for the seed's ``model`` / ``tokenizer`` / ``load_in_8bit``."""
    keys: dict[str, Any] = {}
    kind = "int8" if load_in_8bit else None
    if _is_path(model):
        keys["model.path"] = str(model)
    elif hasattr(model, "save_pretrained") and hasattr(model, "config"):
        kind = kind or _quantized_kind(model)
        if kind:  # a quantized model is loaded again from its source, quantized by satseq
            source = getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")
            if not source:
                raise ConfigError("model: a quantized model is loaded again from its source, and this one names "
                                  "none (name_or_path); pass its name or path, with load_in_8bit=True")
            keys["model.path"] = str(source)
        else:
            if tokenizer is None:
                raise ConfigError("tokenizer: a loaded model needs its tokenizer (pass tokenizer=, a loaded tokenizer "
                                  "or its name)")
            start = run_dir / START_MODEL_DIR
            model.save_pretrained(start, safe_serialization=True)
            keys["model.path"] = str(start)
            if not _is_path(tokenizer):
                tokenizer.save_pretrained(start)
                tokenizer = None
    else:
        raise ConfigError(f"model: expected a model name or path, 'embedded', or a loaded Hugging Face model, "
                          f"got {type(model).__name__}")
    if kind:
        keys["model.quantization"] = kind  # bitsandbytes via BitsAndBytesConfig, LoRA on the frozen base
    if tokenizer is not None:
        if _is_path(tokenizer):
            keys["model.tokenizer"] = str(tokenizer)
        elif hasattr(tokenizer, "save_pretrained"):
            if getattr(tokenizer, "name_or_path", None) != keys["model.path"]:  # else: the model's own
                d = run_dir / "tokenizer"
                tokenizer.save_pretrained(d)
                keys["model.tokenizer"] = str(d)
        else:
            raise ConfigError(f"tokenizer: expected a tokenizer name or path or a loaded tokenizer, "
                              f"got {type(tokenizer).__name__}")
    return keys


def _same_weights(a, b) -> bool:
    import torch

    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(sa[k].shape == sb[k].shape and torch.equal(sa[k], sb[k]) for k in sa)


def _check_ref_model(ref_model, model) -> None:
    """``ref_model`` is accepted when it is the starting model: A*-PO's π_ref (V* and the log-ratio of
    stage 2) is the policy before its first update, which satseq keeps itself."""
    if ref_model is None or ref_model is model:
        return
    if _is_path(ref_model):
        name = str(model) if _is_path(model) else getattr(model, "name_or_path", None)
        if str(ref_model) == name:
            return
    elif hasattr(ref_model, "state_dict") and hasattr(model, "state_dict") and _same_weights(ref_model, model):
        return
    raise ConfigError("ref_model: A*-PO's reference policy is the starting model (model=); a ref_model with "
                      "other weights is not supported (pass ref_model=None)")


def _data_keys(train_problems, run_dir: Path) -> dict:
    """``data.train`` (and ``data.train_size``) for the seed's ``train_problems``."""
    if train_problems is None:
        return {"data.train": "embedded"}
    if _is_path(train_problems):
        return {"data.train": str(train_problems)}
    if isinstance(train_problems, Mapping) or not isinstance(train_problems, Sequence):
        raise ConfigError(f"train_problems: expected a list of {{'problem', 'answer'}} dicts or a path, "
                          f"got {type(train_problems).__name__}")
    if not train_problems:
        raise ConfigError("train_problems: the list is empty")
    lines = []
    for i, row in enumerate(train_problems):
        if not isinstance(row, Mapping):
            raise ConfigError(f"train_problems[{i}]: expected a dict with 'problem' and 'answer', got "
                              f"{type(row).__name__}")
        row = dict(row)
        if isinstance(row.get("answer"), (int, float)) and not isinstance(row.get("answer"), bool):
            row["answer"] = str(row["answer"])  # the seed's synthetic problems have numeric answers
        lines.append(json.dumps(row, ensure_ascii=False))
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / PROBLEMS_FILE
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"data.train": str(path), "data.train_size": len(lines)}


__all__ = ["AStarPO_PAG_Trainer_WithMetrics", "RECIPE_CONFIG", "SEED_METRICS", "embedded_problems"]
