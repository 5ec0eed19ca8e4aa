"""``satseq quickstart`` end to end at minimal size: the chain task's before/after table, its
results files and the certificate line. The warm starts are placed ready-made (a random tiny model
under both names) so the test costs seconds; building them is tested in test_warm_start_targets.py."""
import json

from typer.testing import CliRunner

TINY = ["data.eval_size=6", "trainer.train_batch_size=2", "sat_seq.group_size=2", "grpo.group_size=2",
        "sat_seq.mini_batch_size=4", "ppo.mini_batch_size=4", "rollout.max_new_tokens=6",
        "sat_seq.certificate.prompts=4", "trainer.progress=false"]


def _ready_made_warm_starts(out):
    from satseq.models.tiny import build_tiny_model, save_model_dir

    for stem in ("warm_start_seed0", "chain_seed0"):
        model, tok = build_tiny_model(seed=0)
        d = out / "embedded" / stem
        save_model_dir(model, tok, d)
        (d / "warm_start.json").write_text("{}")


def test_quickstart_prints_the_chain_table_and_writes_its_results(tmp_path):
    from satseq.cli import app

    _ready_made_warm_starts(tmp_path)
    r = CliRunner(env={"COLUMNS": "240"}).invoke(app, ["quickstart", "--output-dir", str(tmp_path), "--stages", "1", *TINY])
    assert r.exit_code == 0, r.output
    assert "relay of three seats: the vote" in r.output and "one agent, one pass" in r.output
    assert "1 policy in the 3 seats" in r.output
    assert "SAT-Seq's certificate" in r.output
    # each phase announces itself with the time left, so the first minute never looks hung
    assert [f"[{i}/6]" in r.output for i in range(1, 7)] == [True] * 6 and r.output.count(" left") >= 6
    res = json.loads((tmp_path / "quickstart" / "results.json").read_text())
    assert res["task"] == "chain" and res["stages"] == 1 and res["n_problems"] == 6
    for col in ("before", "sat_seq", "shared_policy", "grpo"):
        assert 0.0 <= res[col]["vote"] <= 1.0
    assert res["sat_seq"]["one_pass"] is None
    assert 0.0 <= res["grpo"]["one_pass"] <= 1.0 and 0.0 <= res["shared_policy"]["one_pass"] <= 1.0
    assert res["certificate"]["n"] == 4 and res["certificate"]["vote_lower"] <= res["certificate"]["vote_mean"]
    md = (tmp_path / "quickstart" / "results.md").read_text().splitlines()
    assert len(md) == 4 and md[2].startswith("| relay of three seats") and md[0].count("|") == 6
    # each run trained on the chain task, with the team reward only; the shared policy's one model
    for run in ("quickstart_sat_seq", "quickstart_grpo", "quickstart_shared_policy"):
        cfg = (tmp_path / run / "train_config.yaml").read_text()
        assert "embedded_task: chain" in cfg and "num_stages: 1" in cfg
    assert (tmp_path / "quickstart_shared_policy" / "policy_stage_1").is_dir()


def test_quickstart_names_a_bad_override(tmp_path):
    from satseq.cli import app

    r = CliRunner().invoke(app, ["quickstart", "--output-dir", str(tmp_path), "trainer.no_such_key=1"])
    assert r.exit_code == 2 and "trainer.no_such_key" in r.output


def test_the_time_left_is_rescaled_by_the_pace_so_far(monkeypatch):
    import satseq.quickstart as qs

    lines, now = [], [0.0]
    monkeypatch.setattr(qs.time, "perf_counter", lambda: now[0])
    console = type("C", (), {"print": lambda self, s: lines.append(s)})()
    clock = qs.PhaseClock(console, [("a", "first", 10), ("b", "second", 30), ("c", "third", 60)])
    clock.start("a")
    now[0] = 20.0  # the first phase took twice its estimate
    clock.start("b")
    now[0] = 80.0
    clock.start("c")
    clock.stop()
    assert "about 1 min 40 s left" in lines[0]  # 10 + 30 + 60 s, no pace yet
    assert "about 3 min 00 s left" in lines[1]  # (30 + 60) × 2
    assert "about 2 min 00 s left" in lines[2]  # 60 × (20 + 60) / (10 + 30)
    assert clock.spent == {"a": 20.0, "b": 60.0, "c": 0.0}
