"""Where MLMT's answer on the sum of three comes from: the coach's first partial sum and the solver's last
addition, read from held-out evaluations (``predictions.jsonl``) of `recipes/compare/smollm2_mlmt.yaml`.

    python bench/methods/mlmt_decomposition.py EVAL_DIR [EVAL_DIR ...]

For each evaluation directory (``satseq eval``'s output: one MLMT run, or a one-pass run such as GRPO on
the stepwise prompt) and each sampled episode, it finds the first written addition ``a + b = c`` whose
operands are the problem's first two numbers: in the coach's turn for MLMT, in the one answer otherwise.
It prints, per directory: how often that partial sum is written, how often it is right, and the final
answer's accuracy when it is right and when it is wrong or absent (mean over samples; s.e. over
problems for the final accuracy). No model is loaded. docs/mlmt.md, "MLMT on SmolLM2".
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ADDITION = re.compile(r"(\d+)\s*\+\s*(\d+)\s*=\s*(\d+)")
NUMBER = re.compile(r"\d+")


def _partial_sum(text: str, first: int, second: int) -> int | None:
    """The ``c`` of the first ``first + second = c`` written in ``text`` (None if it is not written)."""
    for m in ADDITION.finditer(text):
        if text[:m.start()].rstrip().endswith("+"):  # the tail of a longer sum ("4 + 4 + 4 = 12"), not a + b = c
            continue
        if (int(m.group(1)), int(m.group(2))) == (first, second):
            return int(m.group(3))
    return None


def _rate(xs: list[bool]) -> str:
    return f"{sum(xs) / len(xs):.3f} (n = {len(xs)})" if xs else "—"


def _fmt(ms: dict) -> str:
    return "—" if ms["mean"] is None else f"{ms['mean']:.3f} ± {ms['se'] or 0.0:.3f}"


def breakdown(eval_dir: Path) -> dict:
    """Per-sample partial sums and final correctness of one evaluation."""
    path = eval_dir / "predictions.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path}: not found (an evaluation directory of `satseq eval` holds predictions.jsonl)")
    written, right, final_if_right, final_if_not, per_problem = [], [], [], [], []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}:{n}: not JSON ({e.msg})") from None
        nums = [int(x) for x in NUMBER.findall(row["problem"])]
        if len(nums) < 3:
            raise SystemExit(f"{path}:{n}: problem {row['problem']!r} is not a sum of three numbers")
        roles = row.get("roles")
        at = roles.index("coach") if roles and "coach" in roles else 0  # MLMT: the coach's turn; else the one answer
        for responses, ok in zip(row["responses"], row["correct"]):
            c = _partial_sum(responses[at], nums[0], nums[1])
            written.append(c is not None)
            is_right = c == nums[0] + nums[1]
            if c is not None:
                right.append(is_right)
            (final_if_right if is_right else final_if_not).append(bool(ok))
        per_problem.append(sum(map(bool, row["correct"])) / len(row["correct"]))
    return {"written": written, "right": right, "final_if_right": final_if_right, "final_if_not": final_if_not,
            "final": per_problem, "where": "coach" if roles and "coach" in roles else "answer"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("eval_dirs", nargs="+", type=Path, help="satseq eval output directories (predictions.jsonl)")
    args = ap.parse_args()
    from satseq.utils.stats import mean_se

    print("| evaluation | partial sum in | written | right (when written) | final right: partial right / "
          "wrong or absent | final accuracy |")
    print("|---|---|---|---|---|---|")
    for d in args.eval_dirs:
        b = breakdown(d)
        print(f"| {d.name} | {b['where']} | {_rate(b['written'])} | {_rate(b['right'])} | "
              f"{_rate(b['final_if_right'])} / {_rate(b['final_if_not'])} | {_fmt(mean_se(b['final']))} |")


if __name__ == "__main__":
    main()
