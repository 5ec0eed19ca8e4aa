"""Where PAG's careful verification goes wrong on the embedded task: each step of it, graded apart.

The careful verification of ``a+b`` with an attempt shown in the prompt's first slot
(``0935|chk?|347+589=``) is ``<column chain>;<total><==|!=><attempt>;<ok|no>``
(:func:`satseq.data.multiturn.careful_verification`). Greedy, its first character forced (as the
warm start's validation probes do), on validation problems whose shown attempt is the sum or a near
miss (½ each), this prints the share of verifications whose

* column chain is right (the same chain the careful solution writes);
* total, written after the chain, is the chain's sum, and how often it is the shown attempt instead
  (a copy of the prompt's slot: right only when the attempt is);
* attempt is restated as shown;
* verdict (``ok`` / ``no``) is right, and that verdict's accuracy when the total was copied, and when
  both numbers it compares are right (then only the comparison itself can fail).

A verdict at chance with a right chain says the check fails after adding: at reading its own chain
back, or at comparing two numbers (docs/apo_pag.md, "Why the verifier cannot check on the embedded task").

    python bench/methods/pag_verify_probe.py WARM_START_DIR [--problems 200]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def grade(text: str, a: int, b: int, shown: str) -> dict:
    """The steps of one careful verification ``text`` of ``a+b`` against the attempt ``shown``."""
    from satseq.data.arithmetic import column_chain

    cols, total = column_chain(a, b)
    m = re.match(r"^(?P<chain>[^;]*);(?P<total>\d*)(?P<op>==|!=)(?P<shown>[^;]*);(?P<verdict>ok|no)", text)
    right_verdict = "ok" if shown.lstrip("0") == total else "no"
    if m is None:
        return {"chain": text.split(";", 1)[0] == cols, "parsed": False, "total": False, "copied": False,
                "restated": False, "verdict": False, "attempt_right": right_verdict == "ok"}
    return {"chain": m["chain"] == cols, "parsed": True, "total": m["total"] == total,
            "copied": m["total"] == shown.lstrip("0"), "restated": m["shown"] == shown.lstrip("0"),
            "verdict": m["verdict"] == right_verdict, "attempt_right": right_verdict == "ok"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("warm_start", help="a PAG warm start directory (embedded/multiturn_seed<N>)")
    ap.add_argument("--problems", type=int, default=200, help="validation problems probed (one attempt each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=6, help="print this many verifications")
    ap.add_argument("--json", help="also write the shares here")
    args = ap.parse_args()

    import torch

    from satseq.data.arithmetic import ArithmeticTask
    from satseq.data.multiturn import pag_probes
    from satseq.models.loading import load_causal_lm
    from satseq.models.warm_start import eval_exclusion
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams

    torch.manual_seed(args.seed)
    model, tok = load_causal_lm(args.warm_start)
    task = ArithmeticTask(seed=0)
    problems = task.problems(args.problems, split="valid", exclude=eval_exclusion(task))
    probes = [p for p in pag_probes(problems, seed=args.seed) if p.kind == "careful_verify"]
    ids = [tok(p.prompt + p.head, add_special_tokens=False)["input_ids"] for p in probes]
    gens = HFEngine(tok).generate(model, ids, SamplingParams(max_new_tokens=60, temperature=0.0))
    rows = []
    for probe, p, g in zip(probes, problems, gens):
        text = probe.head + g.text
        shown = probe.prompt.split("|", 1)[0]
        rows.append(grade(text, p.meta["a"], p.meta["b"], shown))
        if len(rows) <= args.show:
            print(f"{probe.prompt}{text}")
    n = len(rows)

    def share(key, where=lambda r: True):
        sel = [r for r in rows if where(r)]
        return (sum(r[key] for r in sel) / len(sel) if sel else float("nan")), len(sel)

    out = {"warm_start": str(args.warm_start), "verifications": n,
           "chain_right": share("chain")[0], "total_right": share("total")[0],
           "total_copies_attempt": share("copied")[0],
           "total_copies_attempt_when_attempt_wrong": share("copied", lambda r: not r["attempt_right"])[0],
           "attempt_restated": share("restated")[0], "verdict_right": share("verdict")[0],
           "verdict_right_when_total_right": share("verdict", lambda r: r["total"])[0],
           "verdict_right_when_both_numbers_right": share("verdict", lambda r: r["total"] and r["restated"])[0],
           "verdict_right_when_total_copied": share("verdict", lambda r: r["copied"])[0]}
    for k, v in out.items():
        print(f"{k:44s} {v:.3f}" if isinstance(v, float) else f"{k:44s} {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
