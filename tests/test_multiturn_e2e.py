"""PAG and MLMT end to end on a tiny model through the real CLI and the recipes: outputs, metrics,
three-turn evaluation, launchers, the Slurm script's argument handling and Ray address plumbing."""
import json
import os
import sys
from pathlib import Path

import pytest
import warm_cli

REPO = Path(__file__).resolve().parents[1]
FAST = ["trainer.train_batch_size=2", "grpo.group_size=2", "rollout.max_new_tokens=6", "data.train_size=8",
        "data.eval_size=4", "threads=1", "trainer.tensorboard=false", "trainer.progress=false"]


def _run(cmd, env=None, timeout=300):
    return warm_cli.run(cmd, env=dict(os.environ, **(env or {})), timeout=timeout, cwd=REPO)


def _train(args, env=None):
    return _run([sys.executable, "-m", "satseq.cli", "train", *args], env)


def _rows(run_dir: Path):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("update", ["grpo", "apo"])
def test_pag_run_logs_dashboard_metrics_and_plots(tiny_dir, tmp_path, update):
    r = _train([f"model.path={tiny_dir}", "method=pag", f"pag.update={update}", "apo.n_samples=2",
                "trainer.num_stages=2", "trainer.eval_every=2", *FAST, f"output_dir={tmp_path}", "run_name=pag"])
    assert r.returncode == 0, r.stderr
    rows = _rows(tmp_path / "pag")
    assert len(rows) == 2
    for key in ("pag/acc_t1", "pag/acc_final", "pag/revision_rate", "pag/verifier_acc", "policy/loss",
                "eval/pag/acc_final"):
        assert key in rows[0] or key in rows[1], key
    if update == "apo":
        assert "apo/vstar_mean" in rows[0] and (tmp_path / "pag" / "vstar.json").exists()
    p = _run([sys.executable, "-m", "satseq.cli", "plot", str(tmp_path / "pag")])
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "pag" / "dashboard.png").stat().st_size > 10_000
    if update == "grpo":  # the evaluator runs a PAG run dir in its self_verify workflow
        e = _eval(["--checkpoint_dir", str(tmp_path / "pag"), "--output_dir", str(tmp_path / "ev")])
        assert e.returncode == 0, e.stderr
        m = json.loads((tmp_path / "ev" / "metrics.json").read_text())
        assert m["workflow"] == "self_verify" and {"turn1", "final", "verifier_accuracy", "revision_rate"} <= set(m)
        line = json.loads((tmp_path / "ev" / "predictions.jsonl").read_text().splitlines()[0])
        assert len(line["verdicts"]) == 2 and line["pag_roles"][0][:2] == ["policy", "verifier"]


@pytest.mark.parametrize("share", ["none", "weights", "lora"])
def test_mlmt_run_each_sharing_mode(tiny_dir, tmp_path, share):
    r = _train([f"model.path={tiny_dir}", "method=mlmt", f"mlmt.share={share}", "model.lora.r=4",
                "ppo.kl_coef=0.01", "trainer.num_stages=2", "trainer.eval_every=2", *FAST,
                f"output_dir={tmp_path}", "run_name=m"])
    assert r.returncode == 0, r.stderr
    run = tmp_path / "m"
    info = json.loads((run / "run_info.json").read_text())
    agents = ["actor"] if share == "weights" else ["solver", "coach"]
    assert info["agents"] == agents and set(info["roles"]) == {"solver", "coach"}
    assert info["mode"] == ("lora" if share == "lora" else "full")
    import torch  # the run records the library versions it ran with

    assert info["versions"]["torch"] in (torch.__version__, torch.__version__.split("+")[0])
    assert info["embedded_task"] == "default" and set(info["versions"]) >= {"python", "transformers", "math-verify"}
    rows = _rows(run)
    for key in ("mlmt/acc_t1", "mlmt/acc_t3", "coach/reward", "coach/dep", "eval/mlmt/acc_t3"):
        assert key in rows[-1], key
    assert f"{agents[0]}/kl_ref" in rows[0]
    for a in agents:
        assert (run / f"{a}_stage_2").is_dir()


def test_mlmt_frozen_role_with_shared_weights_is_an_error(tiny_dir, tmp_path):
    r = _train([f"model.path={tiny_dir}", "method=mlmt", "mlmt.share=weights", "mlmt.coach.trainable=false",
                *FAST, f"output_dir={tmp_path}"])
    assert r.returncode == 2 and "mlmt.share" in r.stderr and "Traceback" not in r.stderr
    assert not any(tmp_path.iterdir())


def _embedded_default(out: Path, tiny_dir: Path) -> dict:
    """The launchers' own default (MODEL_PATH unset = the embedded model) with a stand-in for MLMT's
    warm start in ``out`` (building the real one takes ~9 minutes: docs/embedded_default.md)."""
    import shutil

    dest = out / "embedded" / "mlmt_seed0"
    if not dest.exists():
        shutil.copytree(tiny_dir, dest)
        (dest / "warm_start.json").write_text("{}")
    return {"NUM_STAGES": "1", "TRAIN_BATCH_SIZE": "2", "OUTPUT_DIR": str(out)}


@pytest.fixture(scope="module")
def mlmt_run(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("mlmt")
    r = _run(["bash", "recipes/mlmt/math/HLT_LLT_RR_1_1.sh", *FAST[1:]], _embedded_default(out, tiny_dir))
    assert r.returncode == 0, r.stderr
    info = json.loads((out / "HLT_LLT_RR_1_1" / "run_info.json").read_text())
    assert info["base_model"] == "embedded"
    return out / "HLT_LLT_RR_1_1"


@pytest.mark.parametrize("launcher,schedule", [("HLT_LLT_RR_1_15.sh", (1, 15)), ("HLT_LLT_RR_1_20.sh", (1, 20))])
def test_schedule_launchers(tiny_dir, tmp_path, launcher, schedule):
    r = _run(["bash", f"recipes/mlmt/math/{launcher}", *FAST[1:]], _embedded_default(tmp_path, tiny_dir))
    assert r.returncode == 0, r.stderr
    cfg = (tmp_path / launcher[:-3] / "train_config.yaml").read_text()
    assert f"coach: {schedule[0]}\n    solver: {schedule[1]}" in cfg and "wandb_project: mlmt_rl" in cfg


@pytest.mark.parametrize("share", ["lora", "weights"])
def test_shared_launcher(tiny_dir, tmp_path, share):
    env = dict(_embedded_default(tmp_path, tiny_dir), SHARE=share)
    r = _run(["bash", "recipes/mlmt/math/run_1gpu_shared.sh", *FAST[1:]], env)
    assert r.returncode == 0, r.stderr
    info = json.loads((tmp_path / f"mlmt_1gpu_shared_{share}" / "run_info.json").read_text())
    assert info["mode"] == ("lora" if share == "lora" else "full")


def test_mlmt_dashboard(mlmt_run, tmp_path):
    from satseq.plotting.dashboard import run_info as _run_info
    from satseq.tracking import read_metrics

    p = _run([sys.executable, "-m", "satseq.cli", "plot", str(mlmt_run), "--out", str(tmp_path / "d.png")])
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "d.png").stat().st_size > 10_000
    (tmp_path / "bare").mkdir()  # without run_info.json the layout is inferred from the metric names
    assert _run_info(tmp_path / "bare", read_metrics(mlmt_run))[0] == "mlmt"


def test_eval_math500_three_turns(mlmt_run, tmp_path):
    bad = _run(["bash", "recipes/mlmt/math/eval_math500.sh"])
    assert bad.returncode == 2 and "usage" in bad.stderr
    r = _run(["bash", "recipes/mlmt/math/eval_math500.sh", str(mlmt_run), "--limit", "3", "--n", "2",
              "--max_new_tokens", "6", "--no_progress"], {"DATASET": "embedded", "OUTPUT_DIR": str(tmp_path / "ev")})
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert m["workflow"] == "coach" and m["n_problems"] == 3
    assert {"turn1", "turn3", "improvement_rate", "degradation_rate", "coach_accuracy"} <= set(m)
    line = json.loads((tmp_path / "ev" / "predictions.jsonl").read_text().splitlines()[0])
    assert len(line["turn1_correct"]) == 2 and len(line["responses"][0]) == 3
    assert line["problem"].count("+") == 2  # an MLMT run is evaluated on MLMT's task, the sum of three


def _eval(args, env=None):
    return _run([sys.executable, "-m", "satseq.cli", "eval", "--dataset", "embedded", "--limit", "3", "--n", "2",
                 "--max_new_tokens", "6", "--no_progress", *args], env)


def test_single_model_self_verify_and_workflow_mismatch(tiny_dir, mlmt_run, tmp_path):
    e = _eval(["--checkpoint_dir", str(tiny_dir), "--workflow", "self_verify", "--output_dir", str(tmp_path / "sv")])
    assert e.returncode == 0, e.stderr
    assert json.loads((tmp_path / "sv" / "metrics.json").read_text())["workflow"] == "self_verify"
    bad = _eval(["--checkpoint_dir", str(mlmt_run), "--workflow", "self_verify", "--output_dir", str(tmp_path / "x")])
    assert bad.returncode == 2 and "--workflow self_verify" in bad.stderr and not (tmp_path / "x").exists()


def test_ray_address_reaches_the_trainer(tiny_dir, tmp_path):
    """The Slurm recipe's RAY_ADDRESS reaches trainer.ray_address: with ray hidden (a stand-in package
    whose import fails, first on PYTHONPATH) the trainer says the package is missing, naming the key."""
    hide = tmp_path / "no_ray" / "ray"
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("raise ImportError('ray hidden by the test')\n")
    env = {"MODEL_PATH": str(tiny_dir), "NUM_STAGES": "1", "OUTPUT_DIR": str(tmp_path),
           "RAY_ADDRESS": "127.0.0.1:9",
           "PYTHONPATH": os.pathsep.join([str(hide.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    r = _run(["bash", "recipes/mlmt/math/HLT_LLT_RR_1_1.sh", *FAST[1:]], env)
    assert r.returncode == 2 and "trainer.ray_address" in r.stderr and "127.0.0.1:9" in r.stderr


def _fake_bin(d: Path, name: str, body: str) -> None:
    p = d / name
    p.write_text("#!/usr/bin/env bash\n" + body + "\n")
    p.chmod(0o755)


def test_sbatch_argument_handling_and_ray_plumbing(tmp_path):
    script = "recipes/mlmt/math/submit_mlmt.sbatch"
    no_arg = _run(["bash", script])
    assert no_arg.returncode == 2 and "usage" in no_arg.stderr
    missing = _run(["bash", script, "nope.sh"], {"SLURM_JOB_NODELIST": "n[1-3]"})
    assert missing.returncode == 2 and "nope.sh" in missing.stderr
    bins, log = tmp_path / "bin", tmp_path / "calls.log"
    bins.mkdir()
    _fake_bin(bins, "scontrol", 'printf "node1\\nnode2\\nnode3\\n"')
    _fake_bin(bins, "srun", f'echo "srun $*" >> {log}; [[ "$*" == *hostname* ]] && echo "10.0.0.7 fe80::1"; true')
    launcher = tmp_path / "launcher.sh"
    launcher.write_text(f'echo "launcher RAY_ADDRESS=$RAY_ADDRESS args=$*" >> {log}\n')
    r = _run(["bash", script, str(launcher), "trainer.num_stages=3"],
             {"PATH": f"{bins}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node[1-3]", "RAY_START_WAIT": "0", "RAY_WORKER_WAIT": "0",
              "GPUS_PER_NODE": "2"})
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    assert "launcher RAY_ADDRESS=10.0.0.7:6379 args=trainer.num_stages=3" in calls
    head = [c for c in calls if "--head" in c]
    assert len(head) == 1 and "-w node1" in head[0] and "--node-ip-address=10.0.0.7" in head[0]
    workers = [c for c in calls if "--address=10.0.0.7:6379" in c]
    assert sorted(c.split("-w ")[1].split()[0] for c in workers) == ["node2", "node3"]
    assert all("--num-gpus=2" in c for c in head + workers)


@pytest.mark.parametrize("method", ["mlmt", "pag"])
def test_multiturn_run_resumes_exactly_after_a_kill(tiny_dir, tmp_path, method):
    common = [f"model.path={tiny_dir}", f"method={method}", "ppo.kl_coef=0.01", "trainer.num_stages=3", *FAST]
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]  # noqa: E731
    full = _train([*common, f"output_dir={tmp_path}/a"])
    assert full.returncode == 0, full.stderr
    killed = _train([*common, f"output_dir={tmp_path}/b"], env={"SATSEQ_KILL_AT_STAGE": "1"})
    assert killed.returncode != 0
    resumed = _train([*common, f"output_dir={tmp_path}/b"])
    assert resumed.returncode == 0, resumed.stderr
    run = method  # the default run_name of a method other than sat_seq
    assert strip(_rows(tmp_path / "b" / run)) == strip(_rows(tmp_path / "a" / run))
