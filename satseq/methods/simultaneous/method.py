"""``method=simultaneous``: the relay of SAT-Seq (same agents, rewards, advantages and loss), with
every agent updated at once from the same batch — no sequential IS correction, no order, no KL
check, no certificate (:mod:`satseq.methods.simultaneous.updater`). The baseline that shows what
SAT-Seq's block-coordinate scheme adds; it inherits everything else from SAT-Seq's method.

``simultaneous.trust_region=true`` adds SAT-Seq's trust region and nothing else: each agent's step
is proposed with SAT-Seq's β penalty and passes SAT-Seq's quantile-KL check, shrunk along the
proposal until it holds (:mod:`satseq.methods.sat_seq.kl.quantile_kl_ctrl`), while every agent is
still updated from the same batch with c = 1, in the listed order. With separate parameters and
c = 1 no agent's step depends on another's, so the order changes nothing but which random
mini-batch permutation each agent draws: this is SAT-Seq's stage coordinator with the IS factor
off (``StageCoordinator(..., simultaneous=True)``). It answers "the order or the trust region?"."""
from __future__ import annotations

from satseq.registry import register_method
from satseq.methods.sat_seq.method import SatSeq
from satseq.methods.simultaneous.config import SimultaneousConfig


@register_method
class Simultaneous(SatSeq):
    name = "simultaneous"
    title = "Simultaneous multi-agent (baseline)"
    # SAT-Seq's loss, lr, epochs and clip; the KL check's settings with simultaneous.trust_region
    update_sections = ("sat_seq", "simultaneous", "algorithm.kl_ctrl")
    config_section = ("simultaneous", SimultaneousConfig, "the simultaneous update (baseline)")
    exclusive_keys = {"simultaneous.trust_region": False}
    owns_workflow = False     # a single model in the relay stands for SAT-Seq
    metric_markers = ()       # its metrics are a subset of SAT-Seq's
    ray_updater = None        # its own updater, not SAT-Seq's per-agent step: trainer.backend=local only

    @property
    def default_run_name(self) -> str:
        return self.name

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.simultaneous.updater import SimultaneousUpdater

        if cfg.simultaneous.trust_region:
            from satseq.methods.sat_seq.stage_coordinator import StageCoordinator

            return StageCoordinator(cfg, rt.pool, generator, rt.device, simultaneous=True)

        return SimultaneousUpdater(cfg, rt.pool, generator, rt.device)
