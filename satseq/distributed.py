"""Connecting a run to a Ray cluster (``trainer.ray_address``, set by ``submit_mlmt.sbatch``).

What this does today: connect the driver to the cluster the Slurm script started, check it, and
record its resources in ``run_info.json``. Training and rollouts still run in the driver process
on its device (single process on CPU or one GPU, DESIGN "Scale"); placing rollout workers on the
cluster's other nodes is the next step and is not implemented. docs/mlmt.md says so.
"""
from __future__ import annotations

from satseq.errors import ConfigError


def connect_ray(address: str, console=print) -> dict:
    """``ray.init(address=...)``; returns ``{"address", "nodes", "resources"}``. One-line errors."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"config key 'trainer.ray_address' ({address}): the ray package is not installed "
                          "(pip install 'ray[default]' on every node)") from None
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        resources = {k: float(v) for k, v in ray.cluster_resources().items() if "node:" not in k}
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    except Exception as e:  # connection refused, version mismatch, ...
        raise ConfigError(f"config key 'trainer.ray_address': cannot connect to Ray at {address} "
                          f"({' '.join(str(e).split())[:200]})") from None
    console(f"[satseq] connected to Ray at {address}: {nodes} node(s), {resources.get('GPU', 0):g} GPU(s); "
            "this version trains in the driver process")
    return {"address": address, "nodes": nodes, "resources": resources}
