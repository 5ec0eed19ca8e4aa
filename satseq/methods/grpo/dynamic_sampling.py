"""DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, Sec. 3.2) for ``method=grpo``.

A group (the ``grpo.group_size`` responses to one prompt) whose task rewards are all equal (all
correct or all wrong) has GRPO advantage 0 everywhere: it only dilutes the batch. With
``grpo.dynamic_sampling=true`` a stage rolls out ``trainer.train_batch_size`` prompts, keeps the
informative groups (:func:`satseq.algos.shaping.informative_groups`), and rolls out another
``trainer.train_batch_size`` prompts while fewer than ``trainer.train_batch_size`` groups are kept,
at most ``grpo.max_resample_rounds`` extra rounds; the first ``trainer.train_batch_size`` kept
groups are trained on (fewer when the rounds run out; when none is informative at all, the last
round's episodes are kept unfiltered so that the stage still logs its metrics, and their zero
advantages make the policy-gradient term vanish).

The filter reads each episode's *task* reward (correctness or ``reward.custom``, before DAPO's
overlong penalty; kept in ``turn.info["task_reward"]``), as DAPO filters on accuracy.
Logged: ``rollout/filtered_groups`` (uninformative groups dropped this stage),
``rollout/resample_rounds`` (extra rounds drawn), ``rollout/kept_groups`` (informative groups
trained on; 0 in the fallback). The reward metrics are averaged over every round; the loop's
``policy/accuracy`` and ``policy/response_length`` describe the episodes trained on.
"""
from __future__ import annotations

from typing import Callable

import torch

from satseq.algos.shaping import informative_groups
from satseq.records import Episode

TASK_REWARD = "task_reward"


def task_reward(ep: Episode) -> float:
    t = ep.turns[-1]
    return float(t.info.get(TASK_REWARD, t.reward))


def keep_informative(episodes: list[Episode]) -> tuple[list[Episode], int, int]:
    """(episodes of the informative groups, in order; groups kept; groups dropped)."""
    if not episodes:
        return [], 0, 0
    rewards = torch.tensor([task_reward(ep) for ep in episodes], dtype=torch.float64)
    groups = torch.tensor([ep.group for ep in episodes])
    keep = informative_groups(rewards, groups).tolist()
    kept = [ep for ep, k in zip(episodes, keep) if k]
    n_all, n_kept = len({ep.group for ep in episodes}), len({ep.group for ep in kept})
    return kept, n_kept, n_all - n_kept


def dynamic_sample(draw: Callable[[int], tuple[list[Episode], dict]], batch_size: int,
                   max_rounds: int) -> tuple[list[Episode], dict]:
    """Episodes of up to ``batch_size`` informative groups (module docstring), renumbered so that
    group ids are 0, 1, ... in order; metrics: the reward metrics averaged over the rounds, and
    ``rollout/filtered_groups``, ``rollout/resample_rounds``, ``rollout/kept_groups``."""
    kept: list[Episode] = []
    n_kept = n_dropped = rounds = 0
    reward_rows: list[dict] = []
    last: list[Episode] = []
    while True:
        episodes, metrics = draw(batch_size)
        reward_rows.append(metrics)
        last = episodes
        k, nk, nd = keep_informative(episodes)
        base = max((ep.group for ep in kept), default=-1) + 1
        remap: dict[int, int] = {}
        for ep in k:  # distinct group ids across rounds
            ep.group = remap.setdefault(ep.group, base + len(remap))
        kept += k
        n_kept, n_dropped = n_kept + nk, n_dropped + nd
        if n_kept >= batch_size or rounds >= max_rounds:
            break
        rounds += 1
    trained = min(n_kept, batch_size)  # informative groups trained on
    kept = [ep for ep in kept if ep.group < batch_size] if n_kept else last
    out = {k: sum(r[k] for r in reward_rows if k in r) / sum(k in r for r in reward_rows)
           for k in {k for r in reward_rows for k in r}}
    out.update({"rollout/filtered_groups": float(n_dropped), "rollout/resample_rounds": float(rounds),
                "rollout/kept_groups": float(trained)})
    return kept, out
