"""``method=simultaneous``: the relay of SAT-Seq (same agents, rewards, advantages and loss), with
every agent updated at once from the same batch — no sequential IS correction, no order, no KL
check, no certificate (:mod:`satseq.methods.simultaneous.updater`). The baseline that shows what
SAT-Seq's block-coordinate scheme adds; it inherits everything else from SAT-Seq's method."""
from __future__ import annotations

from satseq.registry import register_method
from satseq.methods.sat_seq.method import SatSeq


@register_method
class Simultaneous(SatSeq):
    name = "simultaneous"
    title = "Simultaneous multi-agent (baseline)"
    update_sections = ("sat_seq",)  # SAT-Seq's loss, lr, epochs and clip; no KL check
    owns_workflow = False     # a single model in the relay stands for SAT-Seq
    metric_markers = ()       # its metrics are a subset of SAT-Seq's
    ray_updater = None        # its own updater, not SAT-Seq's per-agent step: trainer.backend=local only

    @property
    def default_run_name(self) -> str:
        return self.name

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.simultaneous.updater import SimultaneousUpdater

        return SimultaneousUpdater(cfg, rt.pool, generator, rt.device)
