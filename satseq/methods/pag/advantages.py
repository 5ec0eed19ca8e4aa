"""PAG advantages: turn-independent, normalized separately per role (RoleAdvNorm).

Turn-independent (turn discount 0): a turn's "return" is its own reward r (the revision bonus is
already inside a revision turn's reward, :mod:`satseq.methods.pag.rewards`); no later turn's
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

``verifier_balance=True`` (config ``pag.verifier_balance``, default off): verifier turns are
baselined per class of the attempt they judged (right / wrong; the class joins the baseline key) and
each class then weighted ``n / (K * n_class)`` within its baseline group (n verifier turns, K classes
present), so both classes weigh the same: the verifier's objective becomes balanced accuracy. Without
it, for a verifier that ignores the attempt and says "correct" with probability p, the summed
advantage of its "correct" verdicts is ``p (1 - p) (n_right - n_wrong)`` (before the std scaling):
a batch with more wrong attempts than right ones pushes every verdict to "wrong", whatever the cue.
With it, that sum is 0 (a cue-blind verdict bias gets no gradient). Policy turns are unchanged.

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
    is_v = cols["role"].to(r.device) == ROLE_IDS["verifier"]
    cls = torch.where(is_v, attempt_correct.to(device=r.device, dtype=torch.long).clamp(0, 1),
                      torch.full_like(zeros, -1))
    key_v = torch.cat([key, is_v.long().unsqueeze(1)], dim=1)  # never mix roles, whatever group_by
    key_cls = torch.cat([key_v, cls.unsqueeze(1)], dim=1)
    adv = keyed_group_normalize(r, key_cls, norm_by_std=norm_by_std, eps=eps)
    _, g = torch.unique(key_v, dim=0, return_inverse=True)
    _, gc = torch.unique(key_cls, dim=0, return_inverse=True)
    n_g = torch.bincount(g).to(r.dtype)[g]
    n_gc = torch.bincount(gc).to(r.dtype)[gc]
    classes = torch.zeros(int(g.max()) + 1, 2, dtype=torch.bool, device=r.device)
    classes[g[is_v], cls[is_v]] = True
    k = classes.sum(1).to(r.dtype)[g]
    w = torch.where(is_v, n_g / (k.clamp(min=1) * n_gc), torch.ones_like(r))
    return adv * w


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
