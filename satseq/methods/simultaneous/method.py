"""``method=simultaneous``: the relay of SAT-Seq (the same environment, agents, rewards, advantages and
loss), with every agent updated at once from the same batch: no sequential IS correction, no order, no
KL check, no certificate (:mod:`satseq.update.simultaneous`). The baseline that shows what
SAT-Seq's block-coordinate scheme adds; its agents, group size and update settings are the ``sat_seq``
section's.

``simultaneous.trust_region=true`` adds SAT-Seq's trust region and nothing else: each agent's step
is proposed with SAT-Seq's β penalty and passes SAT-Seq's quantile-KL check, shrunk along the
proposal until it holds (:mod:`satseq.methods.sat_seq.kl.quantile_kl_ctrl`), while every agent is
still updated from the same batch with c = 1, in the listed order. With separate parameters and
c = 1 no agent's step depends on another's, so the order changes nothing but which random
mini-batch permutation each agent draws: this is SAT-Seq's stage coordinator with the IS factor
off (``StageCoordinator(..., simultaneous=True)``). It answers "the order or the trust region?".

Like SAT-Seq it also trains any environment that declares its roles when ``sat_seq.agents`` seats one
agent on each (a TextArena game), crediting turns as the environment says (:mod:`satseq.update.turn_credit`)."""
from __future__ import annotations

from satseq.methods.base import Method, RelaySeats
from satseq.methods.simultaneous.config import SimultaneousConfig
from satseq.registry import register_method


@register_method
class Simultaneous(RelaySeats, Method):
    name = "simultaneous"
    title = "Simultaneous multi-agent (baseline)"
    # SAT-Seq's loss, lr, epochs and clip; the KL check's settings with simultaneous.trust_region
    update_sections = ("sat_seq", "simultaneous", "algorithm.kl_ctrl")
    env = "relay"
    envs = ("relay",)  # its agents are the relay's seats (sat_seq.agents); and any env with roles: trains()
    config_section = ("simultaneous", SimultaneousConfig, "the simultaneous update (baseline)")
    exclusive_keys = {"simultaneous.trust_region": False}
    metric_prefixes = ("certificate",)

    def check(self, cfg) -> None:
        self.check_seats(cfg)


    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.update.turn_credit import env_credit

        credit = env_credit(self.environment(cfg))
        if cfg.simultaneous.trust_region:  # SAT-Seq's stage coordinator with the IS factor off, asked of it by name
            from satseq.registry import get_method

            return get_method("sat_seq").simultaneous_updater(cfg, rt, generator, credit=credit)
        from satseq.update.simultaneous import SimultaneousUpdater

        return SimultaneousUpdater(cfg, rt.pool, generator, rt.device, credit=credit)

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        from satseq.plotting.relay_panels import sat_seq_panels

        sat_seq_panels(axes, rows, agents, run_dir)
