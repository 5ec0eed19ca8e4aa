"""trainer.backend=ray: agents in Ray actors give the local run's numbers, resume exactly after the
driver is killed, pipeline the relay without changing its episodes, and fail in one line when Ray
is missing or the cluster cannot hold the placement. One local Ray cluster serves the module."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from numerics import fp_tol
from safetensors.torch import load_file

# the test clusters live on the loopback address and report no usage statistics (as satseq's own local one)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

COMMON = ["trainer.train_batch_size=2", "sat_seq.group_size=2", "grpo.group_size=2", "rollout.max_new_tokens=6",
          "data.train_size=16", "data.eval_size=4", "threads=1", "trainer.tensorboard=false", "trainer.progress=false",
          "trainer.num_stages=2", "trainer.save_every=0", "sat_seq.certificate.prompts=4",
          "sat_seq.certificate.samples=2", "reward.custom=tests.reward_fixtures:length_parity"]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster():
    ray.shutdown()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _cfg(tiny_dir, out, *extra):
    from satseq.config.loader import load_config

    return load_config(None, [*COMMON, f"model.path={tiny_dir}", f"output_dir={out}", *extra])


def _metrics(run_dir: Path):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _same_metrics(a, b):
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for k in ra:
            if isinstance(ra[k], float):
                assert abs(ra[k] - rb[k]) <= fp_tol(ra[k], rb[k]), (k, ra[k], rb[k])
            else:
                assert ra[k] == rb[k], k


def _weights(run_dir: Path, name: str):
    return load_file(str(run_dir / "trainer_state" / f"{name}.safetensors"))


@pytest.fixture(scope="module")
def local_run(tiny_dir, tmp_path_factory):
    from satseq.loop import train

    return train(_cfg(tiny_dir, tmp_path_factory.mktemp("local")), console=lambda *a, **k: None)


@pytest.fixture(scope="module")
def ray_run(cluster, tiny_dir, tmp_path_factory):
    from satseq.loop import train

    return train(_cfg(tiny_dir, tmp_path_factory.mktemp("ray"), "trainer.backend=ray"),
                 console=lambda *a, **k: None)


@pytest.mark.numerics
def test_sat_seq_on_ray_actors_matches_the_local_run(local_run, ray_run, tiny_dir):
    local, remote = _metrics(local_run), _metrics(ray_run)
    _same_metrics(local, remote)
    assert any(abs(r["agent_2/kl_mean"]) > 0 for r in local)  # the agents did move
    assert "certificate/vote_mean" in local[-1]
    start = load_file(str(tiny_dir / "model.safetensors"))
    moved = False
    for name in ("agent_1", "agent_2", "agent_3"):
        a, b = _weights(local_run, name), _weights(ray_run, name)
        assert a.keys() == b.keys()
        for k in a:
            assert torch.allclose(a[k], b[k], atol=fp_tol(a[k]), rtol=0), (name, k)
            moved |= k in start and not torch.equal(a[k], start[k])
        assert (ray_run / f"{name}_stage_2" / "model.safetensors").exists()  # written by its actor
    assert moved
    info = json.loads((ray_run / "run_info.json").read_text())["ray"]
    assert [a["agents"] for a in info["actors"]] == [["agent_1"], ["agent_2"], ["agent_3"]]


def test_lora_agents_sharing_a_base_in_one_actor_match_the_local_run(cluster, tiny_dir, tmp_path):
    from satseq.loop import train

    quiet = lambda *a, **k: None  # noqa: E731
    args = ["model.lora.enabled=true", "model.lora.r=4", "model.lora.dropout=0", "trainer.num_stages=1",
            "sat_seq.certificate.prompts=0"]
    two_and_one = 'trainer.placement=[{"agents": ["agent_1", "agent_2"]}, {"agents": ["agent_3"]}]'
    local = train(_cfg(tiny_dir, tmp_path / "l", *args), console=quiet)
    remote = train(_cfg(tiny_dir, tmp_path / "r", *args, "trainer.backend=ray", two_and_one), console=quiet)
    _same_metrics(_metrics(local), _metrics(remote))
    for name in ("agent_1", "agent_2", "agent_3"):
        a, b = _weights(local, name), _weights(remote, name)
        assert a.keys() == b.keys() and all("lora_" in k for k in a)
        assert all(torch.allclose(a[k], b[k], atol=fp_tol(a[k]), rtol=0) for k in a)
        assert any("lora_B" in k and a[k].abs().sum() > 0 for k in a)  # trained (lora_B starts at zero)
    info = json.loads((remote / "run_info.json").read_text())
    assert info["mode"] == "lora" and [a["agents"] for a in info["ray"]["actors"]] == [["agent_1", "agent_2"],
                                                                                      ["agent_3"]]


@pytest.mark.numerics
def test_stale_batches_from_rollout_actors_match_the_local_rollout_thread(cluster, tiny_dir, tmp_path):
    """trainer.max_staleness=1 on Ray: the rollout thread drives rollout actors (one actor with the three
    agents here, beside the trainer's one) and gives the local rollout thread's metrics and weights."""
    from satseq.loop import train

    quiet = lambda *a, **k: None  # noqa: E731
    args = ["trainer.max_staleness=1", "trainer.num_stages=3", "sat_seq.certificate.prompts=0"]
    one_actor = 'trainer.placement=[{"agents": ["agent_1", "agent_2", "agent_3"]}]'
    local = train(_cfg(tiny_dir, tmp_path / "l", *args), console=quiet)
    remote = train(_cfg(tiny_dir, tmp_path / "r", *args, "trainer.backend=ray", one_actor), console=quiet)
    rows = _metrics(remote)
    _same_metrics(_metrics(local), rows)
    assert [r["async/staleness"] for r in rows] == [0, 1, 1]
    assert any(r["agent_1/is_engine_truncated"] >= 0 for r in rows[1:])  # the correction is on (auto)
    for name in ("agent_1", "agent_2", "agent_3"):
        a, b = _weights(local, name), _weights(remote, name)
        assert all(torch.allclose(a[k], b[k], atol=fp_tol(a[k]), rtol=0) for k in a)
    info = json.loads((remote / "run_info.json").read_text())["ray"]
    assert [a["agents"] for a in info["actors"]] == [a["agents"] for a in info["rollout_actors"]] == \
        [["agent_1", "agent_2", "agent_3"]]


def _train_cli(args, env=None):
    e = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    e.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "satseq.cli", "train", *args], capture_output=True, text=True,
                          env=e, timeout=300, cwd=ROOT)


def test_a_killed_ray_driver_resumes_exactly_with_a_fresh_local_cluster(ray_run, tiny_dir, tmp_path):
    # pipelined here (the reference is not): the same run, killed, resumed and pipelined
    args = [*COMMON, f"model.path={tiny_dir}", f"output_dir={tmp_path}", "trainer.backend=ray",
            "trainer.pipeline_micro_batches=2"]
    killed = _train_cli(args, env={"SATSEQ_KILL_AT_STAGE": "1"})  # SIGKILL in the middle of stage 1
    assert killed.returncode != 0
    part = tmp_path / "sat_seq_dapo"
    assert [r["step"] for r in _metrics(part)] == [0]
    resumed = _train_cli(args)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming" in resumed.stdout + resumed.stderr
    assert "started a local Ray cluster" in resumed.stdout + resumed.stderr
    _same_metrics(_metrics(part), _metrics(ray_run))
    for name in ("agent_1", "agent_2", "agent_3"):
        a, b = _weights(part, name), _weights(ray_run, name)
        assert all(torch.allclose(a[k], b[k], atol=fp_tol(a[k]), rtol=0) for k in a)


@pytest.mark.numerics
def test_grpo_on_a_ray_actor_matches_the_local_run(cluster, tiny_dir, tmp_path):
    from satseq.loop import train

    quiet = lambda *a, **k: None  # noqa: E731
    args = ["method=grpo", "trainer.num_stages=2", "ppo.kl_coef=0.01", "run_name=g"]
    local = train(_cfg(tiny_dir, tmp_path / "l", *args), console=quiet)
    remote = train(_cfg(tiny_dir, tmp_path / "r", *args, "trainer.backend=ray"), console=quiet)
    _same_metrics(_metrics(local), _metrics(remote))
    a, b = _weights(local, "policy"), _weights(remote, "policy")
    assert all(torch.allclose(a[k], b[k], atol=fp_tol(a[k]), rtol=0) for k in a)


def test_the_pipelined_relay_gives_the_sequential_episodes(cluster, tiny_dir, tmp_path):
    from satseq.config.loader import finalize
    from satseq.loop import build_run
    from satseq.scale.pipeline import PipelinedWorkflow

    cfg = finalize(_cfg(tiny_dir, tmp_path, "trainer.backend=ray", "rollout.max_new_tokens=12"))
    run = build_run(cfg, console=lambda *a, **k: None)
    with run.strategy:
        problems = run.rt.train[:5]
        seq = run.workflow.rollout(problems, run.rt.pool, run.rt.engine, group_size=2,
                                   generator=torch.Generator().manual_seed(7))
        gen = torch.Generator().manual_seed(7)
        pip = PipelinedWorkflow(run.workflow, 3).rollout(problems, run.rt.pool, run.rt.engine, group_size=2,
                                                          generator=gen)
        assert not torch.equal(gen.get_state(), torch.Generator().manual_seed(7).get_state())  # drew the streams
    assert len(seq) == len(pip) == 10
    assert len({tuple(t.response_ids) for ep in seq for t in ep.turns}) > 10  # sampled, not all alike
    for a, b in zip(seq, pip):
        assert (a.group, a.problem.problem, a.prediction) == (b.group, b.problem.problem, b.prediction)
        for ta, tb in zip(a.turns, b.turns):
            assert ta.response_ids == tb.response_ids and ta.prompt_ids == tb.prompt_ids
            assert max(abs(x - y) for x, y in zip(ta.behaviour_logprobs, tb.behaviour_logprobs)) <= fp_tol(ta.behaviour_logprobs)


def test_a_placement_the_cluster_cannot_hold_is_a_one_line_error(cluster, tiny_dir, tmp_path):
    from satseq.errors import ConfigError
    from satseq.loop import train

    placement = ('trainer.placement=[{"agents": ["agent_1", "agent_2", "agent_3"], '
                 '"resources": {"node_nowhere": 1}}]')
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"trainer.placement\[0\].*node_nowhere"):
        train(_cfg(tiny_dir, tmp_path, "trainer.backend=ray", placement))
    four_each = ", ".join(f'{{"agents": ["{n}"], "num_cpus": 4}}' for n in ("agent_1", "agent_2", "agent_3"))
    with pytest.raises(ConfigError, match=r"'trainer.placement': the Ray cluster cannot hold it: needs {CPU: 12}"):
        train(_cfg(tiny_dir, tmp_path, "trainer.backend=ray", f"trainer.placement=[{four_each}]"))
    assert time.perf_counter() - t0 < 60  # refused up front, not left pending
    assert not (tmp_path / "sat_seq_dapo").exists()


def test_an_actor_that_cannot_start_is_a_one_line_error(cluster, tiny_dir, tmp_path):
    from satseq.errors import ConfigError
    from satseq.loop import train

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    with pytest.raises(ConfigError, match=r"^config key 'device': 'cuda' requested but CUDA is not available$"):
        train(_cfg(tiny_dir, tmp_path, "trainer.backend=ray", "device=cuda"), console=lambda *a, **k: None)


def test_placement_entries_must_cover_the_agents_once(cluster, tiny_dir, tmp_path):
    from satseq.errors import ConfigError
    from satseq.loop import train

    for placement, what in ((["agent_1", "agent_2"], r"agents \['agent_3'\] not placed"),
                            (["agent_1", "agent_2", "agent_3", "agent_1"], r"agents \['agent_1'\] placed twice"),
                            (["agent_1", "agent_2", "agent_3", "agent_9"], r"unknown agents \['agent_9'\]")):
        entries = ", ".join(f'{{"agents": ["{n}"]}}' for n in placement)
        with pytest.raises(ConfigError, match=what):
            train(_cfg(tiny_dir, tmp_path, "trainer.backend=ray", f"trainer.placement=[{entries}]"))


def test_check_placement_needs_one_node_that_holds_each_actor():
    from satseq.distributed import check_placement
    from satseq.errors import ConfigError
    from satseq.config.schema import ActorPlacement

    nodes = [{"CPU": 2.0, "GPU": 1.0}, {"CPU": 2.0, "GPU": 1.0, "node_b": 1.0}]
    check_placement([ActorPlacement(agents=["a"], num_gpus=0.5), ActorPlacement(agents=["b"], num_gpus=0.5),
                     ActorPlacement(agents=["c"], resources={"node_b": 1})], nodes)  # two agents share a GPU
    with pytest.raises(ConfigError, match=r"placement\[0\]': no node"):  # 4 CPUs in total, 2 per node
        check_placement([ActorPlacement(agents=["a"], num_cpus=3)], nodes)
    with pytest.raises(ConfigError, match=r"placement\[1\]': no node"):  # node_b has no second GPU
        check_placement([ActorPlacement(agents=["a"]), ActorPlacement(agents=["b"], num_gpus=2)], nodes)
    with pytest.raises(ConfigError, match="cannot hold it: needs {CPU: 5}"):
        check_placement([ActorPlacement(agents=[n]) for n in "abcde"], nodes)
    # the rollout actors' entries are named by their own key (trainer.rollout_placement)
    keys = ["trainer.placement[0]", "trainer.rollout_placement[0]"]
    with pytest.raises(ConfigError, match=r"'trainer.rollout_placement\[0\]': no node .*agents b"):
        check_placement([ActorPlacement(agents=["a"]), ActorPlacement(agents=["b"], num_gpus=2)], nodes, keys)
    with pytest.raises(ConfigError, match="'trainer.placement' and 'trainer.rollout_placement': the Ray cluster"):
        check_placement([ActorPlacement(agents=["a"], num_cpus=2), ActorPlacement(agents=["b"], num_cpus=2),
                         ActorPlacement(agents=["c"], num_cpus=1)], nodes, keys + ["trainer.rollout_placement[1]"])


def test_an_unsupported_method_is_a_one_line_error():
    from satseq.config.loader import load_config
    from satseq.errors import ConfigError
    from satseq.registry import get_method
    from satseq.scale.ray_runtime import build_ray_runtime

    cfg = load_config(None, ["method=simultaneous", "trainer.backend=ray"])
    with pytest.raises(ConfigError, match="config key 'trainer.backend': ray supports method=grpo and sat_seq, "
                                          "not method=simultaneous"):
        build_ray_runtime(cfg, get_method("simultaneous"))


def test_missing_ray_is_a_one_line_cli_error(tiny_dir, tmp_path):
    code = ("import sys; sys.modules['ray'] = None; from satseq.cli import main; "  # `import ray` fails
            f"sys.argv = ['satseq', 'train', *{[*COMMON, f'model.path={tiny_dir}', f'output_dir={tmp_path}']!r}, "
            "'trainer.backend=ray']; main()")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and lines == ["error: trainer.backend=ray needs the ray package: pip install "
                                           "'satseq[ray]'"], r.stderr[-2000:]
    assert not (tmp_path / "sat_seq_dapo").exists()


def test_the_local_backend_never_imports_ray(tiny_dir, tmp_path):
    code = ("import sys; from satseq.config.loader import load_config; from satseq.loop import train; "
            f"train(load_config(None, {[*COMMON, f'model.path={tiny_dir}', f'output_dir={tmp_path}']!r}), "
            "console=lambda *a, **k: None, stop_after=1); print('ray' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "False"
    assert (tmp_path / "sat_seq_dapo" / "metrics.jsonl").exists()
