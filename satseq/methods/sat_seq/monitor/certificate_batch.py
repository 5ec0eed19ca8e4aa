"""The certificate batch: fresh episodes of the joint policy, scored for the PAC bound.

``CertificateBatch.draw(pool, stage)`` samples ``sat_seq.certificate.prompts`` prompts uniformly with
replacement from the certificate pool and ``sat_seq.certificate.samples`` relay episodes on each,
with a generator seeded from ``(seed, stage)`` only — so the batch never touches the training
sample stream (training is bit-identical with the certificate on or off) and a resumed run draws
the same batch. It returns, per prompt, the mean vote correctness and the mean normalised episode
reward: the i.i.d. [0, 1] units of :mod:`satseq.methods.sat_seq.monitor.certificate`.

Cost: ``prompts × samples`` relay episodes (K generations each) per certificate, drawn before the
first stage (the warm start, for the certified improvement), every ``certificate.every`` stages
and after the last stage.
"""
from __future__ import annotations

import torch

from satseq.methods.sat_seq.monitor.certificate import bound
from satseq.strategy import current as current_strategy


class CertificateBatch:
    def __init__(self, cfg, rt, workflow, assign_rewards, reward_max: float | None):
        c = cfg.sat_seq.certificate
        self.cfg, self.rt, self.workflow, self.assign = cfg, rt, workflow, assign_rewards
        self.prompts, self.samples, self.delta = c.prompts, c.samples, c.delta
        self.pool = rt.eval if c.pool == "eval" else rt.train
        self.reward_max = reward_max
        self.seed = cfg.seed

    def due(self, stage: int) -> bool:
        c = self.cfg.sat_seq.certificate
        last = stage == self.cfg.trainer.num_stages - 1
        return c.prompts > 0 and (last or (c.every > 0 and (stage + 1) % c.every == 0))

    def scores(self, stage: int) -> tuple[list[float], list[float]]:
        """Per-prompt mean vote correctness and normalised episode reward of a fresh batch."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_033 + 7 * (stage + 2))
        idx = torch.randint(len(self.pool), (self.prompts,), generator=gen).tolist()
        problems = [self.pool[i] for i in idx]
        # data parallel (torchrun): each rank rolls out and scores its block of prompts; the per-prompt
        # sums are then added over ranks (a prompt's episodes are all on one rank)
        strategy = current_strategy()
        episodes = strategy.rollout(self.workflow, problems, self.rt.pool, self.rt.engine, group_size=self.samples,
                                    generator=gen, gather=False)
        self.assign(episodes)
        vote = [0.0] * len(problems)
        reward = [0.0] * len(problems)
        r_max = self.reward_max or 1.0  # (reward scores are only used when reward_max is known)
        for ep in episodes:
            vote[ep.group] += float(ep.prediction_correct) / self.samples
            total = sum(t.reward for t in ep.turns)
            reward[ep.group] += min(max(total / r_max, 0.0), 1.0) / self.samples
        return strategy.all_reduce_sum(vote), strategy.all_reduce_sum(reward)

    def certify(self, stage: int) -> dict[str, dict]:
        """Per score (``vote``, and ``reward`` when its range is known): the batch mean, the lower
        bound at level 1 − δ (the certificate), and both bounds at 1 − δ/2 (for the improvement
        statement). Plain floats, so they can be checkpointed."""
        vote, reward = self.scores(stage)
        scores = {"vote": vote, **({"reward": reward} if self.reward_max else {})}
        out = {}
        for key, values in scores.items():
            full, half = bound(values, self.delta), bound(values, self.delta / 2)
            out[key] = {"mean": full.mean, "lower": full.lower, "lower_half": half.lower, "upper_half": half.upper,
                        "n": full.n}
        return out


def certificate_metrics(now: dict[str, dict], start: dict | None) -> dict:
    """``certificate/<score>_{mean,lower}`` and, with the warm start's bounds, the certified
    improvement ``certificate/<score>_improvement_lower`` = LB_{δ/2}(now) − UB_{δ/2}(start)."""
    out: dict = {}
    for key, b in now.items():
        out[f"certificate/{key}_mean"] = b["mean"]
        out[f"certificate/{key}_lower"] = b["lower"]
        if start is not None and key in start:
            out[f"certificate/{key}_improvement_lower"] = b["lower_half"] - start[key]["upper_half"]
        out["certificate/n"] = b["n"]
    return out
