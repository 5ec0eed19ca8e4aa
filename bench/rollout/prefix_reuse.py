"""Multi-turn rollouts: a turn that continues a conversation from its kept keys and values, against the
whole conversation prefilled every turn.

    python bench/rollout/prefix_reuse.py [--models embedded smollm2] [--episodes 32] [--group 4] [--tokens 48]
        [--turns 4] [--rounds 5] [--threads 1] [--seed 0] [--out outputs/bench_prefix_reuse]

A four-turn tool episode in the ``tool_use`` environment's conversation shape (its first messages for the
model: SmolLM2's system prompt for fenced Python and the user's problem under its chat template; the embedded
model's ``____|____|a*b=`` prompt in the plain format), ``--episodes`` episodes (``--group`` samples of each
problem, as a GRPO batch), each turn ``--tokens`` sampled tokens (T = 1, EOS ignored, so both ways sample
the same number), then a tool message of realistic length (a printed result, a traceback, a printed list)
appended token for token (:class:`satseq.envs.conversation.Conversation`). One call of the engine per turn.

* ``reuse``: satseq's engine as an interactive rollout uses it (``rollout.prefix_cache=true``, the default):
  turns 2..4 prefill only their new tokens (:mod:`satseq.rollout.prefix_cache`);
* ``full`` (the trivial baseline, the engine before it): every turn's whole prompt prefilled
  (``rollout.prefix_cache=false``). The same engine object both ways (its fused weights shared).

The two take turns (reuse, full, reuse, full, ...) for ``--rounds`` rounds after one warm-up round, in one
process, at ``--threads`` torch threads, fp32; every round samples from the same seeded streams. Prints per
way the median seconds per episode batch and tokens/s (sampled tokens / wall time of the four turns), the
ratio of the medians and the per-round ratios' mean ± standard error, the prompt tokens each way prefilled,
and how many episodes sampled the same tokens both ways (they may differ: the reused keys are equal to full
prefill's up to floating-point order, and one flipped draw changes the rest of its episode). Writes
``prefix_reuse.json`` under ``--out`` (after every round, so a stopped run keeps what it measured). Models: ``embedded`` (the embedded architecture, random weights, a
2048-position context) and ``smollm2`` (SmolLM2-135M-Instruct, the bundled GGUF).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

#: what the tool answers after turns 1, 2, 3: a printed result, a traceback, a printed list
TOOL_RESULTS = [
    "467\n",
    "Traceback (most recent call last):\n  File \"<main>\", line 3, in <module>\n    print(total / count)\n"
    "ZeroDivisionError: division by zero\n",
    "[17, 34, 51, 68, 85, 102, 119, 136, 153, 170, 187, 204, 221, 238, 255, 272, 289, 306, 323, 340]\n",
]
PROBLEMS = ["17*23", "48*31", "56*12", "73*44", "29*65", "81*17", "35*92", "64*28", "19*57", "42*76"]


def load(name: str):
    from satseq.models.loading import load_causal_lm
    from satseq.models.tiny import build_tiny_model

    if name == "embedded":
        model, tok = build_tiny_model(seed=0, max_positions=2048)
    elif name == "smollm2":
        model, tok = load_causal_lm("smollm2")
    else:
        raise SystemExit(f"--models: unknown model '{name}' (known: embedded, smollm2)")
    return model.eval(), tok


def first_messages(name: str, tok, episodes: int, group: int):
    """The tool environment's first messages for each episode (``group`` episodes per problem) and its format."""
    from satseq.config import load_config
    from satseq.registry import get_env

    cfg = load_config(None, ["method=grpo", "env.name=tool_use"])
    fmt = get_env("tool_use").prompt_format("embedded" if name == "embedded" else "chat", tok, cfg)
    problems = [PROBLEMS[(e // group) % len(PROBLEMS)] for e in range(episodes)]
    if name != "embedded":
        problems = [f"What is {p.replace('*', ' * ')}? Check it with a program." for p in problems]
    return fmt.conversation, [fmt.first_messages(p) for p in problems]


def episode_batch(engine, model, fmt, firsts, turns: int, tokens: int, seed: int):
    """One batch of ``turns``-turn tool episodes; returns (seconds, sampled ids per episode, prompt tokens
    prefilled, prompt tokens kept from earlier turns)."""
    import torch

    from satseq.envs.conversation import Conversation, Message
    from satseq.rollout.types import SamplingParams

    store = getattr(engine, "prefix_store", None)
    sp = SamplingParams(max_new_tokens=tokens, temperature=1.0)
    streams = [torch.Generator().manual_seed(seed * 100_000 + e) for e in range(len(firsts))]
    convs = [Conversation(fmt, ms) for ms in firsts]
    sampled, prompt_tokens = [[] for _ in convs], 0
    t0 = time.perf_counter()
    for turn in range(turns):
        if turn:
            for c in convs:
                c.add(Message("tool", TOOL_RESULTS[(turn - 1) % len(TOOL_RESULTS)], name="python"))
        prompts = [c.prompt_ids() for c in convs]
        prompt_tokens += sum(len(p) for p in prompts)
        for c, s, g in zip(convs, sampled, engine.generate(model, prompts, sp, streams)):
            c.record(g)
            s.append(g.response_ids)
    seconds = time.perf_counter() - t0
    kept = store.tokens_reused if store is not None else 0
    return seconds, sampled, prompt_tokens - kept, kept


def bench_model(name: str, a, partial=lambda row: None) -> dict:
    from satseq.rollout.engine import make_engine

    model, tok = load(name)
    fmt, firsts = first_messages(name, tok, a.episodes, a.group)
    engine = make_engine("hf", tok)
    engine.eos_ids = set()  # exactly --tokens a turn, both ways
    # one engine, its fused weights shared: reuse = the view an interactive rollout takes (a fresh store for
    # the rollout), full = the engine itself (what rollout.prefix_cache=false gives)
    ways = {"reuse": engine.continuing, "full": lambda: engine}
    for way, view in ways.items():  # warm-up: the fused weights, the allocator
        episode_batch(view(), model, fmt, firsts, a.turns, a.tokens, a.seed)
    seconds = {w: [] for w in ways}
    out = {}
    same = []
    for r in range(a.rounds):
        for way, view in ways.items():
            s, ids, prefilled, kept = episode_batch(view(), model, fmt, firsts, a.turns, a.tokens, a.seed)
            seconds[way].append(s)
            out[way] = (ids, prefilled, kept)
            print(f"  {name} round {r + 1} {way}: {s:.2f} s", flush=True)
        same.append(sum(x == y for x, y in zip(out["reuse"][0], out["full"][0])))
        partial({"seconds": seconds, "rounds_done": r + 1})
    sampled = a.episodes * a.turns * a.tokens
    ratios = [f / r for r, f in zip(seconds["reuse"], seconds["full"])]
    se = statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else float("nan")
    row = {"sampled_tokens": sampled,
           "seconds": seconds,
           "median_seconds": {w: statistics.median(v) for w, v in seconds.items()},
           "tokens_per_s": {w: sampled / statistics.median(v) for w, v in seconds.items()},
           "ratio_of_medians": statistics.median(seconds["full"]) / statistics.median(seconds["reuse"]),
           "round_ratios": ratios, "round_ratio_mean": statistics.mean(ratios), "round_ratio_se": se,
           "prefilled_tokens": {w: out[w][1] for w in ways}, "kept_tokens": out["reuse"][2],
           "episodes_same_tokens": same[-1], "episodes": a.episodes}
    print(f"{name}: {a.episodes} episodes x {a.turns} turns x {a.tokens} tokens, {a.threads} thread(s), {a.rounds} rounds")
    for w in ways:
        print(f"  {w:>5}: {row['median_seconds'][w]:.2f} s a batch (median), {row['tokens_per_s'][w]:.0f} tok/s, "
              f"prefilled {row['prefilled_tokens'][w]:,} prompt tokens")
    print(f"  reuse / full: {row['ratio_of_medians']:.2f}x (ratio of medians); per round {row['round_ratio_mean']:.2f}x "
          f"± {se:.2f} (s.e., {len(ratios)} rounds); {row['episodes_same_tokens']}/{a.episodes} episodes sampled the "
          f"same tokens both ways")
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["embedded", "smollm2"])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--group", type=int, default=4, help="episodes per problem (GRPO's group)")
    ap.add_argument("--tokens", type=int, default=48, help="sampled tokens a turn (rollout.max_new_tokens' default)")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="outputs/bench_prefix_reuse")
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(a).items() if k != "out"}
    rows: dict = {}

    def write(extra=None):  # after every round: a run stopped half-way keeps what it measured
        (out / "prefix_reuse.json").write_text(json.dumps({"settings": settings, "torch": torch.__version__,
                                                            "models": rows, **(extra or {})}, indent=1))

    for name in a.models:
        rows[name] = bench_model(name, a, partial=lambda row, name=name: write({"running": {name: row}}))
        write()
    print(f"wrote {out / 'prefix_reuse.json'}")


if __name__ == "__main__":
    main()
