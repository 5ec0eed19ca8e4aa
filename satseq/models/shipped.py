"""Warm starts shipped with satseq: built once by ``satseq sft --task chain --ship``, read by the quickstart.

Building the chain warm start takes ≈ 10 minutes on 2 cores (the base SFT, then the chain's), and
where its SFT lands depends on the CPU's floating-point path (docs/embedded_default.md). So the one
the quickstart needs ships inside the package, ``satseq/warm_starts/<stem>_seed<seed>/``: an ordinary
HF model directory (≈ 9 MB of fp32 safetensors) plus ``warm_start.json``, which records how it was made
(commit, CPU, kernel path, library versions, SFT steps, every validation check) and the **fingerprint**
of the code that builds it. :func:`shipped_warm_start` hands it out only while that fingerprint equals
the code's: after an edit to a module of :data:`BUILD_MODULES` the warm start is rebuilt on first use
(and ``tests/test_shipped_warm_start.py`` fails until ``--ship`` is run again).

The fingerprint hashes each module's syntax tree with docstrings removed, so comments, docstrings and
formatting do not count; a change to what the code does does.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from satseq.utils.io import atomic_dir

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "warm_starts"

#: the warm starts that may ship (their builders' code is :data:`BUILD_MODULES`)
SHIPPABLE = ("chain",)
#: the modules whose code decides the chain warm start's weights: the model and tokenizer, the base and
#: chain SFT (data, schedule, loss, padding), and the validation that decides when each SFT stops
#: (greedy decoding by satseq's engine, answer extraction)
BUILD_MODULES = (
    "satseq.models.tiny", "satseq.models.sft", "satseq.models.warm_start", "satseq.models.embedded_tasks",
    "satseq.data.arithmetic", "satseq.data.sum_of_three", "satseq.data.relay_chain",
    "satseq.rollout.logprobs", "satseq.rollout.padding", "satseq.rollout.hf_engine", "satseq.rollout.fused_decode",
    "satseq.rewards.extract",
)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def source_fingerprint(source: str) -> str:
    """sha256 of a module's syntax tree without its docstrings (comments never reach the tree)."""
    return hashlib.sha256(ast.dump(_strip_docstrings(ast.parse(source))).encode()).hexdigest()


def code_fingerprint(modules: tuple[str, ...] = BUILD_MODULES) -> str:
    """One fingerprint over ``modules`` (each by :func:`source_fingerprint`, in order)."""
    h = hashlib.sha256()
    for name in modules:
        origin = importlib.util.find_spec(name).origin
        h.update(f"{name}:{source_fingerprint(Path(origin).read_text())}\n".encode())
    return h.hexdigest()


def shipped_dir(stem: str, seed: int) -> Path:
    return SHIPPED_DIR / f"{stem}_seed{seed}"


def shipped_info(stem: str, seed: int) -> Optional[dict]:
    """The shipped warm start's ``warm_start.json``, or None when none ships for ``stem`` / ``seed``."""
    f = shipped_dir(stem, seed) / "warm_start.json"
    return json.loads(f.read_text()) if f.exists() else None


def shipped_warm_start(stem: str, seed: int, *, n_examples: int, eval_size: int) -> Optional[Path]:
    """The shipped warm start for ``stem`` / ``seed`` when one ships, built by today's code
    (fingerprint) with the same corpus size and held-out split; else None (build it)."""
    info = shipped_info(stem, seed) if stem in SHIPPABLE else None
    if info is None:
        return None
    ship = info.get("shipped", {})
    if (ship.get("fingerprint") != code_fingerprint() or info.get("n_examples") != n_examples
            or ship.get("eval_size") != eval_size):
        return None
    return shipped_dir(stem, seed)


def copy_shipped(src: Path, out: Path) -> Path:
    """Copy a shipped warm start into a run's ``output_dir`` atomically (a temporary sibling, then a rename)."""
    with atomic_dir(out) as tmp:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
    return out


def provenance(eval_size: int) -> dict:
    """How and where a warm start is being made: commit, CPU, kernel path, thread count, versions."""
    import torch
    import transformers

    def git(*args) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                                  cwd=SHIPPED_DIR.parent).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"fingerprint": code_fingerprint(), "modules": list(BUILD_MODULES), "eval_size": eval_size,
            "commit": git("rev-parse", "HEAD"), "uncommitted_changes": bool(git("status", "--porcelain", "satseq")),
            "cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "kernel_path": torch.backends.cpu.get_cpu_capability(),
            "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY"),
            "torch": torch.__version__, "transformers": transformers.__version__}


def ship(built: Path, stem: str, seed: int, made: dict, console=print) -> Path:
    """Copy a freshly built warm start into the package, its ``warm_start.json`` extended with ``made``
    (:func:`provenance`, taken when the build started) under ``"shipped"``."""
    info = json.loads((built / "warm_start.json").read_text())
    info["shipped"] = made
    base = Path(info.get("base", "")) / "warm_start.json"
    if base.is_file():  # the base warm start it continued from: its steps and checks
        info["shipped"]["base_warm_start"] = {k: v for k, v in json.loads(base.read_text()).items()
                                              if k in ("steps", "checks", "reached_target", "sft")}
    dest = shipped_dir(stem, seed)
    with atomic_dir(dest) as tmp:
        for f in built.iterdir():
            if f.is_file():
                shutil.copy2(f, tmp / f.name)
        (tmp / "warm_start.json").write_text(json.dumps(info, indent=2) + "\n")
    console(f"[satseq] shipped {dest} (fingerprint {info['shipped']['fingerprint'][:12]}, {info['steps']} SFT steps)")
    return dest
