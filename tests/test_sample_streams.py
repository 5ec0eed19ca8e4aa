"""Per-episode sampling streams: an episode's tokens do not depend on how the batch is split
(engine batch size, micro-batches, shards), and the run generator advances once per episode."""
import pytest
import torch
from numerics import fp_tol

from satseq.rollout.hf_engine import HFEngine
from satseq.rollout.streams import episode_streams
from satseq.rollout.types import SamplingParams
from satseq.records import Problem
from satseq.workflows.base import make_workflow


def _enc(tok, s):
    return tok(s, add_special_tokens=False)["input_ids"]


@pytest.mark.numerics
@pytest.mark.parametrize("header", ["", "111+222=333|404+505=909|"])  # a few-shot header: prefilled once a batch
def test_engine_batch_size_does_not_change_the_samples(tiny, header):
    model, tok = tiny
    prompts = [_enc(tok, header + p) for p in ["347+589=", "12+5=", "1=", "0936|0926|12+5=", "77+7="]] * 2
    sp = SamplingParams(max_new_tokens=16)
    whole = HFEngine(tok, batch_size=64).generate(model, prompts, sp, torch.Generator().manual_seed(5))
    split = HFEngine(tok, batch_size=3).generate(model, prompts, sp, torch.Generator().manual_seed(5))
    assert [g.response_ids for g in whole] == [g.response_ids for g in split]
    for a, b in zip(whole, split):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < fp_tol(a.logprobs)
    assert len({tuple(g.response_ids) for g in whole}) > 3  # the rows really are sampled


def test_a_row_advances_its_stream_once_per_token(tiny):
    model, tok = tiny
    streams = episode_streams(torch.Generator().manual_seed(1), 2)
    copies = [torch.Generator().set_state(s.get_state()) for s in streams]
    gens = HFEngine(tok).generate(model, [_enc(tok, "12+5="), _enc(tok, "347+589=")],
                                  SamplingParams(max_new_tokens=10), streams)
    for g, s, c in zip(gens, streams, copies):
        torch.rand(len(g.response_ids), generator=c)
        assert torch.equal(s.get_state(), c.get_state())


def test_relay_on_a_split_batch_gives_the_same_episodes(tiny):
    model, tok = tiny
    from satseq.models.agents import AgentPool
    from satseq.workflows.prompts import make_format

    pool = AgentPool.full(["a", "b"], [model, model], tok)
    fmt = make_format("embedded", tok)
    wf = make_workflow("relay", {"a": "a", "b": "b"}, fmt, SamplingParams(max_new_tokens=12))
    problems = [Problem(problem_id=str(i), problem=f"{i}+{i + 3}=", answer=str(2 * i + 3)) for i in range(5)]
    eng = HFEngine(tok)
    whole = wf.rollout(problems, pool, eng, group_size=2, generator=torch.Generator().manual_seed(9))
    streams = episode_streams(torch.Generator().manual_seed(9), 10)
    parts = (wf.rollout(problems[:2], pool, eng, group_size=2, streams=streams[:4])
             + wf.rollout(problems[2:], pool, eng, group_size=2, streams=streams[4:]))
    assert [[t.response_ids for t in ep.turns] for ep in whole] == [[t.response_ids for t in ep.turns] for ep in parts]
