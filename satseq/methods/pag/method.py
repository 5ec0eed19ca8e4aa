"""``method=pag``: one policy solves, verifies its attempt and revises only after a "wrong"
verdict (``self_verify``); per-turn rewards with the revision bonus, per-role advantages, and the
GRPO clipped update or A*-PO's regression (``pag.update``)."""
from __future__ import annotations

from satseq.methods.base import Method
from satseq.methods.pag.config import PAGConfig
from satseq.registry import register_method


@register_method
class PAG(Method):
    name = "pag"
    title = "PAG"
    # pag.update=grpo: the ppo section's clipped update; =apo: apo's; grpo.group_size: responses per prompt
    update_sections = ("pag", "ppo", "grpo", "apo")
    workflow = "self_verify"
    owns_workflow = True
    config_section = ("pag", PAGConfig, "PAG (policy as generative verifier); clipped-update settings from ppo")
    warm_start_stem = "multiturn"  # satseq sft --task pag
    metric_prefixes = ("pag",)
    metric_markers = (r"^pag/",)  # metric names only this method logs (plots of runs without run_info.json)
    supports_custom_reward = False  # its turn rewards are defined by correctness and verdicts

    def check(self, cfg) -> None:
        if cfg.pag.update == "apo":
            from satseq.algos import check_name

            check_name("apo.loss", cfg.apo.loss, kind="regression")

    def roles(self, cfg, agent_names):
        return {"policy": agent_names[0], "verifier": agent_names[0]}

    def workflow_options(self, cfg) -> dict:
        return {"max_policy_turns": cfg.pag.max_policy_turns, "verify_last": cfg.pag.verify_last}

    def prompt_format(self, kind, tokenizer, cfg):
        from satseq.workflows.pag_prompts import make_pag_format
        from satseq.workflows.prompts import check_turn_prompts

        check_turn_prompts(kind, "pag", cfg.pag, ("verify_prompt", "revise_prompt"),
                           "verify and revise format (satseq/workflows/pag_prompts.py)")
        return make_pag_format(kind, tokenizer, chat_template=cfg.model.chat_template,
                               template=cfg.data.prompt_template, verify_prompt=cfg.pag.verify_prompt,
                               revise_prompt=cfg.pag.revise_prompt)

    def ensure_warm_start(self, output_dir, **kw):
        from satseq.methods.pag.warm_start import ensure_multiturn_warm_start

        return ensure_multiturn_warm_start(output_dir, **kw)

    def prepare(self, cfg, rt, custom, console) -> dict:
        if cfg.pag.update != "apo":
            return {}
        from satseq.methods.apo.method import vstar_for_training

        return {"vstar": vstar_for_training(cfg, rt, None, console)}

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.pag.updater import PAGUpdater

        return PAGUpdater(cfg, rt.pool, generator, rt.device, vstar_cache=prepared.get("vstar"))

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        from satseq.methods.pag.rewards import assign_pag_rewards

        assign_pag_rewards(episodes, alpha=cfg.pag.alpha)
        return {}

    def metric_roles(self, cfg, rt, workflow):
        return []  # Acc@t1 / Acc@final and the verifier's metrics come from the updater (pag/...)

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        from satseq.eval.rollout_eval import evaluate_multiturn

        r = evaluate_multiturn(workflow, rt.pool, rt.engine, rt.eval, metrics=pag_eval_metrics, generator=generator)
        return {f"eval/{k}": v for k, v in r.items()}

    def after_log(self, cfg, metrics, state, console) -> None:
        """Print the collapse warning the first time the answer change ratio drops below the threshold."""
        from satseq.methods.pag.metrics import collapse_warning

        msg = collapse_warning(metrics.get("pag/answer_change_ratio"), cfg.pag.collapse_threshold)
        if msg and not state.get("warned"):
            console(f"[satseq] warning: {msg}")
        state["warned"] = state.get("warned", False) or bool(msg)

    def grade(self, episodes) -> None:
        from satseq.methods.pag.rewards import grade_pag_episodes

        grade_pag_episodes(episodes)

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        from satseq.methods.pag.dashboard import pag_panels

        pag_panels(axes, rows, agents, run_dir)

    def prediction_answers(self, episodes):
        return [ep.prediction for ep in episodes], [bool(ep.prediction_correct) for ep in episodes]  # the last attempt's

    def prediction_fields(self, episodes) -> dict:
        from satseq.methods.pag.metrics import same_answer

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
    from satseq.methods.pag.metrics import pag_metrics

    return {f"pag/{k}": v for k, v in pag_metrics(episodes).items() if v is not None}


__all__ = ["PAG", "pag_eval_metrics"]
