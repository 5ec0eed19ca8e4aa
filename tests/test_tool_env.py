"""The ``tool_use`` environment: tool calls run in the sandbox and come back as tool messages, token for
token; errors, timeouts and the budget are messages the episode goes on with; ``env.max_turns`` ends
every episode; results are recorded and replayed; a run resumes bit for bit after a SIGKILL."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import ScriptedEngine
from satseq.config import load_config
from satseq.records import Problem
from satseq.registry import get_env
from satseq.rollout.types import SamplingParams

PROBLEM = Problem(problem_id=0, problem="What is 17 * 23?", answer="391")


def _workflow(cfg, tok, **options):
    env = get_env("tool_use")
    fmt = env.prompt_format("embedded", tok, cfg)
    wf = env.make_workflow(cfg, {"policy": "policy"}, fmt, SamplingParams(max_new_tokens=64), options=options)
    return env, fmt, wf


class _Pool:
    """The scripted engine never runs the model: a module without a context length (the episode is bounded
    by its turns alone), or ``model`` (its context bounds the episode)."""

    def __init__(self, model, tok):
        self.model, self.tokenizer = model, tok

    def module(self, name):
        return self.model


def _rollout(cfg, tiny, script, *, model=None, **options):
    _, tok = tiny
    env, fmt, wf = _workflow(cfg, tok, **({"journal": False} | options))
    engine = ScriptedEngine(tok, script)
    eps = wf.rollout([PROBLEM], _Pool(model or object(), tok), engine, group_size=1,
                     generator=torch.Generator().manual_seed(0))
    return env, eps[0], engine


def _cfg(tmp_path, *extra):
    return load_config(None, ["method=grpo", "env.name=tool_use", f"output_dir={tmp_path}", *extra])


def test_a_tool_call_runs_in_the_sandbox_and_its_result_is_the_next_prompt_token_for_token(tiny, tmp_path):
    def script(prompt):
        return "```python\nprint(17 * 23)\n```" if "391" not in prompt else "so \\boxed{391}"

    env, ep, _ = _rollout(_cfg(tmp_path), tiny, script)
    assert len(ep.turns) == 2 and ep.info["stop"] == "answered" and ep.prediction == "391"
    first, second = ep.turns
    assert first.info["tool_calls"] == [{"name": "python", "arguments": {"code": "print(17 * 23)\n"}}]
    assert first.info["tool_results"] == ["391"] and first.answer is None
    # the second prompt continues the first: its prompt ids, the response ids as sampled, the tool message
    n = len(first.prompt_ids) + len(first.response_ids)
    assert second.prompt_ids[:n] == first.prompt_ids + first.response_ids
    assert "tool python: 391" in second.prompt_text
    from satseq.methods.base import RewardContext

    env.assign_rewards(_cfg(tmp_path), [ep], RewardContext())
    assert [t.reward for t in ep.turns] == [0.0, 1.0] and ep.prediction_correct


def test_errors_and_timeouts_are_tool_messages_and_the_episode_goes_on(tiny, tmp_path):
    calls = iter(["```python\nwhile True: pass\n```", "```python\n1/0\n```", "\\boxed{391}"])
    env, ep, _ = _rollout(_cfg(tmp_path, "env.tool_use.timeout_s=1"), tiny, lambda prompt: next(calls))
    assert ep.info["stop"] == "answered" and len(ep.turns) == 3
    timeout, error = ep.turns[0].info["tool_results"][0], ep.turns[1].info["tool_results"][0]
    assert timeout.startswith("error: time limit exceeded") and "ZeroDivisionError" in error
    from satseq.envs.tool_use.session import tool_metrics

    m = tool_metrics([ep])
    assert m["tools/calls"] == 2 and m["tools/errors"] == 2 and m["tools/timeouts"] == 1 and m["tools/turns"] == 3


def test_the_budget_and_max_turns_bound_every_episode(tiny, tmp_path):
    from satseq.envs.tool_use.session import BUDGET_SPENT

    always = "```python\nprint(1)\n```"
    _, ep, _ = _rollout(_cfg(tmp_path, "env.tool_use.max_tool_calls=1", "env.max_turns=3"), tiny, lambda p: always)
    assert len(ep.turns) == 3 and ep.info["stop"] == "turn_limit" and ep.prediction is None
    assert [t.info["tool_results"] for t in ep.turns] == [["1"], [BUDGET_SPENT], [BUDGET_SPENT]]


def test_the_models_context_ends_an_episode_before_a_prompt_that_cannot_fit(tiny, tmp_path):
    model, _ = tiny  # the tiny model's context: a few hundred characters
    always = "```python\nprint('x' * 40)\n```"
    _, ep, _ = _rollout(_cfg(tmp_path, "env.max_turns=50"), tiny, lambda p: always, model=model)
    context = model.config.max_position_embeddings
    assert ep.info["stop"] == "context" and 1 <= len(ep.turns) < 50
    assert all(len(t.prompt_ids) + 64 <= context for t in ep.turns)


def test_a_malformed_or_unknown_call_is_answered_with_an_error(tiny, tmp_path):
    calls = iter(["```python\nprint(1)", "\\boxed{391}"])  # an unclosed fence
    _, ep, _ = _rollout(_cfg(tmp_path), tiny, lambda p: next(calls))
    assert ep.turns[0].info["tool_results"][0].startswith("error: could not parse the tool call")
    assert ep.prediction == "391"


_COUNTER = {"n": 0}


def counter(step: int) -> str:
    """
    A tool whose answer changes from call to call (as a clock would).

    Args:
        step: Any number.
    """
    _COUNTER["n"] += 1
    return str(_COUNTER["n"])


def test_results_are_recorded_and_a_repeated_turn_replays_them(tiny, tmp_path):
    """A resumed stage samples a turn it sampled before the kill: the call takes the recorded result,
    so a tool that answers differently each time (a clock) does not change the resumed run."""
    cfg = _cfg(tmp_path, f"env.tool_use.tools=['{__name__}:counter']", "env.tool_use.parser=hermes")
    script = lambda p: '<tool_call>{"name": "counter", "arguments": {"step": 1}}</tool_call>' if "tool" not in p \
        else "\\boxed{1}"  # noqa: E731
    _, a, _ = _rollout(cfg, tiny, script, journal=True)
    _, b, _ = _rollout(cfg, tiny, script, journal=True)  # the same turn again: replayed from the journal
    assert a.turns[0].info["tool_results"] == b.turns[0].info["tool_results"] == ["1"] and _COUNTER["n"] == 1
    lines = (cfg.run_dir / "tool_calls.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["result"] == "1"
    _, c, _ = _rollout(cfg, tiny, script, journal=False)  # no journal: it runs again
    assert c.turns[0].info["tool_results"] == ["2"]


def test_bad_tool_settings_are_one_line_errors(tmp_path):
    from satseq.errors import ConfigError

    with pytest.raises(ConfigError, match="env.tool_use.parser.*unknown tool parser 'nope'"):
        _cfg(tmp_path, "env.tool_use.parser=nope")
    with pytest.raises(ConfigError, match="env.tool_use.tools"):
        _cfg(tmp_path, "env.tool_use.tools=[]")
    with pytest.raises(ConfigError, match="env.tool_use.tools.*cannot load 'no_such_module:f'"):
        get_env("tool_use").tools(_cfg(tmp_path, "env.tool_use.tools=['no_such_module:f']"))


def test_grpo_in_the_tool_environment_resumes_bit_for_bit_after_sigkill(tiny_dir, tmp_path):
    """GRPO with the Python tool on a reasoning-gym task (its own scorer as the reward), killed in the middle
    of stage 1 and resumed: the same rows as a run straight through (SmolLM2: tests/test_smollm2_slow.py)."""
    from contract_cli import metric_rows, train_kill_resume

    task = "reasoning_gym:chain_sum?min_terms=2&max_terms=3&held_out=0"
    args = ["train", f"model.path={tiny_dir}", "method=grpo", "env.name=tool_use", "trainer.train_batch_size=2",
            f"data.train={task}", f"data.eval={task}",
            "grpo.group_size=2", "rollout.max_new_tokens=8", "data.train_size=8", "data.eval_size=4", "threads=1",
            "trainer.tensorboard=false", "trainer.progress=false", "trainer.num_stages=2", "ppo.lr=1e-3",
            f"output_dir={tmp_path}"]
    a, b = train_kill_resume(__file__, args, tmp_path)
    rows = metric_rows(a)
    assert len(rows) == 2 and rows == metric_rows(b) and all("tools/calls" in r for r in rows)
