"""MLMT-RL training step: coach rewards, per-role per-turn GRPO, the alternating schedule.

1. ``assign_rewards``: grade every turn; solver turns get their own correctness r(z), r(ŷ); the coach
   turn gets ``R_coach`` (:mod:`satseq.methods.mlmt.coach_reward`), whose conf and dep parts need
   two solver forwards on ŷ (with and without the feedback).
2. ``update``: advantages normalized per prompt group *and* per turn index (turn 1 solver, turn 2
   coach, turn 3 solver each get their own baseline: per role, per turn); then, for each pool agent
   that plays a role the schedule trains at this step, one clipped policy-gradient update
   (:func:`satseq.update.clipped_pg.clipped_pg_update`) on that role's turns, with the k3 KL
   penalty to the reference when ``ppo.kl_coef > 0``. Roles not trained this step, or frozen,
   contribute no gradient; a frozen agent's parameters never change.
"""
from __future__ import annotations

import torch

from satseq.algos.advantages import keyed_group_normalize
from satseq.methods.mlmt.coach_reward import coach_reward, solver_scores
from satseq.methods.mlmt.schedule import AlternatingSchedule
from satseq.rewards.turn_rewards import grade_episodes
from satseq.update.clipped_pg import PGSettings, clipped_pg_update
from satseq.update.batch import turns_of
from satseq.update.loop import make_optimizer
from satseq.workflows.coach import COACH, SOLVER
from satseq.records import Episode


class MLMTUpdater:
    def __init__(self, cfg, pool, roles: dict[str, str], generator: torch.Generator, device: str = "cpu"):
        self.cfg, self.pool, self.roles, self.gen, self.device = cfg, pool, dict(roles), generator, device
        m = cfg.mlmt
        self.schedule = AlternatingSchedule(coach=m.schedule.coach, solver=m.schedule.solver,
                                            coach_trainable=m.coach.trainable, solver_trainable=m.solver.trainable)
        self.settings = PGSettings.from_config(cfg)
        trainable = {r for r in (SOLVER, COACH) if getattr(m, r).trainable}
        self.agents = sorted({roles[r] for r in trainable})
        self.opts = {a: make_optimizer(pool, a, cfg.ppo.lr, cfg) for a in self.agents}
        if cfg.ppo.kl_coef > 0:
            for a in self.agents:
                pool.keep_reference(a)

    # ------------------------------------------------------------------ rewards
    def assign_rewards(self, episodes: list[Episode]) -> dict:
        m = self.cfg.mlmt
        grade_episodes(episodes)
        refine = [ep.turns[2] for ep in episodes]
        conf, dep = solver_scores(self.pool.module(self.roles[SOLVER]), [t.prompt_ids for t in refine],
                                  [t.info["prompt_ids_without_feedback"] for t in refine],
                                  [t.response_ids for t in refine], self.pool.tokenizer.pad_token_id,
                                  temperature=self.settings.temperature, device=self.device)
        correct = torch.tensor([float(t.correct) for t in refine])
        r_coach = coach_reward(correct, conf, dep, lambda_conf=m.lambda_conf, lambda_dep=m.lambda_dep,
                               dep_max=m.dep_max)
        for ep, c, d, r in zip(episodes, conf.tolist(), dep.tolist(), r_coach.tolist()):
            ep.turns[0].reward = float(ep.turns[0].correct)
            ep.turns[2].reward = float(ep.turns[2].correct)
            ep.turns[1].reward = r
            ep.turns[1].info.update(conf=c, dep=d, dep_clipped=min(max(d, 0.0), m.dep_max))
        n = max(1, len(episodes))
        return {"coach/reward": float(r_coach.mean()), "coach/conf": float(conf.mean()),
                "coach/dep": float(dep.mean()),
                "coach/dep_clipped": sum(ep.turns[1].info["dep_clipped"] for ep in episodes) / n}

    # ------------------------------------------------------------------ update
    def advantages(self, episodes: list[Episode]) -> torch.Tensor:
        """``[E, 3]``: GRPO-normalized within (prompt group, turn index)."""
        flat = [(ep.group, t.index, t.reward) for ep in episodes for t in ep.turns]
        r = torch.tensor([x[2] for x in flat], dtype=torch.float32)
        keys = torch.tensor([[g, k] for g, k, _ in flat], dtype=torch.long)
        return keyed_group_normalize(r, keys).view(len(episodes), -1)

    def update(self, stage: int, episodes: list[Episode]) -> dict:
        adv = self.advantages(episodes)
        train_roles = self.schedule.roles_at(stage)
        out = {f"schedule/{r}_trains": float(r in train_roles) for r in (SOLVER, COACH)}
        for agent in self.agents:
            roles = [r for r in train_roles if self.roles[r] == agent]
            if not roles:
                continue
            batch = turns_of(episodes, agent, adv, roles=roles)
            m = clipped_pg_update(self.pool, agent, self.opts[agent], batch, self.settings, generator=self.gen,
                                  device=self.device)
            out.update({f"{agent}/{k}": v for k, v in m.items()})
        return out

    def state_dict(self) -> dict:
        return {"optimizers": {a: o.state_dict() for a, o in self.opts.items()}}

    def load_state_dict(self, state: dict) -> None:
        for a, s in state["optimizers"].items():
            self.opts[a].load_state_dict(s)

