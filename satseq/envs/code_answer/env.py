"""``env.name=code_answer``: two roles that differ, a tool user and an answerer (issue 63's first task).

An episode, two turns::

    coder     sees the problem; writes a Python program (a fenced block) that prints the answer
    (the sandbox runs the program: what it printed, or its error, is recorded)
    answerer  sees the problem, the program and what it printed; gives the final answer

The coder never answers and the answerer never runs code: their skills differ, which is where the
literature finds separate agents pay (AT-GRPO's coder + tester). The reward is the environment's, per
seat as in the relay: the coder's own turn is worth ``reward.own`` × (what its program printed is the
answer, graded by the problem's scorer), the answerer's ``reward.own`` × its answer's correctness, and
the last turn adds ``reward.team`` × the final answer's correctness. The credit is per seat (``credit =
"role"``: each seat's advantages from its own reward, :mod:`satseq.update.turn_credit`), so SAT-Seq and
the simultaneous update seat one agent on each role; the last turn's reward, (own + team) × the
answer's correctness, is the episode's outcome, which GRPO credits every turn with. Per-seat metrics: ``code/ran``
(the program exited cleanly), ``code/output_correct``, ``code/blocks`` (a program was written),
``answer/accuracy``, ``answer/copies_output`` (the answer is what the program printed) and the final
accuracy, ``rollout/vote_accuracy``.

The program runs in the sandbox (``env.code_answer.timeout_s``, ``memory_mb``, ``max_output_bytes``),
its result journaled like a tool call (:mod:`satseq.envs.tool_use.journal`), so a resumed run continues
bit for bit.
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from satseq.config.section import Section
from satseq.envs.base import Environment
from satseq.records import Episode, Problem, Turn
from satseq.registry import register_env

CODER, ANSWERER = "coder", "answerer"
NO_PROGRAM = "error: no program (a fenced ```python block) was written"

CODER_SYSTEM = ("Write a Python program that computes the answer to the problem and prints it. "
                "Reply with the program only, in one fenced block:\n```python\nprint(2 + 3)\n```")
ANSWERER_PROMPT = ("{problem}\n\nA program written for this problem:\n```python\n{code}```\nIt printed:\n{output}\n\n"
                   "Give the final answer within \\boxed{{}}.")


class CodeAnswerConfig(Section):
    """``env.code_answer``: the sandbox's limits for the coder's program, and the two roles' prompts."""

    timeout_s: float = Field(5.0, gt=0.0, description="wall-clock seconds the coder's program may run")
    memory_mb: int = Field(512, ge=16, description="address space per process, MiB")
    max_output_bytes: int = Field(1024, ge=64, description="bytes of the program's output the answerer reads")
    coder_system: Optional[str] = Field(None, description="the coder's system message (chat models; None: write a program that prints the answer, in one fenced block)")
    answerer_prompt: Optional[str] = Field(None, description="the answerer's user message, with {problem}, {code} and {output} (None: the default, which asks for a boxed answer)")


class CodeAnswerFormat:
    def __init__(self, conversation_format, chat: bool, section: CodeAnswerConfig, template: str):
        self.conversation, self.chat, self.section, self.template = conversation_format, chat, section, template
        self.name = "code_answer-" + ("chat" if chat else "plain")

    def coder_messages(self, problem: str) -> list:
        from satseq.envs.conversation import Message
        from satseq.workflows.prompts import render_problem

        system = self.section.coder_system or (CODER_SYSTEM if self.chat else None)
        user = render_problem(self.template, problem) if self.template else problem
        return ([Message("system", system)] if system else []) + [Message("user", user)]

    def answerer_messages(self, problem: str, code: str, output: str) -> list:
        from satseq.envs.conversation import Message

        template = self.section.answerer_prompt or ANSWERER_PROMPT
        text = template.replace("{problem}", problem).replace("{code}", code).replace("{output}", output)
        return [Message("user", text.replace("{{}}", "{}"))]

    def single(self, problem: str) -> str:
        """The first prompt (the runtime's length check); the answerer's, longer, is bounded when it is
        made (a prompt past the context ends the episode: stop ``context``)."""
        return self.conversation.render(self.coder_messages(problem), add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        return self.conversation.encode(text)


class CodeAnswerSession:
    def __init__(self, fmt: CodeAnswerFormat, problem: Problem, roles: dict, run, journal):
        from satseq.envs.conversation import Conversation

        self.fmt, self.problem, self.run, self.journal = fmt, problem, run, journal
        self.stop: Optional[str] = None
        self.step = 0
        self.coder = Conversation(fmt.conversation, fmt.coder_messages(problem.problem))
        self.answerer = None
        self.code, self.output, self.ok = "", NO_PROGRAM, False

    def next_turn(self):
        if self.step == 0:
            return CODER, self.coder.prompt_ids(), self.coder.prompt_text
        if self.step == 1:
            return ANSWERER, self.answerer.prompt_ids(), self.answerer.prompt_text
        return None

    def observe(self, turn: Turn, gen) -> None:
        from satseq.envs.conversation import Conversation
        from satseq.envs.tool_use.journal import call_key
        from satseq.rewards.extract import extract_answer
        from satseq.tools.parsers import parse_tool_calls

        if self.step == 0:
            self.coder.record(gen)
            blocks = [c for c in parse_tool_calls(gen.text, "python_block") if c.error is None]
            if blocks:
                self.code = blocks[0].arguments["code"]
                key = call_key(gen.prompt_ids, gen.response_ids, 0, "python", {"code": self.code})
                self.output, _ = self.journal.result(key, lambda: self.run(self.code))
                self.ok = not (self.output.startswith("error:") or "\nerror:" in self.output)
            turn.info.update(code=self.code, output=self.output, ran=self.ok, wrote=bool(blocks))
            turn.answer = _output_answer(self.output) if self.ok else None
            self.answerer = Conversation(self.fmt.conversation,
                                         self.fmt.answerer_messages(self.problem.problem, self.code or "\n", self.output))
            self.step = 1
            return
        turn.answer = extract_answer(gen.text)
        self.step, self.stop = 2, "answered"

    def finish(self, episode: Episode) -> None:
        episode.prediction = episode.turns[-1].answer if len(episode.turns) == 2 else None


def _output_answer(output: str) -> Optional[str]:
    """What a program printed, as an answer: its last non-empty line."""
    lines = [x.strip() for x in output.strip().splitlines() if x.strip()]
    return lines[-1] if lines else None


@register_env
class CodeAnswer(Environment):
    name = "code_answer"
    title = "a coder writes a program that the sandbox runs; an answerer reads it and its output and answers"
    config_section = ("code_answer", CodeAnswerConfig, "the coder → answerer environment")
    max_turns = 2
    credit = "role"             # each seat's advantages over its own turn (satseq.update.turn_credit): SAT-Seq
    last_turn_outcome = True    # and simultaneous seat an agent a role; GRPO credits every turn with the last's

    def config_defaults(self, cfg) -> dict:
        return {"sat_seq.certificate.prompts": 0}  # the certificate bounds the relay's vote

    def role_names(self, cfg) -> list[str]:
        return [CODER, ANSWERER]

    def prompt_format(self, kind, tokenizer, cfg):
        from satseq.envs.conversation import conversation_format
        from satseq.tools.sandbox import ensure_available

        ensure_available()  # no sandbox here: the run stops now, with one line (never unconfined)
        chat = kind != "embedded" and getattr(tokenizer, "chat_template", None) is not None \
            and cfg.model.chat_template != "never"
        template = "" if kind == "embedded" else ("chat" if cfg.data.prompt_template == "boxed" else cfg.data.prompt_template)
        return CodeAnswerFormat(conversation_format(tokenizer, kind="chat" if chat else "plain"), chat,
                                cfg.env.code_answer, template)

    def make_workflow(self, cfg, roles, prompt_format, sampling, options=None):
        from satseq.envs.tool_use.journal import ToolJournal
        from satseq.tools.sandbox import format_result, run_python
        from satseq.workflows.interactive import InteractiveWorkflow

        roles = {r: roles for r in (CODER, ANSWERER)} if isinstance(roles, str) else dict(roles)
        s = cfg.env.code_answer
        journal = ToolJournal.for_run(cfg.run_dir) if (options or {}).get("journal", True) else ToolJournal(None)

        def run(code: str) -> str:
            r = run_python(code, timeout_s=s.timeout_s, memory_mb=s.memory_mb, max_output_bytes=s.max_output_bytes)
            return format_result(r, timeout_s=s.timeout_s, max_output_bytes=s.max_output_bytes)

        return InteractiveWorkflow(roles, prompt_format, sampling, max_turns=2,
                                   start=lambda p: CodeAnswerSession(prompt_format, p, roles, run, journal))

    def workflow_options(self, cfg) -> dict:
        return {"journal": False}

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        from satseq.rewards.turn_rewards import grade_episodes

        grade_episodes(episodes)
        for ep in episodes:
            for t in ep.turns:
                t.reward = cfg.reward.own * float(t.correct)
            ep.turns[-1].reward += cfg.reward.team * float(ep.prediction_correct)
        return {}

    def reward_bound(self, cfg, n_agents, custom):
        own, team = cfg.reward.own, cfg.reward.team
        return None if own < 0 or team < 0 else (2 * own + team) or None

    def rollout_metrics(self, cfg, episodes) -> dict:
        return seat_metrics(episodes)

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        from satseq.envs.common import held_out_rollout

        m = held_out_rollout(self, cfg, rt, workflow, generator, seat_metrics)
        m["eval/vote_accuracy"] = m.pop("eval/accuracy")
        return m

    def prediction_answers(self, episodes):
        return [ep.prediction for ep in episodes], [bool(ep.prediction_correct) for ep in episodes]

    def prediction_fields(self, episodes) -> dict:
        first = [ep.turns[0] if ep.turns else None for ep in episodes]
        return {"code": [t.info.get("code", "") if t else "" for t in first],
                "output": [t.info.get("output", "") if t else "" for t in first],
                "output_correct": [bool(t.correct) if t else False for t in first],
                "responses": [[t.text for t in ep.turns] for ep in episodes]}


def seat_metrics(episodes: list[Episode]) -> dict:
    """Each seat on its own: the coder's program (written, ran, printed the answer), the answerer's answer."""
    n = max(1, len(episodes))
    coders = [ep.turns[0] for ep in episodes if ep.turns]
    answers = [ep.turns[1] for ep in episodes if len(ep.turns) > 1]
    copies = sum(1 for ep in episodes if len(ep.turns) > 1 and ep.turns[1].answer is not None
                 and ep.turns[1].answer == ep.turns[0].answer)
    return {"code/blocks": sum(t.info.get("wrote", False) for t in coders) / n,
            "code/ran": sum(t.info.get("ran", False) for t in coders) / n,
            "code/output_correct": sum(bool(t.correct) for t in coders) / n,
            "answer/accuracy": sum(bool(t.correct) for t in answers) / n,
            "answer/copies_output": copies / n}
