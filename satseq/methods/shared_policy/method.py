"""``method=shared_policy``: every role of an environment played by **one** policy, ``policy``, with
the same parameters: in the relay (its default environment), the K seats of SAT-Seq
(``sat_seq.agents``). The natural alternative to several distinct agents (PettingLLMs' shared-policy
mode, MLMT's ``mlmt.share=weights``): a single model trained on the multi-turn protocol itself rather
than on a one-pass prompt (GRPO).

Everything but the agents is the simultaneous update's (:mod:`satseq.update.simultaneous`),
so the comparison isolates distinct parameters: the environment and its prompts (a role knows its
position from what it is shown), the environment's turn rewards (the relay's ``reward.own`` /
``reward.team``), the turn advantages (``seqaware``, normalised per (prompt, turn)), the loss, lr,
mini-batches and epochs of the ``sat_seq`` section. The policy's batch holds the turns of every role;
one optimizer step per mini-batch of them::

    L = −min(r·A, clip(r, 1−ε, 1+ε)·A)     over all K turns of every episode (c = 1, no KL check)

The policy starts from ``sat_seq.agents[0].path`` (``model.path`` when unset); the relay's roles must
agree on their start and on being trained (one set of parameters cannot be frozen for one role only).
In another environment the policy starts from ``model.path`` and plays the environment's roles, its
turns credited as the environment says (a game's ``credit="role"``: each role's advantages over its own
turns, :mod:`satseq.update.turn_credit`).
"""
from __future__ import annotations

from satseq.errors import ConfigError
from satseq.methods.base import AgentSpec, Method
from satseq.registry import register_method

SHARED_AGENT = "policy"


@register_method
class SharedPolicy(Method):
    name = "shared_policy"
    title = "One shared policy on the relay (baseline)"
    update_sections = ("sat_seq",)  # no KL check, no simultaneous.trust_region
    env = "relay"
    metric_prefixes = ("certificate",)

    def check(self, cfg) -> None:
        from satseq.algos import check_name

        check_name("sat_seq.policy_loss", cfg.sat_seq.policy_loss, kind="clipped_pg")
        if cfg.simultaneous.trust_region:
            raise ConfigError("config key 'simultaneous.trust_region': only method=simultaneous reads it "
                              "(method=shared_policy)")
        if self.environment(cfg).name != "relay":
            return
        agents = cfg.sat_seq.agents
        if len({a.path for a in agents}) > 1:
            raise ConfigError("config key 'sat_seq.agents': method=shared_policy plays every role with one policy, "
                              "so the roles cannot start from different models (set one path, or none)")
        if len({a.trainable for a in agents}) > 1:
            raise ConfigError("config key 'sat_seq.agents': method=shared_policy has one set of parameters; one role "
                              "cannot be frozen while another trains")

    def trains(self, env) -> bool:
        """Every environment that declares its roles (not one role per agent): one policy plays them all."""
        from satseq.envs.base import Environment

        return type(env).role_names is not Environment.role_names

    def _relay(self, cfg) -> bool:
        return self.environment(cfg).name == "relay"

    def agents(self, cfg) -> AgentSpec:
        if not self._relay(cfg):
            return AgentSpec([SHARED_AGENT], [None])
        return AgentSpec([SHARED_AGENT], [cfg.sat_seq.agents[0].path], ["sat_seq.agents[0].path"])

    def roles(self, cfg, agent_names: list[str]) -> dict[str, str]:
        env = self.environment(cfg)
        names = env.role_names(cfg)
        if names is None:
            raise ConfigError(f"config key 'env.name': method=shared_policy plays an environment's roles with one "
                              f"policy; env {env.name} has one role per agent")
        return {r: SHARED_AGENT for r in names}

    def group_size(self, cfg) -> int:
        return cfg.sat_seq.group_size

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.update.simultaneous import SimultaneousUpdater

        from satseq.update.turn_credit import env_credit

        trainable = [SHARED_AGENT] if not self._relay(cfg) or cfg.sat_seq.agents[0].trainable else []
        return SimultaneousUpdater(cfg, rt.pool, generator, rt.device, trainable=trainable,
                                   credit=env_credit(self.environment(cfg)))

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        from satseq.plotting.relay_panels import sat_seq_panels

        sat_seq_panels(axes, rows, agents, run_dir)
