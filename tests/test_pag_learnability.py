"""PAG's learnability check (issue 38): a task on which the verifier MUST learn if PAG's training path is
right, run through the real workflow, rewards, advantages and update.

The task ("oracle check"), built so that checking is much easier than solving:

* a problem ``47213`` (a random 5-digit number) has the answer ``A`` or ``B``, drawn at random per
  problem (a hash of the text). **Solving is impossible**: nothing in the problem says which one is
  right, so the solver is right half of the time whatever it learns.
* the verify prompt ``VA+|47213=`` shows the attempt (``A``) and one character that says whether it is
  the answer (``+`` / ``-``): **checking is reading one character** (the planted signal: the check is
  easy by construction, as a unit test of the verifier's reward → advantage → gradient path).
* the revise prompt ``RAn|47213=`` shows the attempt and the verdict; switching to the other answer
  after a right "wrong" verdict always fixes it.

The warm start (SFT of the tiny model from scratch, ~20 s) samples both verdicts *without looking at
the cue* (``ok`` 2/3, ``no`` 1/3: over-trusting, like the embedded default's hasty verifier), the
solver guesses (½ each) and the reviser copies or switches (½ each). So every behaviour RL must select
is sampled, and only the cue separates a right verdict from a wrong one. If PAG's implementation is
right (verdict rewarded both ways, per-role advantages, gradient on the verifier's tokens), RL makes the
verifier read the cue: balanced accuracy far above the 0.5 of both constant verifiers, and Acc@final
above Acc@t1 (the reviser learns to switch after "no").

``python tests/test_pag_learnability.py [--seeds 0 1 2]`` prints the figures (docs/apo_pag.md).
"""
from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satseq.records import Problem  # noqa: E402
from hashed_letter_task import LetterFormat, hashed_gold, hashed_problems  # noqa: E402

#: balanced accuracy of the trained verifier must beat both constants (0.5 each) by this much
MARGIN = 0.25
#: and the revisions must raise the answer by at least this much (Acc@final − Acc@t1)
REVISION_GAIN = 0.10


def gold(problem: str) -> str:
    """The answer of ``47213``: ``A`` or ``B`` by a hash of the text (unlearnable)."""
    return hashed_gold(problem, "AB")


def problems(n: int, seed: int) -> list[Problem]:
    return hashed_problems(n, seed, "oracle", "AB")


class OracleCheckFormat(LetterFormat):
    """The prompt format of the check task (the interface of :class:`EmbeddedPAGFormat`)."""

    letters = "AB"

    def single(self, problem: str) -> str:
        return f"S__|{problem}="

    def verify(self, problem: str, attempt: str) -> str:
        shown = self._shown(attempt)
        return f"V{shown}{'+' if shown == gold(problem) else '-'}|{problem}="

    def revise(self, problem: str, attempt: str, verification: str) -> str:
        v = self.parse_verdict(verification)
        return f"R{self._shown(attempt)}{'n' if v == 'wrong' else '?'}|{problem}="

    def parse_verdict(self, text: str | None) -> str | None:
        from satseq.workflows.pag_prompts import parse_verdict

        return parse_verdict(text, short_markers=True)


def sft_examples(n: int, seed: int, p_ok: float = 2 / 3) -> list[tuple[str, str]]:
    """Warm-start transcripts: the solver guesses, the verifier ignores the cue, the reviser copies or switches."""
    fmt = OracleCheckFormat(None)
    rng = random.Random(f"oracle-sft-{seed}")
    out = []
    for p in problems(n, seed + 1000):
        a, b = "AB"
        kind = rng.choice(["solve", "verify", "verify", "revise"])
        if kind == "solve":
            out.append((fmt.single(p.problem), "\\boxed{%s}" % rng.choice((a, b))))
        elif kind == "verify":
            att = rng.choice((a, b))
            out.append((fmt.verify(p.problem, "\\boxed{%s}" % att), "ok" if rng.random() < p_ok else "no"))
        else:
            att = rng.choice((a, b))
            other = b if att == a else a
            out.append((fmt.revise(p.problem, "\\boxed{%s}" % att, "no"), "\\boxed{%s}" % rng.choice((att, other))))
    return out


def run_check(seed: int = 0, *, steps: int = 40, prompts: int = 16, group: int = 4, lr: float = 3e-4,
              sft_steps: int = 150, eval_problems: int = 256, p_ok: float = 2 / 3, overrides: tuple[str, ...] = (), log=None) -> dict:
    """Warm start, ``steps`` PAG steps (GRPO update, the default ``pag`` settings), then held-out
    figures of the warm start and the trained policy (T = 1): ``pag_metrics`` plus balanced accuracy."""
    from satseq.config.loader import load_config
    from satseq.envs.self_verify.metrics import pag_metrics
    from satseq.envs.self_verify.rewards import assign_pag_rewards
    from satseq.methods.pag.updater import PAGUpdater
    from satseq.models.agents import AgentPool
    from satseq.models.sft import SFTConfig, run_sft
    from satseq.models.tiny import build_tiny_model
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams
    from satseq.workflows.self_verify import SelfVerifyWorkflow

    t0 = time.perf_counter()
    model, tok = build_tiny_model(seed=seed)
    run_sft(model, tok, sft_examples(sft_steps * 64, seed, p_ok), SFTConfig(steps=sft_steps, seed=seed), show_progress=False)
    cfg = load_config(None, ["method=pag", f"ppo.lr={lr}", f"ppo.mini_batch_size={prompts * group * 4}",
                             f"trainer.train_batch_size={prompts}", f"grpo.group_size={group}",
                             "rollout.max_new_tokens=12", *overrides])
    pool = AgentPool.full(["policy"], [model], tok)
    engine = HFEngine(tok)
    wf = SelfVerifyWorkflow({"policy": "policy", "verifier": "policy"}, OracleCheckFormat(tok),
                            SamplingParams(max_new_tokens=12, temperature=1.0), cfg.pag.max_policy_turns,
                            verify_last=cfg.pag.verify_last)
    gen = torch.Generator().manual_seed(seed)
    updater = PAGUpdater(cfg, pool, gen)
    held_out = problems(eval_problems, seed + 2000)

    def evaluate() -> dict:
        model.eval()
        eps = wf.rollout(held_out, pool, engine, generator=torch.Generator().manual_seed(10_000 + seed))
        m = pag_metrics(eps)
        for k in ("correct_recall", "wrong_recall"):  # None when no attempt of that class was made
            m[k] = float("nan") if m[k] is None else m[k]
        m["balanced_acc"] = (m["correct_recall"] + m["wrong_recall"]) / 2
        return m

    start = evaluate()
    train = problems(prompts * steps, seed + 3000)
    for step in range(steps):
        model.eval()
        eps = wf.rollout(train[step * prompts:(step + 1) * prompts], pool, engine, group_size=group, generator=gen)
        assign_pag_rewards(eps, alpha=cfg.pag.alpha)
        model.train()
        out = updater.update(step, eps)
        if log and step % 5 == 0:
            log(f"step {step}: verifier acc {out.get('pag/verifier_acc', float('nan')):.3f} "
                f"wrong recall {out.get('pag/wrong_recall', float('nan')):.3f} acc_t1 {out['pag/acc_t1']:.3f} "
                f"acc_final {out['pag/acc_final']:.3f}")
    end = evaluate()
    return {"start": start, "end": end, "seconds": time.perf_counter() - t0}


#: seeds tried in turn until one learns: which runs learn is chaotic and depends on the CPU's kernels
#: (docs/apo_pag.md: with the balance 6 of 10 (warm start, seed) runs learned on one CPU, and a seed that
#: learned on one CPU did not on another); a broken path learns in none, a working one fails all five
#: with probability about 0.4^5 = 1 % (seed 1, which learned under no objective on that CPU, is left out)
SEEDS = (0, 2, 3, 4, 5)


@pytest.mark.slow
def test_pag_verifier_learns_where_checking_is_easy():
    torch.set_num_threads(1)
    tried = []
    for seed in SEEDS:
        res = run_check(seed=seed, overrides=("pag.verifier_balance=true",))
        start, end = res["start"], res["end"]
        # the warm start samples both verdicts but ignores the cue: a guess
        assert 0.1 < start["wrong_recall"] < 0.6 and abs(start["balanced_acc"] - 0.5) < 0.1, (seed, start)
        tried.append((seed, round(end["balanced_acc"], 3)))
        if end["balanced_acc"] >= 0.5 + MARGIN:
            break
    else:
        pytest.fail(f"the verifier learned the cue in none of seeds {SEEDS} (balanced accuracy per seed: {tried})")
    # both constant verifiers ("always correct", "always wrong") have balanced accuracy 0.5
    assert end["wrong_recall"] >= 0.5 + MARGIN and end["correct_recall"] >= 0.5 + MARGIN, (seed, end)
    assert end["acc_final"] - end["acc_t1"] >= REVISION_GAIN, (seed, end)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--p-ok", type=float, default=2 / 3, help="the warm start's share of 'ok' verdicts")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="config overrides, e.g. pag.verifier_balance=true or pag.adv_group_by=group_role")
    args = ap.parse_args()
    torch.set_num_threads(1)
    keys = ("balanced_acc", "correct_recall", "wrong_recall", "acc_t1", "acc_final", "revision_rate")
    for s in args.seeds:
        r = run_check(seed=s, steps=args.steps, lr=args.lr, p_ok=args.p_ok, overrides=tuple(args.set), log=print)
        for when in ("start", "end"):
            print(f"seed {s} {when:5s} " + " ".join(f"{k} {r[when][k]:.3f}" for k in keys))
        print(f"seed {s}: {r['seconds']:.0f} s")
