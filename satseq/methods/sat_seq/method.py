"""``method=sat_seq``: K agents answer in turn (``relay``), each turn rewarded by its own
correctness plus the team's vote on the last turn, updated one agent at a time by the stage
coordinator (block-coordinate, truncated IS, quantile-KL check with backtracking, certificate)."""
from __future__ import annotations

import satseq.methods.sat_seq.adv.seqaware  # noqa: F401  (registers advantage estimator seqaware)
import satseq.methods.sat_seq.loss.seq_ratio_loss  # noqa: F401  (registers policy loss sat_seq)
from satseq.methods.base import AgentSpec, Method
from satseq.methods.sat_seq.config import SatSeqConfig
from satseq.registry import register_method


@register_method
class SatSeq(Method):
    name = "sat_seq"
    title = "SAT-Seq"
    update_sections = ("sat_seq", "algorithm.kl_ctrl")
    workflow = "relay"
    owns_workflow = True
    is_default = True  # `method` defaults to sat_seq (the seed's config/sat_seq.yaml)
    config_section = ("sat_seq", SatSeqConfig, "SAT-Seq method")
    metric_prefixes = ("certificate",)
    ray_updater = "per_agent"  # trainer.backend=ray: each agent's step in its actor (build_agent_updater)
    metric_markers = (r"^certificate/", r"/kl_quantile$")  # metric names only this method logs (plots of runs without run_info.json)

    @property
    def default_run_name(self) -> str:
        return "sat_seq_dapo"  # the seed's outputs/sat_seq_dapo/

    def check(self, cfg) -> None:
        from satseq.algos import check_name

        check_name("sat_seq.policy_loss", cfg.sat_seq.policy_loss, kind="clipped_pg")
        if cfg.sat_seq.previous_template is not None and cfg.sat_seq.show_previous == "none":
            from satseq.errors import ConfigError

            raise ConfigError("config key 'sat_seq.previous_template': unused with sat_seq.show_previous=none "
                              "(no turn is shown earlier answers)")

    def agents(self, cfg) -> AgentSpec:
        agents = cfg.sat_seq.agents
        return AgentSpec([a.name for a in agents], [a.path for a in agents],
                         [f"sat_seq.agents[{i}].path" for i in range(len(agents))])

    def group_size(self, cfg) -> int:
        return cfg.sat_seq.group_size

    def prompt_format(self, kind, tokenizer, cfg):
        from satseq.workflows.prompts import check_turn_prompts, make_format

        check_turn_prompts(kind, "sat_seq", cfg.sat_seq, ("previous_template",),
                           "relay format (satseq/data/arithmetic.py)")
        return make_format(kind, tokenizer, chat_template=cfg.model.chat_template,
                           show_previous=cfg.sat_seq.show_previous, previous_budget=cfg.sat_seq.previous_budget,
                           template=cfg.data.prompt_template, previous_template=cfg.sat_seq.previous_template)

    def prepare(self, cfg, rt, custom, console) -> dict:
        return {"custom": custom}

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.sat_seq.monitor.certificate_batch import CertificateBatch
        from satseq.methods.sat_seq.stage_coordinator import StageCoordinator
        from satseq.workflows.base import make_workflow

        certificate = None
        if cfg.sat_seq.certificate.prompts > 0:
            custom = prepared.get("custom")
            relay = make_workflow(self.workflow, self.roles(cfg, rt.pool.names), rt.fmt, rt.sampling)
            own, team = cfg.reward.own, cfg.reward.team
            # the episode reward's range is known for correctness rewards with non-negative weights
            reward_max = None if custom is not None or own < 0 or team < 0 else len(rt.pool.names) * own + team
            certificate = CertificateBatch(cfg, rt, relay, lambda eps: relay_rewards(cfg, eps, custom),
                                           reward_max or None)
        return StageCoordinator(cfg, rt.pool, generator, rt.device, certificate=certificate,
                                agent_steps=getattr(rt, "agent_steps", None))

    def build_agent_updater(self, cfg, rt, generator):
        from satseq.methods.sat_seq.stage_coordinator import StageCoordinator

        return StageCoordinator(cfg, rt.pool, generator, rt.device, certificate=None)

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        relay_rewards(cfg, episodes, ctx.custom)
        return {}

    def rollout_metrics(self, cfg, episodes) -> dict:
        if cfg.data.embedded_task != "chain":
            return {}
        from satseq.data.relay_chain import behaviour_shares

        return behaviour_shares(episodes)

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        from satseq.eval.rollout_eval import evaluate_relay

        roles = self.roles(cfg, rt.pool.names)  # role -> agent (one agent for all roles: shared_policy)
        r = evaluate_relay(rt.pool, roles, rt.fmt, rt.engine, rt.eval, sampling=rt.sampling, generator=generator)
        return {"eval/vote_accuracy": r["vote"]["acc"], **{f"eval/{n}/accuracy": r[n]["acc"] for n in roles}}

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        from satseq.methods.sat_seq.dashboard import sat_seq_panels

        sat_seq_panels(axes, rows, agents, run_dir)


def relay_rewards(cfg, episodes, custom) -> None:
    from satseq.rewards.turn_rewards import assign_relay_rewards

    assign_relay_rewards(episodes, own=cfg.reward.own, team=cfg.reward.team, custom=custom)
