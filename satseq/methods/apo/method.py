"""``method=apo`` (A*-PO): stage 1 computes V* from ``apo.n_samples`` reference samples per
prompt (cached; ``satseq vstar`` runs it alone), stage 2 samples one response per prompt and
regresses ``β2 · log π/π_ref`` onto ``r − V*`` (:mod:`satseq.methods.apo.updater`)."""
from __future__ import annotations

import satseq.methods.apo.loss  # noqa: F401  (registers the regression loss apo)
from satseq.errors import ConfigError
from satseq.methods.apo.config import APOConfig
from satseq.methods.base import Method
from satseq.registry import register_method


def vstar_for_training(cfg, rt, custom, console):
    """A*-PO stage 1 from the cache (computed on first use); ``apo.filter_unsolvable`` trims ``rt.train``."""
    from satseq.methods.apo.stage1 import load_or_compute_vstar

    cache = load_or_compute_vstar(cfg, rt, rt.pool.names[0], custom=custom, console=console)
    if cfg.apo.filter_unsolvable:
        keep = {str(i) for i in cache.solvable_ids()}
        rt.train = [p for p in rt.train if str(p.problem_id) in keep]
        if not rt.train:
            raise ConfigError("apo.filter_unsolvable: every training prompt is unsolvable for the reference policy")
    return cache


@register_method
class APO(Method):
    name = "apo"
    title = "A*-PO"
    config_section = ("apo", APOConfig, "A*-PO (offline V*, optimal-advantage regression)")
    metric_prefixes = ("apo",)

    def check(self, cfg) -> None:
        from satseq.algos import check_name

        check_name("apo.loss", cfg.apo.loss, kind="regression")

    def group_size(self, cfg) -> int:
        return 1  # one sample per prompt: V* is the baseline

    def cli_commands(self) -> dict:
        from satseq.methods.apo.cli import vstar

        return {"vstar": vstar}

    def prepare(self, cfg, rt, custom, console) -> dict:
        return {"vstar": vstar_for_training(cfg, rt, custom, console)}

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.apo.updater import APOUpdater

        return APOUpdater(cfg, rt.pool, generator, prepared["vstar"], rt.device)
