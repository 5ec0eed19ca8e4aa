"""The tool environment's embedded task (a product, satseq/envs/tool_use/task.py) and its warm start: the
warm start's transcripts are the environment's own episodes, token for token; half call the tool; the
probes grade the behaviours the transcripts teach; the held-out pool is never trained on, whatever the
SFT seed; ``env.name=single`` shows the same problems with the same ids; the warm start builds on the
base warm start, once."""
from __future__ import annotations

import json

import torch

from conftest import ScriptedEngine, ScriptedPool
from satseq.config import load_config
from satseq.envs.tool_use.task import (P_TOOL, ProductTask, behaviour, call_text, episode_examples, tool_examples,
                                       tool_probes)
from satseq.registry import get_env
from satseq.rollout.types import SamplingParams


class _SampledEngine(ScriptedEngine):
    """The scripted text, ended by the EOS id as a sampling engine ends a response."""

    def generate(self, model, prompts, sampling, generator=None):
        out = super().generate(model, prompts, sampling, generator)
        for g in out:
            g.response_ids = list(g.response_ids) + [self.tokenizer.eos_token_id]
        return out



def _cfg(tmp_path, *extra):
    return load_config(None, ["method=grpo", "env.name=tool_use", f"output_dir={tmp_path}", *extra])


def _episode(tmp_path, tok, problem, script):
    cfg = _cfg(tmp_path)
    env = get_env("tool_use")
    fmt = env.prompt_format("embedded", tok, cfg)
    wf = env.make_workflow(cfg, {"policy": "policy"}, fmt, SamplingParams(max_new_tokens=48), options={"journal": False})
    ep, = wf.rollout([problem], ScriptedPool(tok), _SampledEngine(tok, script), group_size=1,
                     generator=torch.Generator().manual_seed(0))
    return env, cfg, ep


def test_the_warm_starts_transcripts_are_the_tool_environments_episodes_token_for_token(tiny, tmp_path):
    _, tok = tiny
    p = ProductTask(0).problems(1, split="train")[0]
    a, b = p.meta["a"], p.meta["b"]
    env, cfg, ep = _episode(tmp_path, tok, p, lambda prompt: "\\boxed{" + p.answer + "}" if "tool python:" in prompt
                            else call_text(a, b))
    assert ep.info["stop"] == "answered" and ep.prediction == p.answer and ep.turns[0].info["tool_results"] == [p.answer]
    pairs = episode_examples(a, b, True, tok.eos_token)
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert len(pairs) == len(ep.turns) == 2
    for (prompt, completion), turn in zip(pairs, ep.turns):
        assert enc(prompt) == turn.prompt_ids and enc(completion) + [tok.eos_token_id] == turn.response_ids
    from satseq.methods.base import RewardContext

    env.assign_rewards(cfg, [ep], RewardContext())
    assert [t.reward for t in ep.turns] == [0.0, 1.0]
    # the direct episode: one turn, the same first prompt
    _, _, direct = _episode(tmp_path, tok, p, lambda prompt: "\\boxed{1}")
    (prompt, completion), = episode_examples(a, b, False, tok.eos_token)
    assert enc(prompt) == direct.turns[0].prompt_ids and len(direct.turns) == 1 and not direct.prediction_correct


def test_about_half_the_warm_start_episodes_call_the_tool_and_none_is_held_out():
    held = {q.problem for q in ProductTask(0).problems(200, split="eval")}
    pairs = tool_examples(4000, seed=0, exclude=held)
    def tool_share(pairs) -> float:  # of the episodes: their first turns (a prompt without a tool message)
        firsts = [c for pr, c in pairs if "tool python:" not in pr]
        return sum(behaviour(c) == "tool" for c in firsts) / len(firsts)

    assert abs(tool_share(pairs) - P_TOOL) < 0.03
    assert abs(tool_share(tool_examples(4000, seed=0, p_tool=0.2)) - 0.2) < 0.03
    problems = {pr.split("|")[2].split("=")[0] for pr, _ in pairs}
    assert not problems & held
    # every tool episode copies what the program prints into its answer
    for pr, c in pairs:
        if "tool python:" in pr:
            printed = pr.rsplit("tool python: ", 1)[1].strip()
            x, y = map(int, pr.split("|")[2].split("=")[0].split("*"))
            assert printed == str(x * y) and c == "\\boxed{" + printed + "}"


def test_the_probes_pass_the_transcripts_behaviours_and_fail_others():
    from satseq.models.warm_start import probe_answer

    p = ProductTask(0).problems(1, split="valid")[0]
    a, b = p.meta["a"], p.meta["b"]
    probes = {q.kind: q for q in tool_probes([p])}
    assert set(probes) == {"call", "copy", "direct"}
    tool_pairs = dict(enumerate(episode_examples(a, b, True, "<eos>")))
    for kind, (prompt, completion) in (("call", tool_pairs[0]), ("copy", tool_pairs[1]),
                                       ("direct", episode_examples(a, b, False, "<eos>")[0])):
        q = probes[kind]
        assert q.prompt == prompt and completion.startswith(q.head)
        assert probe_answer(q.head + completion[len(q.head):]) == q.answer  # the transcript passes
    assert probe_answer(probes["call"].head + f"{a}*{b + 1})\n```") != probes["call"].answer  # a wrong program fails
    assert probe_answer("\\boxed{" + str(a * b + 1) + "}") != probes["copy"].answer


def test_the_held_out_pool_is_the_same_for_every_sft_seed_and_the_other_streams_are_not():
    ev0, ev1 = (ProductTask(s).problems(300, split="eval") for s in (0, 1))
    assert [q.problem for q in ev0] == [q.problem for q in ev1]
    tr0, tr1 = (ProductTask(s).problems(50, split="train") for s in (0, 1))
    assert [q.problem for q in tr0] != [q.problem for q in tr1]
    assert all(int(q.answer) == q.meta["a"] * q.meta["b"] and 100 <= q.meta["a"] <= 999 and 10 <= q.meta["b"] <= 99
               for q in ev0 + tr0)
    from satseq.runtime import EMBEDDED_TASK_SEED

    assert EMBEDDED_TASK_SEED == 0  # runs draw their problems from task seed 0; its eval stream is the fixed one


def test_single_and_tool_use_show_the_tool_task_with_the_same_ids(tiny, tmp_path):
    from satseq.runtime import load_datasets

    _, tok = tiny
    tool_cfg = _cfg(tmp_path, "data.train_size=8", "data.eval_size=8")
    single_cfg = load_config(None, ["method=grpo", "env.name=single", "data.embedded_task=tool_use",
                                    "data.train_size=8", "data.eval_size=8", f"output_dir={tmp_path}"])
    tool_env, single_env = get_env("tool_use"), get_env("single")
    tool_sets, single_sets = load_datasets(tool_cfg, tool_env), load_datasets(single_cfg, single_env)
    assert tool_sets == single_sets and all("*" in q.problem for q in tool_sets[0] + tool_sets[1])
    tool_fmt = tool_env.prompt_format("embedded", tok, tool_cfg)
    single_fmt = single_env.prompt_format("embedded", tok, single_cfg)
    for q in tool_sets[1]:
        assert tool_fmt.encode(tool_fmt.single(q.problem)) == single_fmt.encode(single_fmt.single(q.problem))
    # a chat model keeps the problem under its template; trl_env keeps the problem as is and the base task
    trl = get_env("trl_env")
    assert trl.warm_start_stem is None and type(trl.embedded_task(0)).__name__ == "ArithmeticTask"


def test_sft_knows_the_tool_warm_start_and_it_builds_on_the_base_once(tmp_path):
    from satseq.cli import _env_warm_starts
    from satseq.envs.tool_use.warm_start import ensure_tool_warm_start, tool_warm_start_dir
    from satseq.models.sft import SFTConfig
    from satseq.models.tiny import build_tiny_model, save_model_dir
    from satseq.models.warm_start import warm_start_dir

    builders = _env_warm_starts()
    assert builders["tool_use"][0] == "tool" and "trl_env" not in builders
    base = warm_start_dir(tmp_path)
    model, tok = build_tiny_model(seed=0)
    save_model_dir(model, tok, base)
    (base / "warm_start.json").write_text("{}")
    out = ensure_tool_warm_start(tmp_path, cfg=SFTConfig(steps=2, batch_size=4), n_examples=40, eval_size=10,
                                 show_progress=False, console=lambda *a: None)
    assert out == tool_warm_start_dir(tmp_path) and (out / "model.safetensors").exists()
    info = json.loads((out / "warm_start.json").read_text())
    assert info["base"] == str(base) and info["sft"]["steps"] == 2 and info["p_tool"] == P_TOOL
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
    assert get_env("tool_use").ensure_warm_start(tmp_path) == out  # built once, then found
