"""The processor a run or a benchmark ran on: for cache keys (``rollout.engine=auto``'s calibration) and
for the record of every timing (``bench/``)."""
from __future__ import annotations

import os
import platform
from pathlib import Path

#: the vector extensions that decide which GEMM kernels and precisions are fast
SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_info() -> dict:
    """The first processor of /proc/cpuinfo: ``model name``, ``cpu family``, ``model`` and the
    :data:`SPEED_FLAGS` it has (``flags``); ``{}`` where there is no /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict = {}
    for line in text.splitlines():
        key, _, value = (x.strip() for x in line.partition(":"))
        if key == "flags" and "flags" not in info:
            have = set(value.split())
            info["flags"] = [f for f in SPEED_FLAGS if f in have]
        elif key and key != "flags":
            info.setdefault(key, value)
    return info


def cpu_name() -> str:
    """e.g. ``AMD EPYC 7B13 (family 25 model 1), 2 cores, avx2``."""
    info = cpu_info()
    name = (f"{info['model name']} (family {info.get('cpu family', '?')} model {info.get('model', '?')})"
            if "model name" in info else platform.processor() or platform.machine() or "unknown CPU")
    return f"{name}, {os.cpu_count()} cores, " + (" ".join(info.get("flags", [])) or "no AVX2")


def cpu_key() -> str:
    """The processor's model name and speed flags, e.g. ``AMD EPYC 7B13 [avx2]`` (a cache key's part)."""
    info = cpu_info()
    if not info:
        return platform.processor() or platform.machine()
    return f"{info.get('model name', 'cpu')} [{' '.join(info.get('flags', []))}]"
