"""The A*-PO + PAG seed's notebook and trainer object (issue 64, item 3).

``AStarPO_PAG_Trainer_WithMetrics(...).train(...)`` trains on the embedded model through
:func:`satseq.train`, its arguments reaching the run's ``train_config.yaml``;
``recipes/apo_pag/AstarPO_PAG_implementation.ipynb`` runs top to bottom (nbclient, the venv's
``python3`` kernel) and writes its six plots. The embedded PAG warm start is a randomly initialised
tiny model here (the real one is minutes of SFT): what is checked is that the cells run, train and
write what they say, not what they learn.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "recipes" / "apo_pag" / "AstarPO_PAG_implementation.ipynb"
QUIET = dict(console=lambda *a: None)
TINY = {"grpo__group_size": 2, "rollout__max_new_tokens": 12, "threads": 1, "trainer__tensorboard": False,
        "trainer__progress": False, "trainer__eval_every": 0, "data__eval_size": 4}


def _seed_warm_start(output_dir: Path) -> Path:
    """A random tiny model where ``model.path=embedded`` looks for PAG's warm start under ``output_dir``."""
    import satseq
    from satseq.models.tiny import build_tiny_model, save_model_dir
    from satseq.models.warm_start import method_warm_start_dir
    from satseq.registry import env_of

    d = method_warm_start_dir(output_dir, env_of(satseq.load(method="pag")).warm_start_stem)
    model, tok = build_tiny_model(seed=0)
    save_model_dir(model, tok, d)
    (d / "warm_start.json").write_text("{}")
    return d


def _weights(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_trainer_object_trains_through_satseq_train_with_the_seed_arguments(tmp_path):
    from satseq import AStarPO_PAG_Trainer_WithMetrics
    from satseq.models.loading import load_causal_lm
    from satseq.seed_trainers.astarpo_pag import embedded_problems

    start = _seed_warm_start(tmp_path)
    train, _ = embedded_problems(6, 4)
    train[0]["answer"] = int(train[0]["answer"])  # the seed's synthetic problems have numeric answers
    trainer = AStarPO_PAG_Trainer_WithMetrics(model="embedded", ref_model="embedded", tokenizer=None,
                                              train_problems=train, beta1=0.7, beta2=0.004, n_samples_v_star=3,
                                              output_dir=tmp_path, **TINY, **QUIET)
    assert trainer.run_dir == tmp_path / "astarpo_pag"
    assert AStarPO_PAG_Trainer_WithMetrics(output_dir=tmp_path, **TINY, **QUIET).run_dir == tmp_path / "astarpo_pag_2"

    v_star = trainer.estimate_v_star()
    assert len(v_star) == 6 and all(0.0 <= v <= 1.0 for v in v_star.values())
    cache = json.loads((trainer.run_dir / "vstar.json").read_text())
    assert cache["beta1"] == 0.7 and cache["n_samples"] == 3

    trained = trainer.train(n_epochs=2, batch_size=4)  # ⌈2 · 6 / 4⌉ = 3 stages of 4 prompts
    cfg = yaml.safe_load((trainer.run_dir / "train_config.yaml").read_text())
    assert cfg["method"] == "pag" and cfg["pag"]["update"] == "apo"
    assert (cfg["apo"]["beta1"], cfg["apo"]["beta2"], cfg["apo"]["n_samples"]) == (0.7, 0.004, 3)
    assert (cfg["trainer"]["num_stages"], cfg["trainer"]["train_batch_size"]) == (3, 4)
    assert cfg["data"]["train"] == str(trainer.run_dir / "train_problems.jsonl") and cfg["data"]["train_size"] == 6
    assert json.loads((trainer.run_dir / "vstar.json").read_text())["created"] == cache["created"]  # stage 1 reused

    m = trainer.metrics
    assert m["step"] == [0, 1, 2] and len(m["v_star"]) == 6
    assert all(math.isfinite(x) for x in m["loss"]) and all(0.0 <= x <= 1.0 for x in m["revision_rate"])
    before = _weights(load_causal_lm(start)[0])
    after = _weights(trained)
    assert before.keys() == after.keys()
    assert any(not (before[k] == after[k]).all() for k in before), "training changed no weight"

    again = AStarPO_PAG_Trainer_WithMetrics(train_problems=train, beta1=0.7, beta2=0.004, n_samples_v_star=3,
                                            output_dir=tmp_path, run_name="astarpo_pag", **TINY, **QUIET)
    again.train(n_epochs=1, batch_size=6)  # the run continues: ⌈6 / 6⌉ = 1 more stage
    assert [r["step"] for r in trainer.history] == [0, 1, 2, 3]

    paths = trainer.plot_metrics(tmp_path / "plots")
    assert [p.name.split("_")[1] for p in paths[:6]] == list("123456") and paths[6].name == "dashboard.png"
    assert all(p.stat().st_size > 5_000 for p in paths)


def test_loaded_model_objects_are_saved_and_trained_from(tmp_path):
    from satseq import AStarPO_PAG_Trainer_WithMetrics
    from satseq.models.tiny import build_tiny_model
    from satseq.seed_trainers.astarpo_pag import embedded_problems

    model, tok = build_tiny_model(seed=3)
    ref_model, _ = build_tiny_model(seed=3)  # the seed loads the reference as a second copy
    train, _ = embedded_problems(4, 4)
    trainer = AStarPO_PAG_Trainer_WithMetrics(model=model, ref_model=ref_model, tokenizer=tok, train_problems=train,
                                              n_samples_v_star=2, output_dir=tmp_path, **TINY, **QUIET)
    start = trainer.run_dir / "start_model"
    assert trainer.config.model.path == str(start) and (start / "config.json").is_file()
    assert trainer.config.model.tokenizer is None and (start / "tokenizer.json").is_file()
    trained = trainer.train(n_epochs=1, batch_size=4)
    assert _weights(trained).keys() == _weights(model).keys()
    assert any(not (p == model.state_dict()[n]).all() for n, p in _weights(trained).items())


def test_bad_arguments_are_one_line_errors(tmp_path):
    from satseq import AStarPO_PAG_Trainer_WithMetrics
    from satseq.errors import ConfigError
    from satseq.models.tiny import build_tiny_model

    kw = dict(output_dir=tmp_path, **TINY, **QUIET)
    model, tok = build_tiny_model(seed=3)
    other, _ = build_tiny_model(seed=4)
    cases = [
        (dict(model=model, ref_model=other, tokenizer=tok), "ref_model: A*-PO's reference policy is the starting model"),
        (dict(model="embedded", ref_model="gpt2"), "ref_model:"),
        (dict(model=model), "tokenizer: a loaded model needs its tokenizer"),
        (dict(model=3), "model: expected a model name or path"),
        (dict(train_problems=[]), "train_problems: the list is empty"),
        (dict(train_problems=["1+1"]), "train_problems[0]: expected a dict"),
        (dict(n_samples_v_star=0), "apo.n_samples"),
        (dict(beta2=0.0), "apo.beta2"),
        (dict(apo__no_such_key=1), "no_such_key"),
    ]
    for args, message in cases:
        with pytest.raises(ConfigError, match=None) as e:
            AStarPO_PAG_Trainer_WithMetrics(**args, **kw)
        assert message in str(e.value) and "\n" not in str(e.value), (args, str(e.value))
    with pytest.raises(ConfigError, match="n_epochs: expected a positive integer"):
        AStarPO_PAG_Trainer_WithMetrics(**kw).train(n_epochs=0)


def test_load_in_8bit_is_model_quantization_int8(tmp_path):
    """The seed's troubleshooting: ``load_in_8bit=True``, or a model loaded in 8-bit, trains the frozen
    8-bit base with LoRA (``model.quantization=int8``); satseq loads it again from its source."""
    from satseq import AStarPO_PAG_Trainer_WithMetrics
    from satseq.errors import ConfigError
    from satseq.models.tiny import build_tiny_model, save_model_dir

    kw = dict(output_dir=tmp_path, model__lora__enabled=True, **TINY, **QUIET)
    t = AStarPO_PAG_Trainer_WithMetrics(load_in_8bit=True, **kw)
    assert (t.config.model.quantization, t.config.model.path) == ("int8", "embedded")
    with pytest.raises(ConfigError, match="model.quantization"):  # satseq's own check: no 8-bit full fine-tuning
        AStarPO_PAG_Trainer_WithMetrics(load_in_8bit=True, output_dir=tmp_path, **TINY, **QUIET)

    model, tok = build_tiny_model(seed=3)
    model.is_loaded_in_8bit = True  # as transformers marks a model loaded with BitsAndBytesConfig(load_in_8bit=True)
    with pytest.raises(ConfigError, match="^model: a quantized model is loaded again from its source"):
        AStarPO_PAG_Trainer_WithMetrics(model=model, tokenizer=tok, **kw)
    src = save_model_dir(model, tok, tmp_path / "src")
    model.config._name_or_path = str(src)
    t = AStarPO_PAG_Trainer_WithMetrics(model=model, tokenizer=tok, **kw)
    assert (t.config.model.quantization, t.config.model.path) == ("int8", str(src))
    assert not (t.run_dir / "start_model").exists()


def test_the_notebook_runs_top_to_bottom_and_writes_the_six_plots(tmp_path):
    import nbclient
    import nbformat

    _seed_warm_start(tmp_path)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.metadata.kernelspec.name == "python3"
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys; print('KERNEL', sys.executable)"))
    settings = next(i for i, c in enumerate(nb.cells) if "N_EPOCHS = " in c.source)
    nb.cells.insert(settings + 1, nbformat.v4.new_code_cell(  # the test's budget: smaller than the demo's
        "N_TRAIN, N_EVAL, N_EPOCHS, BATCH_SIZE, N_SAMPLES_V_STAR = 8, 4, 1, 4, 2\n"
        "SATSEQ_KEYS.update({'data.eval_size': N_EVAL, 'grpo.group_size': 2, 'rollout.max_new_tokens': 12})"))
    env = {"APO_PAG_OUTPUT_DIR": str(tmp_path), "APO_PAG_THREADS": "1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    kernel = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert kernel.strip() == f"KERNEL {sys.executable}"  # the venv's interpreter

    summary = json.loads((tmp_path / "astarpo_pag" / "notebook_summary.json").read_text())
    plots = [Path(p) for p in summary["plots"]]
    assert len(plots) == 7 and all(p.is_file() and p.stat().st_size > 5_000 for p in plots)
    assert len({p.name for p in plots}) == 7 and all(p.parent == tmp_path / "astarpo_pag" / "plots" for p in plots)
    assert summary["stages"] == 2  # ⌈1 epoch · 8 problems / 4⌉
    assert summary["weight_change"] > 0 and all(math.isfinite(x) for x in summary["loss"])
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 6
    for c in nb.cells:  # how long each cell took (pytest -s shows it)
        t = c.metadata.get("execution", {})
        if c.cell_type == "code" and "iopub.execute_input" in t:
            print(f"{t['iopub.execute_input']} .. {t['shell.execute_reply']}: {c.source.splitlines()[0][:60]}")
