"""How PAG's verifier learns on the oracle-check learnability task (tests/test_pag_learnability.py) under
variants of ``pag.verifier_balance``'s advantages, over several seeds and both warm starts (``ok`` 2/3: an
over-trusting verifier; ``ok`` 1/2: a balanced one). Issue 38: the balance's first version (a per-class
mean baseline and std) was biased towards the majority class; the fix (leave-one-out baseline, no std)
is unbiased; this measures what each does to learning, not only to a cue-blind bias.

    python bench/methods/pag_balance_variants.py --variants fixed old pooled_std --seeds 0 1 2 3 4

Variants (each replaces ``satseq.methods.pag.advantages._balanced_verifier`` for the run):

- ``fixed``: satseq's (leave-one-out baseline per class, classes weighted equally, no std);
- ``fixed_x2``: ``fixed`` times 2 (divided by 1/2, the largest std a 0/1 reward has: the step of a
  std-normalised advantage without a scale drawn from the batch);
- ``pooled_std``: ``fixed`` divided by the group's within-class std of the verifier's rewards (one scale
  for both classes; nearly unbiased, larger steps);
- ``old``: the version before the fix (mean baseline and std per class, classes weighted equally);
- ``none``: no balance (``pag.verifier_balance=false``: the default PAG advantages).

Prints one line per (variant, warm start, seed) with the trained verifier's balanced accuracy,
wrong-recall, no-verdict rate and Acc@final − Acc@t1 (held-out, T = 1), then a summary per variant.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

VARIANT_NAMES = ("fixed", "fixed_x2", "pooled_std", "old", "none")


def variants() -> dict:
    """name -> the function replacing ``_balanced_verifier`` (None: no balance). Imports torch, so not at
    module import (``--help`` stays fast)."""
    import torch

    import satseq.methods.pag.advantages as adv
    from satseq.algos.advantages import keyed_group_normalize

    fixed = adv._balanced_verifier

    def fixed_x2(r, key, is_v, attempt_correct, norm_by_std, eps):
        a = fixed(r, key, is_v, attempt_correct, norm_by_std, eps)
        return torch.where(is_v, 2 * a, a)

    def pooled_std(r, key, is_v, attempt_correct, norm_by_std, eps):
        a = fixed(r, key, is_v, attempt_correct, norm_by_std, eps)
        key_v = torch.cat([key, is_v.long().unsqueeze(1)], dim=1)
        _, g = torch.unique(key_v, dim=0, return_inverse=True)
        n_groups = int(g.max()) + 1
        gc = g * 2 + attempt_correct.to(torch.long).clamp(0, 1)
        z = torch.zeros(2 * n_groups, dtype=r.dtype)
        fv, rv = is_v.to(r.dtype), torch.where(is_v, r, torch.zeros_like(r))
        mean_c = (z.index_add(0, gc, rv) / z.index_add(0, gc, fv).clamp(min=1))[gc]
        resid = torch.where(is_v, r - mean_c, torch.zeros_like(r))
        ss = z[:n_groups].index_add(0, g, resid * resid)[g]
        n_g = z[:n_groups].index_add(0, g, fv)[g]
        s = (ss / (n_g - 1).clamp(min=1)).sqrt()
        return torch.where(is_v & (s > 0), a / (s + eps), torch.where(is_v, torch.zeros_like(a), a))

    def old(r, key, is_v, attempt_correct, norm_by_std, eps):
        zeros = torch.zeros_like(is_v, dtype=torch.long)
        cls = torch.where(is_v, attempt_correct.to(torch.long).clamp(0, 1), torch.full_like(zeros, -1))
        key_v = torch.cat([key, is_v.long().unsqueeze(1)], dim=1)
        key_cls = torch.cat([key_v, cls.unsqueeze(1)], dim=1)
        out = keyed_group_normalize(r, key_cls, norm_by_std=norm_by_std, eps=eps)
        _, g = torch.unique(key_v, dim=0, return_inverse=True)
        _, gc = torch.unique(key_cls, dim=0, return_inverse=True)
        n_g, n_gc = torch.bincount(g).to(r.dtype)[g], torch.bincount(gc).to(r.dtype)[gc]
        classes = torch.zeros(int(g.max()) + 1, 2, dtype=torch.bool)
        classes[g[is_v], cls[is_v]] = True
        k = classes.sum(1).to(r.dtype)[g]
        return out * torch.where(is_v, n_g / (k.clamp(min=1) * n_gc), torch.ones_like(r))

    return {"fixed": fixed, "fixed_x2": fixed_x2, "pooled_std": pooled_std, "old": old, "none": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", nargs="+", default=list(VARIANT_NAMES), choices=VARIANT_NAMES)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--p-ok", type=float, nargs="+", default=[2 / 3, 1 / 2])
    ap.add_argument("--prompts", type=int, default=16, help="prompts a step (x group 4)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=3e-4)
    args = ap.parse_args()
    import torch

    import satseq.methods.pag.advantages as adv
    from test_pag_learnability import run_check

    torch.set_num_threads(1)
    table = variants()
    fixed = adv._balanced_verifier
    summary = {}
    for name in args.variants:
        fn = table[name]
        adv._balanced_verifier = fn or fixed
        overrides = () if fn is None else ("pag.verifier_balance=true",)
        for p_ok in args.p_ok:
            for s in args.seeds:
                e = run_check(seed=s, p_ok=p_ok, overrides=overrides, prompts=args.prompts, steps=args.steps,
                              lr=args.lr)["end"]
                row = (e["balanced_acc"], e["wrong_recall"], e["no_verdict_rate"], e["acc_final"] - e["acc_t1"])
                summary.setdefault(name, []).append(row)
                print(f"{name:10s} ok {p_ok:.2f} seed {s}: balanced acc {row[0]:.3f}  wrong-recall {row[1]:.3f}  "
                      f"no verdict {row[2]:.3f}  Δ {row[3]:+.3f}", flush=True)
    adv._balanced_verifier = fixed
    print("\nvariant     runs  learned (bal. acc ≥ 0.75)  mean bal. acc ± s.e.  mean Δ")
    for name, rows in summary.items():
        b = [r[0] for r in rows]
        se = statistics.stdev(b) / len(b) ** 0.5 if len(b) > 1 else float("nan")
        print(f"{name:10s}  {len(rows):4d}  {sum(x >= 0.75 for x in b):4d}                       "
              f"{statistics.mean(b):.3f} ± {se:.3f}         {statistics.mean(r[3] for r in rows):+.3f}")


if __name__ == "__main__":
    main()
