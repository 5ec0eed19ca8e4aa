"""PAC certificate: formula by hand, nothing-changed case, and validity on an exactly solvable problem."""
from __future__ import annotations

import math

import pytest
import torch

from satseq.methods.sat_seq.adv.seqaware import seqaware_advantages
from satseq.methods.sat_seq.monitor.certificate import AgentCertInput, pac_certificate


def test_formula_by_hand():
    c = torch.tensor([1.0, 0.5, 1.0, 0.8])
    w = torch.tensor([0.5, 3.0, 1.0, 2.5])  # two ratios above w_max = 2
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0])
    a1 = AgentCertInput("a1", c, w, adv, kl_q=0.02)
    a2 = AgentCertInput("a2", torch.ones(4), torch.ones(4), torch.tensor([0.5, -0.5, 1.0, -1.0]), kl_q=0.0, kl_max=0.0)
    cert = pac_certificate([a1, a2], num_turns=3, group_size=4, quantile=0.9, delta=0.1, w_max=2.0, A_max=2.0)
    dp = 0.1 / 4
    lg = math.log(2 / dp)
    x = [1 * 0.5 * 1, 0.5 * 2 * -1, 1 * 1 * 0.5, 0.8 * 2 * 2]
    mean = sum(x) / 4
    var = sum((v - mean) ** 2 for v in x) / 3
    t1 = cert.agents[0]
    assert t1.S == pytest.approx(mean)
    tau = math.sqrt(0.01) + 0.1
    assert t1.tau == pytest.approx(tau) and t1.eps == pytest.approx(2.0)
    assert t1.OCC == pytest.approx(2.0 * 3 * 2 * tau)
    assert t1.bias_cap == pytest.approx(2.0 * (1.0 + 0.5) / 4)
    assert t1.BIAS == pytest.approx(2.0 * 1.5 / 4 + math.sqrt(lg / 8))
    assert t1.FS == pytest.approx(math.sqrt(2 * var * lg / 4) + 7 * 8.0 * lg / 9)
    assert t1.bound == pytest.approx(t1.S - t1.OCC - t1.BIAS - t1.FS)
    t2 = cert.agents[1]
    assert t2.S == pytest.approx(0.0) and t2.OCC == 0.0 and t2.tau == 0.0  # kl_max = 0 -> no TV
    assert cert.lower_bound == pytest.approx(t1.bound + t2.bound)
    assert cert.delta_prime == pytest.approx(dp)
    m = cert.to_metrics()
    assert m["certificate/lower_bound"] == cert.lower_bound and m["certificate/a1/FS"] == t1.FS


def test_nothing_changed_gives_minus_bias_plus_fs():
    g = torch.Generator().manual_seed(0)
    E, K, G = 32, 3, 4
    r = torch.randint(0, 2, (E, K), generator=g).double()
    adv = seqaware_advantages(r, torch.arange(E) // G, gamma=1.0, lam=1.0).raw
    ones = torch.ones(E, dtype=torch.float64)
    agents = [AgentCertInput(f"agent_{k}", ones, ones, adv[:, k], kl_q=0.0, kl_max=0.0) for k in range(K)]
    cert = pac_certificate(agents, num_turns=K, group_size=G, quantile=0.99, delta=0.05, w_max=2.0, A_max=3.0)
    for t in cert.agents:
        assert abs(t.S) < 1e-12  # group-centred advantages, w = c = 1
        assert t.OCC == 0.0 and t.bias_cap == 0.0
    assert cert.lower_bound == pytest.approx(-sum(t.BIAS + t.FS for t in cert.agents))
    assert cert.lower_bound < 0
    # without KL_max only the quantile is known: tau = 1 - q, OCC = eps K (K-1) (1 - q)
    agents = [AgentCertInput(a.name, a.c, a.w, a.adv, kl_q=0.0) for a in agents]
    cert2 = pac_certificate(agents, num_turns=K, group_size=G, quantile=0.99, delta=0.05, w_max=2.0, A_max=3.0)
    occ = [float(adv[:, k].abs().max()) * K * (K - 1) * 0.01 for k in range(K)]
    assert [t.OCC for t in cert2.agents] == pytest.approx(occ)
    assert cert2.lower_bound == pytest.approx(cert.lower_bound - sum(occ))


# ---------------------------------------------------------------- validity on an exact 2-agent, 2-turn problem
# Contexts x (uniform); agent 1 picks a1 ~ pi1(.|x) from m actions, reward r1 ~ Bernoulli(mu1[x, a1]);
# agent 2 sees a1 and picks a2 ~ pi2(.|x, a1), reward r2 ~ Bernoulli(mu2[x, a1, a2]).
# J(pi) = E_x sum_a1 pi1 (mu1 + sum_a2 pi2 mu2), exact by enumeration.


def _trial(g: torch.Generator, X: int = 4, m: int = 3, G: int = 64, q: float = 0.99, delta: float = 0.05):
    f64 = torch.float64
    th1, th2 = torch.randn(X, m, generator=g, dtype=f64), torch.randn(X, m, m, generator=g, dtype=f64)
    mu1, mu2 = torch.rand(X, m, generator=g, dtype=f64), torch.rand(X, m, m, generator=g, dtype=f64)
    p1, p2 = th1.softmax(-1), th2.softmax(-1)
    Q1 = mu1 + (p2 * mu2).sum(-1)
    # moves toward better actions (negative steps are harmful moves), plus noise; steps vary per trial
    e1, e2 = (torch.rand(2, generator=g, dtype=f64) * 6.0 - 2.0).tolist()
    th1n = th1 + e1 * (Q1 - Q1.mean(-1, keepdim=True)) + 0.3 * abs(e1) * torch.randn(X, m, generator=g, dtype=f64)
    th2n = th2 + e2 * (mu2 - mu2.mean(-1, keepdim=True)) + 0.3 * abs(e2) * torch.randn(X, m, m, generator=g, dtype=f64)
    q1, q2 = th1n.softmax(-1), th2n.softmax(-1)

    def J(a, b):
        return float((a * (mu1 + (b * mu2).sum(-1))).sum(-1).mean())

    dJ = J(q1, q2) - J(p1, p2)
    x = torch.arange(X).repeat_interleave(G)
    a1 = torch.multinomial(p1[x], 1, generator=g).squeeze(-1)
    a2 = torch.multinomial(p2[x, a1], 1, generator=g).squeeze(-1)
    r = torch.stack([torch.bernoulli(mu1[x, a1], generator=g), torch.bernoulli(mu2[x, a1, a2], generator=g)], 1)
    adv = seqaware_advantages(r, x, gamma=1.0, lam=1.0).raw
    w1, w2 = q1[x, a1] / p1[x, a1], q2[x, a1, a2] / p2[x, a1, a2]
    kl1 = (q1 * (q1.log() - p1.log())).sum(-1)[x]  # exact per visited state
    kl2 = (q2 * (q2.log() - p2.log())).sum(-1)[x, a1]
    agents = [
        AgentCertInput("agent_1", torch.ones_like(w1), w1, adv[:, 0], float(torch.quantile(kl1, q)), float(kl1.max())),
        AgentCertInput("agent_2", w1.clamp(max=1.0), w2, adv[:, 1], float(torch.quantile(kl2, q)), float(kl2.max())),
    ]
    cert = pac_certificate(agents, num_turns=2, group_size=G, quantile=q, delta=delta, w_max=2.0, A_max=2.0)
    return cert, dJ


def test_certificate_is_a_valid_lower_bound_on_exact_problem():
    g = torch.Generator().manual_seed(1234)
    delta, n = 0.05, 200
    res = [_trial(g, delta=delta) for _ in range(n)]
    L = torch.tensor([c.lower_bound for c, _ in res])
    dJ = torch.tensor([d for _, d in res])
    S = torch.tensor([sum(t.S for t in c.agents) for c, _ in res])
    assert (L <= dJ).double().mean() >= 1 - delta
    # the trials are informative: harmful moves occur, the estimate S tracks the true change,
    # and S alone (no penalty terms) would overstate the improvement in many trials
    assert (dJ < 0).double().mean() > 0.15 and dJ.max() > 0.3
    assert torch.corrcoef(torch.stack([S, dJ]))[0, 1] > 0.85
    assert (S - dJ).abs().mean() < 0.08
    assert (S > dJ).double().mean() > 0.2
