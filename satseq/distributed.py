"""The Ray cluster of a run: join one (``trainer.ray_address``, set by the Slurm scripts) or start a
local one, and check that it can hold the declared placement before any actor is created.

With ``trainer.backend=ray`` the agents live in Ray actors placed on this cluster
(:mod:`satseq.scale.ray_runtime`); the driver process stays the single controller of the loop.
With ``trainer.backend=local`` and an address, the run only connects and records the cluster in
``run_info.json`` and trains in its own process. ``ray`` is imported here lazily, never on the
local path. One-line :class:`~satseq.errors.ConfigError` for: ray not installed, an unreachable
cluster, a placement the cluster cannot hold (rather than actors pending forever). docs/scale.md.
"""
from __future__ import annotations

import os
import sys

from satseq.errors import ConfigError

RAY_MISSING = "trainer.backend=ray needs the ray package: pip install 'satseq[ray]'"


def import_ray(local: bool = False):
    """``ray``, or a one-line ConfigError saying how to install it. ``local``: this process will start
    a one-machine cluster; when ray is imported here for the first time, that cluster is bound to the
    loopback address (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: its node address is 127.0.0.1, not
    the machine's interface). Ray's usage statistics are off unless ``RAY_USAGE_STATS_ENABLED`` says."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if local and "ray" not in sys.modules:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


def _cluster_info(ray, address: str) -> dict:
    resources = {k: float(v) for k, v in ray.cluster_resources().items() if "node:" not in k}
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return {"address": address, "nodes": nodes, "resources": resources}


def connect_ray(address: str, console=print) -> dict:
    """``ray.init(address=...)``; returns ``{"address", "nodes", "resources"}``. One-line errors."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise ConfigError(f"config key 'trainer.ray_address' ({address}): the ray package is not installed "
                          "(pip install 'satseq[ray]' on every node)") from None
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        info = _cluster_info(ray, address)
    except Exception as e:  # connection refused, version mismatch, ...
        raise ConfigError(f"config key 'trainer.ray_address': cannot connect to Ray at {address} "
                          f"({' '.join(str(e).split())[:200]})") from None
    console(f"[satseq] connected to Ray at {address}: {info['nodes']} node(s), "
            f"{info['resources'].get('GPU', 0):g} GPU(s)")
    return info


def start_ray(address: str | None, placement: list, console=print, keys: list[str] | None = None) -> dict:
    """Join ``address``, reuse a cluster this process already joined (tests, benches), or start a
    new local one (never another Ray instance found on this machine) with enough logical CPUs for
    ``placement`` (``ray.init(address="local", num_cpus=..., include_dashboard=False)``);
    then check that the cluster can hold ``placement`` (``keys``: the config key of each entry,
    for the error)."""
    ray = import_ray(local=not address)
    if ray.is_initialized():
        info = _cluster_info(ray, "(already connected)")
    elif address:
        info = connect_ray(address, console)
    else:
        import logging  # Ray's notice that its default token authentication is on: not an error of the run

        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        need = sum(p.num_cpus for p in placement)
        cpus = max(os.cpu_count() or 1, int(-(-need // 1)))
        ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        info = _cluster_info(ray, "local")
        console(f"[satseq] started a local Ray cluster: {cpus:g} logical CPUs on {os.cpu_count()} cores")
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    check_placement(placement, nodes, keys)
    return info


def check_placement(placement: list, nodes: list[dict], keys: list[str] | None = None) -> None:
    """Raise a one-line ConfigError unless every actor fits on some node and the cluster's totals
    cover all of them (a necessary check, not a bin packing: Ray still places the actors).
    ``keys[i]`` names entry i in the error (default ``trainer.placement[i]``)."""
    keys = keys or [f"trainer.placement[{i}]" for i in range(len(placement))]
    def asks(p) -> dict:
        return {k: v for k, v in {"CPU": p.num_cpus, "GPU": p.num_gpus, **p.resources}.items() if v > 0}

    total: dict[str, float] = {}
    for node in nodes:
        for k, v in node.items():
            total[k] = total.get(k, 0.0) + float(v)
    need: dict[str, float] = {}
    for i, p in enumerate(placement):
        a = asks(p)
        for k, v in a.items():
            need[k] = need.get(k, 0.0) + v
        if not any(all(float(n.get(k, 0.0)) >= v for k, v in a.items()) for n in nodes):
            raise ConfigError(f"config key '{keys[i]}': no node of the Ray cluster can hold "
                              f"{_fmt(a)} (agents {', '.join(p.agents)}; cluster: {_fmt(total)})")
    short = {k: v for k, v in need.items() if v > total.get(k, 0.0) + 1e-9}
    if short:
        tops = " and ".join(dict.fromkeys(f"'{k.split('[')[0]}'" for k in keys))
        raise ConfigError(f"config key {tops}: the Ray cluster cannot hold it: needs "
                          f"{_fmt(need)}, has {_fmt(total)}")


def _fmt(res: dict) -> str:
    keep = {k: v for k, v in res.items() if not k.startswith("node:") and "memory" not in k}
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(keep.items())) + "}"
