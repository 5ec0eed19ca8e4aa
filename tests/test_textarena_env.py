"""``env.name=textarena``: TextArena's TicTacToe played by scripted players (each player's conversation
continued token for token, the outcome on each player's last turn, per player; invalid moves as TextArena
handles them), per-role credit in the multi-agent updates, and 2-stage training on the tiny model with
GRPO against the random opponent, the shared policy, SAT-Seq and the simultaneous update."""
from __future__ import annotations

import pytest
import torch

from conftest import ScriptedEngine, ScriptedPool
from contract_cli import metric_rows, train_kill_resume
from satseq.config import load_config
from satseq.errors import ConfigError
from satseq.methods.base import RewardContext
from satseq.registry import get_env
from satseq.rollout.types import SamplingParams

pytest.importorskip("textarena")

FAST = ["trainer.train_batch_size=2", "grpo.group_size=2", "sat_seq.group_size=2", "rollout.max_new_tokens=6",
        "data.train_size=8", "data.eval_size=4", "threads=1", "trainer.tensorboard=false", "trainer.progress=false",
        "trainer.num_stages=2", "trainer.eval_every=2", "ppo.lr=1e-3", "sat_seq.lr=1e-3"]



def _play(tok, overrides, script, seeds=(0,), method="shared_policy"):
    cfg = load_config(None, [f"method={method}", "env.name=textarena", "env.textarena.observations=all", *overrides])
    env = get_env("textarena")
    fmt = env.prompt_format("embedded", tok, cfg)
    roles = {r: "policy" for r in env.role_names(cfg)}
    wf = env.make_workflow(cfg, roles, fmt, SamplingParams(max_new_tokens=64))
    problems = [p for p in env.embedded_task().problems(max(seeds) + 1) if p.meta["seed"] in seeds]
    eps = wf.rollout(problems, ScriptedPool(tok), ScriptedEngine(tok, script), group_size=1,
                     generator=torch.Generator().manual_seed(0))
    env.assign_rewards(cfg, eps, RewardContext())
    return env, cfg, eps


def _moves(*moves):
    it = iter(moves)
    return lambda prompt: next(it)


def test_two_players_each_continue_their_own_conversation_and_get_their_own_outcome(tiny):
    _, tok = tiny
    # O: 0, 1, 2 (a row, after one invalid move); X: 3, 4
    env, cfg, (ep,) = _play(tok, ["env.textarena.opponent=none"], _moves("[0]", "[3]", "no move", "[1]", "[4]", "[2]"))
    assert [t.role for t in ep.turns] == ["player_0", "player_1", "player_0", "player_0", "player_1", "player_0"]
    assert ep.info["stop"] == "game_over" and ep.info["outcome"] == {"player_0": "win", "player_1": "loss"}
    for role in ("player_0", "player_1"):  # each player's prompt continues its previous prompt + sampled ids
        turns = [t for t in ep.turns if t.role == role]
        for a, b in zip(turns, turns[1:]):
            assert b.prompt_ids[:len(a.prompt_ids) + len(a.response_ids)] == a.prompt_ids + a.response_ids
    # a player's next message is only what it received since: the other's move, the board
    assert "You are Player 1" in ep.turns[1].prompt_text and "You are Player 1" not in \
        ep.turns[4].prompt_text[len(ep.turns[1].prompt_text):]
    assert "[Player 1] [3]" in ep.turns[2].prompt_text
    # the invalid move: TextArena's bracket rule, its message to the player, the same player again
    assert ep.turns[2].info["action"] == "[no move]" and ep.turns[2].info["invalid_move"]
    assert "attempted an invalid move" in ep.turns[3].prompt_text[len(ep.turns[2].prompt_text):]
    assert ep.info["invalid_moves"] == {"player_0": 1, "player_1": 0}
    # per-player credit: each outcome on its own player's last turn, nothing of it on the other's
    assert [t.reward for t in ep.turns] == [0.0, 0.0, 0.0, 0.0, -1.0, 1.0]
    m = env.rollout_metrics(cfg, [ep])
    assert m["textarena/player_0/win_rate"] == 1.0 and m["textarena/player_1/loss_rate"] == 1.0
    assert m["textarena/player_0/invalid_moves"] == 1.0 and m["textarena/turns"] == 6.0


def test_a_second_invalid_move_in_a_row_loses_the_game(tiny):
    _, tok = tiny
    _, _, (ep,) = _play(tok, ["env.textarena.opponent=none"], _moves("[4]", "[4]", "[9]"))
    assert ep.info["outcome"] == {"player_0": "win", "player_1": "loss"}  # TextArena's error allowance is 1
    assert [t.info["invalid_move"] for t in ep.turns] == [False, True, True]
    assert [t.reward for t in ep.turns] == [1.0, 0.0, -1.0]
    # the format penalty: each invalid move costs its player, on that player's last turn; the outcome is unchanged
    _, _, (ep,) = _play(tok, ["env.textarena.opponent=none", "env.textarena.invalid_move_penalty=0.25"],
                        _moves("[4]", "[4]", "[9]"))
    assert ep.info["outcome"] == {"player_0": "win", "player_1": "loss"}
    assert [t.reward for t in ep.turns] == [1.0, 0.0, -1.5]
    # (the two-player game of the test above: player_0's one invalid move costs it 0.25 of its win)
    env, cfg, (ep,) = _play(tok, ["env.textarena.opponent=none", "env.textarena.invalid_move_penalty=0.25"],
                            _moves("[0]", "[3]", "no move", "[1]", "[4]", "[2]"))
    assert [t.reward for t in ep.turns] == [0.0, 0.0, 0.0, 0.0, -1.0, 0.75]
    env.grade([ep])  # satseq eval grades without a run config: the game's outcome alone
    assert [t.reward for t in ep.turns] == [0.0, 0.0, 0.0, 0.0, -1.0, 1.0] and ep.turns[-1].correct
    with pytest.raises(ConfigError, match="env.textarena.invalid_move_penalty"):
        load_config(None, ["method=grpo", "env.name=textarena", "env.textarena.invalid_move_penalty=-1"])


def test_against_the_random_opponent_one_role_plays_and_the_opponent_is_seeded(tiny):
    _, tok = tiny

    def listed(prompt):
        import re

        line = [ln for ln in prompt.splitlines() if ln.startswith("Available Moves")][-1]
        return re.findall(r"'(\[\d\])'", line)[0]

    env, cfg, eps = _play(tok, ["env.textarena.opponent=random", "env.textarena.seat=1"], listed, seeds=(0, 1, 2),
                          method="grpo")
    _, _, again = _play(tok, ["env.textarena.opponent=random", "env.textarena.seat=1"], listed, seeds=(0, 1, 2),
                        method="grpo")
    assert env.role_names(cfg) == ["player"]
    for ep, ep2 in zip(eps, again):
        assert {t.role for t in ep.turns} == {"player"} and ep.info["seats"] == {"player": 1}
        assert ep.info["stop"] == "game_over" and ep.info["outcome"]["player"] in ("win", "draw", "loss")
        assert ep.info["opponent_moves"] >= len(ep.turns)  # the opponent moves first, inside the environment
        assert not any(t.info["invalid_move"] for t in ep.turns)
        assert [t.prompt_ids for t in ep.turns] == [t.prompt_ids for t in ep2.turns]  # the seed fixes its moves
        r = {"win": 1.0, "draw": 0.0, "loss": -1.0}[ep.info["outcome"]["player"]]
        assert [t.reward for t in ep.turns] == [0.0] * (len(ep.turns) - 1) + [r]
    assert len({tuple(t.info["action"] for t in ep.turns) for ep in eps}) > 1  # seeds differ


def test_per_role_credit_keeps_one_players_outcome_out_of_the_others_advantages():
    from satseq.methods.sat_seq.adv.seqaware import seqaware_advantages
    from satseq.records import Episode, Problem, Turn
    from satseq.update.turn_credit import turn_advantages

    def episode(group, roles, rewards):
        ep = Episode(problem=Problem(problem_id=group, problem="", answer=""), group=group)
        ep.turns = [Turn(role=r, agent="policy", index=k, prompt_text="", prompt_ids=[1], response_ids=[2],
                         behaviour_logprobs=[0.0], text="", finish_reason="eos", reward=x) for k, (r, x) in enumerate(zip(roles, rewards))]
        return ep

    def batch(x_rewards):  # a group of three games of different lengths; O wins, loses, draws
        return [episode(0, ["O", "X", "O", "X", "O"], [0, 0, 0, x_rewards[0], 1]),
                episode(0, ["O", "X", "O", "X"], [0, 0, -1, x_rewards[1]]),
                episode(0, ["O", "X", "O"], [0, x_rewards[2], 0])]

    kw = dict(gamma=1.0, lam=1.0, A_clip=5.0)
    a = turn_advantages(seqaware_advantages, batch([-1, 1, 0]), credit="role", **kw)
    b = turn_advantages(seqaware_advantages, batch([5, -3, 2]), credit="role", **kw)
    o_turns = [(0, 0), (0, 2), (0, 4), (1, 0), (1, 2), (2, 0), (2, 2)]
    assert all(a[e, k] == b[e, k] for e, k in o_turns)  # O's credit does not see X's rewards
    assert a[0, 0] > 0 > a[1, 0]  # O's first move: credited by O's own return (win vs loss)
    assert a[2, 1] == 0 and b[2, 1] != 0  # X's: its own (a draw in a and 2 in b)
    # the relay's credit is the estimator on the [E, K] rewards, as before
    eps = [episode(g, ["a", "b"], [float(g), 1.0 - g]) for g in (0, 0, 1, 1)]
    eps[1].turns[0].reward = 3.0
    ref = seqaware_advantages(torch.tensor([[t.reward for t in ep.turns] for ep in eps]),
                              torch.tensor([ep.group for ep in eps]), **kw).normalized
    assert torch.equal(turn_advantages(seqaware_advantages, eps, credit="turn", **kw), ref)


def test_config_errors_are_one_line():
    with pytest.raises(ConfigError, match="env.name.*method=grpo.*credited apart"):
        load_config(None, ["method=grpo", "env.name=textarena", "env.textarena.opponent=none"])
    with pytest.raises(ConfigError, match="sat_seq.agents.*one agent on each role.*player_0, player_1"):
        load_config(None, ["method=sat_seq", "env.name=textarena", "env.textarena.opponent=none",
                           "sat_seq.agents=[{name: a}, {name: b}, {name: c}]"])
    with pytest.raises(ConfigError, match="env.textarena.game"):
        load_config(None, ["method=grpo", "env.name=textarena", "env.textarena.game=NoSuchGame-v0"])
    with pytest.raises(ConfigError, match="env.textarena.observations.*'BOARD'"):
        load_config(None, ["method=grpo", "env.name=textarena", "env.textarena.observations=[BOARD]"])
    with pytest.raises(ConfigError, match="env.textarena.bogus"):
        load_config(None, ["method=grpo", "env.name=textarena", "env.textarena.bogus=1"])
    cfg = load_config(None, ["method=simultaneous", "env.name=textarena", "env.textarena.opponent=none"])
    assert [a.name for a in cfg.sat_seq.agents] == ["player_0", "player_1"]  # unset: one agent per role
    assert cfg.sat_seq.certificate.prompts == 0


@pytest.mark.parametrize("method,extra", [
    ("grpo", []),  # against the random opponent (the default)
    ("shared_policy", ["env.textarena.opponent=none"]),
    ("sat_seq", ["env.textarena.opponent=none", "sat_seq.agents=[{name: x_first}, {name: o_second}]"]),
    ("simultaneous", ["env.textarena.opponent=none"]),
])
def test_it_trains_with_every_method(method, extra, tiny_dir, tmp_path):
    import satseq

    r = satseq.train(None, [f"model.path={tiny_dir}", f"method={method}", "env.name=textarena", *extra, *FAST,
                            f"output_dir={tmp_path}", "run_name=r"])
    assert len(r.metrics) == 2
    roles = ["player"] if method == "grpo" else ["player_0", "player_1"]
    for role in roles:
        row = r.metrics[-1]
        assert sum(row[f"textarena/{role}/{o}_rate"] for o in ("win", "draw", "loss", "unfinished")) == pytest.approx(1)
        assert f"eval/textarena/{role}/win_rate" in row
    agents = {"grpo": ["policy"], "shared_policy": ["policy"], "sat_seq": ["x_first", "o_second"],
              "simultaneous": ["player_0", "player_1"]}[method]
    # the first player's agent moves in every game; the second's only after a valid first move (on the
    # untrained tiny model, rare): then the stage says it had no turns
    assert f"{agents[0]}/loss" in r.final, sorted(r.final)
    assert all(f"{a}/loss" in r.final or r.final.get(f"{a}/turns") == 0 for a in agents), sorted(r.final)


def test_a_killed_sat_seq_game_run_resumes_to_the_same_metrics(tiny_dir, tmp_path):
    args = ["train", "method=sat_seq", "env.name=textarena", "env.textarena.opponent=none", f"model.path={tiny_dir}",
            f"output_dir={tmp_path}", "trainer.num_stages=3", "trainer.save_every=1", "trainer.export_pt=false",
            *[a for a in FAST if not a.startswith("trainer.num_stages")]]
    whole, resumed = train_kill_resume(__file__, args, tmp_path)
    assert metric_rows(whole) == metric_rows(resumed) and len(metric_rows(whole)) == 3
    from safetensors.torch import load_file

    for agent in ("player_0", "player_1"):  # sat_seq.agents unset: one agent per role
        a = load_file(str(next((whole / f"{agent}_stage_3").glob("*.safetensors"))))
        b = load_file(str(next((resumed / f"{agent}_stage_3").glob("*.safetensors"))))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_worked_examples_come_between_the_system_message_and_the_first_observation(tiny):
    from test_conversation_tokens import chatml_tokenizer, smollm2_template

    tok = chatml_tokenizer(smollm2_template())
    cfg = load_config(None, ["method=grpo", "env.name=textarena", "env.textarena.system_prompt=Reply [k].",
                             "env.textarena.examples=[{observation: 'board A', move: '[0]'}, "
                             "{observation: 'board B', move: '[3]'}]"])
    env = get_env("textarena")
    fmt = env.prompt_format("chat", tok, cfg)
    wf = env.make_workflow(cfg, {"player": "policy"}, fmt, SamplingParams(max_new_tokens=8))
    problems = env.embedded_task().problems(1)
    (ep,) = wf.rollout(problems, ScriptedPool(tok), ScriptedEngine(tok, lambda prompt: "[4]"), group_size=1,
                       generator=torch.Generator().manual_seed(0))
    text = ep.turns[0].prompt_text
    order = [text.index(s) for s in ("<|im_start|>system\nReply [k].", "<|im_start|>user\nboard A",
                                     "<|im_start|>assistant\n[0]", "<|im_start|>user\nboard B",
                                     "<|im_start|>assistant\n[3]", "[GAME]")]
    assert order == sorted(order)
    assert text.count("[GAME]") and text.index("[GAME]") > order[-2]
    # the model's own turn follows the observation, and later turns do not repeat the examples
    assert ep.turns[0].info["action"] == "[4]"
    if len(ep.turns) > 1:
        assert "board A" not in ep.turns[1].prompt_text[len(text):]
    # the embedded model (no chat template) cannot take chat messages: a one-line error
    _, embedded_tok = tiny
    with pytest.raises(ConfigError, match="env.textarena.examples.*no chat template"):
        env.prompt_format("embedded", embedded_tok, cfg)
    with pytest.raises(ConfigError, match="env.textarena.examples"):
        load_config(None, ["method=grpo", "env.name=textarena", "env.textarena.examples=[{observation: a}]"])
