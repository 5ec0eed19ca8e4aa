"""`satseq compare`: the YAML's one-line errors, a tiny comparison end to end (comparison.md / .png),
nothing redone on a second call, a killed comparison resumed exactly, and the trivial baselines
against hand-computed cases."""
import json
import os
import sys
from pathlib import Path

import pytest
import warm_cli

from satseq.compare.baselines import coach_baselines, judged_attempts, verifier_baselines, verifier_stats
from satseq.compare.runner import BudgetStop, training_summary
from satseq.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _spec(tiny_dir, out, budget="tokens: 60", runs=None) -> str:
    runs = runs or ["{name: grpo, method: grpo}", "{name: sat_seq, method: sat_seq}"]
    return "\n".join([
        f"output_dir: {out}",
        f"budget: {{{budget}}}",
        "seeds: [0]",
        "threads: 1",
        "curve_every: 1",
        f"common: [model.path={tiny_dir}, trainer.train_batch_size=2, sat_seq.group_size=2, grpo.group_size=2,",
        "         rollout.max_new_tokens=6, data.train_size=16, data.eval_size=4]",
        "eval: {problems: 4, n: 2, k: 2}",
        "runs:",
        *[f"  - {r}" for r in runs]]) + "\n"


def _compare(args, env=None):
    env = dict(os.environ, **(env or {}))
    env.setdefault("OMP_NUM_THREADS", "1")
    return warm_cli.run([sys.executable, "-m", "satseq.cli", "compare", *args], cwd=ROOT, env=env, timeout=300)


# ------------------------------------------------------------------------------ YAML errors
BAD = [
    ("budget: {tokens: 10, seconds: 5}\nruns: [{name: a, method: grpo}]\n", ":1: key 'budget': give exactly one"),
    ("budget: {tokens: 10, samples: 5}\nruns: [{name: a, method: grpo}]\n", ":1: key 'budget': give exactly one"),
    ("runs: [{name: a, method: grpo}]\n", "key 'budget': required key missing"),
    ("budget: {tokens: 10}\nrunz: []\nruns: [{name: a, method: grpo}]\n", ":2: key 'runz': unknown key"),
    ("budget: {tokens: 10}\nruns:\n  - {name: a, method: grpo}\n  - {name: a, method: sat_seq}\n",
     "run name 'a' appears twice"),
    ("budget: {tokens: 10}\neval: {n: 2, k: 4}\nruns: [{name: a, method: grpo}]\n", ":2: key 'eval': eval.k (4)"),
    ("budget: {tokens: 10}\nruns:\n  - {name: a, method: grpo}\n  - {name: b, method: nosuch}\n",
     ":4: run 'b': "),
    ("budget: {tokens: 10}\nruns:\n  - name: a\n    method: grpo\n    overrides: [grpo.lrr=1]\n",
     ":3: run 'a': unknown config key 'grpo.lrr'"),
    ("budget: {tokens: 10}\nruns:\n  - name: a\n    method: grpo\n    overrides: [seed=3]\n",
     ":5: 'seed' is set by satseq compare (use 'seeds'"),
    ("budget: {tokens: 10}\nruns:\n  - {name: a/b, method: grpo}\n", ":3: key 'runs.0.name'"),
    ("budget: {tokens: 10}\nbudget: {seconds: 1}\nruns: [{name: a, method: grpo}]\n", ":2: duplicate key"),
    ("budget: {tokens: -1}\nruns: [{name: a, method: grpo}]\n", ":1: key 'budget.tokens'"),
    ("budget: {tokens: 10}\neval: {max_new_tokens: 0}\nruns: [{name: a, method: grpo}]\n",
     ":2: key 'eval.max_new_tokens'"),
]


@pytest.mark.parametrize("text,expected", BAD)
def test_bad_comparison_file_is_one_line_naming_line_or_key(tmp_path, text, expected):
    from satseq.compare.cli import run_comparison

    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        run_comparison(f, tmp_path / "out", console=lambda *a: None, progress=False)
    assert expected in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()  # nothing runs before the whole file is valid


def test_cli_error_exit_status_and_missing_output_dir(tmp_path):
    from typer.testing import CliRunner

    from satseq.cli import app

    f = tmp_path / "c.yaml"
    f.write_text("budget: {seconds: 5}\nruns: [{name: a, method: grpo}]\n")
    r = CliRunner().invoke(app, ["compare", str(f)])
    assert r.exit_code == 2 and "no output directory" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and "comparison file not found" in r.output


# ------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def compared(tiny_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    f = tmp / "c.yaml"
    f.write_text(_spec(tiny_dir, tmp / "out"))
    r = _compare([str(f), "--no_progress"])
    assert r.returncode == 0, r.stderr
    return tmp, f, r


def test_compare_writes_table_and_figure(compared):
    tmp, _, r = compared
    out = tmp / "out"
    md = (out / "comparison.md").read_text()
    assert (out / "comparison.png").read_bytes()[:4] == b"\x89PNG"
    for row in ("| **grpo** (grpo) |", "| **sat_seq** (sat_seq) |", "| ↳ warm start |",
                "| ↳ best-of-2 of the warm start (pass@2) |", "60 generated tokens",
                "| ↳ majority of 2 samples (maj@2) |", "| ↳ majority of 2 samples of the warm start (maj@2) |"):
        assert row in md, row
    assert md.count("majority of 2 samples") == 2  # one policy answering alone only: GRPO and its warm start
    assert "rollouts differ" not in md  # one machine, one choice
    data = json.loads((out / "comparison.json").read_text())
    assert 0.0 <= data["runs"]["grpo"][0]["eval"]["maj@k"]["mean"] <= 1.0
    assert "maj@k" not in data["runs"]["sat_seq"][0]["eval"]
    for name in ("grpo", "sat_seq"):
        (res,) = data["runs"][name]
        assert res["tokens"] >= 60 and res["budget_reached"]  # stopped at the first stage past the budget
        rows = [json.loads(x) for x in (out / f"{name}_seed0" / "metrics.jsonl").read_text().splitlines()]
        assert sum(x["rollout/generated_tokens"] for x in rows[:-1]) < 60 <= res["tokens"]
        assert res["eval"]["n_problems"] == 4 and len(res["curve"]["acc"]) == res["stages"]
        assert (out / f"{name}_seed0" / f"{'policy' if name == 'grpo' else 'agent_1'}_stage_{res['stages']}").is_dir()
    # each warm start is a stage-0 run of its method: the relay methods' is three agents, GRPO's one
    assert Path(data["warm_start"]["grpo"]["dir"], "policy_stage_0").is_symlink()
    assert {p.name for p in Path(data["warm_start"]["sat_seq"]["dir"]).glob("agent_*_stage_0")} == \
        {"agent_1_stage_0", "agent_2_stage_0", "agent_3_stage_0"}


def test_second_call_redoes_nothing(compared):
    tmp, f, _ = compared
    out = tmp / "out"
    watched = [out / "grpo_seed0" / "metrics.jsonl", out / "sat_seq_seed0" / "compare_result.json",
               out / "evals" / "grpo_seed0" / "predictions.jsonl"]
    before = [p.stat().st_mtime_ns for p in watched]
    r = _compare([str(f), "--no_progress"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("done earlier, not redone") == 2
    assert [p.stat().st_mtime_ns for p in watched] == before


def test_a_kept_run_with_a_mark_of_the_older_scheme_is_taken_up_not_redone(compared):
    """A run restored from a study kept before the settings fingerprint (its mark and result hold an older
    hash, no scheme) is accepted when its saved train_config.yaml has this recipe's settings: the mark is
    rewritten and nothing trains or evaluates again. With other saved settings it is refused, whole."""
    tmp, f, _ = compared
    run = tmp / "out" / "grpo_seed0"
    mark_path, result_path, config_path = run / "compare_run.json", run / "compare_result.json", run / "train_config.yaml"
    saved = {p: p.read_text() for p in (mark_path, result_path, config_path)}
    fp = json.loads(saved[mark_path])["fingerprint"]
    old = {**json.loads(saved[mark_path]), "fingerprint": "0123456789abcdef"}
    old.pop("scheme")
    try:
        mark_path.write_text(json.dumps(old))
        result_path.write_text(json.dumps({**json.loads(saved[result_path]), "fingerprint": "0123456789abcdef"}))
        metrics_before = (run / "metrics.jsonl").stat().st_mtime_ns
        r = _compare([str(f), "--no_progress"])
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("done earlier, not redone") == 2
        assert json.loads(mark_path.read_text()) == {**old, "fingerprint": fp, "scheme": "settings"}
        assert json.loads(result_path.read_text())["fingerprint"] == fp
        assert (run / "metrics.jsonl").stat().st_mtime_ns == metrics_before

        mark_path.write_text(json.dumps(old))  # the older mark again, over a config saved with another batch
        assert "  train_batch_size: 2\n" in saved[config_path]
        config_path.write_text(saved[config_path].replace("  train_batch_size: 2\n", "  train_batch_size: 4\n"))
        r = _compare([str(f), "--no_progress"])
        assert r.returncode == 2 and "made with other settings" in r.stderr
        assert json.loads(mark_path.read_text()) == old  # refused: the mark is left as it was
    finally:
        for p, text in saved.items():
            p.write_text(text)


def test_killed_comparison_resumes_exactly(compared, tiny_dir, tmp_path):
    tmp, _, _ = compared
    f = tmp_path / "c.yaml"
    f.write_text(_spec(tiny_dir, tmp_path / "out", runs=["{name: grpo, method: grpo}"]))
    r = _compare([str(f), "--no_progress"], env={"SATSEQ_KILL_AT_STAGE": "1"})
    assert r.returncode != 0 and not (tmp_path / "out" / "comparison.md").exists()
    r = _compare([str(f), "--no_progress"])
    assert r.returncode == 0, r.stderr
    assert "resuming after 1 logged stages" in r.stdout

    def rows(d):
        return [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")}
                for x in (d / "grpo_seed0" / "metrics.jsonl").read_text().splitlines()]

    assert rows(tmp_path / "out") == rows(tmp / "out")  # the same run as the uninterrupted one
    f.write_text(_spec(tiny_dir, tmp_path / "out", budget="tokens: 90", runs=["{name: grpo, method: grpo}"]))
    r = _compare([str(f), "--no_progress"])
    assert r.returncode == 2 and "made with other settings" in r.stderr


def test_runs_option_runs_and_reports_only_the_named_runs(tiny_dir, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(_spec(tiny_dir, tmp_path / "out").replace("eval: {problems: 4, n: 2, k: 2}",
                                                           "eval: {problems: 4, n: 2, k: 2, max_new_tokens: 3}"))
    r = _compare([str(f), "--no_progress", "--runs", "nope,grpo"])
    assert r.returncode == 2 and "--runs nope: not a run or cell" in r.stderr and "grpo, sat_seq" in r.stderr
    assert not (tmp_path / "out").exists()
    r = _compare([str(f), "--no_progress", "--runs", "grpo"])
    assert r.returncode == 0, r.stderr
    assert "[compare] 1 runs of 2 (--runs) × 1 seeds" in r.stdout
    assert (tmp_path / "out" / "grpo_seed0" / "compare_result.json").is_file()
    assert not (tmp_path / "out" / "sat_seq_seed0").exists()
    md = (tmp_path / "out" / "comparison.md").read_text()
    assert "| **grpo** (grpo) |" in md and "sat_seq" not in md
    # eval.max_new_tokens reaches every evaluation: the run's and its warm start's
    import yaml
    evals = sorted((tmp_path / "out" / "evals").iterdir())
    assert len(evals) >= 2, evals
    for d in evals:
        assert yaml.safe_load((d / "inference_config.yaml").read_text())["max_new_tokens"] == 3, d


# ---------------------------------------------------------------------------- the baselines
def test_constant_verifiers_by_hand():
    pairs = [(True, "correct"), (True, "wrong"), (True, "correct"), (False, "wrong"), (False, None)]
    v = verifier_stats(pairs)
    assert v["correct_recall"] == pytest.approx(2 / 3) and v["wrong_recall"] == pytest.approx(1 / 2)
    assert v["balanced_accuracy"] == pytest.approx((2 / 3 + 1 / 2) / 2) and v["accuracy"] == pytest.approx(3 / 5)
    row = {"pag_roles": [["policy", "verifier"], ["policy", "verifier", "policy", "verifier"]],
           "verdicts": [["correct"], ["wrong", "correct"]], "verifier_correct": [[True], [True, False]],
           "turn1_correct": [True, False], "correct": [True, False]}
    assert list(judged_attempts(row)) == [(True, "correct"), (False, "wrong"), (False, "correct")]
    b = verifier_baselines([row])
    assert b["trained"]["accuracy"] == pytest.approx(2 / 3) and b["trained"]["balanced_accuracy"] == pytest.approx(0.75)
    always_correct, always_wrong = b["always_correct"], b["always_wrong"]
    assert always_correct["balanced_accuracy"] == 0.5 and always_wrong["balanced_accuracy"] == 0.5
    assert always_correct["wrong_recall"] == 0 and always_wrong["wrong_recall"] == 1
    assert always_correct["accuracy"] == pytest.approx(1 / 3) and always_wrong["accuracy"] == pytest.approx(2 / 3)
    assert verifier_stats([(True, "correct")])["balanced_accuracy"] is None  # no wrong attempt: undefined


def test_coach_alone_and_copying_the_coach_by_hand():
    rows = [{"coach_answers": ["5", None], "coach_correct": [True, False], "turn1_correct": [False, True]},
            {"coach_answers": ["7", "8"], "coach_correct": [False, False], "turn1_correct": [True, True]}]
    b = coach_baselines(rows)
    assert b["coach_alone"]["mean"] == pytest.approx(0.25)  # problems: 1/2 and 0/2
    assert b["copy_coach"]["mean"] == pytest.approx(0.5)  # 1 (coach right) + 1 (no coach answer: turn 1 right), 0
    assert b["copy_coach"]["se"] == pytest.approx(0.5)  # std of (1, 0) / sqrt(2)


def test_budget_stop_counts_stages_logged_before_a_resume(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "rollout/generated_tokens": 10,
                                                                 "time/stage": 1.0}) + "\n" for s in range(3)))
    stop = BudgetStop(tmp_path, "tokens", 45)
    assert stop(3, {"rollout/generated_tokens": 10}) is False  # 40
    assert stop(4, {"rollout/generated_tokens": 10}) is True  # 50 >= 45
    assert BudgetStop(tmp_path, "seconds", 2.5)(1, {"time/stage": 2.0}) is True  # row 0 (1 s) + 2 s
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "rollout/generated_tokens": 10,
                                                                 "rollout/generated_samples": 3}) + "\n"
                                                     for s in range(2)))
    samples = BudgetStop(tmp_path, "samples", 9)
    assert samples(2, {"rollout/generated_samples": 2}) is False  # 3 + 3 + 2 = 8 samples (26 tokens)
    assert samples(3, {"rollout/generated_samples": 1}) is True  # 9
    rows = [{"step": 0, "rollout/generated_tokens": 5, "rollout/generated_samples": 2, "time/stage": 1.0},
            {"step": 1, "rollout/generated_tokens": 5, "rollout/generated_samples": 2, "time/stage": 1.0,
             "eval/policy/accuracy": 0.5}]
    s = training_summary(rows, "tokens", 10)
    assert s["budget_reached"] and s["curve"] == {"samples": [4.0], "tokens": [10.0], "seconds": [2.0], "acc": [0.5]}
    assert training_summary(rows, "samples", 4)["budget_reached"] and not training_summary(rows, "samples", 5)["budget_reached"]


def test_curve_key_prefers_the_final_answer_in_a_methods_namespace():
    from satseq.compare.runner import curve_key

    assert curve_key([{"eval/vote_accuracy": 0.5, "eval/agent_1/accuracy": 0.4}]) == "eval/vote_accuracy"
    assert curve_key([{"eval/pag/acc_t1": 0.5, "eval/pag/acc_final": 0.6, "eval/pag/verifier_acc": 0.7}]) == "eval/pag/acc_final"
    assert curve_key([{"eval/mlmt/acc_t1": 0.1, "eval/mlmt/acc_t3": 0.3}]) == "eval/mlmt/acc_t3"
    assert curve_key([{"rollout/vote_accuracy": 0.5}]) is None


@pytest.mark.parametrize("recipe", sorted(p.name for p in (Path(__file__).resolve().parents[1] / "recipes" / "compare").glob("*.yaml")))
def test_every_shipped_comparison_loads(recipe, tmp_path):
    """Each recipes/compare/*.yaml is read and every cell's training config loads (nothing runs)."""
    from satseq.compare.spec import check_runs, read_spec

    spec, lines = read_spec(Path(__file__).resolve().parents[1] / "recipes" / "compare" / recipe)
    cells = check_runs(spec, lines, tmp_path / "out")
    assert cells and len({c.name for c in cells}) == len(cells)


def test_rollouts_that_differ_between_runs_are_flagged_under_the_table(tmp_path):
    """A study resumed on another CPU: ``rollout.dtype=auto`` chose bfloat16 there for some runs."""
    from satseq.compare.report import rollout_lines

    def result(name, seed, dtype):
        d = tmp_path / f"{name}_seed{seed}"
        d.mkdir()
        (d / "run_info.json").write_text(json.dumps({"rollout": {"engine": "hf", "dtype": dtype, "gemm": "onednn"}}))
        return {"seed": seed, "run_dir": str(d)}

    same = {"a": [result("a", 0, "float32")], "b": [result("b", 0, "float32")]}
    assert rollout_lines(same) == []
    mixed = {**same, "c": [result("c", 0, "bfloat16"), {"seed": 1, "run_dir": str(tmp_path / "gone")}]}
    (line,) = [x for x in rollout_lines(mixed) if x]
    assert "`hf/float32/onednn`: a seed 0, b seed 0" in line and "`hf/bfloat16/onednn`: c seed 0" in line
    assert "rollout.dtype" in line


def test_maj_at_k_only_for_one_policy_answering_alone():
    """One policy in three relay seats (shared_policy) is not "one policy answering alone": its maj@k would be
    the majority of three relay votes (nine turns a problem), not the fair one-pass vote."""
    from satseq.compare.baselines import summarize_eval

    metrics = {"workflow": "relay", "accuracy": {"mean": 0.5, "se": 0.1}, "maj@3": {"mean": 0.6, "se": 0.1}}
    one_seat = [{"problem_id": 0, "agents": ["policy"], "agent_answers": [["1"], ["1"], ["2"]]}]
    three_seats = [{"problem_id": 0, "agents": ["policy"], "agent_answers": [["1", "1", "2"]] * 3}]
    assert summarize_eval(metrics, one_seat, 3)["maj@k"] == {"mean": 0.6, "se": 0.1}
    assert "maj@k" not in summarize_eval(metrics, three_seats, 3)
    assert "maj@k" in summarize_eval({**metrics, "workflow": "single"}, [{"problem_id": 0}], 3)


def test_code_answer_is_two_seats_not_one_policy_and_reports_the_coders_seat():
    """A tool user -> answerer episode is two generated turns: its lines read as code_answer (not a single
    policy), the coder's seat is scored on its own, and no maj@k is offered as a one-pass rival."""
    from satseq.compare.baselines import summarize_eval
    from satseq.eval.report import compute_metrics

    rows = [{"problem_id": i, "answer": str(i), "answers": [str(i), "x"], "correct": [True, False],
             "code": ["print(1)"] * 2, "output": ["1"] * 2, "output_correct": [True, oc]}
            for i, oc in enumerate([True, False, True, False])]
    m = compute_metrics(rows, [2], seed=0)
    assert m["workflow"] == "code_answer"
    assert m["final"]["accuracy"]["mean"] == 0.5 and m["coder"]["accuracy"]["mean"] == 0.75
    s = summarize_eval(m, rows, 2)
    assert "maj@k" not in s and s["turn1"]["mean"] == 0.75


def test_a_key_at_its_default_leaves_the_fingerprint_and_an_older_mark_is_reread_from_the_saved_config(tmp_path):
    """The fingerprint hashes a config's settings (its values that differ from the schema's defaults), so a key
    the schema gains later, at its default, does not orphan a kept study's runs; a mark of the older scheme (the
    full config) is accepted when the run's saved train_config.yaml has the same settings, never otherwise."""
    from satseq.compare.runner import _saved_settings_match, fingerprint, settings
    from satseq.compare.spec import read_spec
    from satseq.config import load_config, save_config

    f = tmp_path / "c.yaml"
    f.write_text(_spec(tmp_path, tmp_path / "out"))
    spec, _ = read_spec(f)
    cfg = load_config(None, ["method=grpo", "ppo.lr=1e-3"])
    explicit = load_config(None, ["method=grpo", "ppo.lr=1e-3", "ppo.epsilon_high=0.2"])  # its default, said
    assert "epsilon_high" not in settings(explicit)["ppo"]
    assert fingerprint(explicit, spec) == fingerprint(cfg, spec)
    assert fingerprint(load_config(None, ["method=grpo", "ppo.lr=3e-4"]), spec) != fingerprint(cfg, spec)
    run = tmp_path / "run"
    run.mkdir()
    assert not _saved_settings_match(run, cfg)  # nothing saved: refused
    resolved = load_config(None, ["method=grpo", "ppo.lr=1e-3", "rollout.engine=hf"])  # the trainer resolves auto
    save_config(resolved, run / "train_config.yaml")
    assert _saved_settings_match(run, cfg)
    save_config(load_config(None, ["method=grpo", "ppo.lr=3e-4"]), run / "train_config.yaml")
    assert not _saved_settings_match(run, cfg)
