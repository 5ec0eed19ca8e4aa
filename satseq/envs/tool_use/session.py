"""One tool episode (:class:`ToolSession`): the conversation, the calls it made, their results.

A turn's calls are parsed from its text (the format's parser); each readable call within the budget is
run (:func:`satseq.tools.registry.execute_tool_call`; its result taken from the run's journal where the
same turn made it before a kill) and answered by a tool message. A turn without a call ends the episode:
its extracted answer is the prediction. The turn records ``info["tool_calls"]`` (``{name, arguments}``
or ``{error}``) and ``info["tool_results"]`` (the texts the model read), so a run's episodes say what
happened without running anything again.
"""
from __future__ import annotations

from typing import Optional

from satseq.envs.conversation import Conversation, Message
from satseq.envs.tool_use.journal import ToolJournal, call_key
from satseq.records import Episode, Problem, Turn
from satseq.rewards.extract import extract_answer

BUDGET_SPENT = "error: tool budget spent; answer now without a tool call"
TIMEOUT_MARK = "error: time limit exceeded"


class ToolSession:
    """``tools``: ``{name: Tool}`` this episode may call (default: the format's); ``observation``: text appended
    to the problem's user message (a TRL environment's ``reset``); ``reward``: called once when the episode
    ends, its float recorded as ``episode.info["env_reward"]`` (a TRL environment's ``get_reward``)."""

    def __init__(self, fmt, problem: Problem, *, role: str, budget: int, journal: ToolJournal,
                 tools: Optional[dict] = None, observation: Optional[str] = None, reward=None):
        self.fmt, self.problem, self.role, self.budget, self.journal = fmt, problem, role, budget, journal
        self.tools = tools if tools is not None else fmt.tools
        self.conv = Conversation(fmt.conversation, fmt.first_messages(problem.problem, observation))
        self.stop: Optional[str] = None
        self.calls = 0
        self.answer: Optional[str] = None
        self.reward = reward

    def next_turn(self):
        if self.stop is not None:
            return None
        ids = self.conv.prompt_ids()
        return self.role, ids, self.conv.prompt_text

    def observe(self, turn: Turn, gen) -> None:
        from satseq.tools.parsers import parse_tool_calls
        from satseq.tools.registry import execute_tool_call, tool_message

        self.conv.record(gen)
        calls = parse_tool_calls(gen.text, self.fmt.parser)
        if not calls:
            self.answer = turn.answer = extract_answer(gen.text)
            self.stop = "answered"
            return
        made, results = [], []
        for i, call in enumerate(calls):
            made.append({"error": call.error} if call.error is not None else
                        {"name": call.name, "arguments": dict(call.arguments)})
            if self.calls >= self.budget:
                text = BUDGET_SPENT
            else:
                self.calls += 1
                key = call_key(gen.prompt_ids, gen.response_ids, i, call.name, call.arguments)
                text, _ = self.journal.result(key, lambda c=call: execute_tool_call(c, self.tools))
            results.append(text)
            self.conv.add(Message(**tool_message(call, text)))
        turn.info["tool_calls"], turn.info["tool_results"] = made, results

    def finish(self, episode: Episode) -> None:
        episode.prediction = self.answer
        episode.info["tool_calls"] = self.calls
        if self.reward is not None:
            episode.info["env_reward"] = float(self.reward())


def tool_metrics(episodes: list[Episode]) -> dict:
    """Per episode: tool calls, calls answered with an error, timeouts, turns; the share that answered."""
    n = max(1, len(episodes))
    results = [r for ep in episodes for t in ep.turns for r in t.info.get("tool_results", [])]
    calls = [c for ep in episodes for t in ep.turns for c in t.info.get("tool_calls", [])]
    errors = sum(1 for r in results if r.startswith("error:") or "\nerror:" in r)
    return {"tools/calls": len(calls) / n, "tools/errors": errors / n,
            "tools/timeouts": sum(1 for r in results if TIMEOUT_MARK in r) / n,
            "tools/turns": sum(len(ep.turns) for ep in episodes) / n,
            "tools/answered": sum(ep.info.get("stop") == "answered" for ep in episodes) / n}
