"""``env.name=relay``: K seats answer in turn (the ``relay`` workflow); seat k sees the problem and what
seats 1..k-1 answered; the prediction is the vote of the K answers. The reward of each turn is its own
correctness weighted ``reward.own``, plus the vote's correctness weighted ``reward.team`` on the last
turn (:func:`satseq.rewards.turn_rewards.assign_relay_rewards`).

The seats are ``sat_seq.agents`` (the seed's config names them there) and the relay's prompt settings
``sat_seq.show_previous`` / ``previous_budget`` / ``previous_template`` stay in that section, where the
seed's ``config/sat_seq.yaml`` puts them; SAT-Seq, the simultaneous update and the shared policy all
train in this environment."""
from __future__ import annotations

from satseq.envs.base import Environment
from satseq.registry import register_env


@register_env
class Relay(Environment):
    name = "relay"
    title = "K seats answer in turn, each shown the earlier answers; the prediction is their vote"
    workflow = "relay"

    def check(self, cfg) -> None:
        n = len(cfg.sat_seq.agents)
        if cfg.env.max_turns is not None and cfg.env.max_turns != n:
            from satseq.errors import ConfigError

            raise ConfigError(f"config key 'env.max_turns': the relay has one turn per seat of sat_seq.agents ({n}), "
                              f"not {cfg.env.max_turns}")
        if cfg.sat_seq.previous_template is not None and cfg.sat_seq.show_previous == "none":
            from satseq.errors import ConfigError

            raise ConfigError("config key 'sat_seq.previous_template': unused with sat_seq.show_previous=none "
                              "(no turn is shown earlier answers)")

    def role_names(self, cfg) -> list[str]:
        return [a.name for a in cfg.sat_seq.agents]

    def prompt_format(self, kind, tokenizer, cfg):
        from satseq.workflows.prompts import check_turn_prompts, make_format

        check_turn_prompts(kind, "sat_seq", cfg.sat_seq, ("previous_template",),
                           "relay format (satseq/data/arithmetic.py)")
        return make_format(kind, tokenizer, chat_template=cfg.model.chat_template,
                           show_previous=cfg.sat_seq.show_previous, previous_budget=cfg.sat_seq.previous_budget,
                           template=cfg.data.prompt_template, previous_template=cfg.sat_seq.previous_template)

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        from satseq.rewards.turn_rewards import assign_relay_rewards

        assign_relay_rewards(episodes, own=cfg.reward.own, team=cfg.reward.team, custom=ctx.custom)
        return {}

    def reward_bound(self, cfg, n_agents, custom):
        # the episode reward's range is known for correctness rewards with non-negative weights
        own, team = cfg.reward.own, cfg.reward.team
        if custom is not None or own < 0 or team < 0:
            return None
        return (n_agents * own + team) or None

    def rollout_metrics(self, cfg, episodes) -> dict:
        if cfg.data.embedded_task != "chain":
            return {}
        from satseq.data.relay_chain import behaviour_shares

        return behaviour_shares(episodes)

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        from satseq.eval.rollout_eval import evaluate_relay

        roles = dict(workflow.agents)  # role -> agent (one agent for all roles: shared_policy)
        r = evaluate_relay(rt.pool, roles, rt.fmt, rt.engine, rt.eval, sampling=rt.sampling, generator=generator)
        return {"eval/vote_accuracy": r["vote"]["acc"], **{f"eval/{n}/accuracy": r[n]["acc"] for n in roles}}
