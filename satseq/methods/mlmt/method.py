"""``method=mlmt`` (MLMT-RL): solver → coach → solver (``coach`` workflow); the coach is rewarded
for the refined answer plus the solver's confidence and its dependence on the feedback; per-role
per-turn GRPO under the alternating schedule (:mod:`satseq.methods.mlmt.updater`). Its embedded
task is the sum of three, where the coach can demonstrate a method the solver's warm start lacks."""
from __future__ import annotations

from satseq.errors import ConfigError, SatseqError
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
    workflow = "coach"
    owns_workflow = True
    config_section = ("mlmt", MLMTConfig, "MLMT-RL (coach and solver); clipped-update settings from ppo")
    warm_start_stem = "mlmt"  # satseq sft --task mlmt
    metric_markers = (r"^mlmt/",)  # metric names only this method logs (plots of runs without run_info.json)
    supports_custom_reward = False  # the coach reward is defined by correctness, confidence, dependence

    @property
    def config_defaults(self) -> dict:
        from satseq.data.sum_of_three import MAX_NEW_TOKENS

        return {"rollout.max_new_tokens": MAX_NEW_TOKENS}

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

    def roles(self, cfg, agent_names):
        if cfg.mlmt.share == "weights":
            return {SOLVER: SHARED_AGENT, COACH: SHARED_AGENT}
        return {SOLVER: SOLVER, COACH: COACH}

    def prompt_format(self, kind, tokenizer, cfg):
        from satseq.workflows.mlmt_prompts import make_mlmt_format
        from satseq.workflows.prompts import check_turn_prompts

        check_turn_prompts(kind, "mlmt", cfg.mlmt, ("coach_prompt", "refine_prompt"),
                           "coach and refine format (satseq/workflows/mlmt_prompts.py)")
        return make_mlmt_format(kind, tokenizer, chat_template=cfg.model.chat_template,
                                template=cfg.data.prompt_template, coach_prompt=cfg.mlmt.coach_prompt,
                                refine_prompt=cfg.mlmt.refine_prompt)

    def embedded_task(self, seed: int = 0):
        from satseq.data.sum_of_three import SumOfThreeTask

        return SumOfThreeTask(seed=seed)

    def ensure_warm_start(self, output_dir, **kw):
        from satseq.methods.mlmt.warm_start import ensure_mlmt_warm_start

        return ensure_mlmt_warm_start(output_dir, **kw)

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.mlmt.updater import MLMTUpdater

        return MLMTUpdater(cfg, rt.pool, self.roles(cfg, rt.pool.names), generator, rt.device)

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        return ctx.updater.assign_rewards(episodes)  # the coach reward needs the solver's log-probs

    def metric_roles(self, cfg, rt, workflow):
        return [SOLVER, COACH]

    def rollout_metrics(self, cfg, episodes) -> dict:
        from satseq.methods.mlmt.updater import mlmt_rollout_metrics

        return mlmt_rollout_metrics(episodes)

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        from satseq.eval.rollout_eval import evaluate_multiturn

        r = evaluate_multiturn(workflow, rt.pool, rt.engine, rt.eval, metrics=graded_mlmt_metrics, generator=generator)
        return {f"eval/{k}": v for k, v in r.items()}

    def run_info(self, cfg, workflow) -> dict:
        return {"roles": dict(workflow.agents)}

    def eval_roles(self, info, agents, cfg):
        roles = info.get("roles")
        if not isinstance(roles, dict) or set(roles) != {SOLVER, COACH} or not set(roles.values()) <= set(agents):
            raise SatseqError("run_info.json: 'roles' must map solver and coach to its agents")
        return dict(roles)

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        from satseq.methods.mlmt.dashboard import mlmt_panels

        mlmt_panels(axes, rows, agents, run_dir)

    def prediction_answers(self, episodes):
        # final = the solver's refined answer (turn 3)
        return [ep.turns[2].answer for ep in episodes], [bool(ep.turns[2].correct) for ep in episodes]

    def prediction_fields(self, episodes) -> dict:
        eps = episodes
        return {"roles": [SOLVER, COACH, SOLVER],
                "turn1_answers": [ep.turns[0].answer for ep in eps],
                "turn1_correct": [bool(ep.turns[0].correct) for ep in eps],
                "coach_answers": [ep.turns[1].answer for ep in eps],
                "coach_correct": [bool(ep.turns[1].correct) for ep in eps],
                "responses": [[t.text for t in ep.turns] for ep in eps],
                "finish_reasons": [[t.finish_reason for t in ep.turns] for ep in eps]}


def graded_mlmt_metrics(episodes) -> dict:
    from satseq.methods.mlmt.updater import mlmt_rollout_metrics
    from satseq.rewards.turn_rewards import grade_episodes

    grade_episodes(episodes)
    return mlmt_rollout_metrics(episodes)
