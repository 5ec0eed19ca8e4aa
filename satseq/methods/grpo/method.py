"""``method=grpo``: one policy in every role, group-normalised outcome advantages (the reward of an
episode's last turn), the clipped policy-gradient update (:mod:`satseq.methods.grpo.updater`). Its
default environment is ``single``; it trains in any environment one policy can play (every role mapped
to it). Every default of :class:`~satseq.methods.base.Method` is GRPO's.

``grpo.loss`` names a baseline preset (:mod:`satseq.methods.grpo.presets`: grpo, dr_grpo, dapo,
gspo, rloo, reinforce_pp) that fills the ``grpo`` and ``ppo`` keys left unset; DAPO's two rollout-side parts
live here: the soft overlong penalty added in :meth:`GRPO.assign_rewards`
(``grpo.overlong_buffer``) and dynamic sampling in :meth:`GRPO.collect`
(``grpo.dynamic_sampling``, :mod:`satseq.methods.grpo.dynamic_sampling`)."""
from __future__ import annotations

from satseq.errors import ConfigError
from satseq.methods.base import Method
from satseq.methods.grpo.config import GRPOConfig
from satseq.registry import register_method


@register_method
class GRPO(Method):
    name = "grpo"
    title = "GRPO"
    owns_env = True  # a single model evaluated in env single is scored as GRPO's policy
    config_section = ("grpo", GRPOConfig, "GRPO baseline")
    update_sections = ("grpo", "ppo")  # its own (advantages, DAPO's parts) and the clipped update's
    # DAPO's rollout-side parts and the presets: only GRPO reads them (another method setting one is an error)
    exclusive_keys = {"grpo.loss": "grpo", "grpo.dynamic_sampling": False, "grpo.overlong_buffer": 0}
    # the clipped update's settings, shared with PAG and MLMT-RL, moved to the common ppo section (issue 36)
    moved_keys = {f"grpo.{k}": f"ppo.{k}" for k in ("epsilon_low", "epsilon_high", "kl_coef", "loss_agg_mode",
                                                      "policy_loss", "ppo_epochs", "mini_batch_size", "lr")}
    ray_updater = "whole"  # trainer.backend=ray: the updater in the policy's actor (satseq/scale/ray_updaters.py)

    def defaults(self, cfg) -> dict:
        from satseq.methods.grpo.presets import preset_settings

        return {**self.config_defaults, **preset_settings(cfg)}

    def check_section(self, cfg) -> None:
        from satseq.algos import check_name

        check_name("grpo.adv_estimator", cfg.grpo.adv_estimator, kind="adv", of="outcome")
        check_name("ppo.policy_loss", cfg.ppo.policy_loss, kind="clipped_pg")  # the shared update's, for every method

    def check(self, cfg) -> None:
        if cfg.grpo.overlong_buffer > cfg.rollout.max_new_tokens:
            raise ConfigError(f"config key 'grpo.overlong_buffer': {cfg.grpo.overlong_buffer} exceeds "
                              f"rollout.max_new_tokens ({cfg.rollout.max_new_tokens})")
        env = self.environment(cfg)
        roles = env.role_names(cfg) or []
        if getattr(env, "credit", "turn") == "role" and len(roles) > 1 and not env.last_turn_outcome:  # a game
            raise ConfigError(f"config key 'env.name': method=grpo credits an episode by its last turn's reward, and "
                              f"env {env.name}'s roles ({', '.join(roles)}) are credited apart: play one role "
                              f"(e.g. env.textarena.opponent=random) or train them with shared_policy, sat_seq or "
                              f"simultaneous")

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        metrics = super().assign_rewards(cfg, episodes, ctx) or {}
        if cfg.grpo.overlong_buffer > 0:
            import torch

            from satseq.algos.shaping import overlong_penalty
            from satseq.methods.grpo.dynamic_sampling import TASK_REWARD

            turns = [ep.turns[-1] for ep in episodes]
            pen = overlong_penalty(torch.tensor([len(t.response_ids) for t in turns]),
                                   cfg.rollout.max_new_tokens, cfg.grpo.overlong_buffer).tolist()
            for t, p in zip(turns, pen):
                t.info[TASK_REWARD] = t.reward
                t.reward += p
            metrics["reward/overlong_penalty"] = sum(pen) / max(1, len(pen))
        return metrics

    def group_size(self, cfg) -> int:
        return cfg.grpo.group_size

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        from satseq.plotting.one_policy import pag_panels  # the PAG / A*-PO / GRPO layout

        pag_panels(axes, rows, agents, run_dir)

    def collect(self, cfg, draw, batch_size):
        if not cfg.grpo.dynamic_sampling:
            return draw(batch_size)
        from satseq.methods.grpo.dynamic_sampling import dynamic_sample

        return dynamic_sample(draw, batch_size, cfg.grpo.max_resample_rounds)

    def build_updater(self, cfg, rt, generator, prepared):
        from satseq.methods.grpo.updater import GRPOUpdater

        return GRPOUpdater(cfg, rt.pool, generator, rt.device)
