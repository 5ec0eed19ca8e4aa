"""The remote line search (snapshot / propose / measure / set_step_scale / restore, as the worker groups
run it) gives satseq's QuantileKLController's result, parameters and optimizer state."""
import pytest

pytest.importorskip("verl", reason="verl is installed in .venv-verl (make setup-verl)")

import torch

from recipes.sat_seq.verl.kl.quantile_kl_ctrl import StepSnapshot, line_search, per_state_kl
from satseq.algos.kl import kl_penalty
from satseq.errors import ConfigError
from satseq.methods.sat_seq.kl.quantile_kl_ctrl import QuantileKLController


def _setup(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 5)
    opt = torch.optim.Adam(model.parameters(), lr=0.3)
    x = torch.randn(16, 4)
    a = torch.randint(0, 5, (16,))
    with torch.no_grad():
        cur = torch.log_softmax(model(x), -1).gather(1, a[:, None]).squeeze(1)

    def propose(beta):
        for _ in range(3):
            opt.zero_grad()
            lp = torch.log_softmax(model(x), -1).gather(1, a[:, None]).squeeze(1)
            (-(lp.mean()) + beta * kl_penalty(lp, cur, "k3").mean()).backward()
            opt.step()

    def measure():
        with torch.no_grad():
            lp = torch.log_softmax(model(x), -1).gather(1, a[:, None]).squeeze(1)
        return kl_penalty(lp, cur, "k3")

    return model, opt, propose, measure


@pytest.mark.parametrize("kw", [dict(target_kl=10.0), dict(target_kl=0.02), dict(target_kl=1e-9, max_backtracks=2),
                                dict(target_kl=0.02, on_fail="beta"), dict(target_kl=0.02, statistic="mean"),
                                dict(target_kl=1e-9, check=False)])
def test_line_search_equals_satseq_controller(kw):
    c = QuantileKLController(**{"max_backtracks": 5, **kw})
    m1, o1, p1, k1 = _setup()
    ref = c.run(list(m1.parameters()), o1, 0.01, p1, k1)
    m2, o2, p2, k2 = _setup()
    snap: dict = {}
    params = list(m2.parameters())
    res = line_search(c, 0.01, snapshot=lambda: snap.update(s=StepSnapshot.take(params, o2)), propose=p2,
                      measure_kl=k2, set_step_scale=lambda s: snap["s"].set_step_scale(params, o2, s),
                      restore=lambda: snap["s"].restore(params, o2))
    assert res == ref
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)
    s1, s2 = o1.state_dict()["state"], o2.state_dict()["state"]
    assert all(torch.equal(s1[i]["exp_avg"], s2[i]["exp_avg"]) for i in s1)
    assert ref.attempts  # the check ran


def test_the_cases_differ():
    """The parametrised cases cover acceptance at once, a shrunk step and a rejection."""
    outcomes = set()
    for kw in (dict(target_kl=10.0), dict(target_kl=0.02), dict(target_kl=1e-9, max_backtracks=2)):
        m, o, p, k = _setup()
        r = QuantileKLController(**kw).run(list(m.parameters()), o, 0.01, p, k)
        outcomes.add((r.accepted, r.backtracks > 0))
    assert outcomes == {(True, False), (True, True), (False, True)}


def test_per_state_kl_refuses_the_exact_estimator():
    lp = torch.zeros(2, 3)
    with pytest.raises(ConfigError, match="sampled estimator"):
        per_state_kl(lp, lp, torch.ones(2, 3), "exact")
