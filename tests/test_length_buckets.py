"""Length buckets for the trainer's forward (satseq/rollout/length_buckets.py): the dynamic programme
finds the cheapest contiguous partition of the sorted lengths (checked against every partition), and
a bucketed forward gives the one-pass log-probs and gradients, shared prefixes or not, with the
token-positions the buckets promise."""
import copy
import itertools
import random

import pytest
import torch
from numerics import fp_tol

from satseq.rollout import length_buckets as lb
from satseq.rollout import logprobs as lpmod
from satseq.rollout import prefix_sharing
from tests.test_prefix_sharing import PROMPTS, RESPONSES, _decoder_tokens, _one_pass


def _padded(lengths, buckets):
    """Token-positions the buckets compute: ``Σ_b n_b · max_{i ∈ b} L_i``."""
    return sum(len(b) * max(lengths[i] for i in b) for b in buckets if b)


def _cost(lengths, buckets, c):
    return _padded(lengths, buckets) + c * len(buckets)


def _brute_force(lengths, c):
    """The cheapest partition of the sorted rows into contiguous runs, by enumerating every cut set."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = None
    for k in range(len(order)):
        for cuts in itertools.combinations(range(1, len(order)), k):
            edges = (0, *cuts, len(order))
            parts = [order[a:b] for a, b in zip(edges, edges[1:])]
            cost = _cost(lengths, parts, c)
            best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("c", [0, 5, 40])
def test_buckets_are_the_cheapest_partition(seed, c):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 30) for _ in range(rng.randint(1, 9))]
    buckets = lb.length_buckets(lengths, call_cost=c)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))  # every row exactly once
    for b in buckets:
        assert [lengths[i] for i in b] == sorted(lengths[i] for i in b)
    assert _cost(lengths, buckets, c) == _brute_force(lengths, c)


def test_call_cost_by_device():
    assert lb.call_cost("cpu") == lb.call_cost(torch.device("cpu")) == lb.CALL_COST["cpu"]
    assert lb.call_cost("cuda:0") == lb.call_cost("meta") == lb.ACCELERATOR_CALL_COST > lb.CALL_COST["cpu"]


def test_one_bucket_when_splitting_does_not_pay():
    assert lb.length_buckets([10, 11, 12, 13]) == [[0, 1, 2, 3]]  # saves 6 positions < one call
    assert lb.length_buckets([]) == [[]] and lb.length_buckets([7]) == [[0]]
    # 4 short rows and 4 long ones: two buckets save 4 × 90 positions
    assert lb.length_buckets([100, 10, 100, 10, 10, 100, 100, 10]) == [[1, 3, 4, 7], [0, 2, 5, 6]]


# rows of very different lengths: one prompt shared by four rows, four other prompts
LONG = [[30 + i for i in range(12)]]
B_PROMPTS = PROMPTS + LONG * 4
B_RESPONSES = RESPONSES + [[40 + i for i in range(n)] for n in (30, 1, 29, 2)]


@pytest.mark.numerics
@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("lora", [False, True])
def test_bucketed_forward_equals_the_one_pass_forward(tiny, monkeypatch, share, lora):
    base, tok = tiny
    model = copy.deepcopy(base)
    if lora:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(1)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])).eval()
    if not share:
        monkeypatch.setattr(prefix_sharing, "sharing_plan", lambda *a, **k: None)
    monkeypatch.setitem(lb.CALL_COST, "cpu", 0)  # as many buckets as save a position
    seen = _decoder_tokens(model, monkeypatch)
    lp, mask = lpmod.response_logprobs(model, B_PROMPTS, B_RESPONSES, tok.pad_token_id)
    calls = len(seen) - (1 if share else 0)  # the shared prefixes' pass, then one call per bucket
    assert calls >= 3
    if share:
        prefixes, rows = prefix_sharing.prefix_groups(B_PROMPTS)
        rests = [p[len(prefixes[g]):] for p, g in zip(B_PROMPTS, rows)]
    else:
        rests = B_PROMPTS
    fed = [len(x) + max(len(r) - 1, 0) for x, r in zip(rests, B_RESPONSES)]  # rest, response but its last token
    assert sum(seen[-calls:]) == _padded(fed, lb.length_buckets(fed, call_cost=0))
    assert sum(seen[-calls:]) < len(fed) * max(fed) * 0.6  # against one padded layout
    ref = _one_pass(model, B_PROMPTS, B_RESPONSES, tok.pad_token_id)
    torch.testing.assert_close(lp, ref, rtol=0, atol=fp_tol(ref))
    assert mask.sum(1).tolist() == [len(r) for r in B_RESPONSES]
    params = [p for p in model.parameters() if p.requires_grad]
    weights = torch.linspace(0.5, 2.0, lp.shape[1])
    g1 = torch.autograd.grad((lp * weights).sum(), params, allow_unused=True)
    g2 = torch.autograd.grad((ref * mask * weights).sum(), params, allow_unused=True)
    for a, b in zip(g1, g2):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=fp_tol(b))
