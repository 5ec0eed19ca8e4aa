"""``env.name=textarena``: a TextArena game (``textarena.make(env.textarena.game)``, TextArena 0.7.4) whose
players are **roles**, each player an agent's conversation continued token for token.

An episode is one game, from a seed (the problems are seeds, as :class:`~satseq.envs.common.SeedTask`:
training seeds 0, 1, ...; held-out seeds from :data:`~satseq.envs.common.EVAL_SEED_BASE` on)::

    env.reset(num_players=2, seed=s)
    loop: pid, obs = env.get_observation()       # the observations pid received since it last acted
          pid is an LLM seat   -> the turn of role player_<pid>: obs a user message of its conversation,
                                  the sampled response is the action: done, info = env.step(response)
          pid is the opponent  -> env.step(opponent's move) inside the environment (no turn)
    rewards, game_info = env.close()             # TextArena: {pid: +1 win / -1 loss / 0 draw}

**Roles.** ``env.textarena.opponent=none``: every player is an LLM role, ``player_0`` and ``player_1``
(TextArena's player ids; SAT-Seq / the simultaneous update seat ``sat_seq.agents`` on them in order, the
shared policy plays both). ``opponent=random`` / ``first_legal``: the other seat is a scripted player inside
the environment that plays a random (seeded by the episode's seed) / the first of the moves the game lists
(the quoted ``'[...]'`` moves of its latest observation, e.g. TicTacToe's ``Available Moves: '[0]', ...``),
so the episode has one LLM role, ``player``, in seat ``env.textarena.seat`` (0, 1, or ``alternate``: the
seed's parity): GRPO against a fixed opponent.

**Observations.** TextArena's core environment is used without its LLM wrappers (``LLMObservationWrapper``
repeats a player's whole history at every turn; here the history is the conversation): each turn's user
message is only what the player received since its last turn, one ``[GAME] ...`` / ``[Player k] ...`` line
per observation as ``LLMObservationWrapper`` writes them, restricted to ``env.textarena.observations``
(TextArena's ``ObservationType`` names; ``all``; default ``auto``: all for a chat model, :data:`COMPACT`
for the embedded model, whose 256 positions do not hold the rules text). The action is the response text with TextArena's
``ActionFormattingWrapper`` rule (brackets added when it has none).

**Invalid moves** are TextArena's: the game's ``error_allowance`` (TicTacToe: 1) lets a player resubmit
after an invalid move, with the game's message to it (the next turn is the same player's); past it the
player loses (``game_info[pid]["invalid_move"]``). Counted per role in ``textarena/<role>/invalid_moves``.

**Reward and credit.** Each player's outcome (TextArena's reward: +1 win, -1 loss, 0 draw) is the reward of
that player's **last** turn; its other turns get 0. A game not finished within ``env.max_turns`` LLM turns
(or the model's context) is ``unfinished``, outcome 0 for every player. The credit is per player: a role's
turns carry only its own outcome, and a multi-agent update computes each role's advantages over that role's
own turns (:attr:`TextArena.credit` = ``"role"``, :mod:`satseq.update.turn_credit`), so in a zero-sum game one
player's win is never added into the other player's return. An outcome method that reads the episode's last
turn (GRPO) therefore needs one LLM role: GRPO refuses an environment with several roles credited apart.

Not covered: games of more than two players, simultaneous-move games whose ``get_observation`` is not
turn-based, online play, TextArena's LLM judges (games needing a jury).
"""
from __future__ import annotations

import random
import re
from typing import Literal, Optional, Sequence, Union

from pydantic import Field

from satseq.config.section import Section
from satseq.envs.base import Environment
from satseq.envs.common import ObservationFormat, SeedTask
from satseq.errors import ConfigError
from satseq.records import Episode, Problem, Turn
from satseq.registry import register_env

DEFAULT_MAX_TURNS = 10
OUTCOMES = ("win", "draw", "loss", "unfinished")
#: what the embedded model (256 positions) is shown by default: the board, the moves, the game's messages
COMPACT = ("GAME_BOARD", "GAME_ADMIN", "GAME_ACTION_DESCRIPTION", "GAME_MESSAGE")
_MOVE = re.compile(r"'(\[[^\]'\n]*\])'")  # a move the game lists, quoted: '[4]', '[check]'


class ArenaExample(Section):
    """One worked turn of ``env.textarena.examples``: an observation and the move that answers it."""

    observation: str = Field(..., description="the user message (as format_observation writes one)")
    move: str = Field(..., description="the assistant's reply, e.g. [4]")


class TextArenaConfig(Section):
    """``env.textarena``: the game, its players, the opponent and what a player is shown."""

    game: str = Field("TicTacToe-v0", description="a registered TextArena game id (textarena.make(game)); "
                      "a two-player game whose turns alternate, or a one-player game")
    num_players: int = Field(2, ge=1, le=2, description="players of the game (env.reset(num_players=...))")
    opponent: Literal["none", "random", "first_legal"] = Field(
        "random", description="none: every player is an LLM role (player_0, player_1); random / first_legal: "
        "the other seat plays a random (seeded) / the first of the moves the game lists, so the episode has "
        "one LLM role, player")
    seat: Union[int, Literal["alternate"]] = Field(
        0, description="the LLM's seat (player id) against an opponent: 0, 1, or alternate (the seed's parity)")
    observations: Union[Literal["auto", "all"], list[str]] = Field(
        "auto", description="TextArena ObservationType names a player is shown (e.g. [GAME_BOARD, GAME_ADMIN]), "
        "all, or auto: all for a chat model, the embedded model's compact set (COMPACT: no rules text) otherwise")
    system_prompt: Optional[str] = Field(None, description="a system message before the first observation (chat models)")
    invalid_move_penalty: float = Field(
        0.0, ge=0.0, description="subtracted from a player's reward for each invalid move it made (a format reward: "
        "a game lost by invalid moves then scores below one lost by play); 0 = the game's outcome alone")
    examples: list[ArenaExample] = Field(
        default_factory=list, description="worked turns before the first observation (chat models): a list of "
        "{observation, move}, each shown as a user message and the assistant's reply (few-shot; docs/textarena.md)")


def _textarena():
    try:
        import textarena
    except ImportError as e:
        raise ConfigError(f"config key 'env.name': env.name=textarena needs the textarena package "
                          f"(pip install 'satseq[envs]'): {e}") from None
    return textarena


def make_game(game: str):
    """TextArena's core environment of ``game``, without its wrappers (module docstring)."""
    ta = _textarena()
    try:
        env = ta.make(game)
    except (ValueError, ImportError) as e:
        raise ConfigError(f"config key 'env.textarena.game': {e}") from None
    while isinstance(env, ta.Wrapper):
        env = env.env
    return env


def format_observation(observation, keep: Optional[set]) -> str:
    """TextArena's observation list ``[(from_id, message, type)]`` as ``LLMObservationWrapper`` writes
    it (one ``\\n[GAME] ...`` / ``\\n[Player k] ...`` line each), keeping the types in ``keep`` (None: all)."""
    out = []
    for sender, message, kind in observation:
        if keep is not None and kind.name not in keep:
            continue
        out.append(f"\n[{'GAME' if sender == -1 else f'Player {sender}'}] {message}")
    return "".join(out)


def format_action(text: str) -> str:
    """TextArena's ``ActionFormattingWrapper``: brackets around an action that has none."""
    return f"[{text}]" if "[" not in text and "]" not in text else text


def listed_moves(observation) -> list[str]:
    """The quoted ``'[...]'`` moves of the latest message in ``observation`` that lists any."""
    for _, message, _ in reversed(observation):
        moves = _MOVE.findall(message)
        if moves:
            return moves
    return []


class ArenaFormat(ObservationFormat):
    """A conversation format for games (the first prompt is the first observation)."""

    def __init__(self, conversation_format, system: Optional[str], keep: Optional[set] = None,
                 examples: Sequence[ArenaExample] = ()):
        super().__init__(conversation_format, system, "textarena")
        self.keep = keep  # the ObservationType names shown (None: all)
        self.examples = tuple(examples)

    def messages(self, observation: str) -> list:
        """The system message, each worked example's observation and move, then ``observation``."""
        from satseq.envs.conversation import Message

        head = super().messages(observation)
        shots = [m for ex in self.examples for m in (Message("user", ex.observation), Message("assistant", ex.move))]
        return head[:-1] + shots + head[-1:]


class Opponent:
    """The scripted player: ``random`` (a :class:`random.Random` seeded by the episode) or ``first_legal``."""

    def __init__(self, kind: str, seed: int):
        self.kind, self.rng = kind, random.Random(seed)

    def move(self, observation) -> str:
        moves = listed_moves(observation)
        if not moves:
            raise ValueError("env.textarena.opponent: the game lists no moves (quoted '[...]') for the opponent")
        return moves[0] if self.kind == "first_legal" else self.rng.choice(moves)


class ArenaSession:
    """One game: per LLM seat a :class:`~satseq.envs.conversation.Conversation`; the opponent's moves are
    played inside :meth:`next_turn`."""

    def __init__(self, fmt: ArenaFormat, section: TextArenaConfig, problem: Problem, seats: dict[int, str]):
        self.fmt, self.stop, self.seats = fmt, None, seats  # seats: player id -> role
        seed = int(problem.meta.get("seed", problem.problem_id))
        self.keep = fmt.keep
        self.env = make_game(section.game)
        self.env.reset(num_players=section.num_players, seed=seed)
        self.opponent = None if section.opponent == "none" else Opponent(section.opponent, seed)
        self.convs: dict[int, object] = {}
        self.invalid = {r: 0 for r in seats.values()}
        self.opponent_moves = 0
        self.done = False
        self.pid: Optional[int] = None
        self.error: Optional[str] = None

    def _step(self, action: str) -> None:
        self.done, _ = self.env.step(action)

    def next_turn(self):
        from satseq.envs.conversation import Conversation, Message

        if self.stop is not None:
            return None
        while not self.done:
            pid, obs = self.env.get_observation()
            if pid in self.seats:
                break
            try:
                self._step(self.opponent.move(obs))
            except ValueError as e:
                self.error, self.stop = str(e), "error"
                return None
            self.opponent_moves += 1
        if self.done:
            self.stop = "game_over"
            return None
        text = format_observation(obs, self.keep)
        if pid not in self.convs:
            self.convs[pid] = Conversation(self.fmt.conversation, self.fmt.messages(text))
        else:
            self.convs[pid].add(Message("user", text))
        self.pid = pid
        conv = self.convs[pid]
        ids = conv.prompt_ids()
        return self.seats[pid], ids, conv.prompt_text

    def observe(self, turn: Turn, gen) -> None:
        pid, role = self.pid, self.seats[self.pid]
        self.convs[pid].record(gen)
        action = format_action(gen.text)
        state = getattr(self.env, "state", None)
        before = getattr(state, "turn", None)
        self._step(action)
        # TextArena counts a turn only for a valid move (State.step); the last invalid move past the
        # allowance ends the game with game_info[pid]["invalid_move"]
        info = (getattr(state, "game_info", None) or {}).get(pid, {})
        invalid = (before is not None and getattr(state, "turn", None) == before) or bool(info.get("invalid_move"))
        self.invalid[role] += int(invalid)
        turn.info.update({"player": pid, "action": action, "invalid_move": invalid})

    def finish(self, episode: Episode) -> None:
        closed = self.env.close()
        rewards, game_info = closed if isinstance(closed, tuple) else (closed, {})
        finished = self.done and rewards is not None
        outcome, returns = {}, {}
        for pid, role in self.seats.items():
            r = float(rewards.get(pid, 0.0)) if finished else 0.0
            returns[role] = r
            outcome[role] = "unfinished" if not finished else ("win" if r > 0 else "loss" if r < 0 else "draw")
        episode.info.update({"returns": returns, "outcome": outcome, "invalid_moves": dict(self.invalid),
                             "seats": {role: pid for pid, role in self.seats.items()},
                             "opponent_moves": self.opponent_moves,
                             "reason": next((g.get("reason") for g in (game_info or {}).values()
                                             if isinstance(g, dict) and g.get("reason")), None)})
        if self.error:
            episode.info["error"] = self.error


@register_env
class TextArena(Environment):
    name = "textarena"
    title = "a TextArena game, its players as roles (or one role against a scripted opponent)"
    config_section = ("textarena", TextArenaConfig, "a TextArena game")
    credit = "role"  # each role's advantages over its own turns (satseq.update.turn_credit)

    def section(self, cfg) -> TextArenaConfig:
        return cfg.env.textarena

    def config_defaults(self, cfg) -> dict:
        return {"sat_seq.certificate.prompts": 0}  # the certificate bounds the relay's vote, not a game

    def check(self, cfg) -> None:
        s = self.section(cfg)
        if isinstance(s.observations, list):
            names = set(_textarena().ObservationType.__members__)
            bad = [o for o in s.observations if o not in names]
            if bad:
                raise ConfigError(f"config key 'env.textarena.observations': '{bad[0]}' is not a TextArena "
                                  f"ObservationType ({', '.join(sorted(names))})")
        if s.num_players == 1 and s.opponent != "none":
            raise ConfigError("config key 'env.textarena.opponent': a one-player game has no opponent (set none)")
        if s.seat == "alternate" or s.opponent == "none":
            pass
        elif s.seat >= s.num_players:
            raise ConfigError(f"config key 'env.textarena.seat': seat {s.seat} of a {s.num_players}-player game")
        game = make_game(s.game)
        try:
            game.reset(num_players=s.num_players, seed=0)
        except (AssertionError, ValueError, TypeError) as e:
            raise ConfigError(f"config key 'env.textarena.num_players': {s.game} with {s.num_players} players: "
                              f"{e or type(e).__name__}") from None
        if s.opponent != "none" and not listed_moves(game.get_observation()[1]):
            raise ConfigError(f"config key 'env.textarena.opponent': {s.game} lists no moves (quoted '[...]') for a "
                              f"scripted opponent to choose from")
        super().check(cfg)

    def role_names(self, cfg) -> list[str]:
        s = self.section(cfg)
        if s.opponent != "none" or s.num_players == 1:
            return ["player"]
        return [f"player_{k}" for k in range(s.num_players)]

    def seats(self, cfg, problem: Problem) -> dict[int, str]:
        """player id -> role of an episode."""
        s = self.section(cfg)
        if s.num_players == 1:
            return {0: "player"}
        if s.opponent == "none":
            return {k: f"player_{k}" for k in range(s.num_players)}
        seed = int(problem.meta.get("seed", problem.problem_id))
        return {(seed % 2 if s.seat == "alternate" else int(s.seat)): "player"}

    def embedded_task(self, seed: int = 0):
        return SeedTask(seed)

    def prompt_format(self, kind, tokenizer, cfg):
        from satseq.envs.conversation import conversation_format

        chat = kind != "embedded" and getattr(tokenizer, "chat_template", None) is not None \
            and cfg.model.chat_template != "never"
        s = self.section(cfg)
        if s.examples and not chat:
            raise ConfigError("config key 'env.textarena.examples': worked turns are chat messages, and this model "
                              "has no chat template in use (model.chat_template=never, or the embedded model)")
        keep = set(s.observations) if isinstance(s.observations, list) else \
            None if s.observations == "all" or chat else set(COMPACT)
        return ArenaFormat(conversation_format(tokenizer, kind="chat" if chat else "plain"),
                           s.system_prompt if chat else None, keep, s.examples)

    def make_workflow(self, cfg, roles, prompt_format, sampling, options=None):
        from satseq.workflows.interactive import InteractiveWorkflow

        if isinstance(roles, str):  # one model evaluated: it plays every role
            roles = {r: roles for r in self.role_names(cfg)}
        s = self.section(cfg)
        return InteractiveWorkflow(dict(roles), prompt_format, sampling,
                                   start=lambda p: ArenaSession(prompt_format, s, p, self.seats(cfg, p)),
                                   max_turns=cfg.env.max_turns or DEFAULT_MAX_TURNS)

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        """Each role's outcome, less ``invalid_move_penalty`` per invalid move of that role, on its last turn;
        0 on its other turns (module docstring)."""
        penalty = 0.0 if cfg is None else self.section(cfg).invalid_move_penalty  # grade(): the outcome alone
        for ep in episodes:
            returns = ep.info.get("returns", {})
            invalid = ep.info.get("invalid_moves", {})
            last = {t.role: t for t in ep.turns}
            for t in ep.turns:
                t.reward = float(returns.get(t.role, 0.0)) - penalty * invalid.get(t.role, 0) \
                    if last[t.role] is t else 0.0
                t.correct = ep.info.get("outcome", {}).get(t.role) == "win"
            ep.prediction_correct = any(o == "win" for o in ep.info.get("outcome", {}).values()) \
                if len(returns) == 1 else False
        return {}

    def reward_bound(self, cfg, n_agents, custom):
        return 1.0

    def rollout_metrics(self, cfg, episodes) -> dict:
        return outcome_metrics(episodes, "textarena")

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        episodes = workflow.rollout(rt.eval, rt.pool, rt.engine, group_size=1, generator=generator)
        self.assign_rewards(cfg, episodes, None)
        return {f"eval/{k}": v for k, v in self.rollout_metrics(cfg, episodes).items()}

    def grade(self, episodes) -> None:
        """``satseq eval``'s grading (no run config): each role's outcome, without the training penalty."""
        self.assign_rewards(None, episodes, None)

    def prediction_answers(self, episodes):
        return ([",".join(f"{r}:{o}" for r, o in ep.info.get("outcome", {}).items()) for ep in episodes],
                [bool(ep.prediction_correct) for ep in episodes])

    def prediction_fields(self, episodes) -> dict:
        return {"outcome": [ep.info.get("outcome") for ep in episodes],
                "returns": [ep.info.get("returns") for ep in episodes],
                "invalid_moves": [ep.info.get("invalid_moves") for ep in episodes],
                "stop": [ep.info.get("stop") for ep in episodes],
                "actions": [[t.info.get("action") for t in ep.turns] for ep in episodes]}


def outcome_metrics(episodes: list[Episode], prefix: str) -> dict:
    """Per role: win / draw / loss / unfinished rates, invalid moves per episode, its turns per episode;
    and turns per episode (``<prefix>/turns``)."""
    n = max(1, len(episodes))
    roles = sorted({r for ep in episodes for r in ep.info.get("outcome", {})})
    m = {f"{prefix}/turns": sum(len(ep.turns) for ep in episodes) / n}
    for role in roles:
        outs = [ep.info.get("outcome", {}).get(role) for ep in episodes]
        for o in OUTCOMES:
            m[f"{prefix}/{role}/{o}_rate"] = sum(x == o for x in outs) / n
        m[f"{prefix}/{role}/invalid_moves"] = sum(ep.info.get("invalid_moves", {}).get(role, 0) for ep in episodes) / n
        m[f"{prefix}/{role}/turns"] = sum(sum(t.role == role for t in ep.turns) for ep in episodes) / n
    return m
