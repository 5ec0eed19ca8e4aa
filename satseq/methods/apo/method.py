"""``method=apo`` (A*-PO): stage 1 computes V* from ``apo.n_samples`` reference samples per
prompt (cached; ``satseq vstar`` runs it alone), stage 2 samples one response per prompt and
regresses ``β2 · log π/π_ref`` onto ``r − V*`` (:mod:`satseq.update.regression`)."""
from __future__ import annotations

import satseq.algos.regression  # noqa: F401  (registers the regression loss apo)
from satseq.methods.apo.config import APOConfig
from satseq.methods.base import Method
from satseq.registry import register_method


@register_method
class APO(Method):
    name = "apo"
    title = "A*-PO"
    envs = ("single",)  # stage 1's V*(x) is the value of one answer to the prompt
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
        from satseq.update.vstar_stage import vstar_for_training

        return {"vstar": vstar_for_training(cfg, rt, custom, console)}

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.update.regression import APOUpdater

        return APOUpdater(cfg, rt.pool, generator, prepared["vstar"], rt.device)
