"""SAT-Seq's PAC certificate (satseq ``satseq.methods.sat_seq.monitor.certificate``) from verl data.

The certificate is a one-sided lower bound on the team's expected score J from i.i.d. per-prompt units
in [0, 1] (the per-prompt mean vote correctness, or normalised episode reward, of fresh relay episodes).
satseq's :func:`~satseq.methods.sat_seq.monitor.certificate.bound` gives both one-sided bounds (KL-Chernoff,
each at level 1 - delta); :func:`certify` returns the same dictionary as satseq's ``CertificateBatch.certify``,
so satseq's ``certificate_metrics`` names the logged keys (``certificate/vote_lower``, and with the
warm start's bounds the certified improvement ``certificate/vote_improvement_lower``).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping, Sequence

from satseq.methods.sat_seq.monitor.certificate import bound
from satseq.methods.sat_seq.monitor.certificate_batch import certificate_metrics
from satseq.rewards.grade import is_equivalent
from satseq.rewards.voting import majority_vote

__all__ = ["certificate_metrics", "certify", "per_prompt_means", "relay_scores"]


def relay_scores(agent: Sequence[str], episode: Sequence, uid: Sequence, answers: Sequence[str | None],
                 ground_truth: Sequence, turn_reward: Sequence[float], agents: Sequence[str]
                 ) -> dict[str, list[float]]:
    """The certificate's i.i.d. units from relay rows (one row per agent turn): per prompt, the mean over
    its episodes of the team prediction's correctness (satseq's majority vote over the K agents' answers,
    graded with satseq's ``is_equivalent``) and of the episode reward / K (turn rewards in [0, 1])."""
    by_episode: dict = defaultdict(dict)
    for a, e, u, ans, gt, r in zip(agent, episode, uid, answers, ground_truth, turn_reward):
        by_episode[e][a] = (u, ans, gt, float(r))
    uids, vote, reward = [], [], []
    for e, turns in by_episode.items():
        if sorted(turns) != sorted(agents):
            raise ValueError(f"certificate: episode {e!r} lacks turns of {sorted(set(agents) - set(turns))}")
        u, _, gt, _ = turns[agents[0]]
        pred = majority_vote([turns[a][1] for a in agents])
        uids.append(u)
        vote.append(float(pred is not None and is_equivalent(pred, str(gt))))
        reward.append(min(max(sum(turns[a][3] for a in agents) / len(agents), 0.0), 1.0))
    return {"vote": per_prompt_means(uids, vote), "reward": per_prompt_means(uids, reward)}


def per_prompt_means(uids: Iterable, values: Iterable[float]) -> list[float]:
    """The mean of ``values`` per prompt uid (one i.i.d. unit per prompt), in first-seen order."""
    sums: dict = defaultdict(float)
    counts: dict = defaultdict(int)
    for u, v in zip(uids, values):
        sums[u] += float(v)
        counts[u] += 1
    return [sums[u] / counts[u] for u in sums]


def certify(scores: Mapping[str, Sequence[float]], delta: float) -> dict[str, dict]:
    """Per score name: the mean, the lower bound at 1 - delta, and both bounds at 1 - delta/2."""
    out = {}
    for key, values in scores.items():
        full, half = bound(values, delta), bound(values, delta / 2)
        out[key] = {"mean": full.mean, "lower": full.lower, "lower_half": half.lower, "upper_half": half.upper,
                    "n": full.n}
    return out
