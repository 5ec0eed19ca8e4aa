"""A*-PO building blocks: V* vs float64 references, the regression loss and its gradient vs a loop
reference, the entropy bonus, the V* cache round trip and its stale/malformed refusals, registry."""
from __future__ import annotations

import json
import math

import pytest
import torch

from satseq.errors import SatseqError
from satseq.algos.regression import apo_loss
from satseq.update.vstar import (
    VStarCache,
    fingerprint_model,
    fingerprint_problems,
    solvable_mask,
    vstar_from_rewards,
)
from satseq.records import Problem

# ---------------------------------------------------------------- V*


def _vstar_ref(row: list[float], beta1: float) -> float:
    """Direct float64 formula beta1 * ln(mean exp(r / beta1)), shifted by max only to stay finite."""
    if beta1 < 0:
        return 0.0
    if beta1 == 0:
        return math.fsum(row) / len(row)
    m = max(row)
    return m + beta1 * math.log(math.fsum(math.exp((r - m) / beta1) for r in row) / len(row))


@pytest.mark.parametrize("beta1", [0.05, 0.5, 1.0, 3.0, 0.0, -1.0])
def test_vstar_matches_direct_float64(beta1):
    g = torch.Generator().manual_seed(1)
    r = torch.rand(7, 8, generator=g, dtype=torch.float64) * 2 - 0.5
    r[0] = 1.0  # all-equal row: V* = that value for any beta1 >= 0
    r[1] = torch.tensor([0, 1, 0, 0, 1, 0, 0, 0], dtype=torch.float64)  # binary rewards
    got = vstar_from_rewards(r, beta1)
    ref = torch.tensor([_vstar_ref(row, beta1) for row in r.tolist()], dtype=torch.float64)
    assert got.shape == (7,) and got.dtype == torch.float64
    assert torch.allclose(got, ref, atol=1e-12, rtol=0)
    if beta1 > 0:  # the unshifted textbook formula agrees where it does not overflow
        naive = beta1 * torch.log(torch.exp(r / beta1).mean(-1))
        assert torch.allclose(got, naive, atol=1e-12)
    if beta1 >= 0:
        assert got[0].item() == pytest.approx(1.0, abs=1e-12)


def test_vstar_limits_and_edge_cases():
    g = torch.Generator().manual_seed(2)
    r = torch.rand(5, 8, generator=g, dtype=torch.float64)
    assert torch.allclose(vstar_from_rewards(r, 0.0), r.mean(-1), atol=1e-15)
    assert torch.equal(vstar_from_rewards(r, -0.5), torch.zeros(5, dtype=torch.float64))
    assert torch.allclose(vstar_from_rewards(r, 1e6), r.mean(-1), atol=1e-6)  # beta1 -> inf: mean
    assert torch.allclose(vstar_from_rewards(r, 1e-4), r.max(-1).values, atol=1e-3)  # beta1 -> 0+: max
    # soft-max between mean and max, increasing as beta1 decreases
    v = [vstar_from_rewards(r, b) for b in (10.0, 1.0, 0.1)]
    assert torch.all(r.mean(-1) <= v[0] + 1e-12) and torch.all(v[0] <= v[1]) and torch.all(v[1] <= v[2])
    assert torch.all(v[2] <= r.max(-1).values + 1e-12)
    # ints promoted to float64, lists accepted
    assert vstar_from_rewards([[0, 1], [1, 1]], 0.0).tolist() == [0.5, 1.0]
    with pytest.raises(ValueError, match=r"\[P, N\]"):
        vstar_from_rewards(torch.zeros(4), 0.5)
    with pytest.raises(ValueError, match=r"\[P, N\]"):
        vstar_from_rewards(torch.zeros(3, 0), 0.5)


def test_vstar_stable_where_naive_exp_overflows():
    beta1 = 0.5
    r = torch.tensor([[1000.0, 999.0, 0.0, 1000.0], [-1000.0, -1000.0, -999.5, -1001.0]], dtype=torch.float32)
    with torch.no_grad():
        naive = beta1 * torch.log(torch.exp(r / beta1).mean(-1))  # exp(2000) = inf; exp(-2000) = 0
    assert torch.isinf(naive[0]) and torch.isinf(naive[1])
    got = vstar_from_rewards(r, beta1)
    assert torch.isfinite(got).all()
    ref = [_vstar_ref(row, beta1) for row in r.double().tolist()]
    assert got.tolist() == pytest.approx(ref, abs=1e-3)
    # and in float64 where float64's exp overflows too (r / beta1 = 2000 -> ~e^2000)
    r64 = r.double()
    assert torch.isinf(torch.exp(r64 / beta1)).any()
    assert torch.allclose(vstar_from_rewards(r64, beta1), torch.tensor(ref, dtype=torch.float64), atol=1e-9)


def test_solvable_mask():
    r = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.2, 0.1, 0.0], [-1.0, -1.0, -1.0]])
    assert solvable_mask(r).tolist() == [False, True, True, False]
    assert solvable_mask(r, threshold=0.5).tolist() == [False, True, False, False]
    assert solvable_mask(r, threshold=-2.0).tolist() == [True, True, True, True]


# ---------------------------------------------------------------- loss


def _loss_ref(logp, ref_logp, mask, rewards, vstar, beta2):
    """Python loop: mean_b (beta2 * sum_t (logp - ref) + V* - r)^2 and its per-token gradient."""
    B, T = len(logp), len(logp[0])
    total, grad = 0.0, [[0.0] * T for _ in range(B)]
    for b in range(B):
        s = sum(logp[b][t] - ref_logp[b][t] for t in range(T) if mask[b][t])
        res = beta2 * s + vstar[b] - rewards[b]
        total += res * res
        for t in range(T):
            if mask[b][t]:
                grad[b][t] = 2.0 * beta2 * res / B  # closed form d loss / d logp[b, t]
    return total / B, grad


def _batch(seed=0, B=5, T=7):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    ref = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    mask = torch.rand(B, T, generator=g) > 0.3
    mask[0] = True
    mask[1] = False  # a sequence with no valid token
    rewards = (torch.rand(B, generator=g) > 0.5).to(torch.float64)
    vstar = torch.rand(B, generator=g, dtype=torch.float64)
    return logp, ref, mask, rewards, vstar


@pytest.mark.parametrize("beta2", [1e-3, 0.1, 1.0])
def test_apo_loss_value_and_grad_match_loop_reference(beta2):
    logp, ref, mask, rewards, vstar = _batch()
    logp[~mask] = float("-inf")  # padding junk must not leak into the sum
    logp.requires_grad_(True)
    loss, metrics = apo_loss(logp, ref, mask, rewards, vstar, beta2=beta2)
    want, want_grad = _loss_ref(logp.detach().tolist(), ref.tolist(), mask.tolist(), rewards.tolist(),
                                vstar.tolist(), beta2)
    assert loss.item() == pytest.approx(want, rel=1e-12, abs=1e-15)
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.allclose(grad, torch.tensor(want_grad, dtype=torch.float64), rtol=1e-10, atol=1e-15)
    assert torch.all(grad[~mask] == 0)
    assert metrics["loss"] == pytest.approx(want, rel=1e-12)
    assert metrics["adv_mean"] == pytest.approx((rewards - vstar).mean().item(), rel=1e-12)
    s = torch.where(mask, logp.detach() - ref, torch.zeros(()).double()).sum(-1)
    assert metrics["seq_log_ratio"] == pytest.approx(s.mean().item(), rel=1e-12)
    assert "entropy" not in metrics


def test_apo_loss_no_ratio_no_clipping_and_constants_detached():
    # at pi == pi_ref the loss is mean (V* - r)^2 however far pi later moves: no clip plateau
    logp, ref, mask, rewards, vstar = _batch(seed=3)
    loss0, _ = apo_loss(ref.clone(), ref, mask, rewards, vstar, beta2=1e-3)
    assert loss0.item() == pytest.approx(((vstar - rewards) ** 2).mean().item(), rel=1e-12)
    far = (ref + 50.0).requires_grad_(True)  # exp(ratio) would be astronomically clipped in PPO
    loss, _ = apo_loss(far, ref, mask, rewards, vstar, beta2=1e-3)
    (g,) = torch.autograd.grad(loss, far)
    assert torch.count_nonzero(g[mask]) == int(mask.sum())
    # gradient flows to logp only
    ref_g = ref.clone().requires_grad_(True)
    r_g = rewards.clone().requires_grad_(True)
    v_g = vstar.clone().requires_grad_(True)
    lp = logp.clone().requires_grad_(True)
    loss, _ = apo_loss(lp, ref_g, mask, r_g, v_g)
    loss.backward()
    assert ref_g.grad is None and r_g.grad is None and v_g.grad is None and lp.grad is not None


def test_apo_loss_entropy_bonus_sign():
    logp, ref, mask, rewards, vstar = _batch(seed=4)
    ent = torch.rand(logp.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    ent[~mask] = 1e9  # padding must not count
    ent.requires_grad_(True)
    base, _ = apo_loss(logp, ref, mask, rewards, vstar)
    loss, metrics = apo_loss(logp, ref, mask, rewards, vstar, entropy=ent, entropy_coef=0.01)
    h = ent.detach()[mask].mean().item()
    assert metrics["entropy"] == pytest.approx(h, rel=1e-12)
    assert loss.item() == pytest.approx(base.item() - 0.01 * h, rel=1e-12)  # a bonus: lowers the loss
    (g,) = torch.autograd.grad(loss, ent)
    assert torch.all(g[mask] < 0) and torch.all(g[~mask] == 0)  # minimizing raises entropy
    loss0, _ = apo_loss(logp, ref, mask, rewards, vstar, entropy=ent, entropy_coef=0.0)
    assert loss0.item() == pytest.approx(base.item(), rel=1e-12)


def test_apo_loss_shape_errors():
    logp, ref, mask, rewards, vstar = _batch()
    with pytest.raises(ValueError, match="rewards must be"):
        apo_loss(logp, ref, mask, rewards[:-1], vstar)
    with pytest.raises(ValueError, match="vstar must be"):
        apo_loss(logp, ref, mask, rewards, vstar[:, None])
    with pytest.raises(ValueError, match="share one"):
        apo_loss(logp, ref[:, :-1], mask, rewards, vstar)


# ---------------------------------------------------------------- registry


def test_registry_has_apo():
    from satseq.algos import POLICY_LOSSES, get_loss

    assert POLICY_LOSSES["apo"] is apo_loss
    assert get_loss("apo") is apo_loss


# ---------------------------------------------------------------- cache and fingerprints


def _problems():
    return [Problem(problem_id=i, problem=f"What is {i} + {i}?", answer=str(2 * i)) for i in range(4)]


def _cache(beta1=0.5):
    r = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float64)
    return VStarCache.build([p.problem_id for p in _problems()], r, beta1,
                            dataset_fingerprint=fingerprint_problems(_problems()), model_fingerprint="m" * 64)


def _load(path, **kw):
    args = dict(dataset_fingerprint=fingerprint_problems(_problems()), model_fingerprint="m" * 64, n_samples=4)
    args.update(kw)
    return VStarCache.load(path, **args)


def test_cache_round_trip_and_queries(tmp_path):
    c = _cache()
    path = tmp_path / "sub" / "vstar.json"
    c.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["vstar.json"]  # atomic: no temp file left
    back = _load(path)
    assert back == c
    assert back.vstar == pytest.approx(vstar_from_rewards(torch.tensor(c.rewards, dtype=torch.float64), 0.5).tolist(), abs=1e-12)
    assert back.solvable_ids() == [0, 2, 3]
    assert back.vstar_for([3, 0]) == [c.vstar[3], c.vstar[0]]
    with pytest.raises(SatseqError, match=r"problem id 9 is not in the V\* cache"):
        back.vstar_for([9])
    # another beta1 needs no new samples: V* recomputed from the stored rewards
    b0 = _load(path, beta1=0.0)
    assert b0.beta1 == 0.0 and b0.vstar == pytest.approx([0.5, 0.0, 1.0, 0.25])
    assert _load(path, beta1=0.5).vstar == c.vstar


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(dataset_fingerprint="d" * 64), "another dataset"),
        (dict(model_fingerprint="x" * 64), "another model"),
        (dict(n_samples=8), r"N=4 samples per prompt \(current N=8\)"),
    ],
)
def test_stale_cache_refused(tmp_path, kw, needle):
    path = tmp_path / "vstar.json"
    _cache().save(path)
    with pytest.raises(SatseqError, match=needle) as ei:
        _load(path, **kw)
    msg = str(ei.value)
    assert "\n" not in msg and str(path) in msg and "stale" in msg and "rerun `satseq vstar`" in msg


def test_stale_cache_names_every_difference(tmp_path):
    path = tmp_path / "vstar.json"
    _cache().save(path)
    with pytest.raises(SatseqError, match="another dataset.*another model.*N=4") as ei:
        _load(path, dataset_fingerprint="d" * 64, model_fingerprint="x" * 64, n_samples=2)
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"format": "other"}', "format"),
        ('{"format": "satseq.vstar/1", "problem_ids": []}', "missing rewards"),
        (None, "reward row 1 is not 4 numbers"),
        ("\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_cache_is_one_line_error_naming_file(tmp_path, text, needle):
    path = tmp_path / "vstar.json"
    if text is None:
        d = _cache().to_dict()
        d["rewards"][1] = [0, 1]
        path.write_text(json.dumps(d))
    elif text == "\xff\xfe":
        path.write_bytes(b"\xff\xfe\x00")
    else:
        path.write_text(text)
    with pytest.raises(SatseqError, match=needle) as ei:
        _load(path)
    msg = str(ei.value)
    assert "\n" not in msg and str(path) in msg and "malformed V* cache" in msg


def test_missing_cache(tmp_path):
    with pytest.raises(SatseqError, match="no V\\* cache there; run `satseq vstar`"):
        _load(tmp_path / "nope.json")


def test_fingerprint_problems():
    ps = _problems()
    fp = fingerprint_problems(ps)
    assert len(fp) == 64 and fp == fingerprint_problems(list(reversed(ps)))  # order-independent
    edited = list(ps)
    edited[2] = Problem(problem_id=2, problem=ps[2].problem, answer="5")
    assert fingerprint_problems(edited) != fp
    assert fingerprint_problems(ps[:-1]) != fp
    assert fingerprint_problems(ps + ps[:1]) != fp  # duplicates count
    renamed = [Problem(problem_id=str(p.problem_id), problem=p.problem, answer=p.answer) for p in ps]
    assert fingerprint_problems(renamed) != fp
    meta = [Problem(problem_id=p.problem_id, problem=p.problem, answer=p.answer, meta={"x": 1}) for p in ps]
    assert fingerprint_problems(meta) == fp
    assert fingerprint_problems([{"problem_id": p.problem_id, "problem": p.problem, "answer": p.answer}
                                 for p in ps]) == fp


def test_fingerprint_model(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text('{"hidden_size": 8}')
    (d / "model.safetensors").write_bytes(b"\x00" * 100)
    (d / "tokenizer.json").write_text("{}")
    fp = fingerprint_model(d)
    assert len(fp) == 64 and fp == fingerprint_model(str(d))
    (d / "tokenizer.json").write_text('{"changed": 1}')  # not a weight file: same model
    assert fingerprint_model(d) == fp
    (d / "model.safetensors").write_bytes(b"\x00" * 99 + b"\x01")  # same name and size, new contents
    fp2 = fingerprint_model(d)
    assert fp2 != fp
    (d / "model.safetensors").write_bytes(b"\x00" * 101)
    assert fingerprint_model(d) not in (fp, fp2)
    (d / "config.json").write_text('{"hidden_size": 16}')
    assert fingerprint_model(d) not in (fp, fp2)
    hub = fingerprint_model("Qwen/Qwen2.5-1.5B-Instruct")
    assert hub == fingerprint_model("Qwen/Qwen2.5-1.5B-Instruct") != fingerprint_model("Qwen/Qwen2.5-7B")
