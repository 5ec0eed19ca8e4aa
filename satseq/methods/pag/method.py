"""``method=pag``: PAG's credit and update over the ``self_verify`` environment (one policy solves,
verifies its attempt and revises only after a "wrong" verdict; its rewards are the environment's):
turn-independent, per-role advantages, and the GRPO clipped update or A*-PO's regression
(``pag.update``: :mod:`satseq.update.clipped_pg` or :mod:`satseq.update.regression`)."""
from __future__ import annotations

import satseq.algos.regression  # noqa: F401  (registers the regression loss apo: pag.update=apo)
from satseq.methods.base import Method
from satseq.methods.pag.config import PAGConfig
from satseq.registry import register_method


@register_method
class PAG(Method):
    name = "pag"
    title = "PAG"
    # pag.update=grpo: the ppo section's clipped update; =apo: apo's; grpo.group_size: responses per prompt
    update_sections = ("pag", "ppo", "grpo", "apo")
    env = "self_verify"
    envs = ("self_verify",)  # its advantages are per verifier / policy role
    owns_env = True
    config_section = ("pag", PAGConfig, "PAG (policy as generative verifier); clipped-update settings from ppo")
    metric_prefixes = ("pag",)
    metric_markers = (r"^pag/",)  # metric names only this method logs (plots of runs without run_info.json)
    supports_custom_reward = False  # its turn rewards are defined by correctness and verdicts

    def check(self, cfg) -> None:
        if cfg.pag.update == "apo":
            from satseq.algos import check_name

            check_name("apo.loss", cfg.apo.loss, kind="regression")

    def prepare(self, cfg, rt, custom, console) -> dict:
        if cfg.pag.update != "apo":
            return {}
        from satseq.update.vstar_stage import vstar_for_training

        return {"vstar": vstar_for_training(cfg, rt, None, console)}

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.pag.updater import PAGUpdater

        return PAGUpdater(cfg, rt.pool, generator, rt.device, vstar_cache=prepared.get("vstar"))

    def after_log(self, cfg, metrics, state, console) -> None:
        """Print the collapse warning the first time the answer change ratio drops below the threshold."""
        from satseq.envs.self_verify.metrics import collapse_warning

        msg = collapse_warning(metrics.get("pag/answer_change_ratio"), cfg.pag.collapse_threshold)
        if msg and not state.get("warned"):
            console(f"[satseq] warning: {msg}")
        state["warned"] = state.get("warned", False) or bool(msg)

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        from satseq.plotting.one_policy import pag_panels

        pag_panels(axes, rows, agents, run_dir)


__all__ = ["PAG"]
