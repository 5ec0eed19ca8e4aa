"""Baselines as registry entries (RLOO, REINFORCE++, Dr. GRPO, DAPO, GSPO): each estimator against a
slow per-element reference, DAPO's shaping and dynamic sampling by hand, every ``grpo.loss`` preset
reachable from a config override, and a short training run of each preset on the tiny model."""
from __future__ import annotations

import statistics

import pytest
import torch

from satseq.algos import get_adv
from satseq.algos.advantages import reinforce_pp_advantages, rloo_advantages
from satseq.algos.losses import ppo_clip_loss
from satseq.algos.shaping import informative_groups, overlong_penalty
from satseq.config import load_config
from satseq.errors import ConfigError
from satseq.methods.grpo.dynamic_sampling import dynamic_sample
from satseq.methods.grpo.presets import preset_names
from satseq.records import Episode, Problem, Turn

GIDS = [3, 3, 3, 7, 7, 1, 9, 9, 9, 9, 3, 7, 5, 5]  # sizes 4, 3, 1, 4, 2 (unsorted); group 5 made constant


def _rewards(seed: int) -> torch.Tensor:
    r = torch.rand(len(GIDS), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    r[12] = r[13] = 0.25
    return r


# ---------------------------------------------------------------- RLOO


def _rloo_ref(rewards: list[float], gids: list[int]) -> list[float]:
    out = []
    for i, r in enumerate(rewards):
        others = [rewards[j] for j in range(len(rewards)) if gids[j] == gids[i] and j != i]
        out.append(r - sum(others) / len(others) if others else 0.0)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rloo_matches_leave_one_out_loop(seed):
    r = _rewards(seed)
    got = rloo_advantages(r, torch.tensor(GIDS))
    assert torch.allclose(got, torch.tensor(_rloo_ref(r.tolist(), GIDS), dtype=torch.float64), atol=1e-12)
    assert got[12] == 0 and got[13] == 0 and got[5] == 0  # constant group, group of one: exactly 0
    assert get_adv("rloo") is rloo_advantages


def test_rloo_hand_case():
    # rewards 1, 0, 0 in one group: A = 1 - 0, 0 - 0.5, 0 - 0.5
    adv = rloo_advantages(torch.tensor([1, 0, 0]), torch.tensor([0, 0, 0]))
    assert torch.allclose(adv, torch.tensor([1.0, -0.5, -0.5]))


# ---------------------------------------------------------------- REINFORCE++


def _rpp_ref(rewards: list[float], gids: list[int], baseline: bool, eps: float) -> list[float]:
    a = []
    for i, r in enumerate(rewards):
        grp = [rewards[j] for j in range(len(rewards)) if gids[j] == gids[i]]
        a.append((r - statistics.mean(grp) if len(grp) > 1 else 0.0) if baseline else r)
    mu, sd = statistics.mean(a), statistics.stdev(a)
    return [(x - mu) / (sd + eps) for x in a]


@pytest.mark.parametrize("baseline", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_reinforce_pp_matches_batch_normalised_loop(seed, baseline):
    r = _rewards(seed)
    got = reinforce_pp_advantages(r, torch.tensor(GIDS), baseline=baseline)
    ref = torch.tensor(_rpp_ref(r.tolist(), GIDS, baseline, 1e-6), dtype=torch.float64)
    assert torch.allclose(got, ref, atol=1e-12)
    assert abs(got.mean().item()) < 1e-12 and abs(got.std().item() - 1) < 1e-4  # global batch normalisation
    assert get_adv("reinforce_pp") is reinforce_pp_advantages


def test_reinforce_pp_hand_case_and_no_signal():
    # groups {1, 0} and {1, 1}: a = .5, -.5, 0, 0; batch mean 0, unbiased std sqrt(1/6)
    adv = reinforce_pp_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]), eps=0.0)
    s = (1 / 6) ** 0.5
    assert torch.allclose(adv, torch.tensor([0.5 / s, -0.5 / s, 0.0, 0.0]))
    assert torch.equal(reinforce_pp_advantages(torch.ones(4), torch.tensor([0, 0, 1, 1])), torch.zeros(4))


# ---------------------------------------------------------------- Dr. GRPO's constant normaliser


def test_dr_grpo_aggregation_is_token_sum_over_a_constant():
    """Liu et al. 2025: ``(1/B) sum_b sum_t l_bt / L_max``; the updater passes norm_const = L_max * B."""
    g = torch.Generator().manual_seed(7)
    B, T, L_max = 3, 5, 16
    old = -torch.rand(B, T, generator=g, dtype=torch.float64)
    logp = (old + 0.1 * torch.randn(B, T, generator=g, dtype=torch.float64)).requires_grad_()
    adv = torch.tensor([1.0, -0.5, 0.3], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    loss, _ = ppo_clip_loss(logp, old, adv, mask, 0.2, 0.2, agg_mode="seq-mean-token-sum-norm",
                            norm_const=float(L_max * B))
    ref = 0
    for b in range(B):
        for t in range(T):
            if mask[b, t]:
                r = torch.exp(logp[b, t] - old[b, t])
                ref = ref + torch.maximum(-adv[b] * r, -adv[b] * r.clamp(0.8, 1.2))
    assert torch.allclose(loss, ref / L_max / B)


# ---------------------------------------------------------------- DAPO shaping and dynamic sampling


def test_overlong_penalty_hand_cases():
    # L_max 10, L_cache 4: free up to 6 tokens, then -1/4 per token, -1 at 10 and beyond
    got = overlong_penalty(torch.tensor([0, 6, 7, 8, 9, 10, 12]), max_len=10, buffer=4)
    assert torch.allclose(got, torch.tensor([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0]))
    assert torch.equal(overlong_penalty(torch.tensor([3, 50]), max_len=10, buffer=0), torch.zeros(2))
    with pytest.raises(ValueError, match="exceeds"):
        overlong_penalty(torch.tensor([1]), max_len=4, buffer=5)


def test_informative_groups_hand_case():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.0])
    g = torch.tensor([0, 0, 1, 1, 2, 3, 3])  # mixed, all equal, single, mixed
    assert informative_groups(r, g).tolist() == [True, True, False, False, False, True, True]


def _episodes(rewards_per_group: list[list[float]], tag: str) -> list[Episode]:
    out = []
    for gi, rs in enumerate(rewards_per_group):
        for r in rs:
            t = Turn(role="policy", index=0, prompt_text=tag, prompt_ids=[1], response_ids=[2], behaviour_logprobs=[0.0],
                     text="", finish_reason="eos", reward=r)
            out.append(Episode(problem=Problem(f"{tag}{gi}", "p", "1"), group=gi, turns=[t]))
    return out


def _drawer(rounds):
    calls = []

    def draw(n):
        calls.append(n)
        return _episodes(rounds[len(calls) - 1], f"r{len(calls)}_"), {"reward/x": float(len(calls))}
    return draw, calls


def test_dynamic_sampling_refills_and_renumbers():
    # batch of 3 prompts: round 1 keeps 1 group, round 2 keeps 2 more, round 3 is never drawn
    rounds = [[[1, 1], [0, 1], [0, 0]], [[1, 0], [1, 1], [0, 1]], [[0, 1]] * 3]
    draw, calls = _drawer(rounds)
    eps, m = dynamic_sample(draw, batch_size=3, max_rounds=5)
    assert calls == [3, 3]
    assert [(ep.problem.problem_id, ep.group) for ep in eps] == [
        ("r1_1", 0), ("r1_1", 0), ("r2_0", 1), ("r2_0", 1), ("r2_2", 2), ("r2_2", 2)]
    assert m["rollout/filtered_groups"] == 3 and m["rollout/resample_rounds"] == 1
    assert m["rollout/kept_groups"] == 3 and m["reward/x"] == 1.5


def test_dynamic_sampling_truncates_stops_at_max_rounds_and_falls_back():
    draw, calls = _drawer([[[1, 0], [0, 1]], [[1, 0]]])
    eps, m = dynamic_sample(draw, batch_size=1, max_rounds=3)  # two informative groups, one kept
    assert calls == [1] and {ep.group for ep in eps} == {0} and len(eps) == 2
    draw, calls = _drawer([[[1, 1], [0, 1]], [[0, 0], [1, 1]], [[1, 1], [1, 1]]])
    eps, m = dynamic_sample(draw, batch_size=2, max_rounds=1)  # rounds run out: train on what was kept
    assert calls == [2, 2] and m["rollout/kept_groups"] == 1 and m["rollout/filtered_groups"] == 3
    draw, calls = _drawer([[[1, 1]], [[0, 0]]])
    eps, m = dynamic_sample(draw, batch_size=1, max_rounds=1)  # nothing informative: last round unfiltered
    assert calls == [1, 1] and [ep.problem.problem_id for ep in eps] == ["r2_0", "r2_0"]
    assert m["rollout/kept_groups"] == 0 and m["rollout/filtered_groups"] == 2


def test_dynamic_sampling_filters_on_the_task_reward_not_the_overlong_penalty():
    eps = _episodes([[1, 1]], "a")
    eps[0].turns[0].info["task_reward"], eps[0].turns[0].reward = 1.0, 0.5  # penalised, same accuracy
    eps[1].turns[0].info["task_reward"] = 1.0
    out, m = dynamic_sample(lambda n: (eps, {}), batch_size=1, max_rounds=0)
    assert m["rollout/filtered_groups"] == 1 and m["rollout/kept_groups"] == 0 and out == eps  # fallback


def test_grpo_assign_rewards_adds_the_overlong_penalty():
    from satseq.methods.base import RewardContext
    from satseq.registry import get_method

    cfg = load_config(None, ["method=grpo", "grpo.loss=dapo", "rollout.max_new_tokens=10"])
    assert cfg.grpo.overlong_buffer == 2  # 10 // 5
    eps = _episodes([[0, 0, 0]], "p")
    for ep, n in zip(eps, (8, 9, 10)):
        ep.turns[0].response_ids = [5] * n
    m = get_method("grpo").assign_rewards(cfg, eps, RewardContext(custom=lambda p, r, a: 1.0))
    assert [ep.turns[0].reward for ep in eps] == [1.0, 0.5, 0.0]
    assert [ep.turns[0].info["task_reward"] for ep in eps] == [1.0, 1.0, 1.0]
    assert abs(m["reward/overlong_penalty"] - (-0.5)) < 1e-9


# ---------------------------------------------------------------- presets from the config


EXPECTED = {
    "grpo": dict(adv_estimator="grpo", policy_loss="ppo", loss_agg_mode="seq-mean-token-mean",
                 epsilon_low=0.2, epsilon_high=0.2, dynamic_sampling=False, overlong_buffer=0),
    "dr_grpo": dict(adv_estimator="dr_grpo", policy_loss="ppo", loss_agg_mode="seq-mean-token-sum-norm",
                    epsilon_low=0.2, epsilon_high=0.2, dynamic_sampling=False, overlong_buffer=0),
    "dapo": dict(adv_estimator="grpo", policy_loss="ppo", loss_agg_mode="token-mean",
                 epsilon_low=0.2, epsilon_high=0.28, dynamic_sampling=True, overlong_buffer=9),
    "gspo": dict(adv_estimator="grpo", policy_loss="gspo", loss_agg_mode="seq-mean-token-mean",
                 epsilon_low=3e-4, epsilon_high=4e-4, dynamic_sampling=False, overlong_buffer=0),
    "rloo": dict(adv_estimator="rloo", policy_loss="ppo", loss_agg_mode="seq-mean-token-sum",
                 epsilon_low=0.2, epsilon_high=0.2, dynamic_sampling=False, overlong_buffer=0),
    "reinforce_pp": dict(adv_estimator="reinforce_pp", policy_loss="ppo", loss_agg_mode="token-mean",
                         epsilon_low=0.2, epsilon_high=0.2, dynamic_sampling=False, overlong_buffer=0),
}


def test_every_preset_is_tested():
    assert sorted(EXPECTED) == sorted(preset_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_from_an_override(name, tmp_path):
    from satseq.config import save_config

    cfg = load_config(None, ["method=grpo", f"grpo.loss={name}"])
    section = {"policy_loss": cfg.ppo, "loss_agg_mode": cfg.ppo, "epsilon_low": cfg.ppo, "epsilon_high": cfg.ppo}
    assert {k: getattr(section.get(k, cfg.grpo), k) for k in EXPECTED[name]} == EXPECTED[name]
    save_config(cfg, tmp_path / "c.yaml")  # the saved run config reads back identically
    assert load_config(tmp_path / "c.yaml") == cfg


def test_explicit_keys_win_over_the_preset(tmp_path):
    cfg = load_config(None, ["method=grpo", "grpo.loss=dapo", "ppo.epsilon_high=0.3", "grpo.dynamic_sampling=false"])
    assert (cfg.ppo.epsilon_high, cfg.grpo.dynamic_sampling, cfg.ppo.loss_agg_mode) == (0.3, False, "token-mean")
    p = tmp_path / "c.yaml"
    p.write_text("method: grpo\ngrpo:\n  loss: dr_grpo\nppo:\n  loss_agg_mode: token-mean\n")
    cfg = load_config(p, ["rollout.max_new_tokens=20"])
    assert (cfg.grpo.adv_estimator, cfg.ppo.loss_agg_mode) == ("dr_grpo", "token-mean")
    assert load_config(None, ["method=grpo", "grpo.loss=dapo", "rollout.max_new_tokens=20"]).grpo.overlong_buffer == 4


def test_unknown_preset_and_misuse_are_one_line_errors():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["method=grpo", "grpo.loss=ppo2"])
    assert str(e.value) == ("config key 'grpo.loss': unknown baseline preset 'ppo2' "
                            "(known: grpo, dr_grpo, dapo, gspo, rloo, reinforce_pp)")
    with pytest.raises(ConfigError, match=r"config key 'grpo.loss': only method=grpo reads it \(method=pag\)"):
        load_config(None, ["method=pag", "grpo.loss=dapo"])
    with pytest.raises(ConfigError, match="config key 'grpo.overlong_buffer': 60 exceeds rollout.max_new_tokens"):
        load_config(None, ["method=grpo", "grpo.overlong_buffer=60"])


def test_a_section_override_leaves_method_defaults_applicable():
    # an override in a section marks only that key as set (MLMT's 96-token default still applies)
    assert load_config(None, ["method=mlmt", "rollout.temperature=0.7"]).rollout.max_new_tokens == 96


# ---------------------------------------------------------------- training each preset


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_preset_trains_on_the_tiny_model(name, tiny_dir, tmp_path):
    """Two stages per preset, in process; a length-based custom reward gives every group some spread
    (the random tiny model is never correct), so each update must move the weights."""
    import json
    import math

    from safetensors.torch import load_file

    from satseq.loop import train

    cfg = load_config(None, [f"model.path={tiny_dir}", "model.lora.enabled=false", "method=grpo", f"grpo.loss={name}",
                             "trainer.num_stages=2", "trainer.train_batch_size=2", "grpo.group_size=3",
                             "ppo.mini_batch_size=3", "ppo.lr=1e-3", "rollout.max_new_tokens=6",
                             "data.train_size=16", "data.eval_size=4", "threads=1", "trainer.tensorboard=false",
                             "trainer.progress=false", f"output_dir={tmp_path}", "run_name=r"])
    run = train(cfg, console=lambda *a, **k: None, reward_fn=lambda prompt, response, answer: float(len(response) % 3))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(math.isfinite(r["policy/loss"]) for r in rows)
    if name == "dapo":
        assert all("rollout/filtered_groups" in r and "reward/overlong_penalty" in r for r in rows)
    before, after = load_file(tiny_dir / "model.safetensors"), load_file(run / "policy_stage_2" / "model.safetensors")
    common = [k for k in after if k in before and before[k].shape == after[k].shape]
    assert common and any(not torch.equal(before[k], after[k]) for k in common)
    assert all(torch.isfinite(after[k]).all() for k in common)
