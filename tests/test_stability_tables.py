"""bench/figures/stability_tables.py: the study's tables are computed from comparison.json and written into a
page's marked block atomically (the docs' figures are that output, not retyped)."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("stability_tables", ROOT / "bench" / "figures" / "stability_tables.py")
st = importlib.util.module_from_spec(spec)
spec.loader.exec_module(st)


def _seed(final, acc_collapsed):
    return {"stability": {"collapse": {"accuracy": acc_collapsed, "any": True}}, "eval": {"accuracy": {"mean": final}}}


def _data():
    cell = lambda lr: f"relay_sat_seq@sat_seq.lr={lr}"
    stab = {"seeds": 3, "collapsed": 3, "final": {"mean": 0.1, "se": 0.05}, "best": {"mean": 0.9, "se": 0.01},
            "kl_step_q99": {"mean": 0.12, "se": 0.0}, "kl_step_max": {"mean": 10.0, "se": 0.0},
            "step_scale_mean": {"mean": 0.5, "se": 0.1}, "reasons": ["accuracy 0.000 < warm start 0.6"]}
    return {"spec": {"eval": {"k": 4}},
            "sweep": {"relay_sat_seq": [cell("0.0001"), cell("0.001")]},
            "stability": {cell("0.0001"): stab, cell("0.001"): stab, "relay_sat_seq_no_is": stab},
            "runs": {cell("0.0001"): [_seed(0.0, True), _seed(0.0, True), _seed(0.9, False)],
                     cell("0.001"): [_seed(0.0, True)] * 3, "relay_sat_seq_no_is": [_seed(0.0, True)] * 3},
            "warm_start": {cell("0.0001"): {"dir": "b/warm_start_relay_0a", "eval": {"accuracy": {"mean": 0.6, "se": 0.02},
                                                     "pass@k": {"mean": 0.98, "se": 0.01}}}}}


def test_rows_count_accuracy_collapses_per_seed_and_carry_the_baselines():
    text = st.tables(_data())
    assert "| SAT-Seq | 0.0001 | 0.100 ± 0.050 | 0.900 ± 0.010 | 2 / 3 of 3 | 0.12 | 10 | 0.5 |" in text
    assert "| SAT-Seq | 0.001 | 0.100 ± 0.050 | 0.900 ± 0.010 | 3 / 3 of 3 |" in text
    assert "| warm start (relay vote) | - | 0.600 ± 0.020 |" in text and "| best-of-4 of the warm start (relay vote) | - | 0.980 ± 0.010 |" in text
    assert "| no IS factor (c = 1) | 1e-3 |" in text  # the ablation block, beside SAT-Seq at 1e-3


def test_write_replaces_only_the_marked_block(tmp_path):
    src = tmp_path / "comparison.json"
    src.write_text(json.dumps(_data()))
    page = tmp_path / "page.md"
    page.write_text(f"intro\n{st.BEGIN}\nold\n{st.END}\noutro\n")
    assert st.main([str(src), "--write", str(page)]) == 0
    doc = page.read_text()
    assert doc.startswith("intro\n") and doc.endswith("outro\n") and "old" not in doc and "| SAT-Seq | 0.001 |" in doc
    page.write_text("no markers\n")
    assert st.main([str(src), "--write", str(page)]) == 2 and page.read_text() == "no markers\n"
    assert st.main([str(tmp_path / "missing.json")]) == 2


def test_compact_table_is_one_row_per_method_with_the_final_accuracy_per_lr():
    text = st.compact(_data())
    assert "| relay: final held-out | lr 0.0001 | lr 0.001 |" in text
    assert "| SAT-Seq | 0.100 ± 0.050 | 0.100 ± 0.050 |" in text
    assert "warm start (relay vote): 0.600 ± 0.020" in text and "`relay_sat_seq_no_is` 0.100 ± 0.050" in text
