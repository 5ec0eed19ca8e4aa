"""SatSeqRayTrainer's stage on stub worker groups (verl's own ``_compute_old_log_prob`` / ``_update_actor``
run on CPU; each agent's worker group is a stub with one parameter theta): the order, the frozen agent,
backtracking, the truncated IS between agents and which rows each worker group gets."""
import pytest

pytest.importorskip("verl", reason="verl is installed in .venv-verl (make setup-verl)")

import numpy as np
import torch
from omegaconf import OmegaConf

from recipes.sat_seq.verl.kl.quantile_kl_ctrl import StepSnapshot
from recipes.sat_seq.verl.ray_trainer import SatSeqRayTrainer
from recipes.sat_seq.verl.stage_coordinator import SatSeqStageDriver
from satseq.methods.sat_seq.agent_scheduler import AgentScheduler
from verl import DataProto
from verl.utils import tensordict_utils as tu

P, R = 3, 4  # prompt and response lengths


class StubWorkerGroup:
    """One agent's actor worker group: log pi at position i = -softplus(theta * x(token_i)), the model output
    at i standing for the next token's log-prob as verl's no_padding_2_padding reads it; update_actor moves
    theta by ``step`` through an Adam optimizer; the sat_seq_* controls act on theta."""

    def __init__(self, agent_token: int, step: float):
        self.theta = torch.nn.Parameter(torch.tensor([0.5]))
        self.opt = torch.optim.Adam([self.theta], lr=step)
        self.agent_token, self.calls, self.received, self.is_weights, self.betas = agent_token, [], [], [], []

    def _logp(self, ids: torch.Tensor) -> torch.Tensor:
        return -torch.nn.functional.softplus(self.theta.detach() * (ids.float() / 10.0))

    def _seen(self, td):
        ids = td["input_ids"]
        self.received.append(sorted(set(ids.values().tolist()) - {0}))
        return ids

    def compute_log_prob(self, td):
        self.calls.append("compute_log_prob")
        ids = self._seen(td)
        lp = torch.nested.nested_tensor_from_jagged(self._logp(ids.values()), offsets=ids.offsets())
        return tu.get_tensordict(tensor_dict={"log_probs": lp, "entropy": lp.clone()},
                                 non_tensor_dict={"metrics": {"mfu": 0.0}})

    def update_actor(self, td):
        self.calls.append("update_actor")
        self._seen(td)
        w = td["rollout_is_weights"]
        self.is_weights.append((w.to_padded_tensor(0.0) if w.is_nested else w).clone())
        self.opt.zero_grad()
        self.theta.grad = torch.tensor([-1.0])
        self.opt.step()
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": {"mfu": 0.0, "pg_loss": 0.5}})

    def sat_seq_snapshot(self):
        self.calls.append("snapshot")
        self.snap = StepSnapshot.take([self.theta], self.opt)

    def sat_seq_set_step_scale(self, scale):
        self.calls.append(f"scale {scale}")
        self.snap.set_step_scale([self.theta], self.opt, scale)

    def sat_seq_restore(self):
        self.calls.append("restore")
        self.snap.restore([self.theta], self.opt)

    def sat_seq_set_beta(self, beta):
        self.betas.append(beta)


def _trainer(recipe_config, steps, trainable=(True, True, True), scheduler="fixed", target_kl=0.05, **sat_seq):
    cfg = recipe_config.copy()
    OmegaConf.set_struct(cfg, False)
    cfg.sat_seq.agents = [{"name": f"agent_{k + 1}", "path": "", "trainable": t} for k, t in enumerate(trainable)]
    cfg.sat_seq.scheduler = scheduler
    cfg.algorithm.kl_ctrl.target_kl = target_kl
    for k, v in sat_seq.items():
        cfg.sat_seq[k] = v
    tr = SatSeqRayTrainer.__new__(SatSeqRayTrainer)  # RayPPOTrainer.__init__ builds dataloaders; not needed here
    tr.config, tr.distillation_config = cfg, None
    tr.agents = [a["name"] for a in cfg.sat_seq.agents]
    tr.per_agent = {n: {"actor_rollout_wg": StubWorkerGroup(10 * (k + 1), steps[k]), "ref_policy_wg": None}
                    for k, n in enumerate(tr.agents)}
    tr.driver = SatSeqStageDriver(cfg, ops=tr)
    return tr


def _batch(agents, episodes=4, prompts=2, seed=0):
    """One row per (episode, agent turn); agent k's tokens are 10(k+1) + 1..9, so each worker group can
    tell whose rows it got; rows shuffled across agents."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for e in range(episodes):
        for k, name in enumerate(agents):
            base = 10 * (k + 1)
            rows.append((e, name, base + torch.randint(1, 10, (P + R,), generator=g), float(torch.rand(1, generator=g) > 0.5)))
    perm = torch.randperm(len(rows), generator=g).tolist()
    rows = [rows[i] for i in perm]
    ids = torch.stack([r[2] for r in rows])
    lengths = torch.randint(1, R + 1, (len(rows),), generator=g)
    response_mask = (torch.arange(R)[None] < lengths[:, None]).long()
    attention = torch.cat([torch.ones(len(rows), P, dtype=torch.long), response_mask], 1)
    ids = ids * attention
    rewards = torch.zeros(len(rows), R)
    rewards[torch.arange(len(rows)), lengths - 1] = torch.tensor([r[3] for r in rows])
    return DataProto.from_single_dict({
        "prompts": ids[:, :P], "responses": ids[:, P:], "input_ids": ids, "attention_mask": attention,
        "position_ids": (attention.cumsum(-1) - 1).clamp(min=0), "response_mask": response_mask,
        "token_level_rewards": rewards,
        "uid": np.array([f"p{r[0] % prompts}" for r in rows], dtype=object),
        "sat_seq_episode": np.array([f"e{r[0]}" for r in rows], dtype=object),
        "sat_seq_agent": np.array([r[1] for r in rows], dtype=object)})


def _expected_logp(theta, data, agent_rows):
    # verl reads the response's log-probs one position to the left (the output at t predicts token t + 1)
    ids = data.batch["input_ids"][agent_rows, P - 1:P - 1 + R]
    return -torch.nn.functional.softplus(theta * ids.float() / 10.0)


def test_stage_order_frozen_agent_and_rows(recipe_config):
    tr = _trainer(recipe_config, steps=(0.01, 0.01, 0.01), trainable=(True, False, True), target_kl=10.0)
    data = _batch(tr.agents)
    metrics = tr.driver.run_stage(0, data)
    assert metrics["sat_seq/order"] == "agent_1,agent_3"
    frozen = tr.per_agent["agent_2"]["actor_rollout_wg"]
    assert frozen.calls == [] and torch.equal(frozen.theta.detach(), torch.tensor([0.5]))
    for k, name in enumerate(tr.agents):  # every call of a worker group saw only its own agent's tokens
        wg = tr.per_agent[name]["actor_rollout_wg"]
        assert all(all(10 * (k + 1) < t < 10 * (k + 2) for t in seen) for seen in wg.received)
    wg1 = tr.per_agent["agent_1"]["actor_rollout_wg"]
    assert wg1.calls == ["compute_log_prob", "snapshot", "update_actor", "compute_log_prob"]
    assert float(wg1.theta) != 0.5 and metrics["sat_seq/agent_1/accepted"] == 1.0


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_random_order_is_the_schedulers(recipe_config, stage):
    tr = _trainer(recipe_config, steps=(0.01, 0.01, 0.01), scheduler="random", target_kl=10.0)
    metrics = tr.driver.run_stage(stage, _batch(tr.agents))
    expected = AgentScheduler(tr.agents, mode="random", seed=0).order(stage)
    assert metrics["sat_seq/order"] == ",".join(expected)


def test_truncated_is_between_agents(recipe_config):
    """Agent 2's rows carry c_e = min(1, exp(sum over agent 1's turn in e of log pi_new/pi_cur))."""
    tr = _trainer(recipe_config, steps=(0.4, 0.01, 0.01), target_kl=10.0)
    data = _batch(tr.agents)
    tr.driver.run_stage(0, data)
    wg1, wg2 = (tr.per_agent[n]["actor_rollout_wg"] for n in ("agent_1", "agent_2"))
    assert torch.all(wg1.is_weights[0][wg1.is_weights[0] > 0] == 1.0)  # the first agent: c = 1
    agent = data.non_tensor_batch["sat_seq_agent"]
    ep = data.non_tensor_batch["sat_seq_episode"]
    rows1, rows2 = np.nonzero(agent == "agent_1")[0], np.nonzero(agent == "agent_2")[0]
    m1 = data.batch["response_mask"][rows1].float()
    lr1 = ((_expected_logp(float(wg1.theta), data, rows1) - _expected_logp(0.5, data, rows1)) * m1).sum(-1)
    by_episode = dict(zip(ep[rows1].tolist(), lr1.tolist()))
    c2 = torch.tensor([min(1.0, float(np.exp(by_episode[e]))) for e in ep[rows2]])
    got = wg2.is_weights[0]
    m2 = data.batch["response_mask"][rows2].float()
    # verl's padding conversion keeps row order; the masked mean per row is agent 2's c_e
    torch.testing.assert_close((got * m2).sum(-1) / m2.sum(-1), c2, rtol=1e-5, atol=1e-6)
    assert (c2 < 1).any()


def test_backtracking_shrinks_the_step_and_grows_beta(recipe_config):
    tr = _trainer(recipe_config, steps=(3.0, 0.01, 0.01), target_kl=0.01, max_backtracks=6)
    data = _batch(tr.agents)
    metrics = tr.driver.run_stage(0, data)
    wg = tr.per_agent["agent_1"]["actor_rollout_wg"]
    j = metrics["sat_seq/agent_1/backtracks"]
    assert metrics["sat_seq/agent_1/accepted"] == 1.0 and j >= 1
    assert wg.calls[:4] == ["compute_log_prob", "snapshot", "update_actor", "compute_log_prob"]
    assert wg.calls[4:] == [x for i in range(1, j + 1) for x in (f"scale {0.5 ** i}", "compute_log_prob")]
    proposal = 0.5 + 3.0  # Adam's first step moves theta by lr
    torch.testing.assert_close(wg.theta.detach(), torch.tensor([0.5 + 0.5 ** j * (proposal - 0.5)]))
    assert metrics["sat_seq/agent_1/kl_quantile"] <= 0.01
    assert tr.driver.betas["agent_1"] == pytest.approx(0.001 * 1.5 ** j)
    assert wg.opt.state_dict()["state"] == {}  # a shrunk step keeps the snapshot's (empty) Adam state


def test_rejection_restores_and_the_next_agent_sees_c_one(recipe_config):
    tr = _trainer(recipe_config, steps=(3.0, 0.01, 0.01), target_kl=1e-12, max_backtracks=1)
    metrics = tr.driver.run_stage(0, _batch(tr.agents))
    wg1, wg2 = (tr.per_agent[n]["actor_rollout_wg"] for n in ("agent_1", "agent_2"))
    assert metrics["sat_seq/agent_1/accepted"] == 0.0 and wg1.calls[-1] == "restore"
    assert torch.equal(wg1.theta.detach(), torch.tensor([0.5]))
    w = wg2.is_weights[0]
    assert torch.all(w[w > 0] == 1.0)  # agent 1 kept pi_cur: no shift for agent 2


def test_advantages_reach_each_agent_from_the_registry(recipe_config):
    tr = _trainer(recipe_config, steps=(0.01, 0.01, 0.01), target_kl=10.0)
    data = _batch(tr.agents)
    tr.driver.run_stage(0, data)
    agent = data.non_tensor_batch["sat_seq_agent"]
    turn = np.array([tr.agents.index(a) for a in agent])
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    adv, _ = get_adv_estimator_fn("sat_seq")(data.batch["token_level_rewards"], data.batch["response_mask"],
                                             data.non_tensor_batch["uid"], config=tr.config.algorithm,
                                             episode_index=data.non_tensor_batch["sat_seq_episode"], turn_index=turn,
                                             A_clip=tr.config.sat_seq.A_clip)
    assert torch.equal(data.batch["advantages"], adv) and adv.abs().sum() > 0


class StubRolloutManager:
    """One agent's agent-loop manager: answers every prompt with \\boxed{<agent token>} and scores the
    turn 1 when it is agent 2's; records the chats it was given."""

    def __init__(self, token: int):
        self.token, self.prompts, self.slept = token, [], 0

    def generate_sequences(self, gen: DataProto) -> DataProto:
        chats = gen.non_tensor_batch["raw_prompt"]
        self.prompts.append([c[-1]["content"] for c in chats])
        n = len(gen)
        prompts = torch.ones(n, P, dtype=torch.long)
        responses = torch.full((n, R), self.token, dtype=torch.long)
        scores = torch.zeros(n, R)
        scores[:, -1] = float(self.token == 20)
        attention = torch.ones(n, P + R, dtype=torch.long)
        return DataProto.from_single_dict({"prompts": prompts, "responses": responses,
                                           "input_ids": torch.cat([prompts, responses], 1), "attention_mask": attention,
                                           "position_ids": attention.cumsum(-1) - 1, "rm_scores": scores},
                                          meta_info={"timing": {}})


class StubCheckpointManager:
    def __init__(self, rollout):
        self.rollout = rollout

    def sleep_replicas(self):
        self.rollout.slept += 1


class StubTokenizer:
    def batch_decode(self, ids, skip_special_tokens=True):
        return [f"so the answer is \\boxed{{{int(row[0])}}}" for row in ids]


def test_relay_rollout_shows_earlier_answers_and_tags_rows(recipe_config):
    tr = _trainer(recipe_config, steps=(0.01, 0.01, 0.01), target_kl=10.0)
    tr.tokenizer = StubTokenizer()
    for k, name in enumerate(tr.agents):
        rollout = StubRolloutManager(10 * (k + 1))
        tr.per_agent[name].update(async_rollout_manager=rollout, checkpoint_manager=StubCheckpointManager(rollout))
    batch = DataProto.from_single_dict({
        "raw_prompt": np.array([[{"role": "user", "content": f"Problem {i}"}] for i in range(2)], dtype=object),
        "dummy": torch.zeros(2, 1)})
    data = tr.relay_rollout(batch)
    n = tr.config.actor_rollout_ref.rollout.n
    assert len(data) == 2 * n * 3
    seen = [tr.per_agent[a]["async_rollout_manager"].prompts[0] for a in tr.agents]
    assert seen[0][0] == "Problem 0" and len(seen[0]) == 2 * n
    assert seen[1][0].startswith("Problem 0") and "Agent 1: 10" in seen[1][0] and "Agent 2" not in seen[1][0]
    assert "Agent 1: 10" in seen[2][n] and "Agent 2: 20" in seen[2][n] and seen[2][n].startswith("Problem 1")
    agent, ep, uid = (data.non_tensor_batch[k] for k in ("sat_seq_agent", "sat_seq_episode", "uid"))
    for e in set(ep.tolist()):  # each episode: one row per agent, one prompt uid
        rows = np.nonzero(ep == e)[0]
        assert sorted(agent[rows].tolist()) == tr.agents and len(set(uid[rows].tolist())) == 1
    assert len(set(ep.tolist())) == 2 * n and len(set(uid.tolist())) == 2
    torch.testing.assert_close(data.batch["token_level_rewards"].sum(-1),
                               torch.tensor([float(a == "agent_2") for a in agent]))
    assert all(tr.per_agent[a]["async_rollout_manager"].slept == 1 for a in tr.agents)
    metrics = tr.driver.run_stage(0, data)  # the stage takes the relay's rows as they come
    assert metrics["sat_seq/order"] == "agent_1,agent_2,agent_3"


def test_certificate_from_relay_episodes(recipe_config):
    """certify_relay: the team's majority answer per episode graded against reward_model.ground_truth,
    per-prompt means, satseq's PAC bounds."""
    from satseq.methods.sat_seq.monitor.certificate import bound

    tr = _trainer(recipe_config, steps=(0.01, 0.01, 0.01), target_kl=10.0)
    tr.tokenizer = StubTokenizer()
    for name, token in zip(tr.agents, (7, 20, 7)):  # agents 1 and 3 answer 7, agent 2 answers 20 (reward 1)
        rollout = StubRolloutManager(token)
        tr.per_agent[name].update(async_rollout_manager=rollout, checkpoint_manager=StubCheckpointManager(rollout))
    tr.val_dataloader = [{
        "raw_prompt": np.array([[{"role": "user", "content": f"Problem {i}"}] for i in range(2)], dtype=object),
        "reward_model": np.array([{"ground_truth": "7"}, {"ground_truth": "8"}], dtype=object),
        "dummy": torch.zeros(2, 1)}]
    out = tr.certify_relay(0)
    delta = tr.config.sat_seq.certificate.delta
    assert out["vote"]["mean"] == 0.5 and out["vote"]["n"] == 2
    assert out["vote"]["lower"] == bound([1.0, 0.0], delta).lower
    assert out["reward"]["mean"] == pytest.approx(1 / 3)
    assert out["reward"]["upper_half"] == bound([1 / 3, 1 / 3], delta / 2).upper
    assert all(tr.per_agent[a]["async_rollout_manager"].slept == 0 for a in tr.agents)  # kept awake
