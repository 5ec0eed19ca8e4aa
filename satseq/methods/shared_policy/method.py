"""``method=shared_policy``: the relay of SAT-Seq played by **one** policy — every role
(``sat_seq.agents``) mapped to a single agent, ``policy``, with the same parameters. The natural
alternative to several distinct agents (PettingLLMs' shared-policy mode, MLMT's ``mlmt.share=weights``):
a single model trained on the relay itself rather than on a one-pass prompt (GRPO).

Everything but the agents is the simultaneous update's (:mod:`satseq.methods.simultaneous`), so the
comparison isolates distinct parameters: the relay workflow and its prompts (a role knows its
position from the answers it is shown), the turn rewards (``reward.own`` / ``reward.team``), the
turn advantages (``adv/seqaware``, normalised per (prompt, turn)), the loss, lr, mini-batches and
epochs of the ``sat_seq`` section. The policy's batch holds the turns of every role; one optimizer
step per mini-batch of them::

    L = −min(r·A, clip(r, 1−ε, 1+ε)·A)     over all K turns of every episode (c = 1, no KL check)

The policy starts from ``sat_seq.agents[0].path`` (``model.path`` when unset); the roles must agree
on their start and on being trained (one set of parameters cannot be frozen for one role only).
"""
from __future__ import annotations

from satseq.errors import ConfigError
from satseq.methods.base import AgentSpec
from satseq.methods.simultaneous.method import Simultaneous
from satseq.registry import register_method

SHARED_AGENT = "policy"


@register_method
class SharedPolicy(Simultaneous):
    name = "shared_policy"
    title = "One shared policy on the relay (baseline)"
    update_sections = ("sat_seq",)  # no KL check, no simultaneous.trust_region

    def check(self, cfg) -> None:
        super().check(cfg)
        if cfg.simultaneous.trust_region:
            raise ConfigError("config key 'simultaneous.trust_region': only method=simultaneous reads it "
                              "(method=shared_policy)")
        agents = cfg.sat_seq.agents
        if len({a.path for a in agents}) > 1:
            raise ConfigError("config key 'sat_seq.agents': method=shared_policy plays every role with one policy, "
                              "so the roles cannot start from different models (set one path, or none)")
        if len({a.trainable for a in agents}) > 1:
            raise ConfigError("config key 'sat_seq.agents': method=shared_policy has one set of parameters; one role "
                              "cannot be frozen while another trains")

    def agents(self, cfg) -> AgentSpec:
        return AgentSpec([SHARED_AGENT], [cfg.sat_seq.agents[0].path], ["sat_seq.agents[0].path"])

    def roles(self, cfg, agent_names: list[str]) -> dict[str, str]:
        return {a.name: SHARED_AGENT for a in cfg.sat_seq.agents}

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.simultaneous.updater import SimultaneousUpdater

        trainable = [SHARED_AGENT] if cfg.sat_seq.agents[0].trainable else []
        return SimultaneousUpdater(cfg, rt.pool, generator, rt.device, trainable=trainable)
