"""Quantile KL check with the backtracking line search: the step shrunk along the proposal, exact
restore of parameters and Adam state, the beta schedule."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from satseq.algos.kl import exact_kl, kl_quantile
from satseq.errors import ConfigError
from satseq.methods.sat_seq.kl.quantile_kl_ctrl import QuantileKLController


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    X = torch.randn(32, 4)
    y = torch.randint(0, 3, (32,))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    return model, X, y, opt


def _train(model, opt, X, y, steps, beta=0.0, ref=None):
    for _ in range(steps):
        opt.zero_grad()
        logits = model(X)
        loss = F.cross_entropy(logits, y)
        if ref is not None:
            loss = loss + beta * exact_kl(logits, ref).mean()
        loss.backward()
        opt.step()


def _opt_tensors(opt):
    return [(k, v.clone()) for st in opt.state.values() for k, v in sorted(st.items())]


def _assert_state_equal(model, opt, p0, o0):
    for p, q in zip(model.parameters(), p0):
        assert torch.equal(p, q)
    o1 = _opt_tensors(opt)
    assert [k for k, _ in o1] == [k for k, _ in o0] and {k for k, _ in o0} == {"exp_avg", "exp_avg_sq", "step"}
    for (_, a), (_, b) in zip(o1, o0):
        assert torch.equal(a, b)


def test_always_too_far_is_rejected_and_restored_bit_for_bit():
    model, X, y, opt = _setup()
    _train(model, opt, X, y, steps=3)  # the optimizer has real state (step 3) before the stage
    p0 = [p.detach().clone() for p in model.parameters()]
    o0 = _opt_tensors(opt)
    with torch.no_grad():
        ref = model(X).clone()
    betas: list[float] = []

    def propose(beta):
        _assert_state_equal(model, opt, p0, o0)  # the proposal starts from the snapshot
        betas.append(beta)
        _train(model, opt, X, y, steps=4, beta=beta, ref=ref)

    ctrl = QuantileKLController(target_kl=1e-12, quantile=0.99, max_backtracks=5)
    res = ctrl.run(list(model.parameters()), opt, 0.01, propose, lambda: exact_kl(model(X), ref))
    assert not res.accepted and res.backtracks == 5 and res.step_scale == 0.0
    assert betas == [0.01]  # one proposal; the retries shrink it instead of proposing again
    assert [s for s, _ in res.attempts] == pytest.approx([0.5**j for j in range(6)])
    assert all(q > 1e-12 for _, q in res.attempts)
    assert res.beta == pytest.approx(0.01 * 1.5**5)
    _assert_state_equal(model, opt, p0, o0)
    # the restored optimizer is live: the next step is exactly what it would have been without the check
    twin, X2, y2, twin_opt = _setup()
    _train(twin, twin_opt, X2, y2, steps=4)
    _train(model, opt, X, y, steps=1)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


def test_accepted_on_first_try_keeps_the_proposal():
    model, X, y, opt = _setup(1)
    with torch.no_grad():
        ref = model(X).clone()
    res = QuantileKLController(target_kl=10.0).run(
        list(model.parameters()), opt, 0.5, lambda b: _train(model, opt, X, y, 5, b, ref),
        lambda: exact_kl(model(X), ref))
    assert res.accepted and res.backtracks == 0 and res.beta == 0.5 and len(res.attempts) == 1
    assert res.step_scale == 1.0
    kl = exact_kl(model(X), ref).detach()
    assert res.kl_quantile == pytest.approx(torch.quantile(kl.double(), 0.99).item())
    assert res.kl_mean == pytest.approx(kl.mean().item()) and res.kl_quantile > 0
    assert int(opt.state[next(iter(model.parameters()))]["step"]) == 5  # the proposal's steps stand


def test_a_too_large_step_is_shrunk_along_the_proposal_until_it_passes():
    model, X, y, opt = _setup(0)
    _train(model, opt, X, y, steps=2)
    p0 = [p.detach().clone() for p in model.parameters()]
    o0, o_dict = _opt_tensors(opt), copy.deepcopy(opt.state_dict())
    with torch.no_grad():
        ref = model(X).clone()
    _train(model, opt, X, y, 20)  # where the full proposal lands
    full = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        full_kl = kl_quantile(exact_kl(model(X), ref), 0.99)
        for p, q in zip(model.parameters(), p0):
            p.copy_(q)
    opt.load_state_dict(o_dict)  # back to the snapshot: now let the controller do it
    target = full_kl / 20  # far below the full step's KL: it must be shrunk a few times
    res = QuantileKLController(target_kl=target, quantile=0.99, max_backtracks=8, alpha=0.5).run(
        list(model.parameters()), opt, 0.5, lambda b: _train(model, opt, X, y, 20),
        lambda: exact_kl(model(X), ref))
    assert res.accepted and res.backtracks >= 2 and res.step_scale == 0.5**res.backtracks
    assert res.kl_quantile <= target and res.beta == pytest.approx(0.5 * 1.5**res.backtracks)
    qs = [q for _, q in res.attempts]
    assert all(a > b for a, b in zip(qs, qs[1:])) and all(q > target for q in qs[:-1])
    for p, q0, q1 in zip(model.parameters(), p0, full):  # θ_cur + α^j Δ exactly
        assert torch.allclose(p, q0 + res.step_scale * (q1 - q0), atol=1e-7)
    o1 = _opt_tensors(opt)  # a shrunk step keeps the snapshot's optimizer state
    assert [k for k, _ in o1] == [k for k, _ in o0] and all(torch.equal(a, b) for (_, a), (_, b) in zip(o1, o0))


def test_nan_kl_fails_the_check_and_quantile_helper():
    model, X, y, opt = _setup()
    res = QuantileKLController(target_kl=1.0, max_backtracks=1).run(
        list(model.parameters()), opt, 1.0, lambda b: None, lambda: torch.tensor([0.0, float("nan")]))
    assert not res.accepted and len(res.attempts) == 2  # the proposal and one shrunk step
    x = torch.rand(1001, generator=torch.Generator().manual_seed(0))
    for q in (0.0, 0.5, 0.99, 1.0):
        assert kl_quantile(x, q) == pytest.approx(torch.quantile(x.double(), q).item(), abs=1e-12)


def test_config_errors():
    with pytest.raises(ConfigError, match="target_kl"):
        QuantileKLController(target_kl=0.0)
    with pytest.raises(ConfigError, match="quantile"):
        QuantileKLController(quantile=1.5)
    with pytest.raises(ConfigError, match="max_backtracks"):
        QuantileKLController(max_backtracks=-1)
    with pytest.raises(ConfigError, match="backtrack_alpha"):
        QuantileKLController(alpha=1.0)


# ------------------------------------------------------------------ the stability study's ablations
def test_mean_statistic_accepts_a_heavy_tail_the_quantile_rejects():
    """980 states with KL 0 and 20 with KL 1: mean 0.02, q99 1.0; target 0.05."""
    kl = torch.cat([torch.zeros(980), torch.ones(20)])
    model, X, y, opt = _setup()
    run = dict(params=list(model.parameters()), optimizer=opt, beta=0.1, propose=lambda b: None, measure_kl=lambda: kl)
    q = QuantileKLController(target_kl=0.05, max_backtracks=2).run(**run)
    m = QuantileKLController(target_kl=0.05, max_backtracks=2, statistic="mean").run(**run)
    assert not q.accepted and q.kl_quantile == pytest.approx(1.0)
    assert m.accepted and m.backtracks == 0 and m.kl_mean == pytest.approx(0.02) and m.kl_quantile == pytest.approx(1.0)


def test_without_the_check_every_proposal_stands():
    model, X, y, opt = _setup(2)
    twin, _, _, twin_opt = _setup(2)
    with torch.no_grad():
        ref = model(X).clone()
    res = QuantileKLController(target_kl=1e-12, check=False).run(
        list(model.parameters()), opt, 0.5, lambda b: _train(model, opt, X, y, 6), lambda: exact_kl(model(X), ref))
    _train(twin, twin_opt, X, y, 6)
    assert res.accepted and res.backtracks == 0 and res.step_scale == 1.0 and res.kl_quantile > 1e-12
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


def test_beta_growth_alone_proposes_again_from_the_snapshot():
    """on_fail=beta: each failed check restores θ_cur and Adam's state and proposes again with β × 1.5;
    the step is never shrunk. Here the third proposal passes."""
    model, X, y, opt = _setup()
    _train(model, opt, X, y, steps=3)
    p0 = [p.detach().clone() for p in model.parameters()]
    o0 = _opt_tensors(opt)
    betas: list[float] = []

    def propose(beta):
        _assert_state_equal(model, opt, p0, o0)
        betas.append(beta)
        _train(model, opt, X, y, steps=4)

    res = QuantileKLController(target_kl=0.4, max_backtracks=5, on_fail="beta").run(
        list(model.parameters()), opt, 0.01, propose, lambda: torch.tensor([1.0 / len(betas)]))
    assert res.accepted and res.backtracks == 2 and res.step_scale == 1.0
    assert betas == pytest.approx([0.01, 0.015, 0.0225]) and res.beta == pytest.approx(0.0225)
    twin, X2, y2, twin_opt = _setup()
    _train(twin, twin_opt, X2, y2, steps=7)  # the snapshot's 3 steps and the accepted proposal's 4
    assert all(torch.allclose(a, b, atol=0, rtol=0) for a, b in zip(model.parameters(), twin.parameters()))
    # and a proposal that never passes is rejected with θ_cur and the optimizer restored
    res = QuantileKLController(target_kl=1e-12, max_backtracks=2, on_fail="beta").run(
        list(model.parameters()), opt, 0.01, lambda b: _train(model, opt, X, y, steps=2), lambda: torch.ones(3))
    assert not res.accepted and res.step_scale == 0.0


def test_ablation_options_are_checked():
    with pytest.raises(ConfigError, match="statistic"):
        QuantileKLController(statistic="median")
    with pytest.raises(ConfigError, match="on_fail"):
        QuantileKLController(on_fail="grow")
