"""``method=shared_policy``: one policy plays every relay role — the run's one
agent, its batch of every role's turns, the relay's held-out vote, and the one-line errors."""
import copy
import json
from pathlib import Path

import pytest
import torch

from satseq.config import load_config
from satseq.errors import ConfigError
from satseq.models.agents import AgentPool
from satseq.records import Problem
from satseq.registry import get_method
from satseq.rewards.turn_rewards import assign_relay_rewards
from satseq.rollout.hf_engine import HFEngine
from satseq.rollout.types import SamplingParams
from satseq.update.batch import turns_of
from satseq.workflows.prompts import EmbeddedFormat
from satseq.workflows.relay import RelayWorkflow

ROLES = ["agent_1", "agent_2", "agent_3"]


def test_one_policy_trains_on_the_relay_and_is_evaluated_as_every_role(tiny_dir, tmp_path):
    import satseq

    base = {"model.path": str(tiny_dir), "trainer.train_batch_size": 2, "rollout.max_new_tokens": 6,
            "sat_seq.group_size": 2, "data.train_size": 8, "data.eval_size": 2, "trainer.num_stages": 2,
            "trainer.export_pt": False, "trainer.tensorboard": False, "trainer.progress": False,
            "reward.custom": "tests.reward_fixtures:length_parity", "method": "shared_policy", "threads": 1,
            "trainer.eval_every": 1, "output_dir": str(tmp_path)}
    r = satseq.train(overrides=base, console=lambda *a: None)
    run = Path(r.run_dir)
    assert json.loads((run / "run_info.json").read_text())["agents"] == ["policy"]
    assert (run / "policy_stage_2").is_dir() and not list(run.glob("agent_*_stage_*"))
    last = r.metrics[-1]
    assert "policy/loss" in last and not any(k.startswith("agent_1/loss") for k in last)
    assert all(f"{a}/accuracy" in last for a in ROLES)  # rollout metrics per role
    assert "eval/vote_accuracy" in last and all(f"eval/{a}/accuracy" in last for a in ROLES)


def test_the_policys_batch_holds_every_roles_turns(tiny):
    model, tok = tiny
    method = get_method("shared_policy")
    cfg = load_config(None, ["method=shared_policy"])
    roles = method.roles(cfg, ["policy"])
    assert roles == {a: "policy" for a in ROLES}
    pool = AgentPool.full(["policy"], [copy.deepcopy(model)], tok)
    wf = RelayWorkflow(roles, EmbeddedFormat(tok), SamplingParams(max_new_tokens=6))
    problems = [Problem(i, f"{100 + i}+{200 + i}", str(300 + 2 * i)) for i in range(3)]
    eps = wf.rollout(problems, pool, HFEngine(tok), group_size=2, generator=torch.Generator().manual_seed(0))
    assign_relay_rewards(eps, own=1.0, team=0.0, custom=lambda p, r, a: float(len(r) % 2))
    assert [[t.role for t in ep.turns] for ep in eps] == [ROLES] * len(eps)
    assert {t.agent for ep in eps for t in ep.turns} == {"policy"}
    assert len(turns_of(eps, "policy")) == 3 * len(eps)


@pytest.mark.parametrize("agents,match", [
    ("[{name: a}, {name: b, trainable: false}]", "cannot be frozen"),
    ("[{name: a, path: x}, {name: b, path: y}]", "different models"),
])
def test_roles_that_cannot_share_one_policy_are_a_one_line_error(agents, match):
    with pytest.raises(ConfigError, match=match):  # at load time, as every method's own check
        load_config(None, ["method=shared_policy", f"sat_seq.agents={agents}"])
