"""bench/figures/reproduce.py reads each case's output under the names docs/headlines.json documents."""
import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("reproduce", REPO / "bench" / "figures" / "reproduce.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_outputs(out: Path) -> None:
    (out / "quickstart").mkdir(parents=True)
    (out / "quickstart" / "results.json").write_text(json.dumps(
        {"before": {"vote": 0.2, "one_pass": 0.0}, "sat_seq": {"vote": 0.8, "one_pass": None},
         "shared_policy": {"vote": 0.8, "one_pass": 0.0}, "grpo": {"vote": 0.2, "one_pass": 0.0}}))
    run = {"vote_equal_samples": 0.5}
    (out / "multiagent_comparison_chain.json").write_text(json.dumps(
        {"0": {"warm_start": {"vote": 0.2}, "sat_seq": run, "simultaneous": run, "grpo": run}}))
    ev = {"eval": {"accuracy": {"mean": 0.5}}}
    (out / "comparison.json").write_text(json.dumps(
        {"runs": {"pag": [ev], "pag_balanced": [ev], "apo_pag": [ev], "grpo_t1": [ev]},
         "warm_start": {"pag": {"eval": {"accuracy": {"mean": 0.4}}}}}))
    coach = {"accuracy": {"mean": 0.6}, "coach": {"copy_coach": {"mean": 0.9}}}
    (out / "mlmt").mkdir()
    (out / "mlmt" / "comparison.json").write_text(json.dumps(
        {"runs": {"mlmt": [{"eval": coach}]}, "warm_start": {"mlmt": {"eval": coach}}}))


def test_every_documented_headline_is_read_from_its_case_output(tmp_path):
    bench = _bench()
    _fake_outputs(tmp_path)
    headlines = json.loads((REPO / "docs" / "headlines.json").read_text())
    cases = [c for c in headlines if not c.startswith("_")]
    assert set(cases) <= set(bench.CASES) and "quickstart" in cases and "pag" in cases
    for case in cases:
        measured = bench.CASES[case](tmp_path)  # outputs present: read back, nothing re-run
        for fig in headlines[case]["figures"]:
            assert fig["name"] in measured, (case, fig["name"], sorted(measured))
            assert fig["lo"] <= fig["hi"]
