"""Held-out evaluation of a workflow: per-agent accuracy, the vote, pass@k.

``evaluate_relay`` runs the relay ``n`` times per problem and reports, for every agent, the mean
correctness of its answers (sampled pass@1 = avg@n) and pass@k over its n samples, plus the same
for the vote. ``evaluate_single`` does the same for one policy answering alone; ``evaluate_multiturn`` runs any
workflow and reports the metrics its method computes.
"""
from __future__ import annotations

import torch

from satseq.eval.metrics import pass_at_k
from satseq.rewards.turn_rewards import grade_episodes
from satseq.rollout.types import SamplingParams
from satseq.workflows.relay import RelayWorkflow
from satseq.workflows.single import SingleWorkflow


def _per_problem(episodes, n: int, key) -> list[list[bool]]:
    rows = [[] for _ in range(len(episodes) // n)]
    for ep in episodes:
        rows[ep.group].append(bool(key(ep)))
    return rows


def _summary(rows: list[list[bool]], ks: tuple[int, ...]) -> dict:
    n = len(rows[0])
    out = {"acc": sum(sum(r) for r in rows) / (len(rows) * n)}
    for k in ks:
        if k <= n:
            out[f"pass@{k}"] = sum(pass_at_k(n, sum(r), k) for r in rows) / len(rows)
    return out


def evaluate_relay(pool, agents: list[str] | dict[str, str], fmt, engine, problems, *, n: int = 1, sampling: SamplingParams,
                   generator: torch.Generator | None = None, ks: tuple[int, ...] = (1,)) -> dict:
    episodes = RelayWorkflow(agents, fmt, sampling).rollout(problems, pool, engine, group_size=n, generator=generator)
    grade_episodes(episodes)
    out = {"vote": _summary(_per_problem(episodes, n, lambda ep: ep.prediction_correct), ks)}
    for k, name in enumerate(agents):
        out[name] = _summary(_per_problem(episodes, n, lambda ep, k=k: ep.turns[k].correct), ks)
    out["episodes"] = episodes
    return out


def evaluate_single(pool, agent: str, fmt, engine, problems, *, n: int = 1, sampling: SamplingParams,
                    generator: torch.Generator | None = None, ks: tuple[int, ...] = (1,)) -> dict:
    episodes = SingleWorkflow(agent, fmt, sampling).rollout(problems, pool, engine, group_size=n, generator=generator)
    grade_episodes(episodes)
    out = _summary(_per_problem(episodes, n, lambda ep: ep.turns[0].correct), ks)
    out["episodes"] = episodes
    return out


def evaluate_multiturn(workflow, pool, engine, problems, *, metrics, n: int = 1,
                       generator: torch.Generator | None = None, sampling: SamplingParams | None = None) -> dict:
    """Run a multi-turn workflow ``n`` times per problem; ``metrics(episodes) -> dict`` is the method's
    (PAG: Acc@t1, Acc@final, verifier accuracy...; MLMT: accuracy after turn 1 and 3, coach accuracy...)."""
    episodes = workflow.rollout(problems, pool, engine, group_size=n, generator=generator, sampling=sampling)
    return metrics(episodes)
