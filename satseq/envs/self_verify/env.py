"""``env.name=self_verify`` (PAG's protocol, spec apo_pag.md): one policy solves, verifies its attempt
and revises only after a "wrong" verdict (the ``self_verify`` workflow). The reward of each turn is
PAG's (:mod:`satseq.envs.self_verify.rewards`): a policy turn its answer's correctness (plus the
revision bonus α), a verifier turn its verdict's. Its settings (turn limit, turn prompts, α) are in the
``pag`` section, where PAG's configs put them. Its embedded task is the two-operand sum, with the
multi-turn warm start (``satseq sft --task self_verify``)."""
from __future__ import annotations

from satseq.envs.base import Environment
from satseq.registry import register_env
from satseq.workflows.self_verify import POLICY, VERIFIER


@register_env
class SelfVerify(Environment):
    name = "self_verify"
    title = "one policy solves, verifies its attempt, and revises after a 'wrong' verdict"
    workflow = "self_verify"
    warm_start_stem = "multiturn"
    task_aliases = ("pag",)
    supports_custom_reward = False  # its turn rewards are defined by correctness and verdicts

    def role_names(self, cfg) -> list[str]:
        return [POLICY, VERIFIER]

    def workflow_options(self, cfg) -> dict:
        return {"max_policy_turns": cfg.pag.max_policy_turns, "verify_last": cfg.pag.verify_last}

    def check(self, cfg) -> None:
        p = cfg.pag
        most = 2 * p.max_policy_turns - (0 if p.verify_last else 1)
        if cfg.env.max_turns is not None and cfg.env.max_turns != most:
            from satseq.errors import ConfigError

            raise ConfigError(f"config key 'env.max_turns': self_verify's turns are set by pag.max_policy_turns "
                              f"and pag.verify_last (at most {most} here), not {cfg.env.max_turns}")

    def prompt_format(self, kind, tokenizer, cfg):
        from satseq.workflows.pag_prompts import make_pag_format
        from satseq.workflows.prompts import check_turn_prompts

        check_turn_prompts(kind, "pag", cfg.pag, ("verify_prompt", "revise_prompt"),
                           "verify and revise format (satseq/workflows/pag_prompts.py)")
        return make_pag_format(kind, tokenizer, chat_template=cfg.model.chat_template,
                               template=cfg.data.prompt_template, verify_prompt=cfg.pag.verify_prompt,
                               revise_prompt=cfg.pag.revise_prompt)

    def ensure_warm_start(self, output_dir, **kw):
        from satseq.envs.self_verify.warm_start import ensure_multiturn_warm_start

        return ensure_multiturn_warm_start(output_dir, **kw)

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        from satseq.envs.self_verify.rewards import assign_pag_rewards

        assign_pag_rewards(episodes, alpha=cfg.pag.alpha)
        return {}

    def metric_roles(self, cfg, rt, workflow):
        return []  # Acc@t1 / Acc@final and the verifier's metrics come from the updater (pag/...)

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        from satseq.eval.rollout_eval import evaluate_multiturn

        r = evaluate_multiturn(workflow, rt.pool, rt.engine, rt.eval, metrics=pag_eval_metrics, generator=generator)
        return {f"eval/{k}": v for k, v in r.items()}

    def grade(self, episodes) -> None:
        from satseq.envs.self_verify.rewards import grade_pag_episodes

        grade_pag_episodes(episodes)

    def prediction_answers(self, episodes):
        return [ep.prediction for ep in episodes], [bool(ep.prediction_correct) for ep in episodes]  # the last attempt's

    def prediction_fields(self, episodes) -> dict:
        from satseq.envs.self_verify.metrics import same_answer

        eps = episodes
        return {"turn1_answers": [ep.info["answer_t1"] for ep in eps],
                "turn1_correct": [bool(ep.turns[0].correct) for ep in eps],
                "verdicts": [ep.info["verdicts"] for ep in eps],
                "verifier_correct": [[bool(t.correct) for t in ep.turns if t.role == "verifier"] for ep in eps],
                "revised": [bool(ep.info["revised"]) for ep in eps],
                "answer_changed": [not same_answer(ep.info["answer_t1"], ep.prediction) for ep in eps],
                "pag_roles": [[t.role for t in ep.turns] for ep in eps],
                "responses": [[t.text for t in ep.turns] for ep in eps],
                "finish_reasons": [[t.finish_reason for t in ep.turns] for ep in eps]}


def pag_eval_metrics(episodes) -> dict:
    from satseq.envs.self_verify.metrics import pag_metrics

    return {f"pag/{k}": v for k, v in pag_metrics(episodes).items() if v is not None}
