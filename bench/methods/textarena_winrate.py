"""Win rate of a TextArena run (``env.name=textarena``) against its fixed opponent, on held-out seeds.

``satseq eval`` replays the run in its environment with the run's config (its game, opponent and seat) on
``N`` held-out seeds (the environment's eval split, seeds from 1,000,000 on: never trained on), one game
each, and this script reads each game's outcome from ``predictions.jsonl``::

    win rate  p = wins / N,   s.e. = sqrt(p (1 - p) / N)      (and the same for draws, losses, unfinished)

Per role when the run seats LLMs in both seats (``opponent=none``): each role's rates against the other.

    python bench/methods/textarena_winrate.py RUN_DIR [RUN_DIR ...] --n 200 [--stage S] [--out table.json]

The trivial baseline, a player that plays a uniformly random listed move (seeded by the game's seed + 1 so it is
not the opponent's stream) in the LLM's seat, against the same opponent on the same held-out seeds::

    python bench/methods/textarena_winrate.py --random-player [--game TicTacToe-v0] [--opponent random]
        [--seat alternate] --n 200

A model before any training (``--model smollm2``, or any ``model.path``) in the environment a run would give it,
greedy, one game per held-out seed (``--set`` adds the run's ``env.*`` / ``rollout.*`` overrides)::

    python bench/methods/textarena_winrate.py --model smollm2 --n 100 --set env.textarena.seat=alternate ...

``--config RECIPE`` starts that model from a training recipe (its game, prompts, examples and sampling), so the
"before" of a run is the run's own setting; ``--temperature T`` samples every move at T (top-p 1) for the model
and for the runs alike (the default: greedy for runs, the recipe's or greedy for ``--model``)::

    python bench/methods/textarena_winrate.py --model smollm2 --config recipes/smollm2/textarena_tictactoe.yaml \
        --temperature 1.0 --n 200
    python bench/methods/textarena_winrate.py outputs/smollm2_textarena_tictactoe --temperature 1.0 --n 200
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

OUTCOMES = ("win", "draw", "loss", "unfinished")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("runs", nargs="*", help="run directories of env.name=textarena runs")
    ap.add_argument("--random-player", action="store_true", help="the trivial baseline: a random player in the seat")
    ap.add_argument("--model", default=None, help="a model before training (model.path: smollm2, a directory)")
    ap.add_argument("--config", default=None, help="--model: a training recipe to start from (its env.*, rollout.*)")
    ap.add_argument("--set", nargs="*", default=[], help="--model: config overrides (env.textarena.*, rollout.*)")
    ap.add_argument("--temperature", type=float, default=None, help="sample each move at T with top-p 1 (default: greedy)")
    ap.add_argument("--game", default="TicTacToe-v0", help="--random-player: the game")
    ap.add_argument("--opponent", default="random", choices=["random", "first_legal"], help="--random-player: the opponent")
    ap.add_argument("--seat", default="alternate", help="--random-player: 0, 1 or alternate (the seed's parity)")
    ap.add_argument("--n", type=int, default=100, help="held-out seeds (games) per run")
    ap.add_argument("--stage", type=int, default=None, help="the run's stage to evaluate (default: its last)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="tokens per move (default: the run's)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all)")
    ap.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
    return ap.parse_args(argv)


def rates(outcomes: list[str]) -> dict:
    """Each outcome's rate and its binomial s.e. over the games."""
    n = len(outcomes)
    out = {"games": n}
    for o in OUTCOMES:
        p = sum(x == o for x in outcomes) / max(1, n)
        out[o], out[f"{o}_se"] = p, math.sqrt(p * (1 - p) / max(1, n))
    return out


def winrate(run_dir: Path, n: int, stage, max_new_tokens, threads, temperature=None) -> dict:
    import satseq

    sampling = {} if temperature is None else {"temperature": temperature, "top_p": 1.0}
    with tempfile.TemporaryDirectory() as tmp:
        satseq.evaluate(run_dir, dataset="embedded", limit=n, stage=stage, max_new_tokens=max_new_tokens,
                        threads=threads, output_dir=tmp, **sampling)
        rows = [json.loads(x) for x in (Path(tmp) / "predictions.jsonl").read_text().splitlines()]
    per_role: dict[str, list[str]] = {}
    for row in rows:
        for outcome in row.get("outcome") or []:
            for role, o in (outcome or {}).items():
                per_role.setdefault(role, []).append(o)
    if not per_role:
        raise SystemExit(f"{run_dir}: no game outcomes in its predictions (not an env.name=textarena run?)")
    return {role: rates(outs) for role, outs in sorted(per_role.items())}


def random_player(game: str, opponent: str, seat: str, n: int) -> dict:
    """A random listed move in ``seat`` against ``opponent`` on the held-out seeds (the environment's eval
    split); each game ends when TextArena says it is over."""
    from satseq.envs.common import EVAL_SEED_BASE
    from satseq.envs.textarena.env import Opponent, make_game

    outcomes = []
    for i in range(n):
        seed = EVAL_SEED_BASE + i
        mine = seed % 2 if seat == "alternate" else int(seat)
        env = make_game(game)
        env.reset(num_players=2, seed=seed)
        players = {mine: Opponent("random", seed + 1), 1 - mine: Opponent(opponent, seed)}
        done = False
        while not done:
            pid, obs = env.get_observation()
            done, _ = env.step(players[pid].move(obs))
        closed = env.close()
        rewards = closed[0] if isinstance(closed, tuple) else closed
        r = rewards.get(mine, 0)
        outcomes.append("win" if r > 0 else "loss" if r < 0 else "draw")
    return {"player": rates(outcomes)}


def untrained(model: str, overrides: list[str], n: int, threads: int, config=None,
              temperature=None) -> tuple[dict, list[dict]]:
    """``model`` (no training) on ``n`` held-out seeds of ``env.name=textarena`` (from the recipe ``config``
    when given) with ``overrides``, greedy or at ``temperature``: the rates per role and each game's outcome and
    actions."""
    import torch

    from satseq.config import load_config
    from satseq.registry import get_method
    from satseq.runtime import build_runtime

    sampling = ["rollout.temperature=0.0"] if temperature is None and config is None else \
        [] if temperature is None else [f"rollout.temperature={temperature}", "rollout.top_p=1.0"]
    cfg = load_config(config, ["method=grpo", f"model.path={model}", "env.name=textarena", *sampling,
                               "data.train_size=1", f"data.eval_size={n}", f"threads={threads or 1}",
                               f"output_dir={tempfile.mkdtemp()}", *overrides])
    method = get_method(cfg.method)
    rt = build_runtime(cfg, method, console=lambda *a: None)
    env = method.environment(rt.cfg)
    workflow = env.make_workflow(rt.cfg, method.roles(rt.cfg, rt.pool.names), rt.fmt, rt.sampling)
    episodes = workflow.rollout(rt.eval, rt.pool, rt.engine, group_size=1, generator=torch.Generator().manual_seed(0))
    env.assign_rewards(rt.cfg, episodes, None)
    games = [{"seed": ep.problem.meta.get("seed"), "outcome": ep.info.get("outcome"),
              "invalid_moves": ep.info.get("invalid_moves"), "reason": ep.info.get("reason"),
              "actions": [t.info.get("action") for t in ep.turns]} for ep in episodes]
    per_role: dict[str, list[str]] = {}
    for g in games:
        for role, o in (g["outcome"] or {}).items():
            per_role.setdefault(role, []).append(o)
    return {role: rates(outs) for role, outs in sorted(per_role.items())}, games


def main(argv=None) -> int:
    args = parse_args(argv)
    table = {}
    if args.random_player:
        name = f"random_player:{args.game}:{args.opponent}:seat={args.seat}"
        table[name] = random_player(args.game, args.opponent, args.seat, args.n)
        args.runs = []
        r = table[name]["player"]
        print(f"{name}  win {r['win']:.3f} ± {r['win_se']:.3f}  draw {r['draw']:.3f}  loss {r['loss']:.3f}  "
              f"({r['games']} games)")
    elif args.model is not None:
        name = f"untrained:{args.model}:" + " ".join(
            ([f"--config {args.config}"] if args.config else []) +
            ([f"--temperature {args.temperature}"] if args.temperature is not None else []) + args.set)
        table[name], games = untrained(args.model, args.set, args.n, args.threads, args.config, args.temperature)
        table[name]["games"] = games
        args.runs = []
        for role, r in table[name].items():
            if role != "games":
                print(f"{name}  {role}  win {r['win']:.3f} ± {r['win_se']:.3f}  draw {r['draw']:.3f}  loss {r['loss']:.3f}"
                      f"  unfinished {r['unfinished']:.3f}  ({r['games']} games)")
    elif not args.runs:
        raise SystemExit("textarena_winrate.py: give run directories, --random-player or --model")
    for run in args.runs:
        table[run] = winrate(Path(run), args.n, args.stage, args.max_new_tokens, args.threads, args.temperature)
        for role, r in table[run].items():
            print(f"{run}  {role:>9}  win {r['win']:.3f} ± {r['win_se']:.3f}  draw {r['draw']:.3f}  "
                  f"loss {r['loss']:.3f}  unfinished {r['unfinished']:.3f}  ({r['games']} games)")
    if args.out is not None:
        args.out.write_text(json.dumps(table, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
