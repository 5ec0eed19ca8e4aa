"""PAG advantages: turn-independent, normalized separately per role (RoleAdvNorm).

Turn-independent (turn discount 0): a turn's "return" is its own reward r (the revision bonus is
already inside a revision turn's reward, :mod:`satseq.envs.self_verify.rewards`); no later turn's
reward flows back into it. Per turn, with a baseline group B::

    A = (r - mean_B r) / (std_B r + eps)       (unbiased std, as GRPO; ``norm_by_std=False``: r - mean)

``group_by="group_role_turn"`` (this function's default): B = the turns of the same prompt group, same PAG role,
same turn index (y1 with y1s, v1 with v1s, y2 with y2s ...). Policy and verifier turns are never
in one group, so each role is normalized on its own (RoleAdvNorm).

**Deviation from the paper**: PAG trains with PPO and a learned critic (A = r - V(s) with
discount 0, then per-role whitening over the batch). We use group baselines instead (no critic),
as the spec allows. As in :func:`satseq.algos.advantages.group_normalize`, a baseline group of
one turn, or one whose rewards are all equal, gets advantage 0; in particular a revision turn
that is the only one of its prompt group to be revised gets 0. ``group_by="group_role"``
(baseline over all turns of the role within the prompt group) or ``"role"`` (over the whole
batch per role, closest to the paper's RoleAdvNorm) keep a signal there. Training uses ``pag.adv_group_by`` (config default ``"role"``: measured to
keep the verifier's wrong-recall alive, docs/apo_pag.md).

``verifier_balance=True`` (config ``pag.verifier_balance``, default off). Without it, for a verifier that
ignores the attempt and says "correct" with probability p, the summed advantage of its "correct"
verdicts is ``p (1 - p) (n_right - n_wrong)`` (before the std scaling): a batch with more wrong attempts
than right ones pushes every verdict to "wrong", whatever the cue. With it, the verifier's objective is
balanced accuracy, ``(P(says correct | right attempt) + P(says wrong | wrong attempt)) / 2``, estimated
without bias. Within a baseline group (``group_by``'s group, verifier turns only; n of them), a verifier
turn i that judged an attempt of class c (right / wrong; n_c turns of the group)::

    A_i = (n / (2 n_c)) * (r_i - b_i)         b_i = mean of r_j over the other turns j of class c

``b_i`` is a leave-one-out baseline (RLOO's): it does not depend on turn i's own sample (for a class of
one turn: the mean over the group's other verifier turns). A group whose verifier turns all judged one
class gets no verifier gradient: it cannot tell a cue from a verdict bias. Then a cue-blind verdict
bias gets no gradient in expectation: each class adds ``±n p (1 - p) / 2`` to the expected gradient of
the verdict's logit, exactly (tests/test_pag.py enumerates every batch). The advantages are not divided
by a standard deviation, whatever ``norm_by_std``: a scale drawn from the batch's own verdicts biases
the verdict again. Policy turns are unchanged.

Before issue 38's fix this option baselined each class by its mean (turn i included) and divided by
that class's std. Both bias the verdict towards the majority class: the mean shrinks a class's expected
gradient by ``(n_c - 1) / n_c``, and a class whose verdicts all agree has std 0 and no signal. On a
cue-blind verifier judging 2 right and 7 wrong attempts, the expected push towards "wrong" was half the
unbalanced one (-1.11 against -2.21 at p = 1/2); with 15 % right attempts in batches of 32, a fifth to a
half (docs/apo_pag.md, "Why the default collapses").

Registry: the signature follows the adv-estimator convention (leading ``(rewards, group_ids)`` as
``grpo``; without ``roles`` / ``turn_ids`` it reduces to GRPO; extra per-turn tensors as keywords),
but it is deliberately NOT registered here: registering on import would make the registry's
contents depend on import order (tests/test_algos_core.py asserts the exact list of names). To
register it as ``"pag"``, add ``register_adv("pag")(pag_advantages)`` (or the decorator) where
``satseq.algos`` imports its estimators, and update those lists.
"""
from __future__ import annotations

import torch
from torch import Tensor

from satseq.algos.advantages import keyed_group_normalize
from satseq.records import Episode

ROLE_IDS = {"policy": 0, "verifier": 1}
GROUP_BY = ("group_role_turn", "group_role", "role")


def pag_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    roles: Tensor | None = None,
    turn_ids: Tensor | None = None,
    group_by: str = "group_role_turn",
    norm_by_std: bool = True,
    eps: float = 1e-6,
    attempt_correct: Tensor | None = None,
    verifier_balance: bool = False,
) -> Tensor:
    """Per-turn advantages ``[N]`` from flat per-turn ``rewards``, prompt ``group_ids``, ``roles``
    (:data:`ROLE_IDS` codes) and ``turn_ids`` (turn index in the episode), all ``[N]``;
    ``attempt_correct`` ``[N]`` (1 / 0 on verifier turns: the judged attempt is right; any value on
    policy turns) is read only with ``verifier_balance`` (module docstring)."""
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
    r = rewards if rewards.is_floating_point() else rewards.to(torch.float32)
    if r.dim() != 1:
        raise ValueError(f"rewards must be [N], got {tuple(r.shape)}")
    n = r.shape[0]
    zeros = torch.zeros(n, dtype=torch.long, device=r.device)
    cols = {"group": group_ids, "role": zeros if roles is None else roles,
            "turn": zeros if turn_ids is None else turn_ids}
    for k, v in cols.items():
        if v.shape != (n,):
            raise ValueError(f"{k} ids must be [N] with N={n}, got {tuple(v.shape)}")
    keys = {"group_role_turn": ("group", "role", "turn"), "group_role": ("group", "role"), "role": ("role",)}
    key = torch.stack([cols[k].to(device=r.device, dtype=torch.long) for k in keys[group_by]], dim=1)
    if not verifier_balance:
        return keyed_group_normalize(r, key, norm_by_std=norm_by_std, eps=eps)
    if attempt_correct is None or attempt_correct.shape != (n,):
        raise ValueError("verifier_balance needs attempt_correct [N]")
    return _balanced_verifier(r, key, cols["role"].to(r.device) == ROLE_IDS["verifier"], attempt_correct,
                              norm_by_std=norm_by_std, eps=eps)


def _balanced_verifier(r: Tensor, key: Tensor, is_v: Tensor, attempt_correct: Tensor, norm_by_std: bool,
                       eps: float) -> Tensor:
    """``verifier_balance``'s advantages (module docstring): policy turns as without it (``key``'s
    groups); verifier turns by class, with a leave-one-out baseline, weighted so both classes count
    the same (0 in a group with one class only)."""
    key_v = torch.cat([key, is_v.long().unsqueeze(1)], dim=1)  # never mix roles, whatever group_by
    adv = keyed_group_normalize(r, key_v, norm_by_std=norm_by_std, eps=eps)  # policy turns keep these
    if not bool(is_v.any()):
        return adv
    cls = attempt_correct.to(device=r.device, dtype=torch.long).clamp(0, 1)
    _, g = torch.unique(key_v, dim=0, return_inverse=True)
    n_groups = int(g.max()) + 1
    gc = g * 2 + cls  # (group, class) cell
    z = torch.zeros(2 * n_groups, dtype=r.dtype, device=r.device)
    rv = torch.where(is_v, r, torch.zeros_like(r))
    fv = is_v.to(r.dtype)
    cell_n = z.index_add(0, gc, fv)  # verifier turns per (group, class)
    cell_s = z.index_add(0, gc, rv)
    n_c, s_c = cell_n[gc], cell_s[gc]
    n_g, s_g = cell_n.view(n_groups, 2).sum(1)[g], cell_s.view(n_groups, 2).sum(1)[g]
    k = (cell_n.view(n_groups, 2) > 0).sum(1).to(r.dtype)[g]
    # leave-one-out baseline: the class's other turns, else the group's other verifier turns, else none
    b = torch.where(n_c > 1, (s_c - r) / (n_c - 1).clamp(min=1),
                    torch.where(n_g > 1, (s_g - r) / (n_g - 1).clamp(min=1), r))
    # a group with one class only cannot tell a cue from a verdict bias: no verifier gradient from it
    a = torch.where(k > 1, (r - b) * n_g / (k * n_c.clamp(min=1)), torch.zeros_like(r))
    return torch.where(is_v, a, adv)


def episode_turn_tensors(episodes: list[Episode]) -> dict[str, Tensor]:
    """Flatten episodes (episode-major, then turn order) into the inputs of :func:`pag_advantages`."""
    turns = [(ep.group, t) for ep in episodes for t in ep.turns]
    return {
        "rewards": torch.tensor([t.reward for _, t in turns], dtype=torch.float32),
        "group_ids": torch.tensor([g for g, _ in turns], dtype=torch.long),
        "roles": torch.tensor([ROLE_IDS[t.role] for _, t in turns], dtype=torch.long),
        "turn_ids": torch.tensor([t.index for _, t in turns], dtype=torch.long),
        "attempt_correct": torch.tensor([int(bool(t.info.get("attempt_correct"))) if t.role == "verifier" else 0
                                         for _, t in turns], dtype=torch.long),
    }


def assign_pag_advantages(episodes: list[Episode], **kwargs) -> Tensor:
    """Compute :func:`pag_advantages` for rewarded episodes, store each in ``Turn.info["advantage"]``
    and return the flat ``[N]`` tensor (order of :func:`episode_turn_tensors`)."""
    adv = pag_advantages(**episode_turn_tensors(episodes), **kwargs)
    for a, t in zip(adv.tolist(), (t for ep in episodes for t in ep.turns)):
        t.info["advantage"] = a
    return adv
