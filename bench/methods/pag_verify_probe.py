"""Where PAG's careful verification goes wrong on the embedded task: each step of it, graded apart.

The careful verification of ``a+b`` with an attempt shown in the prompt's first slot
(``0935|chk?|347+589=``) is, column by column, ``x+y+c=ss:d=`` or ``x+y+c=ss:d!`` (the column's sum, the
attempt's digit in that column, whether they agree), then the final carry against the thousands digit,
then ``ok`` / ``no`` (:func:`satseq.data.multiturn.careful_verification`). Greedy, its first character
forced (as the warm start's validation probes do), on validation problems whose shown attempt is the sum
or a near miss (½ each), this prints the share of verifications whose

* column sums are all right (the careful chain's arithmetic);
* attempt digits are all read right from the prompt's slot;
* marks (``=`` / ``!``) all follow from the two;
* verdict (``ok`` / ``no``) is right, overall and where every mark was right.

A verdict at chance with the sums right says the check fails after adding (reading or comparing). At
commit 316bbcf this script graded the earlier check (``<columns>;936!=935;no``: the sum and the attempt
written as numbers, then compared): on PAG's warm start of then the chain was right 1.000 and the verdict
0.500, and with 4x the verification transcripts 0.53 even where both numbers were right (docs/apo_pag.md).

    python bench/methods/pag_verify_probe.py WARM_START_DIR [--problems 200]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def grade(text: str, a: int, b: int, shown: str) -> dict:
    """The steps of one careful verification ``text`` of ``a+b`` against the attempt ``shown`` (4 characters,
    as the prompt's slot shows it)."""
    from satseq.data.multiturn import careful_verification

    ref = careful_verification(a, b, shown)
    ref_cols, ref_verdict = ref.rsplit(";", 1)
    body, _, verdict = text.rpartition(";")
    cols, want = body.split(","), ref_cols.split(",")
    parsed = len(cols) == len(want) and all(c.count(":") == 1 and len(c.split(":")[1]) == 2 for c in cols)
    if not parsed:
        return {"parsed": False, "sums": False, "digits": False, "marks": False,
                "verdict": verdict.strip() == ref_verdict, "attempt_right": ref_verdict == "ok"}
    pairs = [(c.split(":"), w.split(":")) for c, w in zip(cols, want)]
    sums = all(c[0] == w[0] for c, w in pairs)
    digits = all(c[1][0] == w[1][0] for c, w in pairs)
    # a mark follows from what the column wrote: its sum's digit (the carry, last) against the digit it read
    marks = all(c[1][1] == ("=" if c[0][-1] == c[1][0] else "!") for c, _ in pairs)
    return {"parsed": True, "sums": sums, "digits": digits, "marks": marks,
            "verdict": verdict.strip() == ref_verdict, "attempt_right": ref_verdict == "ok"}


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
        shown = probe.prompt.split("|", 1)[0]  # the slot: 4 characters
        rows.append(grade(text, p.meta["a"], p.meta["b"], shown))
        if len(rows) <= args.show:
            print(f"{probe.prompt}{text}")
    n = len(rows)

    def share(key, where=lambda r: True):
        sel = [r for r in rows if where(r)]
        return (sum(r[key] for r in sel) / len(sel) if sel else float("nan")), len(sel)

    out = {"warm_start": str(args.warm_start), "verifications": n, "parsed": share("parsed")[0],
           "sums_right": share("sums")[0], "attempt_digits_read_right": share("digits")[0],
           "marks_follow": share("marks")[0], "verdict_right": share("verdict")[0],
           "verdict_right_when_attempt_right": share("verdict", lambda r: r["attempt_right"])[0],
           "verdict_right_when_attempt_wrong": share("verdict", lambda r: not r["attempt_right"])[0],
           "verdict_right_when_every_step_right": share("verdict", lambda r: r["sums"] and r["digits"] and r["marks"])[0]}
    for k, v in out.items():
        print(f"{k:44s} {v:.3f}" if isinstance(v, float) else f"{k:44s} {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
