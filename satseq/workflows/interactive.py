"""Episodes an environment drives turn by turn: tool calls, games, conversations continued token for token.

A fixed protocol (``single``, ``relay``, ``coach``) knows its turns in advance. An interactive episode
does not: after every turn the environment decides who acts next, with which prompt, or that the
episode is over (a final answer, a won game, the turn or tool budget spent). Each episode is a
:class:`Session` the environment starts from its problem; this workflow asks every session for its next
turn, samples the turns of all live sessions batched per agent (one ``engine.generate`` per agent and
step), records each as a :class:`~satseq.records.Turn` with the exact prompt ids the session gave and
the ids the engine sampled, and hands it back to its session. Sessions answer with **token ids**
(:class:`satseq.envs.conversation.Conversation`): a turn that continues a conversation is its
previous prompt + the response as sampled + the new messages encoded, never a decoded and re-encoded
text.

Every episode samples from its own stream (:mod:`satseq.rollout.streams`), so its tokens do not
depend on which other episodes share its batch. Two bounds end every episode: ``max_turns`` turns,
and the model's context (a prompt that leaves fewer than ``sampling.max_new_tokens`` tokens ends the
episode before it is sampled; :attr:`Session.stop` says ``context``). A turn that continues a
conversation prefills only its new tokens where the engine keeps the conversation's keys and values
(:func:`satseq.rollout.prefix_cache.continuing`).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Protocol, runtime_checkable

from satseq.records import Episode, Problem, Turn
from satseq.rollout.prefix_cache import continuing
from satseq.rollout.types import Generation, SamplingParams
from satseq.workflows.base import EpisodeWorkflow, TurnSampler


@runtime_checkable
class Session(Protocol):
    """One interactive episode, as its environment plays it."""

    stop: Optional[str]  # why it ended (None while it runs): "answered", "turn_limit", "context", ...

    def next_turn(self) -> Optional[tuple[str, list[int], str]]:
        """``(role, prompt_ids, prompt_text)`` of the next turn, or None when the episode is over."""

    def observe(self, turn: Turn, gen: Generation) -> None:
        """The turn just sampled from :meth:`next_turn`'s prompt (set its ``answer`` and ``info`` here)."""

    def finish(self, episode: Episode) -> None:
        """The episode is over: set its ``prediction`` and ``info``."""


class InteractiveWorkflow(EpisodeWorkflow):
    """``agents``: role -> agent; ``start(problem) -> Session`` (the environment's); at most ``max_turns``
    turns an episode; ``context_length``: the model's (None: read from the acting agent's model). An environment builds it in its
    :meth:`~satseq.envs.base.Environment.make_workflow` (it is not in the workflow registry: it needs the
    environment's ``start``)."""

    name = "interactive"
    roles = None

    def __init__(self, agents: dict[str, str], prompt_format, sampling: SamplingParams, *,
                 start: Callable[[Problem], Session], max_turns: int, context_length: Optional[int] = None):
        super().__init__(agents, prompt_format, sampling)
        if max_turns < 1:
            raise ValueError("an interactive episode needs max_turns >= 1")
        self.start, self.max_turns, self.context_length = start, max_turns, context_length

    def _context(self, turns: TurnSampler, agent: str) -> Optional[int]:
        if self.context_length is not None:
            return self.context_length
        from satseq.data.context import context_length_of

        module = getattr(turns.pool, "module", None)
        return context_length_of(module(agent)) if module is not None else None

    def play(self, episodes: list[Episode], turns: TurnSampler) -> None:
        # later turns prefill only what is new: satseq's engine keeps each conversation's keys and values
        # for this rollout (rollout.prefix_cache; vLLM caches prefixes itself)
        turns = dataclasses.replace(turns, engine=continuing(turns.engine))
        sessions = [self.start(ep.problem) for ep in episodes]
        contexts = {agent: self._context(turns, agent) for agent in set(self.agents.values())}
        while True:
            ready: dict[str, list[tuple[int, str, list[int], str]]] = {}  # agent -> (episode, role, ids, text)
            for e, (ep, s) in enumerate(zip(episodes, sessions)):
                if s.stop is not None:
                    continue
                if len(ep.turns) >= self.max_turns:
                    s.stop = "turn_limit"
                    continue
                nxt = s.next_turn()
                if nxt is None:
                    s.stop = s.stop or "done"
                    continue
                role, ids, text = nxt
                context = contexts[self.agents[role]]
                if context is not None and len(ids) + turns.sampling.max_new_tokens > context:
                    s.stop = "context"
                    continue
                ready.setdefault(self.agents[role], []).append((e, role, ids, text))
            if not ready:
                break
            for agent, items in ready.items():
                gens = turns.sample_ids(agent, [ids for _, _, ids, _ in items], [e for e, _, _, _ in items])
                for (e, role, _, text), gen in zip(items, gens):
                    ep = episodes[e]
                    turn = Turn.from_generation(gen, role=role, agent=agent, index=len(ep.turns), prompt_text=text)
                    ep.turns.append(turn)
                    sessions[e].observe(turn, gen)
        for ep, s in zip(episodes, sessions):
            ep.info["stop"] = s.stop
            s.finish(ep)
