"""SAT-Seq pieces: turn-level GAE, sequence-ratio loss, truncated IS, agent scheduler."""
from __future__ import annotations

import math
import statistics

import pytest
import torch

from satseq.algos import get_adv, get_loss
from satseq.errors import ConfigError
from satseq.methods.sat_seq.adv.seqaware import seqaware_advantages
from satseq.methods.sat_seq.agent_scheduler import AgentScheduler
from satseq.methods.sat_seq.data.reweighting import episode_log_ratio, sequence_log_ratio, truncated_is_weight
from satseq.methods.sat_seq.loss.seq_ratio_loss import seq_ratio_loss

# ---------------------------------------------------------------- seqaware GAE


def _seqaware_ref(r, gids, gamma, lam, mask, A_clip, eps=1e-6):
    E, K = len(r), len(r[0])
    n = [sum(mask[e]) for e in range(E)]
    G = [[0.0] * K for _ in range(E)]
    for e in range(E):
        for k in reversed(range(n[e])):
            G[e][k] = r[e][k] + (gamma * G[e][k + 1] if k + 1 < n[e] else 0.0)

    def members(e, k):
        return [f for f in range(E) if gids[f] == gids[e] and mask[f][k]]

    V = [[statistics.mean(G[f][k] for f in members(e, k)) if mask[e][k] else 0.0 for k in range(K)] for e in range(E)]
    A = [[0.0] * K for _ in range(E)]
    for e in range(E):
        for k in range(n[e]):
            A[e][k] = sum((gamma * lam) ** l * (r[e][k + l] + (gamma * V[e][k + l + 1] if k + l + 1 < n[e] else 0.0)
                                                 - V[e][k + l]) for l in range(n[e] - k))
    N = [[0.0] * K for _ in range(E)]
    for e in range(E):
        for k in range(n[e]):
            grp = [A[f][k] for f in members(e, k)]
            if len(grp) > 1 and max(grp) != min(grp):
                z = (A[e][k] - statistics.mean(grp)) / (statistics.stdev(grp) + eps)
                N[e][k] = max(-A_clip, min(A_clip, z))
    return G, V, A, N


@pytest.mark.parametrize("use_mask", [False, True])
def test_seqaware_matches_loop_reference(use_mask):
    g = torch.Generator().manual_seed(0)
    E, K = 11, 3
    gids = torch.tensor([0, 0, 0, 0, 5, 5, 5, 2, 2, 2, 9])
    rewards = torch.randint(0, 2, (E, K), generator=g).double() + torch.rand(E, K, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, K + 1, (E,), generator=g) if use_mask else torch.full((E,), K)
    mask = torch.arange(K)[None, :] < lengths[:, None]
    out = seqaware_advantages(rewards, gids, gamma=0.9, lam=0.7, mask=mask if use_mask else None, A_clip=1.2)
    G, V, A, N = _seqaware_ref(rewards.tolist(), gids.tolist(), 0.9, 0.7, mask.int().tolist(), 1.2)
    for got, ref in ((out.returns, G), (out.values, V), (out.raw, A), (out.normalized, N)):
        assert torch.allclose(got, torch.tensor(ref, dtype=torch.float64), atol=1e-10)
    assert out.normalized.abs().max() <= 1.2 + 1e-12 and out.normalized.abs().max() > 1.0  # clip is exercised


def test_seqaware_hand_case():
    # Two episodes of one prompt, K=2, gamma=lam=0.5; rewards (1,0) and (0,1).
    # G = (1, 0), (0.5, 1); V = (0.75, 0.5); delta_2 = -/+0.5; delta_1 = 1 + .25 - .75 = .5, -.5
    # A_1 = delta_1 + .25 delta_2 = .375, -.375; normalized +-1/sqrt(2), clipped at 0.5
    out = seqaware_advantages(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([4, 4]), gamma=0.5, lam=0.5,
                              A_clip=0.5)
    assert torch.allclose(out.returns, torch.tensor([[1.0, 0.0], [0.5, 1.0]]))
    assert torch.allclose(out.values, torch.tensor([[0.75, 0.5], [0.75, 0.5]]))
    assert torch.allclose(out.deltas, torch.tensor([[0.5, -0.5], [-0.5, 0.5]]))
    assert torch.allclose(out.raw, torch.tensor([[0.375, -0.5], [-0.375, 0.5]]))
    assert torch.allclose(out.normalized, torch.tensor([[0.5, -0.5], [-0.5, 0.5]]))
    big = seqaware_advantages(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([4, 4]), gamma=0.5, lam=0.5)
    assert torch.allclose(big.normalized.abs(), torch.full((2, 2), 1 / math.sqrt(2)), atol=1e-5)
    assert get_adv("seqaware") is seqaware_advantages


def test_seqaware_lam1_is_return_minus_baseline_and_groups_centered():
    g = torch.Generator().manual_seed(1)
    r = torch.rand(12, 3, generator=g, dtype=torch.float64)
    gids = torch.arange(12) // 4
    out = seqaware_advantages(r, gids, gamma=0.97, lam=1.0)
    assert torch.allclose(out.raw, out.returns - out.values)
    out = seqaware_advantages(r, gids, gamma=0.97, lam=0.8)
    assert torch.allclose(out.raw.view(3, 4, 3).mean(1), torch.zeros(3, 3, dtype=torch.float64), atol=1e-12)


# ---------------------------------------------------------------- sequence-ratio loss


def _sat_ref(logp, cur, adv, mask, c, kl, beta, eps, mode):
    total, nseq = 0, 0
    for b in range(logp.shape[0]):
        idx = [t for t in range(logp.shape[1]) if mask[b, t]]
        if not idx:
            continue
        nseq += 1
        if mode == "token":
            surr = sum(torch.minimum(torch.exp(logp[b, t] - cur[b, t]) * adv[b],
                                     torch.clamp(torch.exp(logp[b, t] - cur[b, t]), 1 - eps, 1 + eps) * adv[b])
                       for t in idx) / len(idx)
        else:
            s = sum(logp[b, t] - cur[b, t] for t in idx)
            r = torch.exp(s / len(idx) if mode == "sequence" else s)
            surr = torch.minimum(r * adv[b], torch.clamp(r, 1 - eps, 1 + eps) * adv[b])
        klb = sum(kl[b, t] for t in idx) / len(idx)
        total = total - c[b] * surr + beta * klb
    return total / nseq


@pytest.mark.parametrize("mode", ["sequence", "token", "product"])
def test_seq_ratio_loss_value_and_grad(mode):
    g = torch.Generator().manual_seed(2)
    B, T = 6, 5
    cur = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    logp = (cur + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.15).requires_grad_()
    adv = torch.tensor([1.0, -1.5, 0.3, 2.0, -0.7, 1.0], dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 3:] = False
    mask[5] = False  # an empty sequence is left out
    c = torch.tensor([1.0, 0.5, 0.9, 0.2, 1.0, 1.0], dtype=torch.float64)
    kl = torch.rand(B, T, generator=g, dtype=torch.float64) * 0.1
    loss, met = seq_ratio_loss(logp, cur, adv, mask, is_weight=c, kl=kl, beta=0.3, clip_low=0.1, clip_high=0.1, ratio=mode)
    ref = _sat_ref(logp, cur, adv, mask, c, kl, 0.3, 0.1, mode)
    assert torch.allclose(loss, ref)
    (g1,) = torch.autograd.grad(loss, logp)
    (g2,) = torch.autograd.grad(ref, logp)
    assert torch.allclose(g1, g2)
    assert g1.abs().sum() > 0
    assert 0.0 < met["clipfrac"] < 1.0
    assert abs(met["kl_mean"] - sum(kl[b][mask[b]].mean().item() for b in range(5)) / 5) < 1e-12
    assert get_loss("sat_seq") is seq_ratio_loss


def test_seq_ratio_loss_hand_case_and_is_weight_detached():
    # one sequence, 2 tokens, mean log-ratio 0.5 -> r = e^0.5 > 1.2, A = 2: clipped, surr = 1.2 * 2
    logp = torch.tensor([[0.4, 0.6]], requires_grad=True)
    c = torch.tensor([0.5], requires_grad=True)
    loss, met = seq_ratio_loss(logp, torch.zeros(1, 2), torch.tensor([2.0]), torch.ones(1, 2), is_weight=c,
                               kl=torch.tensor([[0.2, 0.4]]), beta=0.5, clip_low=0.2, clip_high=0.2)
    assert abs(loss.item() - (-0.5 * 1.2 * 2 + 0.5 * 0.3)) < 1e-6
    assert met["clipfrac"] == 1.0 and abs(met["ratio_mean"] - math.exp(0.5)) < 1e-6
    loss.backward()
    assert c.grad is None  # c is detached
    assert torch.allclose(logp.grad, torch.zeros(1, 2))  # clipped branch: no policy gradient
    with pytest.raises(ConfigError, match="unknown sat_seq ratio"):
        seq_ratio_loss(logp, logp, torch.ones(1), torch.ones(1, 2), ratio="geometric")


# ---------------------------------------------------------------- truncated IS


def test_truncated_is_weight():
    assert torch.equal(truncated_is_weight([], num_episodes=3), torch.ones(3))
    a = torch.tensor([0.3, -0.2, -1.0, 5.0])
    b = torch.tensor([-0.5, 0.1, 0.4, -4.0])
    ref = torch.tensor([min(1.0, math.exp(x + y)) for x, y in zip(a.tolist(), b.tolist())])
    assert torch.allclose(truncated_is_weight([a, b]), ref)
    assert torch.allclose(truncated_is_weight(torch.stack([a, b])), ref)
    assert torch.equal(truncated_is_weight(torch.zeros(0, 4)), torch.ones(4))
    x = torch.tensor([-0.3, 0.2], requires_grad=True)
    assert not truncated_is_weight([x]).requires_grad
    with pytest.raises(ValueError):
        truncated_is_weight([])


def test_sequence_and_episode_log_ratio():
    new = torch.tensor([[0.1, 0.2, 9.0], [0.5, -0.5, 0.3]], requires_grad=True)
    cur = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    s = sequence_log_ratio(new, cur, mask)
    assert torch.allclose(s, torch.tensor([0.3, 0.3])) and not s.requires_grad
    # turns 0 and 1 both belong to episode 1 of 3
    assert torch.allclose(episode_log_ratio(s, torch.tensor([1, 1]), 3), torch.tensor([0.0, 0.6, 0.0]))


# ---------------------------------------------------------------- scheduler


def test_scheduler_modes():
    names = ["agent_1", "agent_2", "agent_3"]
    assert AgentScheduler(names, "fixed").order(7) == names
    rr = AgentScheduler(names, "round_robin")
    assert [rr.order(s) for s in range(4)] == [names, names[1:] + names[:1], names[2:] + names[:2], names]
    gr = AgentScheduler(names, "greedy")
    assert gr.order(0, {"agent_1": 0.1, "agent_2": 0.9, "agent_3": 0.5}) == ["agent_2", "agent_3", "agent_1"]
    assert gr.order(0, {"agent_1": 0.5, "agent_2": 0.1, "agent_3": 0.5}) == ["agent_1", "agent_3", "agent_2"]
    with pytest.raises(ValueError, match="agent_3"):
        gr.order(0, {"agent_1": 0.1, "agent_2": 0.2})


def test_scheduler_random_is_stateless_and_varies():
    names = [f"a{i}" for i in range(5)]
    s1, s2 = AgentScheduler(names, "random", seed=3), AgentScheduler(names, "random", seed=3)
    orders = [s1.order(s) for s in range(20)]
    assert all(sorted(o) == names for o in orders)
    assert [s2.order(s) for s in reversed(range(20))] == orders[::-1]  # resumed / any call order
    assert len({tuple(o) for o in orders}) > 10
    assert [AgentScheduler(names, "random", seed=4).order(s) for s in range(20)] != orders


def test_scheduler_config_errors():
    with pytest.raises(ConfigError, match="unknown agent scheduler mode 'sorted'"):
        AgentScheduler(["a"], "sorted")
    with pytest.raises(ConfigError, match="duplicate"):
        AgentScheduler(["a", "a"])
    with pytest.raises(ConfigError, match="empty"):
        AgentScheduler([])
