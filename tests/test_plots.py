"""`satseq plot`: the six-panel dashboard from metrics.jsonl (SAT-Seq, PAG / GRPO and MLMT layouts,
chosen through the method registry), method inference, CLI errors, the answer-change-ratio collapse
warning, and the layouts' imports (no cycle back to the dashboard)."""
from __future__ import annotations

import ast
import json
import math
import random
from pathlib import Path

import pytest

from satseq.errors import SatseqError
from satseq.plot_cli import plot_command
from satseq.plotting.common import collapse_warning, moving_average
from satseq.plotting.dashboard import infer_method, plot_dashboard, run_info

AGENTS = ["agent_1", "agent_2", "agent_3"]


def _write_run(run_dir, method, agents, rows, config=None):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run_info.json").write_text(json.dumps({"method": method, "agents": agents}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if config is not None:
        (run_dir / "train_config.yaml").write_text(config)
    return run_dir


def _sat_seq_rows(n=30):
    rng = random.Random(0)
    rows = []
    for s in range(n):
        r = {"step": s, "rollout/vote_accuracy": min(1.0, 0.4 + s / 60 + rng.random() * 0.1),
             "stage/order": ",".join(AGENTS)}
        if s % 10 == 9:  # a certificate every 10 stages
            r.update({"certificate/vote_lower": 0.3 + s / 100, "certificate/vote_mean": 0.38 + s / 100,
                      "certificate/vote_improvement_lower": -0.1 + s / 100})
        for i, a in enumerate(AGENTS):
            rejected = s in (7, 19) and i == 1
            r.update({f"{a}/loss": rng.gauss(-0.02, 0.03), f"{a}/accuracy": 0.3 + s / 80 + rng.random() * 0.1,
                      f"{a}/kl_quantile": 0.01 + rng.random() * 0.05, f"{a}/beta": 1e-3 * 2 ** (s // 10 + i),
                      f"{a}/backtracks": 2 if rejected else (1 if s % 9 == i else 0),
                      f"{a}/accepted": 0.0 if rejected else 1.0,
                      f"{a}/step_scale": 0.0 if rejected else 0.5 ** (1 if s % 9 == i else 0)})
        rows.append(r)
    for s in (9, 19, 29):  # sparse held-out rows
        rows.append({"step": s, "eval/vote_accuracy": 0.6 + s / 100,
                     **{f"eval/{a}/accuracy": 0.5 + s / 100 for a in AGENTS}})
    return rows


def _pag_rows(n=30, collapse=False):
    rng = random.Random(1)
    rows = []
    for s in range(n):
        acr = (0.8 - s / n * 0.7) if collapse else 0.7 + rng.random() * 0.1
        rows.append({"step": s, "policy/loss": rng.gauss(0.1, 0.05), "policy/accuracy": 0.4 + s / 100,
                     "pag/acc_t1": 0.4 + s / 100, "pag/acc_final": 0.45 + s / 90,
                     "pag/verifier_acc": 0.6 + rng.random() * 0.2, "pag/correct_recall": 0.8,
                     "pag/wrong_recall": 0.3 + s / 100, "pag/answer_change_ratio": acr,
                     "pag/revision_rate": 0.5 - s / 100 if s != 3 else None})
    return rows


def _assert_png(path):
    mpimg = pytest.importorskip("matplotlib.image")
    assert path.exists() and path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(str(path))
    assert img.shape[0] > 500 and img.shape[1] > 1000


def test_sat_seq_dashboard(tmp_path):
    run = _write_run(tmp_path / "run", "sat_seq", AGENTS, _sat_seq_rows(),
                     config="algorithm:\n  kl_ctrl:\n    target_kl: 0.03\n")
    path = plot_dashboard(run)
    assert path == run / "dashboard.png"
    _assert_png(path)
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]  # atomic write left nothing behind


def test_pag_dashboard_with_vstar_and_out(tmp_path):
    run = _write_run(tmp_path / "pag", "pag", ["policy"], _pag_rows())
    rng = random.Random(2)
    (run / "vstar.json").write_text(json.dumps({"vstar": [rng.random() for _ in range(200)]}))
    out = tmp_path / "figs" / "dash.png"
    assert plot_command(run, out) == out
    _assert_png(out)
    assert not (run / "dashboard.png").exists()


def test_grpo_dashboard_degrades(tmp_path, capsys):
    rows = [{"step": s, "policy/loss": 0.01 * s, "policy/accuracy": s / 20, "time/stage": 1.0} for s in range(20)]
    run = _write_run(tmp_path / "grpo", "grpo", ["policy"], rows)
    plot_command(run, None)
    _assert_png(run / "dashboard.png")
    assert "warning" not in capsys.readouterr().out


def test_missing_run_metadata_is_inferred(tmp_path):
    run = tmp_path / "bare"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _sat_seq_rows(8)))
    _assert_png(plot_dashboard(run, tmp_path / "bare.png"))


def test_infer_method_and_agents(tmp_path):
    assert infer_method([k for r in _sat_seq_rows(2) for k in r]) == "sat_seq"
    assert infer_method(["step", "agent_1/kl_quantile"]) == "sat_seq"
    assert infer_method([k for r in _pag_rows(2) for k in r]) == "pag"
    assert infer_method(["step", "mlmt/acc_t1", "solver/loss"]) == "mlmt"
    assert infer_method(["step", "policy/loss"]) == "grpo"
    (tmp_path / "run_info.json").write_text(json.dumps({"method": "apo"}))  # run_info.json wins; agents inferred
    assert run_info(tmp_path, _pag_rows(2)) == ("apo", ["policy"])


def test_mlmt_dashboard(tmp_path):
    rng = random.Random(3)
    rows = [{"step": s, "solver/loss": rng.gauss(0, 0.1), "coach/loss": rng.gauss(0.1, 0.1),
             "mlmt/acc_t1": 0.3 + s / 100, "mlmt/acc_t3": 0.35 + s / 90, "coach/reward": rng.random(),
             "solver/kl_ref": 0.01 * s, "mlmt/improvement_rate": 0.1} for s in range(12)]
    rows += [{"step": 11, "eval/mlmt/acc_t1": 0.4, "eval/mlmt/acc_t3": 0.5}]
    run = _write_run(tmp_path / "mlmt", "mlmt", ["solver", "coach"], rows)
    _assert_png(plot_dashboard(run))


@pytest.mark.parametrize("method,title", [("sat_seq", "SAT-Seq"), ("mlmt", "MLMT-RL"), ("pag", "PAG"),
                                          ("apo", "A*-PO"), ("grpo", "GRPO")])
def test_builtin_methods_own_their_layout(method, title):
    from satseq.registry import get_method

    m = get_method(method)  # a built-in must be registered: an unknown method falls back to the default layout
    assert m.title == title and callable(m.dashboard)


def test_unknown_method_gets_the_default_layout(tmp_path):
    rows = [{"step": s, "policy/loss": 0.1 * s, "policy/accuracy": s / 10} for s in range(8)]
    run = _write_run(tmp_path / "run", "no_such_method", ["policy"], rows)
    _assert_png(plot_dashboard(run))


def test_layouts_import_only_the_common_helpers():
    """A layout (``methods/<name>/dashboard.py``, or one that several methods draw: ``plotting/one_policy.py``,
    ``plotting/relay_panels.py``) imports nothing of satseq but satseq.plotting.common: the dashboard imports
    the layouts (through the registry), never the other way round."""
    root = Path(__file__).resolve().parents[1] / "satseq"
    layouts = sorted(root.glob("methods/*/dashboard.py")) + [root / "plotting" / "one_policy.py",
                                                             root / "plotting" / "relay_panels.py"]
    assert {p.parent.name for p in layouts} >= {"mlmt", "plotting"}
    for path in layouts + [root / "plotting" / "common.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                if name.split(".")[0] == "satseq":
                    assert name == "satseq.plotting.common" and path.name != "common.py", (path, name)


def test_cli_errors(tmp_path):
    with pytest.raises(SatseqError, match="no such run directory"):
        plot_command(tmp_path / "nope", None)
    (tmp_path / "run").mkdir()
    with pytest.raises(SatseqError, match="no metrics file"):
        plot_command(tmp_path / "run", None)
    (tmp_path / "run" / "metrics.jsonl").write_text("")
    with pytest.raises(SatseqError, match="empty") as e:
        plot_command(tmp_path / "run", None)
    assert "\n" not in str(e.value)


def test_cli_prints_collapse_warning(tmp_path, capsys):
    run = _write_run(tmp_path / "pag", "pag", ["policy"], _pag_rows(collapse=True))
    plot_command(run, tmp_path / "d.png")
    out = capsys.readouterr().out
    assert "dashboard:" in out and "warning: answer change ratio" in out


def test_collapse_warning():
    key = "pag/answer_change_ratio"
    assert collapse_warning([]) is None
    assert collapse_warning([{"step": 0, "policy/accuracy": 0.5}]) is None
    healthy = [{"step": s, key: 0.8} for s in range(10)]
    assert collapse_warning(healthy) is None
    late = healthy + [{"step": 10 + s, key: 0.2} for s in range(5)]
    msg = collapse_warning(late)
    assert msg is not None and "0.200" in msg and "< 0.5" in msg
    assert collapse_warning(late, threshold=0.1) is None
    # only the last values count; None / NaN entries (no revised episodes) are skipped
    recovered = late + [{"step": 20 + s, key: 0.9} for s in range(5)] + [{"step": 25, key: None},
                                                                          {"step": 26, key: math.nan}]
    assert collapse_warning(recovered) is None


def test_moving_average():
    assert moving_average([1.0, 3.0, 5.0, 7.0], window=2) == [1.0, 2.0, 4.0, 6.0]
    assert moving_average([]) == []
