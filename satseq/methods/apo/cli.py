"""``satseq vstar``: A*-PO stage 1 on its own (the command A*-PO brings to the CLI)."""
from __future__ import annotations

from typing import List, Optional

import typer


def vstar(args: Optional[List[str]] = typer.Argument(None, help="CONFIG.yaml followed by key=value overrides")):
    """A*-PO stage 1: sample apo.n_samples responses per training prompt, write the V* cache."""
    from satseq.config import load_config
    from satseq.config.loader import split_config_args
    from satseq.update.vstar_stage import cache_path, compute_vstar
    from satseq.registry import get_method
    from satseq.rewards.custom import resolve_custom_reward
    from satseq.runtime import build_runtime

    path, overrides = split_config_args(args or [])
    cfg = load_config(path, ["method=apo", *overrides])
    rt = build_runtime(cfg, get_method(cfg.method), typer.echo)
    cache, secs = compute_vstar(cfg, rt, rt.pool.names[0], custom=resolve_custom_reward(cfg))
    cache.save(cache_path(cfg))
    v = cache.vstar
    solvable = len(cache.solvable_ids()) / max(1, len(v))
    typer.echo(f"V* for {len(v)} prompts × {cfg.apo.n_samples} samples in {secs:.1f} s: mean {sum(v) / len(v):.3f}, "
               f"solvable {solvable:.1%} -> {cache_path(cfg)}")
