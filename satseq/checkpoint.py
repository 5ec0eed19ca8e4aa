"""Checkpoints: one HF-format checkpoint per agent per saved stage, and the trainer state.

Layout of a run directory (``outputs/<run>/``)::

    train_config.yaml            the full resolved config
    run_info.json                agents, their mode (full / lora), base model, prompt format
    agent_1_stage_10/            HF model dir or PEFT adapter (safetensors) + tokenizer
    agent_1_stage_10.pt          the seed's name: the agent's trainable weights as a state dict
    trainer_state/               everything needed to resume exactly (rewritten every stage):
        state.pt                 stage, β per agent, optimizer states, RNG states, data position
        agent_1.safetensors      current trainable weights of each agent
        dcp/                     instead of the .safetensors and the optimizer states, with
                                 trainer.strategy=fsdp2: torch.distributed.checkpoint's sharded
                                 files, one set per rank, resumable on any number of ranks
                                 (written by the fsdp2 strategy)
    metrics.jsonl, tensorboard/  metrics

Every file and directory is written atomically (temp sibling + rename): a run killed at any
moment leaves either the previous complete state or the new one.
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from satseq.errors import SatseqError
from satseq.utils.dir_lock import locked_dir

STATE_DIR = "trainer_state"


@contextmanager
def sole_trainer(run_dir: Path):
    """Hold the run directory for this process's training: an exclusive, non-blocking lock on the
    directory itself (:func:`satseq.utils.dir_lock.locked_dir`; released when the training ends, or the
    process, however it ends). A second process training into the same directory (``satseq compare`` restarted while a worker
    of the first, orphaned, still trains; two ``satseq train`` with one run name) would interleave its
    stages, metrics and checkpoints with the first's: it stops at once with an error instead."""
    with ExitStack() as stack:
        try:
            held = stack.enter_context(locked_dir(run_dir, wait=False))
        except BlockingIOError:
            raise SatseqError(f"{run_dir} is being trained by another process (its stages and checkpoints would "
                              f"mix with this one's): wait for it to end or stop it (`fuser -v {run_dir}` shows it)"
                              ) from None
        yield held


def swap_in_dir(tmp: Path, final: Path) -> None:
    """Replace ``final`` by the complete directory ``tmp`` (the previous one kept as ``.old`` until then)."""
    old = final.with_name(final.name + ".old")
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old)


def with_global_rng(stage: int, extra: dict) -> dict:
    """``state.pt``'s content: the stage, the global RNG states (torch, Python, NumPy) and ``extra``."""
    return {"stage": stage, "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
            "numpy_rng": np.random.get_state(), **extra}


def save_trainer_state(run_dir: Path, *, stage: int, pool, extra: dict) -> Path:
    """Write ``trainer_state/`` for resuming after ``stage`` (the last completed stage): each agent's
    trainable weights (safetensors) and ``state.pt``. A sharded run's trainer state is written by its
    strategy (:meth:`satseq.strategy.Strategy.save_trainer_state`), with :func:`swap_in_dir` and
    :func:`with_global_rng`."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{STATE_DIR}.", dir=run_dir))
    try:
        for name in pool.names:
            state = {k: v.contiguous().cpu() for k, v in pool.trainable_state(name).items()}
            save_file(state, str(tmp / f"{name}.safetensors"))
        torch.save(with_global_rng(stage, extra), tmp / "state.pt")
        swap_in_dir(tmp, run_dir / STATE_DIR)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return run_dir / STATE_DIR


def load_trainer_state(run_dir: Path, pool, *, read_shards=None, check_plain=None) -> dict | None:
    """Restore agents' weights and global RNGs; return the state dict (None if there is none).

    A sharded state (``dcp/``, ``trainer.strategy=fsdp2``) is read by ``read_shards(dir, state)``, which
    the fsdp2 strategy passes (it restores the weights and the optimizers recorded in
    ``pool.optimizers`` and puts their state dicts into ``state["updater"]``; every rank calls it);
    without it such a state is a one-line error. ``check_plain(dir)`` may refuse a plain state."""
    run_dir = Path(run_dir)
    d = run_dir / STATE_DIR
    if not (d / "state.pt").exists():
        old = run_dir / (STATE_DIR + ".old")
        if (old / "state.pt").exists():
            d = old
        else:
            return None
    try:
        state = torch.load(d / "state.pt", weights_only=False)
        sharded = (d / "dcp").is_dir()
        if sharded and read_shards is None:
            raise SatseqError(f"{d}: written with trainer.strategy=fsdp2; resume it with that strategy "
                              "(or start a new run_name)")
        if sharded:
            read_shards(d, state)
        elif check_plain is not None:
            check_plain(d)
        for name in ([] if sharded else pool.names):
            f = d / f"{name}.safetensors"
            if not f.exists():
                raise SatseqError(f"{f}: missing; the run's agents differ from the checkpoint's "
                                  f"(start a new run_name or set resume=false)")
            pool.load_trainable_state(name, load_file(str(f)))
    except SatseqError:
        raise
    except Exception as e:  # a corrupt or foreign file
        raise SatseqError(f"{d}: cannot resume from this trainer state ({type(e).__name__}: {e})") from None
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    np.random.set_state(state["numpy_rng"])
    return state


def save_agent_checkpoints(run_dir: Path, pool, stage: int, *, export_pt: bool = True) -> list[Path]:
    """``agent_k_stage_N/`` (HF format) and, if asked, the seed's ``agent_k_stage_N.pt``."""
    out = []
    for name in pool.names:
        d = pool.save_agent(name, Path(run_dir) / f"{name}_stage_{stage}")
        out.append(d)
        if export_pt:
            from satseq.utils.io import atomic_write

            with atomic_write(Path(run_dir) / f"{name}_stage_{stage}.pt", "wb", encoding=None) as fh:
                torch.save({k: v.cpu() for k, v in pool.trainable_state(name).items()}, fh)
    return out


def latest_agent_checkpoints(run_dir: Path, names: list[str]) -> tuple[int, dict[str, Path]] | None:
    """The highest stage for which every agent has an HF checkpoint directory."""
    run_dir = Path(run_dir)
    stages = None
    for name in names:
        found = {int(p.name.rsplit("_", 1)[1]) for p in run_dir.glob(f"{name}_stage_*")
                 if p.is_dir() and p.name.rsplit("_", 1)[1].isdigit()}
        stages = found if stages is None else stages & found
    if not stages:
        return None
    s = max(stages)
    return s, {n: run_dir / f"{n}_stage_{s}" for n in names}
