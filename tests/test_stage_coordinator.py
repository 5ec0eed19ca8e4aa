"""SAT-Seq stages on the tiny model with the real engine: block-coordinate updates, the KL check
shrinking a too-large step until it holds, rejecting for real (parameters and optimizer state
restored bit-for-bit, β × 1.5 per retry), and truncated IS weights."""
import copy

import pytest
import torch
from numerics import fp_tol

from satseq.config import load_config
from satseq.methods.sat_seq.stage_coordinator import StageCoordinator
from satseq.models.agents import AgentPool
from satseq.rewards.turn_rewards import assign_relay_rewards
from satseq.rollout.hf_engine import HFEngine
from satseq.rollout.types import SamplingParams
from satseq.records import Problem
from satseq.workflows.prompts import EmbeddedFormat
from satseq.workflows.relay import RelayWorkflow

AGENTS = ["agent_1", "agent_2", "agent_3"]


def _setup(tiny, **over):
    model, tok = tiny
    models = [copy.deepcopy(model) for _ in AGENTS]
    pool = AgentPool.full(AGENTS, models, tok)
    args = ["sat_seq.scheduler=fixed", "sat_seq.group_size=4", "sat_seq.mini_batch_size=8"]
    args += [f"{k}={v}" for k, v in over.items()]
    cfg = load_config(None, args)
    gen = torch.Generator().manual_seed(0)
    coord = StageCoordinator(cfg, pool, gen)
    wf = RelayWorkflow(AGENTS, EmbeddedFormat(tok), SamplingParams(max_new_tokens=8))
    return cfg, pool, coord, wf, HFEngine(tok), gen


def _episodes(wf, pool, eng, gen):
    problems = [Problem(i, f"{100 + i}+{200 + i}", str(300 + 2 * i)) for i in range(4)]
    eps = wf.rollout(problems, pool, eng, group_size=4, generator=gen)
    # a reward that varies inside groups (the random tiny model never solves the task)
    assign_relay_rewards(eps, own=1.0, team=0.0, custom=lambda p, r, a: float(len(r) % 2))
    return eps


def _opt_state(opt):
    return copy.deepcopy(opt.state_dict()["state"])


def test_rejected_proposal_restores_parameters_and_optimizer_state_exactly(tiny):
    cfg, pool, coord, wf, eng, gen = _setup(tiny, **{"sat_seq.lr": 1e-5, "sat_seq.max_backtracks": 3})
    m = coord.update(0, _episodes(wf, pool, eng, gen))  # a small accepted step: non-trivial Adam state
    assert all(m[f"{a}/accepted"] == 1.0 for a in AGENTS)
    before = {a: pool.trainable_state(a) for a in AGENTS}
    opt_before = {a: _opt_state(coord.optimizers[a]) for a in AGENTS}
    assert opt_before["agent_1"], "Adam state should exist after an accepted step"
    for opt in coord.optimizers.values():
        for g in opt.param_groups:
            g["lr"] = 1.0  # every proposal now blows far past target_kl
    betas0 = dict(coord.betas)
    proposed = []
    orig_run = coord.controller.run

    def spy(params, optimizer, beta, propose, measure_kl):
        def propose_spy(b):
            proposed.append(b)
            propose(b)
        return orig_run(params, optimizer, beta, propose_spy, measure_kl)

    coord.controller.run = spy
    coord.controller.alpha = 0.999  # shrinking barely helps: every retry still fails
    m = coord.update(1, _episodes(wf, pool, eng, gen))
    for a in AGENTS:
        assert m[f"{a}/accepted"] == 0.0 and m[f"{a}/backtracks"] == 3 and m[f"{a}/step_scale"] == 0.0
        assert m[f"{a}/kl_quantile"] > cfg.algorithm.kl_ctrl.target_kl
        after = pool.trainable_state(a)
        assert all(torch.equal(before[a][k], after[k]) for k in before[a])
        st_after = _opt_state(coord.optimizers[a])
        for pid, st in opt_before[a].items():
            for key, val in st.items():
                assert torch.equal(val, st_after[pid][key]), (a, pid, key)
        assert coord.betas[a] == pytest.approx(betas0[a] * 1.5 ** 3)  # × 1.5 per shrunk retry
    assert proposed == pytest.approx([betas0[a] for a in AGENTS])  # one proposal per agent; retries shrink it
    assert coord.betas["agent_1"] == pytest.approx(betas0["agent_1"] * 1.5 ** 3)


def test_a_one_step_proposal_at_lr_1e_3_is_shrunk_and_accepted(tiny):
    """The case growing β alone could never rescue: one optimizer step at lr 1e-3 lands far outside the
    trust region; the line search shrinks it until the quantile KL is within the target."""
    cfg, pool, coord, wf, eng, gen = _setup(tiny, **{"sat_seq.lr": 1e-3, "sat_seq.mini_batch_size": 64,
                                                     "sat_seq.max_backtracks": 8})
    before = {a: pool.trainable_state(a) for a in AGENTS}
    m = coord.update(0, _episodes(wf, pool, eng, gen))  # 16 turns per agent, one mini-batch: one step
    target = cfg.algorithm.kl_ctrl.target_kl
    for a in AGENTS:
        assert m[f"{a}/accepted"] == 1.0 and m[f"{a}/kl_quantile"] <= target
        assert m[f"{a}/backtracks"] >= 1 and m[f"{a}/step_scale"] == 0.5 ** m[f"{a}/backtracks"]
        after = pool.trainable_state(a)
        assert any(not torch.equal(before[a][k], after[k]) for k in after)  # it moved, less far


@pytest.mark.numerics
def test_accepted_stage_moves_each_agent_and_truncates_is_weights(tiny):
    cfg, pool, coord, wf, eng, gen = _setup(tiny, **{"sat_seq.lr": 1e-4, "algorithm.kl_ctrl.target_kl": 10.0})
    before = {a: pool.trainable_state(a) for a in AGENTS}
    m = coord.update(0, _episodes(wf, pool, eng, gen))
    assert m["stage/order"] == "agent_1,agent_2,agent_3"
    for a in AGENTS:
        assert m[f"{a}/accepted"] == 1.0 and m[f"{a}/backtracks"] == 0
        after = pool.trainable_state(a)
        assert any(not torch.equal(before[a][k], after[k]) for k in after)
    assert m["agent_1/is_weight_mean"] == 1.0  # first agent in the order
    assert 0.0 < m["agent_2/is_weight_mean"] <= 1.0 and 0.0 < m["agent_3/is_weight_mean"] <= 1.0
    assert m["agent_3/is_weight_mean"] < 1.0  # two agents moved before it
    assert not any(k.startswith("certificate/") for k in m)  # no certificate batch configured here
    # π_cur sampled these turns (fp32 engine): the engine's log-probs match the trainer's
    assert all(0.0 <= m[f"{a}/logprob_gap"] <= fp_tol(m[f"{a}/logprob_gap"]) for a in AGENTS)
    # the KL check's forward is timed on its own, inside the agent's update
    assert all(0.0 < m[f"time/kl_check_{a}"] < m[f"time/update_{a}"] for a in AGENTS)
    assert not any(k.endswith("/time_kl_check") for k in m)


def test_frozen_agent_is_never_updated(tiny):
    cfg, pool, coord, wf, eng, gen = _setup(tiny, **{"sat_seq.lr": 1e-4, "algorithm.kl_ctrl.target_kl": 10.0,
                                                     "sat_seq.agents.1.trainable": False})
    before = pool.trainable_state("agent_2")
    m = coord.update(0, _episodes(wf, pool, eng, gen))
    assert m["stage/order"] == "agent_1,agent_3"
    after = pool.trainable_state("agent_2")
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_simultaneous_update_ignores_the_other_agents_updates(tiny):
    """The simultaneous baseline updates every agent from the same batch with no IS factor and no order:
    the last agent's update is bit for bit the one it gets when it is the only agent trained."""
    from satseq.update.simultaneous import SimultaneousUpdater

    cfg, pool, _, wf, eng, gen = _setup(tiny, **{"sat_seq.lr": 1e-3, "sat_seq.mini_batch_size": 64})
    episodes = _episodes(wf, pool, eng, gen)
    twin = AgentPool.full(AGENTS, [copy.deepcopy(pool.module(a)) for a in AGENTS], pool.tokenizer)
    before = {a: pool.trainable_state(a) for a in AGENTS}
    m = SimultaneousUpdater(cfg, pool, torch.Generator().manual_seed(1)).update(0, episodes)
    alone_gen = torch.Generator().manual_seed(1)
    for _ in AGENTS[:-1]:  # the mini-batch permutations the first two agents drew
        torch.randperm(16, generator=alone_gen)
    alone = SimultaneousUpdater(cfg, twin, alone_gen)
    alone.trainable = AGENTS[-1:]
    alone.update(0, episodes)
    for a in AGENTS:
        assert f"{a}/loss" in m and not any(k.startswith(f"{a}/is_weight") for k in m)
        moved = pool.trainable_state(a)
        assert any(not torch.equal(before[a][k], moved[k]) for k in moved)
    last, last_alone = pool.trainable_state(AGENTS[-1]), twin.trainable_state(AGENTS[-1])
    assert all(torch.equal(last[k], last_alone[k]) for k in last)


@pytest.mark.numerics
def test_on_policy_stage_reuses_the_grad_pass_for_pi_cur_with_the_same_result(tiny, monkeypatch):
    """One step on the whole batch, no dropout: π_cur's log-probs come from the proposal's grad pass
    (one forward fewer per agent). Forcing the separate no-grad forward gives the same stage."""
    import satseq.methods.sat_seq.stage_coordinator as sc

    results = []
    real = sc.batch_logprobs
    for force_forward in (False, True):
        cfg, pool, coord, wf, eng, gen = _setup(tiny, **{"sat_seq.mini_batch_size": 64, "sat_seq.lr": 1e-3})
        eps = _episodes(wf, pool, eng, gen)
        calls = []
        monkeypatch.setattr(sc, "batch_logprobs", lambda *a, **k: calls.append(k.get("grad", False)) or real(*a, **k))
        monkeypatch.setattr(sc, "has_dropout", lambda m: force_forward)
        m = coord.update(0, eps)
        results.append((m, {a: pool.trainable_state(a) for a in AGENTS}, calls))
    (m0, w0, c0), (m1, w1, c1) = results
    assert len(c1) - len(c0) == len(AGENTS)  # exactly one no-grad forward saved per agent
    for a in AGENTS:
        assert m0[f"{a}/accepted"] == m1[f"{a}/accepted"] and m0[f"{a}/backtracks"] == m1[f"{a}/backtracks"]
        assert abs(m0[f"{a}/kl_quantile"] - m1[f"{a}/kl_quantile"]) < fp_tol(m0[f"{a}/kl_quantile"])
        for n in w0[a]:
            torch.testing.assert_close(w0[a][n], w1[a][n], rtol=0, atol=fp_tol(w0[a][n]))


def test_has_dropout_sees_lora_dropout_and_attention_dropout(tiny):
    from satseq.update.loop import has_dropout

    model, _ = tiny
    assert not has_dropout(model)
    m2 = copy.deepcopy(model)
    m2.config.attention_dropout = 0.1
    assert has_dropout(m2)
    m3 = copy.deepcopy(model)
    m3.extra = torch.nn.Dropout(0.05)
    assert has_dropout(m3)


def test_without_the_is_factor_every_agent_has_weight_one_and_the_first_agent_is_unchanged(tiny):
    """sat_seq.importance_weight=false (the stability study's ablation): c = 1 for every agent; the first
    agent in the order, whose c is 1 anyway, takes the same step as with the factor on."""
    runs = {}
    for iw in (True, False):
        cfg, pool, coord, wf, eng, gen = _setup(tiny, **{"sat_seq.lr": 1e-4, "algorithm.kl_ctrl.target_kl": 10.0,
                                                         "sat_seq.importance_weight": iw})
        m = coord.update(0, _episodes(wf, pool, eng, gen))
        runs[iw] = (m, {a: pool.trainable_state(a) for a in AGENTS})
    (m_on, s_on), (m_off, s_off) = runs[True], runs[False]
    assert m_on["agent_3/is_weight_mean"] < 1.0 and all(m_off[f"{a}/is_weight_mean"] == 1.0 for a in AGENTS)
    assert all(torch.equal(s_on["agent_1"][k], s_off["agent_1"][k]) for k in s_on["agent_1"])
    assert any(not torch.equal(s_on["agent_3"][k], s_off["agent_3"][k]) for k in s_on["agent_3"])



def test_simultaneous_trust_region_shrinks_every_step_and_ignores_the_order_and_the_other_agents(tiny):
    """``method=simultaneous simultaneous.trust_region=true``: SAT-Seq's check and shrink on each agent's
    step, c = 1 and the listed order whatever ``sat_seq.scheduler`` says. At lr 1e-3 one step lands
    outside the trust region, so every agent's step is shrunk until its quantile KL is within the target;
    the last agent's step is bit for bit the one it takes when it is the only agent trained."""
    over = {"sat_seq.lr": 1e-3, "sat_seq.mini_batch_size": 64, "sat_seq.max_backtracks": 8,
            "sat_seq.scheduler": "random"}
    cfg, pool, _, wf, eng, gen = _setup(tiny, **over)
    episodes = _episodes(wf, pool, eng, gen)
    twin = AgentPool.full(AGENTS, [copy.deepcopy(pool.module(a)) for a in AGENTS], pool.tokenizer)
    m = StageCoordinator(cfg, pool, torch.Generator().manual_seed(1), simultaneous=True).update(0, episodes)
    assert m["stage/order"] == ",".join(AGENTS)
    for a in AGENTS:
        assert m[f"{a}/is_weight_mean"] == 1.0 and m[f"{a}/accepted"] == 1.0
        assert m[f"{a}/backtracks"] >= 1 and m[f"{a}/kl_quantile"] <= cfg.algorithm.kl_ctrl.target_kl
    alone_cfg = load_config(None, [f"{k}={v}" for k, v in over.items()] + [
        "sat_seq.group_size=4", "sat_seq.agents.0.trainable=false", "sat_seq.agents.1.trainable=false"])
    alone_gen = torch.Generator().manual_seed(1)
    for _ in AGENTS[:-1]:  # the mini-batch permutations the first two agents drew
        torch.randperm(16, generator=alone_gen)
    StageCoordinator(alone_cfg, twin, alone_gen, simultaneous=True).update(0, episodes)
    last, last_alone = pool.trainable_state(AGENTS[-1]), twin.trainable_state(AGENTS[-1])
    assert all(torch.equal(last[k], last_alone[k]) for k in last)
    # without the trust region the same step is not shrunk: its KL is past the target
    cfg2, pool2, _, wf2, eng2, gen2 = _setup(tiny, **{**over, "trainer.step_kl": True})
    from satseq.update.simultaneous import SimultaneousUpdater

    plain = SimultaneousUpdater(cfg2, pool2, torch.Generator().manual_seed(1)).update(0, _episodes(wf2, pool2, eng2, gen2))
    assert all(plain[f"{a}/kl_step_q99"] > cfg.algorithm.kl_ctrl.target_kl for a in AGENTS)


def test_simultaneous_trust_region_is_a_setting_of_method_simultaneous_only():
    from satseq.errors import ConfigError
    from satseq.registry import get_method

    cfg = load_config(None, ["method=simultaneous", "simultaneous.trust_region=true"])
    assert cfg.simultaneous.trust_region and "algorithm.kl_ctrl" in get_method("simultaneous").sections
    assert "algorithm.kl_ctrl" not in get_method("shared_policy").sections
    for method in ("sat_seq", "grpo", "shared_policy"):
        with pytest.raises(ConfigError, match=rf"^config key 'simultaneous.trust_region': only method=simultaneous "
                                              rf"reads it \(method={method}\)$"):
            load_config(None, [f"method={method}", "simultaneous.trust_region=true"])
