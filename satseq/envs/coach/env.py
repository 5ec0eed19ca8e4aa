"""``env.name=coach`` (MLMT-RL's protocol, spec mlmt.md): solver → coach → solver (the ``coach``
workflow): the solver answers, the coach writes feedback on it, the solver answers again with the
feedback. Its settings (the coach's and the refinement's turn prompts) are in the ``mlmt`` section,
where MLMT's configs put them. Its embedded task is the sum of three, where a coach can demonstrate a
method the solver's warm start lacks (``satseq sft --task coach``). Its own reward is each turn's
correctness; MLMT-RL credits the coach otherwise (its context-utilization reward needs the solver's
log-probs: :meth:`satseq.methods.mlmt.method.MLMT.assign_rewards`)."""
from __future__ import annotations

from satseq.envs.base import Environment
from satseq.errors import SatseqError
from satseq.registry import register_env
from satseq.workflows.coach import COACH, SOLVER


@register_env
class Coach(Environment):
    name = "coach"
    title = "a solver answers, a coach writes feedback, the solver answers again"
    workflow = "coach"
    warm_start_stem = "mlmt"
    task_aliases = ("mlmt",)
    max_turns = 3

    def config_defaults(self, cfg) -> dict:
        from satseq.data.sum_of_three import MAX_NEW_TOKENS

        return {"rollout.max_new_tokens": MAX_NEW_TOKENS}

    def role_names(self, cfg) -> list[str]:
        return [SOLVER, COACH]

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
        from satseq.envs.coach.warm_start import ensure_mlmt_warm_start

        return ensure_mlmt_warm_start(output_dir, **kw)

    def metric_roles(self, cfg, rt, workflow):
        return [SOLVER, COACH]

    def rollout_metrics(self, cfg, episodes) -> dict:
        from satseq.envs.coach.metrics import mlmt_rollout_metrics

        return mlmt_rollout_metrics(episodes)

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        from satseq.envs.coach.metrics import graded_mlmt_metrics
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
