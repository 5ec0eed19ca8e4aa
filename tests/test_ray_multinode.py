"""trainer.placement on a simulated two-node Ray cluster (``ray.cluster_utils.Cluster``, two raylets on
this machine with distinct custom resources): each agent's actor runs on the node its placement
names, and a SAT-Seq stage trains across both."""
import json
import os

import pytest

# the test clusters live on the loopback address and report no usage statistics (as satseq's own local one)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"node_a": 1},
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=2, resources={"node_b": 2})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_each_actor_runs_on_the_node_its_placement_names(two_nodes, tiny_dir, tmp_path):
    from satseq.config.loader import load_config
    from satseq.loop import train

    placement = ('trainer.placement=[{"agents": ["agent_1"], "resources": {"node_a": 1}}, '
                 '{"agents": ["agent_2"], "resources": {"node_b": 1}}, '
                 '{"agents": ["agent_3"], "resources": {"node_b": 1}}]')
    cfg = load_config(None, ["trainer.train_batch_size=2", "sat_seq.group_size=2", "rollout.max_new_tokens=4",
                             "data.train_size=8", "data.eval_size=4", "threads=1", "trainer.tensorboard=false",
                             "trainer.progress=false", "trainer.num_stages=1", "sat_seq.certificate.prompts=0",
                             f"model.path={tiny_dir}", f"output_dir={tmp_path}", "trainer.backend=ray", placement,
                             "trainer.pipeline_micro_batches=2"])
    run_dir = train(cfg, console=lambda *a, **k: None)
    node_of = {res: n["NodeID"] for n in ray.nodes() if n["Alive"] for res in ("node_a", "node_b")
               if res in n["Resources"]}
    assert len(set(node_of.values())) == 2
    actors = json.loads((run_dir / "run_info.json").read_text())["ray"]["actors"]
    where = {a["agents"][0]: a["node_id"] for a in actors}  # ray.get_runtime_context().get_node_id() in each actor
    assert where == {"agent_1": node_of["node_a"], "agent_2": node_of["node_b"], "agent_3": node_of["node_b"]}
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and all(f"agent_{k}/accepted" in rows[0] for k in (1, 2, 3))


def test_the_sat_seq_slurm_script_starts_the_cluster_and_places_one_agent_per_node(tmp_path):
    """submit_sat_seq.sbatch with stand-ins for scontrol, srun and the launcher (no Slurm, no Ray)."""
    import os
    import shutil
    import subprocess
    from pathlib import Path

    from satseq.config.loader import load_config

    repo = Path(__file__).resolve().parents[1]
    root, bins, log = tmp_path / "root", tmp_path / "bin", tmp_path / "calls.log"
    (root / "recipes" / "slurm").mkdir(parents=True)
    (root / "recipes" / "sat_seq").mkdir()
    shutil.copy(repo / "recipes" / "slurm" / "ray_cluster.sh", root / "recipes" / "slurm")
    (root / "recipes" / "sat_seq" / "train_dapo.sh").write_text(
        f'for a in "$@"; do echo "launcher $a" >> {log}; done\n')
    bins.mkdir()
    for name, body in (("scontrol", 'printf "n1\\nn2\\n"'),
                       ("srun", f'echo "srun $*" >> {log}; [[ "$*" == *hostname* ]] && echo "10.0.0.7"; true')):
        (bins / name).write_text("#!/usr/bin/env bash\n" + body + "\n")
        (bins / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bins}:{os.environ['PATH']}", SLURM_JOB_NODELIST="n[1-2]", SATSEQ_ROOT=str(root),
               RAY_START_WAIT="0", RAY_WORKER_WAIT="0", GPUS_PER_NODE="2", GPUS_PER_AGENT="0.5")
    r = subprocess.run(["bash", str(repo / "recipes" / "sat_seq" / "submit_sat_seq.sbatch"), "trainer.num_stages=3"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    head = [c for c in calls if "--head" in c]
    assert len(head) == 1 and "-w n1" in head[0] and '{"satseq_node_0":100}' in head[0]
    workers = [c for c in calls if "--address=10.0.0.7:6379" in c]
    assert len(workers) == 1 and "-w n2" in workers[0] and '{"satseq_node_1":100}' in workers[0]
    args = [c[len("launcher "):] for c in calls if c.startswith("launcher ")]
    assert args[:2] == ["trainer.backend=ray", "trainer.ray_address=10.0.0.7:6379"]
    assert args[-1] == "trainer.num_stages=3"
    placement = next(a for a in args if a.startswith("trainer.placement="))
    cfg = load_config(None, [placement, "trainer.backend=ray"])  # the script's placement is a valid config
    assert [(p.agents, p.num_gpus, p.resources) for p in cfg.trainer.placement] == [
        (["agent_1"], 0.5, {"satseq_node_0": 1}), (["agent_2"], 0.5, {"satseq_node_1": 1}),
        (["agent_3"], 0.5, {"satseq_node_0": 1})]
