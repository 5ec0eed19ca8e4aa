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
    # each phase announces itself (after the first, with the time left), so the first minute never looks hung
    assert [f"[{i}/5]" in r.output for i in range(1, 6)] == [True] * 5 and r.output.count(" left") >= 4
    assert "chain warm start: the three agents' vote" in r.output
    res = json.loads((tmp_path / "quickstart" / "results.json").read_text())
    assert res["task"] == "chain" and res["stages"] == 1 and res["n_problems"] == 6
    said = res["timings_s"]["estimates"]  # every printed time left, beside the time that was left
    assert len(said) >= 4 and all(e["actual_s"] >= 0 and set(e) == {"at_s", "said_s", "actual_s", "error"} for e in said)
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


def test_the_time_left_is_the_longer_lanes_remaining_work_at_the_measured_pace():
    from satseq.quickstart_clock import Progress, RunTrack, pace, seconds_left

    ref = {"toks": 1000.0, "before": 20.0, "tail": {"e1": 10.0, "e2": 30.0},
           "runs": {"a": (5.0, 2.0, 1.0), "b": (1.0, 1.0, 0.0), "c": (2.0, 2.0, 1.0)}}
    runs = {m: RunTrack(m, 10) for m in "abc"}
    prog = Progress(lanes=[["before", "a"], ["b", "c"]], runs=runs, tail_left=["e1", "e2"], toks=500.0)
    # nothing measured: the rollout speed says this machine is twice as slow as the reference
    assert pace(prog, ref) == 2.0
    # lane 1: 2 × (20 + 5 + 10·2 + 1) = 92; lane 2: 2 × (1 + 10 + 0) + 2 × (2 + 20 + 1) = 68; tail 2 × 40
    assert seconds_left(prog, ref) == 92 + 80
    # b's stages measured: 3 s a stage where the reference took 1 (pace 3, the rollout speed no longer used)
    for t, done in ((10.0, 1), (13.0, 2), (16.0, 3)):
        runs["b"].observe(done, t)
    prog.before_elapsed = 30.0
    assert runs["b"].seconds_per_stage() == 3.0 and pace(prog, ref) == 3.0
    # lane 1: 3·20 − 30 + 3·(5 + 20 + 1) = 108; lane 2: 7 stages × 3 s + 3·0 + 3·23 = 90; tail 3 × 40
    assert seconds_left(prog, ref) == 108 + 120
    # time since a run's last stage counts as done: 2 s after b's third stage, lane 2 = 19 + 69 (lane 1 still 108)
    prog.now = 18.0
    assert seconds_left(prog, ref) == 108 + 120
    runs["a"].observe(1, 18.0)
    prog.now = 21.0
    # lane 1: 30 + a's 9 stages at 3·2 s + 3·1 − 3 s since its first = 84; lane 2: 21 − 5 + 69 = 85, the longer
    assert seconds_left(prog, ref) == 85 + 120
    # the trainings done, the first evaluation took 5 s of its reference 10: the last one is charged 0.5 × 30
    prog.before_done = True
    for r in runs.values():
        r.done = r.stages
    prog.tail_left, prog.tail_spent = ["e2"], {"e1": 5.0}
    assert seconds_left(prog, ref) == 15.0


def test_the_phase_clock_prints_the_time_left_and_records_what_each_phase_took(monkeypatch):
    import satseq.quickstart as qs
    from satseq.quickstart_clock import Progress

    lines, now = [], [0.0]
    monkeypatch.setattr(qs.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(qs, "seconds_left", lambda prog: 60.0 * len(prog.tail_left))
    console = type("C", (), {"print": lambda self, s: lines.append(s)})()
    prog = Progress(lanes=[], runs={}, tail_left=["x", "y"])
    clock = qs.PhaseClock(console, prog, [("t", "train {n}"), ("x", "first"), ("y", "second")], n=3)
    clock.start("t")
    now[0] = 20.0
    clock.start("x")
    now[0] = 25.0
    clock.start("y")
    clock.stop()
    assert lines == ["[bold][1/3][/bold] train 3 · about 2 min 00 s left",
                     "[bold][2/3][/bold] first · about 2 min 00 s left",
                     "[bold][3/3][/bold] second · about 1 min 00 s left"]
    assert clock.spent == {"t": 20.0, "x": 5.0, "y": 0.0} and prog.tail_spent == {"x": 5.0, "y": 0.0}
