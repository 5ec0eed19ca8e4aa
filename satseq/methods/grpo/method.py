"""``method=grpo``: one policy, the ``single`` workflow, group-normalised outcome advantages, the
clipped policy-gradient update (:mod:`satseq.methods.grpo.updater`). Every default of
:class:`~satseq.methods.base.Method` is GRPO's."""
from __future__ import annotations

from satseq.methods.base import Method
from satseq.registry import register_method


@register_method
class GRPO(Method):
    name = "grpo"
    title = "GRPO"
    owns_workflow = True

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.grpo.updater import GRPOUpdater

        return GRPOUpdater(cfg, rt.pool, generator, rt.device)
