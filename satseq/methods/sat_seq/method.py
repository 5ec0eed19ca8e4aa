"""``method=sat_seq``: K agents in the ``relay`` environment (each turn rewarded by its own correctness
plus the team's vote on the last turn: the environment's reward), updated one agent at a time by the
stage coordinator (block-coordinate, truncated IS, quantile-KL check with backtracking, certificate).

It also trains any environment that declares its roles when ``sat_seq.agents`` seats one agent on each,
in order (a TextArena game's players, ``env.name=textarena``); the environment's ``credit`` says how
turns are credited there (``role``: each role's advantages over its own turns,
:mod:`satseq.update.turn_credit`). The certificate bounds the relay's vote: only in the relay."""
from __future__ import annotations

import satseq.methods.sat_seq.adv.seqaware  # noqa: F401  (registers advantage estimator seqaware)
import satseq.methods.sat_seq.loss.seq_ratio_loss  # noqa: F401  (registers policy loss sat_seq)
from satseq.methods.base import Method, RelaySeats
from satseq.methods.sat_seq.config import SatSeqConfig
from satseq.registry import register_method


@register_method
class SatSeq(RelaySeats, Method):
    name = "sat_seq"
    title = "SAT-Seq"
    update_sections = ("sat_seq", "algorithm.kl_ctrl")
    env = "relay"
    envs = ("relay",)  # its agents are the relay's seats (sat_seq.agents); and any env with roles: trains()
    owns_env = True
    is_default = True  # `method` defaults to sat_seq (the seed's config/sat_seq.yaml)
    config_section = ("sat_seq", SatSeqConfig, "SAT-Seq method")
    metric_prefixes = ("certificate",)
    ray_updater = "per_agent"  # trainer.backend=ray: each agent's step in its actor (build_agent_updater)
    metric_markers = (r"^certificate/", r"/kl_quantile$")  # metric names only this method logs (plots of runs without run_info.json)

    @property
    def default_run_name(self) -> str:
        return "sat_seq_dapo"  # the seed's outputs/sat_seq_dapo/

    def check(self, cfg) -> None:
        self.check_seats(cfg)
        env = self.environment(cfg)
        if env.name not in self.envs and cfg.sat_seq.certificate.prompts > 0:
            from satseq.errors import ConfigError

            raise ConfigError(f"config key 'sat_seq.certificate.prompts': the certificate bounds the relay's "
                              f"vote accuracy; env {env.name} has none (set 0)")

    def prepare(self, cfg, rt, custom, console) -> dict:
        return {"custom": custom}

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.base import RewardContext
        from satseq.methods.sat_seq.monitor.certificate_batch import CertificateBatch
        from satseq.methods.sat_seq.stage_coordinator import StageCoordinator

        certificate = None
        if cfg.sat_seq.certificate.prompts > 0:
            custom = prepared.get("custom")
            env = self.environment(cfg)
            relay = env.make_workflow(cfg, self.roles(cfg, rt.pool.names), rt.fmt, rt.sampling)
            ctx = RewardContext(custom=custom)
            certificate = CertificateBatch(cfg, rt, relay, lambda eps: env.assign_rewards(cfg, eps, ctx),
                                           env.reward_bound(cfg, len(rt.pool.names), custom))
        from satseq.update.turn_credit import env_credit

        return StageCoordinator(cfg, rt.pool, generator, rt.device, certificate=certificate,
                                agent_steps=getattr(rt, "agent_steps", None),
                                credit=env_credit(self.environment(cfg)))

    def build_agent_updater(self, cfg, rt, generator):
        from satseq.methods.sat_seq.stage_coordinator import StageCoordinator

        return StageCoordinator(cfg, rt.pool, generator, rt.device, certificate=None)

    def simultaneous_updater(self, cfg, rt, generator, *, credit):
        """SAT-Seq's stage coordinator with every agent stepped from the same batch, c = 1 (no IS factor, no
        order): ``method=simultaneous simultaneous.trust_region=true`` asks for it by name (the registry),
        so that no method imports another."""
        from satseq.methods.sat_seq.stage_coordinator import StageCoordinator

        return StageCoordinator(cfg, rt.pool, generator, rt.device, simultaneous=True, credit=credit)

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        from satseq.plotting.relay_panels import sat_seq_panels

        sat_seq_panels(axes, rows, agents, run_dir)
