"""The PAC certificate: the KL-form Chernoff bounds against exact binomial coverage, and validity of
the whole procedure (fit π_new on the stage's data, then certify it on a fresh batch) on exact toys
solved in closed form — including π_new overfitting coin-flip rewards, where the true change is 0.
Each toy setting runs 2,000 trials; the bound must hold in at least 1 − δ of them."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from satseq.errors import ConfigError
from satseq.methods.sat_seq.monitor.certificate import (bernoulli_kl, bound, improvement_lower_bound, kl_lower_bound,
                                                       kl_upper_bound)

DELTA = 0.05
TRIALS = 2000


# ------------------------------------------------------------------ the bound itself
def test_bound_solves_the_kl_equation_and_beats_hoeffding():
    lb = kl_lower_bound(0.4, 100, DELTA)
    assert 100 * bernoulli_kl(0.4, lb) == pytest.approx(math.log(1 / DELTA), rel=1e-9)
    assert 0.4 - math.sqrt(math.log(1 / DELTA) / 200) <= lb < 0.4  # never looser than Hoeffding
    ub = kl_upper_bound(0.4, 100, DELTA)
    assert 100 * bernoulli_kl(0.4, ub) == pytest.approx(math.log(1 / DELTA), rel=1e-9) and ub > 0.4
    assert kl_lower_bound(0.0, 50, DELTA) == 0.0 and kl_upper_bound(1.0, 50, DELTA) == 1.0
    assert kl_lower_bound(1.0, 50, DELTA) == pytest.approx(DELTA ** (1 / 50))  # kl(1‖p) = −ln p
    b = bound([1, 0, 1, 1], DELTA)
    assert b.mean == 0.75 and b.lower == kl_lower_bound(0.75, 4, DELTA) and b.n == 4
    with pytest.raises(ValueError):
        bound([1.5], DELTA)
    with pytest.raises(ConfigError):
        kl_lower_bound(0.5, 10, 1.5)


@pytest.mark.parametrize("n", [1, 7, 40, 256])
def test_lower_bound_coverage_is_exact_on_bernoulli(n):
    """P(LB > p) = Σ_{k: LB(k/n) > p} C(n,k) p^k (1−p)^(n−k) ≤ δ for every p on a grid (the slow reference)."""
    lbs = [kl_lower_bound(k / n, n, DELTA) for k in range(n + 1)]
    ubs = [kl_upper_bound(k / n, n, DELTA) for k in range(n + 1)]
    for p in np.linspace(0.001, 0.999, 201):
        pmf = [math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]
        assert sum(w for w, lb in zip(pmf, lbs) if lb > p) <= DELTA + 1e-12
        assert sum(w for w, ub in zip(pmf, ubs) if ub < p) <= DELTA + 1e-12


# ------------------------------------------------------------------ exact toys
def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


class RelayBandit:
    """K agents each answer one of A options; the team's prediction is the majority vote (ties to the
    later agent); option 0 is right. ``coin``: the score is a fair coin whatever is answered (true
    change 0 for every update). J(π) in closed form by enumerating the A^K joint answers."""

    def __init__(self, K=3, A=4, coin=False):
        self.K, self.A, self.coin = K, A, coin
        self.joint = np.array(list(itertools.product(range(A), repeat=K)))
        self.win = np.array([self._vote(a) == 0 for a in self.joint], dtype=float)

    def _vote(self, answers):
        counts = {}
        for i, a in enumerate(answers):
            counts[a] = (counts.get(a, (0, 0))[0] + 1, i)
        return max(counts, key=lambda a: counts[a])

    def J(self, logits):
        if self.coin:
            return 0.5
        p = _softmax(logits)
        probs = np.prod(p[np.arange(self.K), self.joint], axis=1)
        return float(probs @ self.win)

    def sample(self, logits, n, rng):
        p = _softmax(logits)
        acts = np.stack([rng.choice(self.A, size=n, p=p[k]) for k in range(self.K)], 1)  # [n, K]
        if self.coin:
            return acts, rng.integers(0, 2, size=n).astype(float)
        idx = np.ravel_multi_index(acts.T, (self.A,) * self.K)
        return acts, self.win[idx]

    def fit(self, logits, acts, scores, lr):
        """Block-coordinate REINFORCE on the stage's own samples, many steps: it overfits them."""
        new = logits.copy()
        adv = scores - scores.mean()
        for k in range(self.K):
            counts = np.bincount(acts[:, k], weights=adv, minlength=self.A)  # Σ_e adv_e · onehot(a_e)
            for _ in range(20):
                new[k] += lr * (counts - _softmax(new[k]) * adv.sum()) / len(adv)
        return new


class TwoTurnMDP:
    """Two prompts x; agent 1 answers a1 ∈ {0,1,2} given x, agent 2 sees (x, a1) and answers a2;
    the score is 1 when a2 = (a1 + x) mod 3. Tabular policies; J in closed form. Certificate units
    are per-prompt means over ``m`` episodes on prompts drawn uniformly."""

    def __init__(self, m=2):
        self.m = m

    @staticmethod
    def score(x, a1, a2):
        return float(a2 == (a1 + x) % 3)

    def J(self, th):
        t1, t2 = th
        total = 0.0
        for x in (0, 1):
            p1 = _softmax(t1[x])
            for a1 in range(3):
                p2 = _softmax(t2[x, a1])
                total += 0.5 * p1[a1] * sum(p2[a2] * self.score(x, a1, a2) for a2 in range(3))
        return total

    def sample(self, th, n_prompts, rng):
        t1, t2 = th
        x = np.repeat(rng.integers(0, 2, size=n_prompts), self.m)  # m episodes per drawn prompt
        a1 = _draw(_softmax(t1)[x], rng)
        a2 = _draw(_softmax(t2)[x, a1], rng)
        ys = (a2 == (a1 + x) % 3).astype(float)
        return (x, a1, a2, ys), ys.reshape(n_prompts, self.m).mean(1)

    def fit(self, th, data, lr):
        t1, t2 = th[0].copy(), th[1].copy()
        xs, a1s, a2s, ys = data
        adv = ys - ys.mean()
        c1 = np.zeros((2, 3))
        np.add.at(c1, (xs, a1s), adv)
        s1 = np.bincount(xs, weights=adv, minlength=2)[:, None]
        for _ in range(20):  # agent 1, then agent 2 (block-coordinate), on the same stage data
            t1 += lr * (c1 - _softmax(t1) * s1) / len(ys)
        c2 = np.zeros((2, 3, 3))
        np.add.at(c2, (xs, a1s, a2s), adv)
        s2 = np.zeros((2, 3))
        np.add.at(s2, (xs, a1s), adv)
        for _ in range(20):
            t2 += lr * (c2 - _softmax(t2) * s2[..., None]) / len(ys)
        return t1, t2


def _draw(p, rng):
    """One draw per row of the probability matrix ``p`` (inverse CDF)."""
    return np.minimum((p.cumsum(-1) < rng.random((len(p), 1))).sum(-1), p.shape[-1] - 1)


def _coverage_bandit(coin: bool, seed: int, n_cert: int = 256) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    env = RelayBandit(coin=coin)
    held = improved = 0
    for _ in range(TRIALS):
        cur = rng.normal(0, 0.5, size=(env.K, env.A))
        acts, scores = env.sample(cur, 32, rng)          # the stage's data
        new = env.fit(cur, acts, scores, lr=30.0)          # fitted (and overfitted) on it
        _, fresh_new = env.sample(new, n_cert, rng)        # the certificate batch of π_new
        _, fresh_cur = env.sample(cur, n_cert, rng)        # the start batch of π_cur
        held += bound(fresh_new, DELTA).lower <= env.J(new)
        improved += improvement_lower_bound(bound(fresh_new, DELTA / 2), bound(fresh_cur, DELTA / 2)) \
            <= env.J(new) - env.J(cur)
    return held / TRIALS, improved / TRIALS


@pytest.mark.parametrize("coin", [False, True], ids=["vote-reward", "coin-flip-overfit"])
def test_certificate_holds_on_the_relay_bandit(coin):
    lower, improvement = _coverage_bandit(coin, seed=1 + coin)
    assert lower >= 1 - DELTA and improvement >= 1 - DELTA


def test_certificate_holds_on_the_two_turn_mdp():
    rng = np.random.default_rng(3)
    env = TwoTurnMDP(m=2)
    held = improved = 0
    for _ in range(TRIALS):
        cur = (rng.normal(0, 0.5, size=(2, 3)), rng.normal(0, 0.5, size=(2, 3, 3)))
        data, _ = env.sample(cur, 16, rng)
        new = env.fit(cur, data, lr=20.0)
        _, units_new = env.sample(new, 128, rng)
        _, units_cur = env.sample(cur, 128, rng)
        held += bound(units_new, DELTA).lower <= env.J(new)
        improved += improvement_lower_bound(bound(units_new, DELTA / 2), bound(units_cur, DELTA / 2)) \
            <= env.J(new) - env.J(cur)
    assert held / TRIALS >= 1 - DELTA and improved / TRIALS >= 1 - DELTA
