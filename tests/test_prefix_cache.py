"""Conversations continued from their kept keys and values (:mod:`satseq.rollout.prefix_cache`, issue 62 item 4).

Four-turn conversations (user → assistant → tool → assistant → user → assistant → tool → assistant) on the
embedded tiny model and on a tiny random model under SmolLM2's chat template (tests/test_conversation_tokens.py):
with the cache, later turns prefill only their new tokens (the fused decode, and the model's own forward); the sampled tokens' log-probs are what the trainer's
forward on the concatenated ids gives (within tests/numerics.py's tolerance), greedy ids are full prefill's, a
seeded run repeats exactly, the first turn is full prefill's bit for bit, and a GRPO run in the tool environment
(every turn a tool call: four-turn episodes) resumes bit for bit after a SIGKILL. Single-turn and relay
rollouts never reach the cache.
"""
from __future__ import annotations

import pytest
import torch

from numerics import fp_tol
from satseq.envs.conversation import Conversation, Message, conversation_format
from satseq.rollout.engine import make_engine
from satseq.rollout.prefix_cache import Past, PastStore, continuing, model_state
from satseq.rollout.types import SamplingParams
from satseq.tools.parsers import ToolCall, register_tool_parser
from test_conversation_tokens import chat_model, first_messages, smollm2_template

#: the messages after each assistant turn: a tool result of realistic length, a user message, another tool result
LATER = [Message("tool", "stdout:\n936\nexit code 0 (0.02 s)", name="python"), Message("user", "Check it once more."),
         Message("tool", "stdout:\nTrue\nexit code 0 (0.01 s)", name="python")]


@register_tool_parser("every_turn_calls")
def every_turn_calls(text: str) -> list[ToolCall]:
    """Every response is a call of a tool the environment lacks (answered with an error message, nothing run):
    an untrained model's tool episodes then go on to ``env.max_turns``."""
    return [ToolCall(name="lookup", arguments={"q": text[:8]})]


@pytest.fixture(scope="module")
def smollm2_chat():
    return chat_model(smollm2_template())


def models(case, tiny, smollm2_chat):
    model, tok = {"embedded": tiny, "smollm2-template": smollm2_chat}[case]
    return model.eval(), tok


def four_turns(engine, model, tok, *, n: int = 4, max_new_tokens: int = 8, temperature: float = 1.0, seed: int = 0,
               first=None):
    """``n`` conversations of four sampled turns, each batch of turns one ``engine.generate``; ``first``: the
    first turn's messages (default: tests/test_conversation_tokens.py's problems)."""
    fmt = conversation_format(tok)
    convs = [Conversation(fmt, ms) for ms in (first or first_messages(fmt, n))]
    streams = [torch.Generator().manual_seed(1000 * seed + i) for i in range(len(convs))]
    sp = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)
    gens = [[] for _ in convs]
    for turn in range(4):
        if turn:
            for c in convs:
                c.add(LATER[turn - 1])
        for i, g in enumerate(engine.generate(model, [c.prompt_ids() for c in convs], sp, streams)):
            convs[i].record(g)
            gens[i].append(g)
    return convs, gens


def _gap(model, convs, gens, pad_id, temperature=1.0, *, drop: int = 0) -> float:
    """The largest |trainer − engine| log-prob gap over every sampled token of the four turns, in units of
    fp_tol at the logits' magnitude (tests/test_conversation_tokens.py's ``trainer_gap``, which says why): the
    trainer's forward runs once per conversation on its concatenated ids. ``drop``: the first ``drop`` ids of
    the context left out (a wrong context, which the check must catch)."""
    from satseq.rollout.logprobs import response_logprobs

    starts = [c.spans[0][0] for c in convs]
    prompts = [c.ids[drop:s] for c, s in zip(convs, starts)]
    rests = [c.ids[s:] for c, s in zip(convs, starts)]
    with torch.no_grad():
        lp, _, logits = response_logprobs(model, prompts, rests, pad_id, temperature=temperature, return_logits=True)
    gap = 0.0
    for row, (c, s, gs) in enumerate(zip(convs, starts, gens)):
        assert len(c.spans) == len(gs) == 4
        for (a, b), g in zip(c.spans, gs):
            assert c.ids[a:b] == g.response_ids and b - a == len(g.logprobs) > 0
            ref, z = lp[row, a - s:b - s], logits[row, a - s:b - s]
            gap = max(gap, float((ref - torch.tensor(g.logprobs)).abs().max()) / fp_tol(ref, z))
    return gap


@pytest.mark.numerics
@pytest.mark.parametrize("case", ["embedded", "smollm2-template"])
def test_continued_turns_score_as_the_trainers_forward_on_the_whole_ids(case, tiny, smollm2_chat):
    model, tok = models(case, tiny, smollm2_chat)
    engine = make_engine("hf", tok).continuing()
    convs, gens = four_turns(engine, model, tok)
    store = engine.prefix_store
    assert store.hits == 3 * 4 and store.misses == 4  # turns 2..4 continued every row, turn 1 had nothing
    assert store.tokens_reused == sum(len(g.prompt_ids) + len(g.response_ids) - 1 for gs in gens for g in gs[:-1])
    assert _gap(model, convs, gens, tok.pad_token_id) < 1.0
    assert _gap(model, convs, gens, tok.pad_token_id, drop=1) > 10  # the check sees a wrong context
    # at another temperature too, and with rows of different lengths (max_new_tokens long enough for EOS)
    convs, gens = four_turns(make_engine("hf", tok).continuing(), model, tok, n=3, max_new_tokens=12,
                             temperature=0.7, seed=1)
    assert _gap(model, convs, gens, tok.pad_token_id, 0.7) < 1.0


@pytest.mark.numerics
@pytest.mark.parametrize("case", ["embedded", "smollm2-template"])
def test_greedy_turns_are_full_prefills_and_the_first_turn_is_bit_identical(case, tiny, smollm2_chat):
    model, tok = models(case, tiny, smollm2_chat)
    full = four_turns(make_engine("hf", tok, prefix_cache=False).continuing(), model, tok, temperature=0.0)[1]
    reuse = four_turns(make_engine("hf", tok).continuing(), model, tok, temperature=0.0)[1]
    for f, r in zip(full, reuse):
        assert [g.response_ids for g in f] == [g.response_ids for g in r]
        assert f[0].logprobs == r[0].logprobs  # nothing kept yet: the fused decode's own prefill
        for a, b in zip(f[1:], r[1:]):
            ref = torch.tensor(a.logprobs)
            assert (ref - torch.tensor(b.logprobs)).abs().max() <= fp_tol(ref)


@pytest.mark.numerics
def test_the_models_own_forward_continues_too_and_sliding_windows_prefill_whole(tiny):
    """``rollout.fused=false`` (or an architecture the fused decode does not run): the kept rows go back into
    the model's ``DynamicCache``, with the same guarantees; a decoder with sliding-window layers (whose cache
    keeps only the window) is never continued."""
    from satseq.models.tiny import build_tiny_model

    model, tok = models("embedded", tiny, None)
    engine = make_engine("hf", tok, fused=False).continuing()
    convs, gens = four_turns(engine, model, tok)
    assert engine.prefix_store.hits == 3 * 4 and _gap(model, convs, gens, tok.pad_token_id) < 1.0
    full = four_turns(make_engine("hf", tok, fused=False, prefix_cache=False), model, tok, temperature=0.0)[1]
    reuse = four_turns(make_engine("hf", tok, fused=False).continuing(), model, tok, temperature=0.0)[1]
    assert [[g.response_ids for g in gs] for gs in full] == [[g.response_ids for g in gs] for gs in reuse]
    assert [gs[0].logprobs for gs in full] == [gs[0].logprobs for gs in reuse]
    windowed, wtok = build_tiny_model(seed=0, max_positions=512)
    windowed.config.use_sliding_window, windowed.config.sliding_window = True, 16
    engine = make_engine("hf", wtok).continuing()
    four_turns(engine, windowed.eval(), wtok, n=2, max_new_tokens=4)
    assert engine.prefix_store.hits == engine.prefix_store.misses == 0 and not engine.prefix_store.entries


def test_a_seeded_run_repeats_exactly(tiny):
    model, tok = models("embedded", tiny, None)
    a = four_turns(make_engine("hf", tok).continuing(), model, tok, seed=3)[1]
    b = four_turns(make_engine("hf", tok).continuing(), model, tok, seed=3)[1]
    assert [[(g.response_ids, g.logprobs) for g in gs] for gs in a] == [[(g.response_ids, g.logprobs) for g in gs] for gs in b]


def test_rows_that_join_or_finish_early_are_continued_correctly(tiny):
    """A batch of continued rows and new ones (no kept keys) together, and rows dropped by the engine when
    half the batch has finished (their keys and values kept as they stood)."""
    model, tok = models("embedded", tiny, None)
    engine = make_engine("hf", tok).continuing()
    fmt = conversation_format(tok)
    firsts = first_messages(fmt, 6)
    convs, gens = four_turns(engine, model, tok, first=firsts[:3], n=3, max_new_tokens=6)
    late = [Conversation(fmt, ms) for ms in firsts[3:]]
    mixed = convs + late
    for c in convs:
        c.add(Message("user", "Once more."))
    sp = SamplingParams(max_new_tokens=24, temperature=1.0, stop=("1",))  # a stop string ends rows early
    streams = [torch.Generator().manual_seed(50 + i) for i in range(len(mixed))]
    hits = engine.prefix_store.hits
    out = engine.generate(model, [c.prompt_ids() for c in mixed], sp, streams)
    assert engine.prefix_store.hits - hits == 3
    assert {g.finish_reason for g in out} >= {"stop"}
    for c, gs, g in zip(mixed, gens + [[] for _ in late], out):
        c.record(g)
        gs.append(g)
    from satseq.rollout.logprobs import response_logprobs

    for c, gs in zip(mixed, gens + [[g] for g in out[3:]]):
        a, b = c.spans[-1]
        lp, _ = response_logprobs(model, [c.ids[:a]], [c.ids[a:b]], tok.pad_token_id)
        ref = lp[0, : b - a]
        assert (ref - torch.tensor(gs[-1].logprobs)).abs().max() <= fp_tol(ref)


def test_the_store_keeps_only_what_the_same_weights_computed(tiny):
    """A kept row is found only for the model state that computed it (an update bumps the parameters'
    versions), only as a proper prefix of the prompt, and the oldest rows go past the budget."""
    model, _ = tiny
    store = PastStore(budget_gb=1.0)
    kv = [(torch.zeros(2, 5, 4), torch.zeros(2, 5, 4))]
    state = store.state_id(model_state(model, torch.float32))
    store.put(state, Past((1, 2, 3, 4, 5), kv))
    assert store.lookup(state, [1, 2, 3, 4, 5, 6]) is not None
    assert store.state_id(model_state(model, torch.float32)) == state
    assert store.lookup(state, [1, 2, 3, 4, 5]) is None         # the whole prompt: its last token must run
    assert store.lookup(state, [1, 2, 3, 9, 5, 6]) is None
    assert store.lookup(store.state_id(model_state(model, torch.bfloat16)), [1, 2, 3, 4, 5, 6]) is None
    with torch.no_grad():
        p = next(model.parameters())
        p.add_(0.0)  # an update in place
    updated = store.state_id(model_state(model, torch.float32))
    assert updated != state and store.lookup(updated, [1, 2, 3, 4, 5, 6]) is None
    store.put(state, Past((1, 2, 3), [(k[:, :3], v[:, :3]) for k, v in kv]))
    assert store.lookup(state, [1, 2, 3, 4, 5, 6]).ids == (1, 2, 3, 4, 5)  # the longest kept prefix
    store.collect()  # the rows continued above are dropped
    assert list(store.entries) == [(state, (1, 2, 3))] and store.lookup(state, [1, 2, 3, 4, 5, 6]).ids == (1, 2, 3)
    one = Past((7,) * 5, kv).nbytes
    small = PastStore(budget_gb=2.5 * one / 2 ** 30)
    for t in range(4):
        small.put(state, Past((t,) * 5, kv))
    assert [k[1][0] for k in small.entries] == [2, 3]
    assert small.lookup(state, [0] * 6) is None and small.lookup(state, [3] * 6) is not None


@pytest.mark.numerics
def test_lora_agents_continue_their_own_conversations(tiny):
    """Two LoRA adapters on one base, turns alternating between them in one rollout (a two-agent game): each
    finds only the keys and values its own weights computed (another adapter, or the adapters switched off
    for the reference policy, is another model state), and its log-probs are the trainer's."""
    import copy

    from peft import LoraConfig, get_peft_model

    base, tok = tiny
    lora = dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=False)
    model = get_peft_model(copy.deepcopy(base), LoraConfig(**lora), adapter_name="first")
    model.add_adapter("second", LoraConfig(**lora))
    model.eval()
    states = {}
    for name in ("first", "second"):
        model.set_adapter(name)
        states[name] = model_state(model, torch.float32)
        with model.disable_adapter():
            states[name + "-off"] = model_state(model, torch.float32)
    assert len(set(states.values())) == 4 and states["first-off"][3] != states["first"][3]
    engine = make_engine("hf", tok).continuing()
    runs = {}
    for name in ("first", "second", "first", "second"):  # the same conversations, each adapter its own copy
        model.set_adapter(name)
        runs[name] = four_turns(engine, model, tok, n=2, seed=7)
    for name, (convs, gens) in runs.items():
        model.set_adapter(name)
        assert _gap(model, convs, gens, tok.pad_token_id) < 1.0, name
    assert engine.prefix_store.hits == 4 * 3 * 2  # every later turn continued its own adapter's rows


def test_the_setting_off_and_engines_without_a_cache_prefill_whole(tiny):
    _, tok = tiny
    off = make_engine("hf", tok, prefix_cache=False)
    assert off.continuing() is off and continuing(off) is off
    plain = object()
    assert continuing(plain) is plain
    on = make_engine("hf", tok, prefix_cache_gb=0.5)
    view = continuing(on)
    assert view is not on and view.prefix_store.budget == 2 ** 29 and on.prefix_store is None
    assert view._weights is on._weights  # the fused weights are shared, not rebuilt


@pytest.mark.parametrize("workflow", ["single", "relay"])
def test_single_turn_and_relay_rollouts_never_reach_the_cache(workflow, tiny, monkeypatch):
    from satseq.records import Problem
    from satseq.workflows.base import make_workflow
    from satseq.workflows.prompts import EmbeddedFormat

    def refuse(*a, **k):
        raise AssertionError("the prefix cache was used")

    monkeypatch.setattr(PastStore, "__init__", refuse)
    model, tok = tiny

    class Pool:
        def module(self, name):
            return model

    agents = ["a", "b"] if workflow == "relay" else ["a"]
    wf = make_workflow(workflow, agents, EmbeddedFormat(tok), SamplingParams(max_new_tokens=4))
    eps = wf.rollout([Problem(problem_id=0, problem="12+34", answer="46")], Pool(), make_engine("hf", tok),
                     group_size=2, generator=torch.Generator().manual_seed(0))
    assert len(eps) == 2 and all(ep.turns for ep in eps)


def test_tool_episodes_continue_their_conversations(tiny_dir, tmp_path, monkeypatch):
    """The tool environment's episodes (interactive workflow, satseq's engine) reuse the keys and values of
    their earlier turns: four turns each, three of them continued."""
    from satseq.config import load_config
    from satseq.models.loading import load_causal_lm
    from satseq.records import Problem
    from satseq.registry import get_env

    seen = []
    collect = PastStore.collect
    monkeypatch.setattr(PastStore, "collect", lambda self: (seen.append(self), collect(self))[1])
    model, tok = load_causal_lm(tiny_dir)
    cfg = load_config(None, ["method=grpo", "env.name=tool_use", "env.tool_use.parser=every_turn_calls",
                             "env.max_turns=4", f"output_dir={tmp_path}"])
    env = get_env("tool_use")
    fmt = env.prompt_format("embedded", tok, cfg)
    wf = env.make_workflow(cfg, {"policy": "policy"}, fmt, SamplingParams(max_new_tokens=6), options={"journal": False})

    class Pool:
        def module(self, name):
            return model

    eps = wf.rollout([Problem(problem_id=0, problem="What is 17 * 23?", answer="391")], Pool(), make_engine("hf", tok),
                     group_size=2, generator=torch.Generator().manual_seed(0))
    assert [len(ep.turns) for ep in eps] == [4, 4]
    store = seen[0]
    assert all(s is store for s in seen) and store.hits == 3 * 2 and store.misses == 2


def test_grpo_in_the_tool_environment_with_the_cache_resumes_bit_for_bit_after_sigkill(tiny_dir, tmp_path):
    """GRPO in the tool environment, every turn a tool call (four-turn episodes, three turns continued from
    the cache), killed in the middle of stage 1 and resumed: the same rows as a run straight through."""
    from contract_cli import metric_rows, train_kill_resume

    task = "reasoning_gym:chain_sum?min_terms=2&max_terms=3&held_out=0"
    args = ["train", f"model.path={tiny_dir}", "method=grpo", "env.name=tool_use", "env.tool_use.parser=every_turn_calls",
            "env.max_turns=4", "rollout.prefix_cache=true", "trainer.train_batch_size=2", f"data.train={task}",
            f"data.eval={task}", "grpo.group_size=2", "rollout.max_new_tokens=8", "data.train_size=8",
            "data.eval_size=4", "threads=1", "trainer.tensorboard=false", "trainer.progress=false",
            "trainer.num_stages=2", "ppo.lr=1e-3", f"output_dir={tmp_path}"]
    a, b = train_kill_resume(__file__, args, tmp_path)
    rows = metric_rows(a)
    assert len(rows) == 2 and rows == metric_rows(b)
    assert all(r["tools/turns"] > 1 for r in rows), rows  # episodes went on: later turns were continued


def test_vllm_is_started_with_its_prefix_caching_on(tiny, monkeypatch):
    """vLLM continues conversations from its own prefix cache: the engine is built with
    ``enable_prefix_caching=True`` (checked on the constructor's arguments; vLLM itself need not be installed)."""
    import types

    from satseq.errors import ConfigError
    from satseq.rollout import vllm_engine

    seen = {}

    class LLM:
        def __init__(self, **kwargs):
            seen.update(kwargs)
            raise RuntimeError("not vLLM")

    monkeypatch.setattr(vllm_engine, "_import_vllm", lambda: (types.SimpleNamespace(LLM=LLM, __version__="0"), None))
    monkeypatch.setattr(vllm_engine, "_ENGINES", {})
    monkeypatch.setattr(vllm_engine, "_prepare_environment", lambda settings, device: None)
    monkeypatch.setattr(vllm_engine.VLLMEngine, "_check_architecture", lambda self, arch: None)
    model, tok = tiny
    with pytest.raises(ConfigError, match="vLLM could not start"):
        vllm_engine.VLLMEngine(tok)._start(model)
    assert seen["enable_prefix_caching"] is True
