"""`satseq compare` sweeps: the `sweep:` grid's one-line errors and per-method keys, a 2 x 2 grid on
the tiny model end to end (comparison.md's sweep and stability rows, sweep.png), a killed cell resumed
and a finished one not redone; the stability statistics and the step KL against hand-computed cases."""
import json
import math
import os
import sys
from pathlib import Path

import pytest
import warm_cli
import torch

from satseq.algos.kl import kl_quantile
from satseq.compare.stability import (final_ratios, final_value, largest, over_seeds, run_stability,
                                      sat_seq_stats)
from satseq.errors import ConfigError
from satseq.update.step_kl import step_kl_stats

ROOT = Path(__file__).resolve().parents[1]
HEAD = "budget: {tokens: 10}\n"


def _check(tmp_path, text):
    from satseq.compare.spec import check_runs, read_spec

    f = tmp_path / "c.yaml"
    f.write_text(text)
    spec, lines = read_spec(f)
    return check_runs(spec, lines, tmp_path / "out")


# ------------------------------------------------------------------------------ the grid
def test_file_sweep_keys_apply_per_method_section(tmp_path):
    cells = _check(tmp_path, HEAD + "sweep: {sat_seq.lr: [1.0e-4, 3.0e-4], ppo.lr: [1.0e-4], "
                   "trainer.train_batch_size: [2, 4]}\nruns:\n  - {name: g, method: grpo}\n"
                   "  - {name: s, method: sat_seq}\n  - {name: m, method: simultaneous}\n"
                   "  - {name: plain, method: grpo, sweep: {}}\n")
    names = [c.name for c in cells]
    assert names == ["g@ppo.lr=0.0001,trainer.train_batch_size=2", "g@ppo.lr=0.0001,trainer.train_batch_size=4",
                     "s@sat_seq.lr=0.0001,trainer.train_batch_size=2", "s@sat_seq.lr=0.0001,trainer.train_batch_size=4",
                     "s@sat_seq.lr=0.0003,trainer.train_batch_size=2", "s@sat_seq.lr=0.0003,trainer.train_batch_size=4",
                     "m@sat_seq.lr=0.0001,trainer.train_batch_size=2", "m@sat_seq.lr=0.0001,trainer.train_batch_size=4",
                     "m@sat_seq.lr=0.0003,trainer.train_batch_size=2", "m@sat_seq.lr=0.0003,trainer.train_batch_size=4",
                     "plain"]
    s = cells[4]
    assert s.base == "s" and s.point == {"sat_seq.lr": 3e-4, "trainer.train_batch_size": 2}
    assert s.overrides[-2:] == ["sat_seq.lr=0.0003", "trainer.train_batch_size=2"]  # after the run's own
    from satseq.compare.runner import run_config
    from satseq.compare.spec import read_spec

    spec, _ = read_spec(tmp_path / "c.yaml")
    cfg = run_config(spec, s, 1, tmp_path / "out")
    assert cfg.sat_seq.lr == 3e-4 and cfg.trainer.train_batch_size == 2 and cfg.trainer.step_kl
    assert cfg.run_name == "s@sat_seq.lr=0.0003,trainer.train_batch_size=2_seed1"


BAD = [
    (HEAD + "sweep: {apo.lr: [1.0e-4]}\nruns: [{name: a, method: grpo}]\n", ":2: sweep key 'apo.lr': no run's method reads it"),
    (HEAD + "sweep:\n  grpo.lrr: [1]\nruns: [{name: a, method: grpo}]\n", ":3: run 'a': sweep grpo.lrr=1: unknown config key"),
    (HEAD + "sweep:\n  ppo.lr: [0.1, -1]\nruns: [{name: a, method: grpo}]\n", ":3: run 'a': sweep ppo.lr=-1: config key 'ppo.lr'"),
    (HEAD + "sweep: {seed: [1, 2]}\nruns: [{name: a, method: grpo}]\n", ":2: sweep key 'seed' is set by satseq compare"),
    (HEAD + "sweep: {ppo.lr: []}\nruns: [{name: a, method: grpo}]\n", ":2: sweep key 'ppo.lr': give a non-empty list"),
    (HEAD + "sweep: {ppo.lr: [0.1, 0.10]}\nruns: [{name: a, method: grpo}]\n", "value 0.1 appears twice"),
    (HEAD + "sweep: {grpo.loss: [a/b]}\nruns: [{name: a, method: grpo}]\n", "value 'a/b': use numbers"),
    (HEAD + "runs:\n  - name: a\n    method: grpo\n    sweep: {sat_seq.lr: [0.1]}\n",
     ":5: run 'a': sweep key 'sat_seq.lr': method 'grpo' does not read it (its update settings: grpo, ppo)"),
]


@pytest.mark.parametrize("text,expected", BAD)
def test_bad_sweep_is_one_line_naming_the_line(tmp_path, text, expected):
    with pytest.raises(ConfigError) as e:
        _check(tmp_path, text)
    assert expected in str(e.value) and "\n" not in str(e.value), str(e.value)


# ------------------------------------------------------------------------------- end to end
def _spec(tiny_dir, out) -> str:
    return "\n".join([
        f"output_dir: {out}",
        "budget: {tokens: 60}",
        "seeds: [0, 1]",
        "threads: 1",
        "curve_every: 1",
        f"common: [model.path={tiny_dir}, trainer.train_batch_size=2, grpo.group_size=2, rollout.max_new_tokens=6,",
        "         data.train_size=16, data.eval_size=4, reward.custom=tests.reward_fixtures:length_parity]",
        "eval: {problems: 4, n: 2, k: 2}",
        "sweep: {ppo.lr: [1.0e-4, 0.1]}",
        "runs:",
        "  - {name: grpo, method: grpo}"]) + "\n"


def _compare(args, env=None):
    env = dict(os.environ, **(env or {}))
    env.setdefault("OMP_NUM_THREADS", "1")
    return warm_cli.run([sys.executable, "-m", "satseq.cli", "compare", *args], cwd=ROOT, env=env, timeout=300)


CELLS = ("grpo@ppo.lr=0.0001", "grpo@ppo.lr=0.1")


@pytest.fixture(scope="module")
def swept(tiny_dir, tmp_path_factory):
    """The 2 x 2 grid (2 lr x 2 seeds), killed in the first cell's stage 1, then run again."""
    tmp = tmp_path_factory.mktemp("sweep")
    f = tmp / "c.yaml"
    f.write_text(_spec(tiny_dir, tmp / "out"))
    killed = _compare([str(f), "--no_progress"], env={"SATSEQ_KILL_AT_STAGE": "1"})
    first = tmp / "out" / f"{CELLS[0]}_seed0" / "metrics.jsonl"
    partial = first.read_text()
    assert not (tmp / "out" / "comparison.md").exists()
    r = _compare([str(f), "--no_progress"])
    assert r.returncode == 0, r.stderr
    return tmp, f, killed, partial, r


def test_a_killed_cell_resumes_and_keeps_its_logged_stages(swept):
    tmp, _, killed, partial, r = swept
    assert killed.returncode != 0
    assert len(partial.splitlines()) == 1  # stage 0 logged, killed in stage 1
    assert r.stdout.count("resuming after 1 logged stages") == 1
    assert f"{CELLS[0]} seed 0: resuming" in r.stdout
    rows = (tmp / "out" / f"{CELLS[0]}_seed0" / "metrics.jsonl").read_text()
    assert rows.startswith(partial)  # stage 0 not redone (its timings are the killed process's)
    assert [json.loads(x)["step"] for x in rows.splitlines()] == [0, 1, 2]


def test_sweep_report_rows_and_figure(swept):
    tmp, _, _, _, _ = swept
    out = tmp / "out"
    md = (out / "comparison.md").read_text()
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "comparison.png").read_bytes()[:4] == b"\x89PNG"
    for row in ("| **grpo@ppo.lr=0.0001** (grpo) |", "| **grpo@ppo.lr=0.1** (grpo) |", "## Sweep", "### grpo (grpo)",
                "| `ppo.lr` | final accuracy | best (periodic eval) | collapsed seeds |", "## Stability"):
        assert row in md, row
    data = json.loads((out / "comparison.json").read_text())
    assert data["sweep"] == {"grpo": list(CELLS)}
    for cell in CELLS:
        seeds = data["runs"][cell]
        assert [s["seed"] for s in seeds] == [0, 1] and all(s["run"] == "grpo" for s in seeds)
        assert (out / f"{cell}_seed1" / "compare_result.json").is_file()
        st = data["stability"][cell]
        assert st["seeds"] == 2 and st["final"]["se"] is not None and st["kl_step_q99"]["mean"] >= 0
        line = next(x for x in md.splitlines() if x.startswith(f"| {'0.0001' if '0001' in cell else '0.1'} |"))
        assert f"| {st['collapsed']} / 2 |" in line
    assert data["runs"][CELLS[0]][0]["point"] == {"ppo.lr": 1e-4}
    # lr 0.1 on this reward moves the policy far more per stage than lr 1e-4
    lo, hi = (data["stability"][c]["kl_step_max"]["mean"] for c in CELLS)
    assert hi > lo
    rows = [json.loads(x) for x in (out / f"{CELLS[1]}_seed0" / "metrics.jsonl").read_text().splitlines()]
    assert {"policy/kl_step_q99", "policy/kl_step_max", "policy/sampled_entropy"} <= set(rows[0])


def test_second_call_redoes_no_cell(swept):
    tmp, f, _, _, _ = swept
    out = tmp / "out"
    watched = [out / f"{c}_seed{s}" / "metrics.jsonl" for c in CELLS for s in (0, 1)]
    before = [p.stat().st_mtime_ns for p in watched]
    r = _compare([str(f), "--no_progress"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("done earlier, not redone") == 4
    assert [p.stat().st_mtime_ns for p in watched] == before


def _untimed(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")} for x in path.read_text().splitlines()]


def test_cells_side_by_side_give_the_cells_of_one_at_a_time(swept, tmp_path):
    """--jobs 2: two worker processes; every cell's metrics and held-out evaluation equal the sequential
    (killed and resumed) run's."""
    tmp, f, _, _, _ = swept
    spec = f.read_text().replace(str(tmp / "out"), str(tmp_path / "out"))
    (tmp_path / "c.yaml").write_text(spec)
    r = _compare([str(tmp_path / "c.yaml"), "--no_progress", "--jobs", "2"])
    assert r.returncode == 0, r.stderr
    assert "2 at a time" in r.stdout and f"[{CELLS[1]} seed 1]" in r.stdout
    seq, par = (json.loads((d / "comparison.json").read_text()) for d in (tmp / "out", tmp_path / "out"))
    for cell in CELLS:
        assert [x["eval"] for x in par["runs"][cell]] == [x["eval"] for x in seq["runs"][cell]]
        for seed in (0, 1):
            name = f"{cell}_seed{seed}/metrics.jsonl"
            assert _untimed(tmp_path / "out" / name) == _untimed(tmp / "out" / name)


def test_a_seconds_budget_is_not_run_side_by_side(tmp_path):
    (tmp_path / "c.yaml").write_text("budget: {seconds: 10}\nruns: [{name: a, method: grpo}]\n")
    r = _compare([str(tmp_path / "c.yaml"), "--out", str(tmp_path / "o"), "--jobs", "2"])
    assert r.returncode == 2 and "seconds budget" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------- stability by hand
def _rows():
    # 10 stages: the final value is the mean over the last ceil(10 / 10) = 1 stage
    rows = []
    for s in range(10):
        rows.append({"step": s, "agent_1/response_length": 10.0 if s < 9 else 4.0, "agent_1/sampled_entropy": 2.0,
                     "agent_2/response_length": 8.0, "agent_2/sampled_entropy": 2.0 if s < 9 else 0.1,
                     "eval/agent_1/response_length": 0.0, "agent_1/kl_step_q99": 0.01 * s, "agent_1/kl_step_max": 0.1,
                     "agent_2/kl_step_q99": 0.02, "agent_2/kl_step_max": 0.5 if s == 3 else 0.2,
                     "agent_1/accepted": 0.0 if s == 5 else 1.0, "agent_1/backtracks": 5 if s == 5 else (1 if s == 2 else 0),
                     "agent_1/step_scale": 0.0 if s == 5 else (0.5 if s == 2 else 1.0)})
    return rows


def test_final_value_window_and_ratios():
    assert final_value([1.0] * 19 + [3.0]) == pytest.approx((1.0 + 3.0) / 2)  # ceil(20 / 10) = 2 stages
    assert final_value([5.0]) == 5.0 and final_value([]) is None
    r = _rows()
    assert final_ratios(r, "response_length") == {"agent_1": pytest.approx(0.4), "agent_2": pytest.approx(1.0)}
    assert final_ratios(r, "sampled_entropy") == {"agent_1": pytest.approx(1.0), "agent_2": pytest.approx(0.05)}
    assert largest(r, "/kl_step_q99") == pytest.approx(0.09) and largest(r, "/kl_step_max") == 0.5
    assert largest(r, "/nothing") is None


def test_sat_seq_stats_by_hand():
    s = sat_seq_stats(_rows())
    assert s == {"updates": 10, "backtracks": 6, "shrunk": 1, "rejected": 1,
                 "step_scale_mean": pytest.approx((8 * 1.0 + 0.5 + 0.0) / 10), "step_scale_min": 0.0}
    assert sat_seq_stats([{"step": 0, "policy/loss": 1.0}]) is None


def test_collapse_by_hand():
    st = run_stability(_rows(), final_acc=0.40, warm_acc=0.45, curve_acc=[0.3, 0.5, 0.42])
    assert st["best"] == 0.5 and st["curve_last"] == 0.42
    assert st["collapse"] == {"accuracy": True, "length": True, "entropy": True, "any": True}
    assert st["collapse_reasons"] == ["accuracy 0.400 < warm start 0.450", "agent_1 length ×0.40",
                                      "agent_2 entropy ×0.05"]
    flat = [{"step": s, "policy/response_length": 6.0, "policy/sampled_entropy": 1.0} for s in range(3)]
    ok = run_stability(flat, final_acc=0.5, warm_acc=0.5)
    assert ok["collapse"] == {"accuracy": False, "length": False, "entropy": False, "any": False}
    assert ok["best"] is None and ok["kl_step_q99"] is None and ok["sat_seq"] is None
    assert run_stability(flat, final_acc=0.5, warm_acc=None)["collapse"]["accuracy"] is None
    summary = over_seeds([st, ok])
    assert summary["collapsed"] == 1 and summary["seeds"] == 2 and summary["sharpened"] == 0
    assert summary["final"]["mean"] == pytest.approx(0.45) and summary["final"]["se"] == pytest.approx(0.05)
    assert summary["length_ratio_min"] == pytest.approx(0.4) and summary["entropy_ratio_min"] == pytest.approx(0.05)
    assert summary["backtracks"]["mean"] == 6 and summary["step_scale_min"] == 0.0


def test_falling_entropy_is_a_collapse_only_without_a_rise_in_held_out_accuracy():
    """Entropy ×0.05 with held-out accuracy up from the warm start's is sharpening (not flagged, kept under
    ``sharpened``); with the accuracy flat, falling or unknown it is flagged."""
    rows = [{"step": s, "policy/response_length": 6.0, "policy/sampled_entropy": 2.0 if s < 9 else 0.1} for s in range(10)]
    sharp = run_stability(rows, final_acc=0.86, warm_acc=0.08)
    assert sharp["collapse"] == {"accuracy": False, "length": False, "entropy": False, "any": False}
    assert sharp["collapse_reasons"] == [] and sharp["sharpened"] == ["policy entropy ×0.05"]
    assert sharp["entropy_ratio"] == {"policy": pytest.approx(0.05)}  # the ratio itself is still reported
    for final, warm in ((0.30, 0.30), (0.20, 0.30), (0.50, None)):  # flat, falling, no warm start to tell
        st = run_stability(rows, final_acc=final, warm_acc=warm)
        assert st["collapse"]["entropy"] is True and st["collapse"]["any"] is True, (final, warm)
        assert "policy entropy ×0.05" in st["collapse_reasons"] and st["sharpened"] == []
    summary = over_seeds([sharp, run_stability(rows, final_acc=0.30, warm_acc=0.30)])
    assert summary["collapsed"] == 1 and summary["sharpened"] == 1
    from satseq.compare.report import stability_lines
    line = stability_lines({"mlmt": summary})[2]
    assert "policy entropy ×0.05; not flagged: 1 / 2 seeds sharpened" in line and "| 1 / 2 |" in line


def test_step_kl_by_hand():
    old = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.1, 0.5, 0.5]]))
    new = torch.log(torch.tensor([[0.25, 0.25, 0.9], [0.4, 0.5, 0.123]]))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    k3 = [0.5 - 1 - math.log(0.5), 0.0, 0.0, 4.0 - 1 - math.log(4.0), 0.0]  # r - 1 - log r, r = new / old
    s = step_kl_stats(old, new, mask)
    assert s["kl_step_max"] == pytest.approx(max(k3), rel=1e-5)
    assert s["kl_step_mean"] == pytest.approx(sum(k3) / 5, rel=1e-5)
    srt = sorted(k3)
    pos = 0.99 * 4
    assert s["kl_step_q99"] == pytest.approx(srt[3] + (pos - 3) * (srt[4] - srt[3]), rel=1e-5)
    assert kl_quantile(torch.tensor([3.0, 1.0, 2.0]), 0.5) == 2.0 == float(torch.quantile(torch.tensor([3.0, 1.0, 2.0]), 0.5))
    assert step_kl_stats(old[:, :2], new, mask)["kl_step_max"] == pytest.approx(max(k3), rel=1e-5)  # widths differ
    assert step_kl_stats(old, new, torch.zeros_like(mask))["kl_step_max"] == 0.0


def test_sampled_entropy_by_hand():
    from satseq.loop import rollout_metrics
    from satseq.records import Episode, Turn

    def turn(lps):
        return Turn(role="policy", index=0, prompt_text="", prompt_ids=[1], response_ids=[2] * len(lps),
                    behaviour_logprobs=lps, text="", finish_reason="stop")

    eps = [Episode(problem=None, group=0, turns=[turn([-1.0, -2.0])]), Episode(problem=None, group=0, turns=[turn([-0.5])])]
    m = rollout_metrics(eps, ["policy"])
    assert m["policy/sampled_entropy"] == pytest.approx(3.5 / 3)


@pytest.mark.parametrize("method,extra", [("simultaneous", {"sat_seq.group_size": 2}),
                                          ("grpo", {"grpo.group_size": 2, "ppo.ppo_epochs": 2,
                                                    "ppo.mini_batch_size": 2})])
def test_step_kl_is_logged_only_when_asked_and_changes_no_update(tiny_dir, tmp_path, method, extra):
    import satseq

    base = {"model.path": str(tiny_dir), "trainer.train_batch_size": 2, "rollout.max_new_tokens": 6,
            "data.train_size": 8, "data.eval_size": 2, "trainer.num_stages": 2, "trainer.save_every": 0,
            "trainer.export_pt": False, "trainer.tensorboard": False, "trainer.progress": False,
            "reward.custom": "tests.reward_fixtures:length_parity", "method": method, "threads": 1, **extra}
    on = satseq.train(overrides={**base, "output_dir": str(tmp_path / "on"), "trainer.step_kl": True},
                      console=lambda *a: None)
    off = satseq.train(overrides={**base, "output_dir": str(tmp_path / "off")}, console=lambda *a: None)
    agent = "agent_1" if method == "simultaneous" else "policy"
    for a, b in zip(on.metrics, off.metrics):
        assert a[f"{agent}/kl_step_max"] >= a[f"{agent}/kl_step_q99"] >= 0 and a[f"{agent}/kl_step_max"] > 0
        assert not any("kl_step" in k for k in b)
        assert a[f"{agent}/loss"] == b[f"{agent}/loss"]  # the statistic is measured, nothing else changes


def test_a_file_without_a_sweep_trains_without_the_step_kl(tmp_path):
    """The step KL's extra forward would count in a seconds budget: only sweeps turn it on."""
    from satseq.compare.runner import run_config
    from satseq.compare.spec import read_spec

    (tmp_path / "c.yaml").write_text(HEAD + "runs: [{name: a, method: grpo}]\n")
    spec, _ = read_spec(tmp_path / "c.yaml")
    assert not run_config(spec, spec.runs[0], 0, tmp_path / "out").trainer.step_kl
