"""A*-PO stage 1: V*(x) from N samples of the reference policy per training prompt, cached.

``V*(x) = β1 · ln mean_i exp(r_i / β1)`` (see :mod:`satseq.update.vstar`). The cache records
the dataset, model and N it was made for; stage 2 refuses a stale one.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from satseq.errors import ConfigError
from satseq.update.vstar import VStarCache, fingerprint_model, fingerprint_problems
from satseq.rewards.turn_rewards import assign_outcome_rewards
from satseq.utils.progress import progress_bar
from satseq.workflows.single import SingleWorkflow


def cache_path(cfg) -> Path:
    return Path(cfg.apo.vstar_cache) if cfg.apo.vstar_cache else cfg.run_dir / "vstar.json"


def model_fingerprint(cfg, rt) -> str:
    from satseq.models.warm_start import EMBEDDED, warm_start_dir

    path = cfg.model.path
    return fingerprint_model(warm_start_dir(cfg.output_dir) if path == EMBEDDED else path)


def compute_vstar(cfg, rt, agent: str, *, chunk: int = 32, custom=None, console=print) -> tuple[VStarCache, float]:
    """Sample ``apo.n_samples`` responses per training prompt with the (untrained) policy; return the
    cache and the seconds it took. Sampling uses its own generator seeded from ``seed``."""
    t0 = time.perf_counter()
    n = cfg.apo.n_samples
    wf = SingleWorkflow(agent, rt.fmt, rt.sampling)
    gen = torch.Generator().manual_seed(cfg.seed * 104729 + 1)
    rewards: list[list[float]] = []
    with progress_bar(len(rt.train), "A*-PO stage 1: V*", enabled=cfg.trainer.progress) as bar:
        for s in range(0, len(rt.train), chunk):
            probs = rt.train[s:s + chunk]
            eps = wf.rollout(probs, rt.pool, rt.engine, group_size=n, generator=gen)
            assign_outcome_rewards(eps, custom=custom)
            for g in range(len(probs)):
                rewards.append([ep.turns[0].reward for ep in eps if ep.group == g])
            bar.advance(len(probs))
    cache = VStarCache.build([p.problem_id for p in rt.train], torch.tensor(rewards), cfg.apo.beta1,
                             dataset_fingerprint=fingerprint_problems(rt.train),
                             model_fingerprint=model_fingerprint(cfg, rt))
    return cache, time.perf_counter() - t0


def load_or_compute_vstar(cfg, rt, agent: str, *, custom=None, console=print) -> VStarCache:
    path = cache_path(cfg)
    if path.exists():
        return VStarCache.load(path, dataset_fingerprint=fingerprint_problems(rt.train),
                               model_fingerprint=model_fingerprint(cfg, rt), n_samples=cfg.apo.n_samples,
                               beta1=cfg.apo.beta1)
    console(f"[satseq] no V* cache at {path}: running A*-PO stage 1 ({cfg.apo.n_samples} samples × "
            f"{len(rt.train)} prompts)")
    cache, secs = compute_vstar(cfg, rt, agent, custom=custom, console=console)
    cache.save(path)
    console(f"[satseq] V* cache written to {path} ({secs:.1f} s)")
    return cache


def vstar_for_training(cfg, rt, custom, console):
    """A*-PO stage 1 from the cache (computed on first use); ``apo.filter_unsolvable`` trims ``rt.train``."""
    cache = load_or_compute_vstar(cfg, rt, rt.pool.names[0], custom=custom, console=console)
    if cfg.apo.filter_unsolvable:
        keep = {str(i) for i in cache.solvable_ids()}
        rt.train = [p for p in rt.train if str(p.problem_id) in keep]
        if not rt.train:
            raise ConfigError("apo.filter_unsolvable: every training prompt is unsolvable for the reference policy")
    return cache
