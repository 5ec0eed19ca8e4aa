"""``method=mlmt`` (MLMT-RL) over the ``coach`` environment (solver → coach → solver): the coach is
credited for the refined answer plus the solver's confidence and its dependence on the feedback (in
place of the environment's reward); per-role per-turn GRPO under the alternating schedule
(:mod:`satseq.methods.mlmt.updater`). The environment's embedded task is the sum of three, where the
coach can demonstrate a method the solver's warm start lacks."""
from __future__ import annotations

from satseq.errors import ConfigError
from satseq.methods.base import AgentSpec, Method
from satseq.methods.mlmt.config import MLMTConfig
from satseq.registry import register_method

SOLVER, COACH = "solver", "coach"
SHARED_AGENT = "actor"


@register_method
class MLMT(Method):
    name = "mlmt"
    title = "MLMT-RL"
    update_sections = ("mlmt", "ppo", "grpo")  # the ppo section's clipped update per role; grpo.group_size
    env = "coach"
    envs = ("coach",)  # its coach reward and schedule are the coach and the solver's
    owns_env = True
    config_section = ("mlmt", MLMTConfig, "MLMT-RL (coach and solver); clipped-update settings from ppo")
    metric_markers = (r"^mlmt/",)  # metric names only this method logs (plots of runs without run_info.json)
    supports_custom_reward = False  # the coach reward is defined by correctness, confidence, dependence

    def check(self, cfg) -> None:
        m = cfg.mlmt
        if m.share == "weights" and m.solver.trainable != m.coach.trainable:
            raise ConfigError("config key 'mlmt.share': with shared weights one role cannot be frozen while the "
                              "other trains (use mlmt.share=lora: one adapter per role)")

    def agents(self, cfg) -> AgentSpec:
        m = cfg.mlmt
        if m.share == "weights":
            return AgentSpec([SHARED_AGENT], [m.solver.path], ["mlmt.solver.path"])
        return AgentSpec([SOLVER, COACH], [m.solver.path, m.coach.path], ["mlmt.solver.path", "mlmt.coach.path"],
                         force_lora=m.share == "lora")

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.mlmt.updater import MLMTUpdater

        return MLMTUpdater(cfg, rt.pool, self.roles(cfg, rt.pool.names), generator, rt.device)

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        return ctx.updater.assign_rewards(episodes)  # the coach reward needs the solver's log-probs

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        from satseq.methods.mlmt.dashboard import mlmt_panels

        mlmt_panels(axes, rows, agents, run_dir)
