"""Turn advantages of a multi-agent update: by turn position (the relay) or per role (a game).

``credit="turn"`` — every episode has the same K turns and turn k is the k-th role's (the relay): the
advantage estimator runs on the ``[E, K]`` turn rewards, grouped by prompt, as it always has::

    A = adv_fn(r[E, K], groups).normalized                       (seqaware: GAE over turns)

``credit="role"`` — episodes of different lengths, several turns per role, one role's outcome not the
other's (a two-player game, :class:`satseq.envs.textarena.env.TextArena`): each role ρ is its own reward
stream, its turns in order ``j = 0..n_ρ(e)-1`` padded to the longest with a prefix mask, and the
estimator runs on that stream alone, grouped by prompt::

    A_ρ = adv_fn(r_ρ[E, J_ρ], groups, mask=M_ρ).normalized        (M_ρ[e, j] = j < n_ρ(e))
    A[e, t.index] = A_ρ[e, j]          for the j-th turn t of role ρ in episode e

so a role's turns are credited with that role's own return only (GAE runs over its own turns; a turn
the role did not play is masked, :mod:`satseq.methods.sat_seq.adv.seqaware`), and its baseline at its
j-th turn is the mean over the group's episodes that have that turn. The result is ``[E, K_max]``
indexed by turn index, what :func:`satseq.update.batch.turns_of` reads.
"""
from __future__ import annotations

import torch

CREDITS = ("turn", "role")


def turn_advantages(adv_fn, episodes, *, credit: str = "turn", **kw) -> torch.Tensor:
    """Normalised turn advantages ``[E, K]`` (module docstring); ``kw``: the estimator's settings."""
    groups = torch.tensor([ep.group for ep in episodes])
    if credit == "turn":
        rewards = torch.tensor([[t.reward for t in ep.turns] for ep in episodes], dtype=torch.float32)
        return adv_fn(rewards, groups, **kw).normalized
    if credit != "role":
        raise ValueError(f"credit '{credit}': not one of {', '.join(CREDITS)}")
    E = len(episodes)
    out = torch.zeros(E, max((len(ep.turns) for ep in episodes), default=0), dtype=torch.float32)
    roles = sorted({t.role for ep in episodes for t in ep.turns})
    for role in roles:
        streams = [[t for t in ep.turns if t.role == role] for ep in episodes]
        J = max(len(s) for s in streams)
        rewards = torch.zeros(E, J, dtype=torch.float32)
        mask = torch.zeros(E, J, dtype=torch.bool)
        for e, s in enumerate(streams):
            rewards[e, :len(s)] = torch.tensor([t.reward for t in s], dtype=torch.float32)
            mask[e, :len(s)] = True
        adv = adv_fn(rewards, groups, mask=mask, **kw).normalized
        for e, s in enumerate(streams):
            for j, t in enumerate(s):
                out[e, t.index] = adv[e, j]
    return out


def env_credit(env) -> str:
    """The credit an environment's episodes need: its ``credit`` attribute (``role``: a game), else ``turn``."""
    return getattr(env, "credit", "turn")


def trains_roles(env) -> bool:
    """Whether a multi-agent method (one agent a role) trains ``env`` besides the relay: its roles are
    players credited per role (``credit="role"``)."""
    return env_credit(env) == "role"


def role_agents(env, cfg) -> list:
    """The ``sat_seq.agents`` a multi-agent method seats when they are unset: one per role, named after it
    (entries of the section's own agent type)."""
    from typing import get_args

    agent_type = get_args(type(cfg.sat_seq).model_fields["agents"].annotation)[0]
    return [agent_type(name=r) for r in env.role_names(cfg) or []]


def check_one_each(env, cfg, agent_names: list[str], method: str) -> None:
    """A multi-agent method outside the relay: its agents play the environment's roles one each, in order
    (:meth:`satseq.envs.base.Environment.roles`); one-line ConfigError otherwise."""
    from satseq.errors import ConfigError

    roles = env.role_names(cfg)
    if roles is None or len(roles) != len(agent_names):
        raise ConfigError(f"config key 'sat_seq.agents': method={method} seats one agent on each role of env "
                          f"{env.name} ({', '.join(roles or [])}); sat_seq.agents has {len(agent_names)} "
                          f"({', '.join(agent_names)})")
