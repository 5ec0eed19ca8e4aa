"""Registries, GRPO advantages, KL estimators, agg_loss, PPO and GSPO losses vs slow references."""
from __future__ import annotations

import math
import statistics
import importlib
import sys

import pytest
import torch

from satseq.algos import ADV_ESTIMATORS, POLICY_LOSSES, get_adv, get_loss, register_adv
from satseq.algos.advantages import dr_grpo_advantages, grpo_advantages
from satseq.algos.kl import exact_kl, exact_kl_chunked, kl_penalty
from satseq.algos.losses import agg_loss, gspo_loss, ppo_clip_loss
from satseq.errors import ConfigError

# ---------------------------------------------------------------- registry


def test_registries_populated_and_lookup():
    from satseq.registry import discover

    discover()  # the methods register their own formulas (seqaware, sat_seq, apo)
    assert {"grpo", "dr_grpo", "seqaware"} <= set(ADV_ESTIMATORS)
    assert {"ppo", "gspo", "sat_seq"} <= set(POLICY_LOSSES)
    assert get_adv("grpo") is grpo_advantages
    assert get_loss("ppo") is ppo_clip_loss


def test_unknown_names_are_config_errors():
    from satseq.registry import discover

    discover()
    with pytest.raises(ConfigError, match=r"unknown advantage estimator 'nope' \(known: dr_grpo, grpo, reinforce_pp, rloo, seqaware\)"):
        get_adv("nope")
    with pytest.raises(ConfigError, match=r"unknown policy loss 'x' \(known: .*ppo"):
        get_loss("x")


def test_duplicate_registration_rejected():
    with pytest.raises(ValueError, match="already registered"):
        register_adv("grpo")(lambda r, g: r)


def test_algos_never_imports_a_method_and_methods_register_their_own_formulas(monkeypatch):
    # Fresh copies of satseq.algos / satseq.methods; monkeypatch puts the original modules back afterwards.
    import satseq

    before = set(sys.modules)
    for name in [n for n in sys.modules if n.startswith(("satseq.algos", "satseq.methods", "satseq.registry"))]:
        monkeypatch.delitem(sys.modules, name)
    try:
        _fresh_import_checks(monkeypatch, satseq)
    finally:  # modules first imported here belong to the fresh copies: drop them
        for name in set(sys.modules) - before:
            del sys.modules[name]


def _fresh_import_checks(monkeypatch, satseq):
    monkeypatch.setattr(satseq, "algos", None, raising=False)
    monkeypatch.setattr(satseq, "methods", None, raising=False)
    importlib.import_module("satseq.algos")
    assert not [n for n in sys.modules if n.startswith("satseq.methods")]
    reg = sys.modules["satseq.algos.registry"]
    assert sorted(reg.ADV_ESTIMATORS) == ["dr_grpo", "grpo", "reinforce_pp", "rloo"] and sorted(reg.POLICY_LOSSES) == ["gspo", "ppo"]
    assert reg.ADV_ESTIMATORS["grpo"] is not grpo_advantages  # really a fresh import
    importlib.import_module("satseq.registry").discover()
    assert sorted(reg.ADV_ESTIMATORS) == ["dr_grpo", "grpo", "reinforce_pp", "rloo", "seqaware"]
    assert sorted(reg.POLICY_LOSSES) == ["apo", "gspo", "ppo", "sat_seq"]
    assert reg.loss_names("clipped_pg") == ["gspo", "ppo", "sat_seq"] and reg.loss_names("regression") == ["apo"]


def test_config_selects_registered_losses_and_refuses_unknown_names():
    from satseq.config import load_config
    from satseq.errors import ConfigError

    assert load_config(None, ["method=grpo", "ppo.policy_loss=gspo"]).ppo.policy_loss == "gspo"
    with pytest.raises(ConfigError, match=r"config key 'ppo.policy_loss': unknown clipped_pg policy loss 'nope' "
                                          r"\(known: gspo, ppo, sat_seq\)"):
        load_config(None, ["method=grpo", "ppo.policy_loss=nope"])
    with pytest.raises(ConfigError, match="config key 'grpo.adv_estimator': unknown advantage estimator 'x'"):
        load_config(None, ["method=grpo", "grpo.adv_estimator=x"])
    with pytest.raises(ConfigError, match="config key 'apo.loss'.*known: apo"):
        load_config(None, ["method=apo", "apo.loss=ppo"])
    with pytest.raises(ConfigError, match=r"config key 'method': unknown method 'nope' \(known: .*grpo"):
        load_config(None, ["method=nope"])


# ---------------------------------------------------------------- GRPO


def _grpo_ref(rewards: list[float], gids: list[int], norm: bool, eps: float) -> list[float]:
    out = []
    for i, r in enumerate(rewards):
        grp = [rewards[j] for j in range(len(rewards)) if gids[j] == gids[i]]
        if len(grp) == 1:
            out.append(0.0)
            continue
        a = r - statistics.mean(grp)
        out.append(a / (statistics.stdev(grp) + eps) if norm else a)
    return out


def test_grpo_matches_loop_reference():
    g = torch.Generator().manual_seed(0)
    gids = torch.tensor([3, 3, 3, 7, 7, 1, 9, 9, 9, 9, 3, 7])  # sizes 4, 3, 1, 4 (unsorted)
    rewards = torch.rand(len(gids), generator=g, dtype=torch.float64)
    for norm in (True, False):
        ref = _grpo_ref(rewards.tolist(), gids.tolist(), norm, 1e-6)
        got = grpo_advantages(rewards, gids, norm_by_std=norm)
        assert torch.allclose(got, torch.tensor(ref, dtype=torch.float64), atol=1e-12)
    assert torch.equal(dr_grpo_advantages(rewards, gids), grpo_advantages(rewards, gids, norm_by_std=False))


def test_grpo_hand_case_and_degenerate_groups():
    # group 0: rewards 1, 0 -> mean .5, unbiased std sqrt(.5); group 1: all equal; group 2: single
    adv = grpo_advantages(torch.tensor([1, 0, 1, 1, 1]), torch.tensor([0, 0, 1, 1, 2]), eps=0.0)
    s = 0.5 / math.sqrt(0.5)
    assert torch.allclose(adv, torch.tensor([s, -s, 0.0, 0.0, 0.0]))


# ---------------------------------------------------------------- KL


def _random_pair(seed: int, v: int = 6, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(v, generator=g, dtype=torch.float64) * scale
    lq = lp + torch.randn(v, generator=g, dtype=torch.float64) * 0.3
    return lp.log_softmax(-1), lq.log_softmax(-1)


def test_exact_kl_matches_loop_and_handles_zero_mass():
    lp, lq = _random_pair(1)
    ref = sum(math.exp(a) * (a - b) for a, b in zip(lp.tolist(), lq.tolist()))
    assert abs(exact_kl(lp, lq).item() - ref) < 1e-6
    # p puts no mass on the last token: that term counts 0, not NaN
    lp0 = torch.tensor([0.0, 0.0, -float("inf")])
    assert abs(exact_kl(lp0, torch.zeros(3)).item() - math.log(1.5)) < 1e-6
    assert exact_kl(lp, lp).abs().item() < 1e-6


def test_kl_estimators_expectations_exact():
    # E_{a~p}[k1] = E[k3] = KL(p||q) exactly (enumerate the categories); k3 >= 0 pointwise.
    for seed in range(5):
        lp, lq = _random_pair(seed)
        p, kl = lp.exp(), exact_kl(lp, lq).double()
        assert torch.allclose((p * kl_penalty(lp, lq, "k1")).sum(), kl, atol=1e-6)
        assert torch.allclose((p * kl_penalty(lp, lq, "k3")).sum(), kl, atol=1e-6)
        assert (kl_penalty(lp, lq, "k3") >= 0).all()
        assert torch.allclose(kl_penalty(lp, lq, "k2"), 0.5 * (lp - lq) ** 2)
        assert torch.allclose(kl_penalty(lp, lq, "abs"), (lp - lq).abs())
        # k2 is biased but second-order close for nearby distributions
        assert abs((p * kl_penalty(lp, lq, "k2")).sum() - kl) < 0.25 * kl


def test_kl_estimators_sampled_means():
    lp, lq = _random_pair(11)
    kl = exact_kl(lp, lq).item()
    g = torch.Generator().manual_seed(0)
    a = torch.multinomial(lp.exp(), 200_000, replacement=True, generator=g)
    for kind in ("k1", "k3"):
        est = kl_penalty(lp[a], lq[a], kind)
        se = est.std().item() / math.sqrt(a.numel())
        assert abs(est.mean().item() - kl) < 5 * se + 1e-9, kind
    assert kl_penalty(lp[a], lq[a], "k3").min() >= 0


def test_k3_clamps_and_unknown_kind():
    big = kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "k3")
    assert big.item() == 10.0
    assert torch.equal(kl_penalty(torch.tensor([0.3]), torch.tensor([0.1]), "low_var_kl"),
                       kl_penalty(torch.tensor([0.3]), torch.tensor([0.1]), "k3"))
    with pytest.raises(ConfigError, match="unknown KL estimator 'k9'"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k9")


def test_exact_kl_chunked_equals_full():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(10, 7, generator=g), torch.randn(10, 7, generator=g)
    got = exact_kl_chunked(lambda s, e: a[s:e], lambda s, e: b[s:e], 10, chunk=3)
    assert torch.allclose(got, exact_kl(a, b))


# ---------------------------------------------------------------- agg_loss


def _agg_ref(loss, mask, mode, norm=None):
    B, T = len(loss), len(loss[0])
    sums = [sum(loss[b][t] for t in range(T) if mask[b][t]) for b in range(B)]
    cnts = [sum(mask[b]) for b in range(B)]
    if mode == "token-mean":
        return sum(sums) / sum(cnts)
    if mode == "seq-mean-token-sum":
        return sum(sums) / B
    if mode == "seq-mean-token-mean":
        per = [s / c for s, c in zip(sums, cnts) if c > 0]
        return sum(per) / len(per)
    return sum(sums) / (T if norm is None else norm)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_agg_loss_modes(mode):
    g = torch.Generator().manual_seed(3)
    loss = torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]])
    ref = _agg_ref(loss.tolist(), mask.tolist(), mode)
    assert abs(agg_loss(loss, mask, mode).item() - ref) < 1e-12
    if mode == "seq-mean-token-sum-norm":
        assert abs(agg_loss(loss, mask, mode, norm_const=100).item() - _agg_ref(loss.tolist(), mask.tolist(), mode, 100)) < 1e-12
    with pytest.raises(ConfigError, match="unknown loss_agg_mode"):
        agg_loss(loss, mask, "seq-sum")


# ---------------------------------------------------------------- PPO / GSPO


def _ppo_ref(logp, old, adv, mask, lo, hi, c):
    """Per-token loop; returns seq-mean-token-mean of the dual-clipped PPO loss (autograd-able)."""
    B, T = logp.shape
    seqs = []
    for b in range(B):
        terms = []
        for t in range(T):
            if not mask[b, t]:
                continue
            r = torch.exp(logp[b, t] - old[b, t])
            a = float(adv[b])
            lt = torch.maximum(-a * r, -a * torch.clamp(r, 1 - lo, 1 + hi))
            if a < 0:
                lt = torch.minimum(lt, torch.tensor(-a * c, dtype=lt.dtype))
            terms.append(lt)
        seqs.append(sum(terms) / len(terms))
    return sum(seqs) / B


def test_ppo_clip_loss_value_grad_and_metrics():
    g = torch.Generator().manual_seed(4)
    B, T = 4, 6
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    logp = (old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.5).requires_grad_()
    adv = torch.tensor([1.5, -2.0, 0.7, -0.3], dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 4:] = False
    mask[2, 1:] = False
    loss, met = ppo_clip_loss(logp, old, adv, mask, 0.2, 0.28, agg_mode="seq-mean-token-mean")
    ref = _ppo_ref(logp, old, adv, mask, 0.2, 0.28, 3.0)
    assert torch.allclose(loss, ref)
    (g1,) = torch.autograd.grad(loss, logp)
    (g2,) = torch.autograd.grad(ref, logp)
    assert torch.allclose(g1, g2)
    # metrics by hand
    r = torch.exp(logp - old).detach()
    a = adv[:, None].expand(B, T)
    clipped = (-a * r.clamp(0.8, 1.28) > -a * r) & mask
    assert abs(met["clipfrac"] - clipped.sum().item() / mask.sum().item()) < 1e-12
    assert abs(met["ratio_mean"] - r[mask].mean().item()) < 1e-12
    assert abs(met["approx_kl"] - (old - logp.detach())[mask].mean().item()) < 1e-12
    # [B] and [B, T] advantages agree
    loss2, _ = ppo_clip_loss(logp, old, a, mask, 0.2, 0.28, agg_mode="seq-mean-token-mean")
    assert torch.allclose(loss, loss2)


def test_ppo_dual_clip_hand_case():
    # ratio e^2 ~ 7.39, A = -1: standard clip gives 7.39, dual clip caps it at 3
    loss, _ = ppo_clip_loss(torch.tensor([[2.0]]), torch.tensor([[0.0]]), torch.tensor([-1.0]), torch.ones(1, 1))
    assert abs(loss.item() - 3.0) < 1e-6
    loss, _ = ppo_clip_loss(torch.tensor([[2.0]]), torch.tensor([[0.0]]), torch.tensor([-1.0]), torch.ones(1, 1),
                            clip_ratio_c=None)
    assert abs(loss.item() - math.exp(2.0)) < 1e-5


def test_gspo_matches_sequence_level_formula():
    g = torch.Generator().manual_seed(5)
    B, T = 5, 4
    old = -torch.rand(B, T, generator=g, dtype=torch.float64)
    logp = (old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.01).requires_grad_()
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0, -0.2], dtype=torch.float64)
    mask = torch.ones(B, T)
    mask[1, 2:] = 0
    lo, hi = 3e-3, 4e-3
    loss, met = gspo_loss(logp, old, adv, mask, lo, hi)
    ref = 0
    for b in range(B):
        n = int(mask[b].sum())
        s = torch.exp(sum(logp[b, t] - old[b, t] for t in range(n)) / n)
        ref = ref + torch.maximum(-adv[b] * s, -adv[b] * s.clamp(1 - lo, 1 + hi))
    ref = ref / B
    assert torch.allclose(loss, ref)
    (g1,) = torch.autograd.grad(loss, logp)
    (g2,) = torch.autograd.grad(ref, logp)
    assert torch.allclose(g1, g2)
    assert 0.0 < met["clipfrac"] < 1.0  # the test exercises both branches


def _pg_setup(tiny, n=6):
    import copy

    from satseq.models.agents import AgentPool
    from satseq.update.batch import TurnBatch

    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 90, (5,), generator=g).tolist() for _ in range(n)]
    responses = [torch.randint(3, 90, (3 + i % 3,), generator=g).tolist() for i in range(n)]
    batch = TurnBatch(prompts, responses, torch.arange(n), torch.linspace(-1, 1, n), [[0.0] * len(r) for r in responses])
    return AgentPool.full(["a"], [model], tok), batch



def _run_pg(tiny, monkeypatch, *, mini_batch_size, force_old=False):
    import satseq.update.clipped_pg as cpg
    import satseq.update.loop as loop

    pool, batch = _pg_setup(tiny)
    calls = []
    real = cpg.batch_logprobs
    for mod in (cpg, loop):  # the update's own forwards and the mini-batch loop's grad passes
        monkeypatch.setattr(mod, "batch_logprobs", lambda *a, **k: calls.append(k.get("grad", False)) or real(*a, **k))
    if force_old:
        monkeypatch.setattr(cpg, "is_on_policy", lambda s, n: False)
    opt = torch.optim.SGD(pool.parameters("a"), lr=0.5)
    s = cpg.PGSettings(epochs=1, mini_batch_size=mini_batch_size)
    cpg.clipped_pg_update(pool, "a", opt, batch, s, generator=torch.Generator().manual_seed(1), device="cpu")
    monkeypatch.undo()
    return calls, [p.detach().clone() for p in pool.parameters("a")]


def test_on_policy_update_skips_the_old_logprob_forward_and_matches_the_two_pass_update(tiny, monkeypatch):
    """One epoch in one mini-batch: one forward (the grad pass) instead of two, the same update."""
    calls, fast = _run_pg(tiny, monkeypatch, mini_batch_size=8)
    assert calls == [True]
    calls, ref = _run_pg(tiny, monkeypatch, mini_batch_size=8, force_old=True)
    assert calls == [False, True]
    assert any(float((a - b.detach()).abs().max()) > 0 for a, b in zip(fast, _pg_setup(tiny)[0].parameters("a")))  # moved
    for a, b in zip(fast, ref):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


def test_two_mini_batches_keep_the_old_logprob_forward(tiny, monkeypatch):
    calls, _ = _run_pg(tiny, monkeypatch, mini_batch_size=3)
    assert calls == [False, True, True]
