"""``env.name=tool_use``: one agent answers a problem and may call tools first (a sandboxed Python by
default), over several turns of one conversation continued token for token.

An episode, for the conversation ``[system (how to call the tools), user (the problem)]``::

    assistant turn ──▶ tool calls in it? ──yes──▶ each call run, its result a tool message ──▶ next turn
                              │ no (or the tool budget is spent)
                              ▼
                     its final answer: the episode ends (``stop``: "answered")

Each turn's prompt is the conversation's exact ids (:class:`satseq.envs.conversation.Conversation`):
the previous prompt, the response as sampled, the tool messages encoded. Calls are read by a registered
parser (``env.tool_use.parser``: ``hermes`` JSON calls in ``<tool_call>`` tags, as chat templates
declare them, or ``python_block`` fenced code for models without a tool format; ``auto`` picks
``hermes`` where the chat template renders ``tools=``, else ``python_block``). A result, an error and a
timeout are all tool messages: the model reads them and the episode goes on. ``env.max_turns`` (default
4) and ``env.tool_use.max_tool_calls`` bound every episode; a call past the budget is answered "error:
tool budget spent" and the next turn must answer.

The reward is the environment's: the final answer graded against the problem's reference (or
``reward.custom``), on the last turn; earlier turns get 0. Tool results are recorded
(:mod:`satseq.envs.tool_use.journal`), so a resumed run continues bit for bit. Metrics per stage:
``tools/calls``, ``tools/errors``, ``tools/timeouts``, ``tools/turns`` (means per episode),
``tools/answered`` (share of episodes that ended with an answer).

The embedded model's first prompt is the problem in its layout (``____|____|347*29=``, as
``env.name=single`` shows it); its embedded task is a product it cannot compute in one pass but can with
the tool, and its warm start calls the tool on half its episodes (:mod:`satseq.envs.tool_use.task`,
``satseq sft --task tool_use``).
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from satseq.config.section import Section
from satseq.envs.base import Environment
from satseq.registry import register_env

DEFAULT_MAX_TURNS = 4
TOOL_ROLE = "policy"

PYTHON_BLOCK_SYSTEM = (
    "You can run Python. To run a program, write it in a fenced block:\n```python\nprint(2 + 3)\n```\n"
    "You will see what it printed. When you know the answer, give it as \\boxed{answer} without a code block.")
HERMES_SYSTEM = ("You may call the tools you are given. When you know the answer, give it as \\boxed{answer} "
                 "without a tool call.")


class ToolUseConfig(Section):
    """``env.tool_use``: the tools, how their calls are read, and the limits of every call."""

    tools: list[str] = Field(default_factory=lambda: ["python"], description='the tools the agent may call: "python" (model-written code in the sandbox, satseq/tools/sandbox.py) or "module:function" (a typed, documented Python callable; its schema from its signature and docstring)')
    parser: str = Field("auto", min_length=1, description="how tool calls are read from a response: a registered parser (hermes: <tool_call>{json}</tool_call>; python_block: fenced ```python code, a call of the python tool) or auto (hermes where the chat template renders tools=, else python_block)")
    max_tool_calls: int = Field(4, ge=0, description="tool calls an episode may make; past it a call is answered 'error: tool budget spent'")
    system_prompt: Optional[str] = Field(None, description="the system message (None: how to call the tools and how to answer, for the parser in use); the embedded model gets none unless set")
    timeout_s: float = Field(5.0, gt=0.0, description="the python tool: wall-clock seconds per call")
    memory_mb: int = Field(512, ge=16, description="the python tool: address space per process, MiB")
    max_output_bytes: int = Field(2048, ge=64, description="the python tool: bytes of stdout (and of stderr) the model reads; past it the program is stopped")


class ToolFormat:
    """The prompt format of a tool environment: the conversation format (chat template or the embedded
    model's plain format) and what the first prompt of a problem is. ``single`` / ``encode`` are the
    runtime's length checks' view of the first prompt."""

    def __init__(self, conversation_format, system: Optional[str], template: str, kind: str, layout=None):
        self.conversation = conversation_format
        self.system = system
        self.template = template
        self.layout = layout  # problem -> the user message (the embedded model's layout), or None
        self.name = f"tool_use-{kind}"

    def first_messages(self, problem: str, observation: Optional[str] = None) -> list:
        """``[system?, user]``: the problem under ``data.prompt_template`` (chat models), then ``observation``
        appended to the user message (a TRL environment's ``reset``), as TRL appends it."""
        from satseq.envs.conversation import Message
        from satseq.workflows.prompts import render_problem

        user = self.layout(problem) if self.layout else render_problem(self.template, problem) if self.template \
            else problem
        if observation:
            user = f"{user}{observation}" if user else observation
        return ([Message("system", self.system)] if self.system else []) + [Message("user", user)]

    def single(self, problem: str) -> str:
        return self.conversation.render(self.first_messages(problem), add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        return self.conversation.encode(text)


def load_tools(specs: list[str], section: ToolUseConfig) -> list:
    """The tool callables ``env.tool_use.tools`` names (``python``: the sandbox with the section's limits)."""
    from satseq.envs.common import load_dotted
    from satseq.tools.sandbox import make_python_tool

    out = []
    for spec in specs:
        if spec == "python":
            out.append(make_python_tool(timeout_s=section.timeout_s, memory_mb=section.memory_mb,
                                        max_output_bytes=section.max_output_bytes))
            continue
        fn = load_dotted(spec, "env.tool_use.tools")
        out.append(fn)
    return out


@register_env
class ToolUse(Environment):
    name = "tool_use"
    title = "one agent answers, calling tools (a sandboxed Python) on the way, in one conversation"
    config_section = ("tool_use", ToolUseConfig, "the tool environment: its tools, parser and limits")
    warm_start_stem = "tool"

    @staticmethod
    def embedded_layout(problem: str) -> str:
        """The embedded model's first user message: the problem in its layout (``____|____|347*29=``)."""
        from satseq.data.arithmetic import render_prompt

        return render_prompt(problem)

    def embedded_task(self, seed: int = 0):
        from satseq.envs.tool_use.task import ProductTask

        return ProductTask(seed=seed)

    def ensure_warm_start(self, output_dir, **kw):
        from satseq.envs.tool_use.warm_start import ensure_tool_warm_start

        return ensure_tool_warm_start(output_dir, **kw)

    def section(self, cfg) -> ToolUseConfig:
        return cfg.env.tool_use

    def max_turns_of(self, cfg) -> int:
        return cfg.env.max_turns or DEFAULT_MAX_TURNS

    def check(self, cfg) -> None:
        from satseq.tools.parsers import get_tool_parser

        s = self.section(cfg)
        if s.parser != "auto":
            get_tool_parser(s.parser, key="env.tool_use.parser")
        if not s.tools:
            from satseq.errors import ConfigError

            raise ConfigError("config key 'env.tool_use.tools': a tool environment needs at least one tool")

    def needs_sandbox(self, cfg) -> bool:
        return "python" in self.section(cfg).tools

    def tools(self, cfg) -> list:
        from satseq.tools.registry import tools_by_name

        return list(tools_by_name(load_tools(self.section(cfg).tools, self.section(cfg))).values())

    def prompt_format(self, kind, tokenizer, cfg):
        from satseq.envs.conversation import conversation_format
        from satseq.tools.registry import tool_schemas

        tools = self.tools(cfg)
        if self.needs_sandbox(cfg):
            from satseq.tools.sandbox import ensure_available

            ensure_available()  # no sandbox here: the run stops now, with one line (never unconfined)
        chat = kind != "embedded" and getattr(tokenizer, "chat_template", None) is not None \
            and cfg.model.chat_template != "never"
        fmt = conversation_format(tokenizer, tools=tool_schemas(tools), kind="chat" if chat else "plain")
        parser = self.parser_of(cfg, fmt)
        s = self.section(cfg)
        system = s.system_prompt
        if system is None and kind != "embedded":
            system = HERMES_SYSTEM if parser == "hermes" else PYTHON_BLOCK_SYSTEM
        template = "" if kind == "embedded" else ("chat" if cfg.data.prompt_template == "boxed" else cfg.data.prompt_template)
        layout = self.embedded_layout if kind == "embedded" else None
        out = ToolFormat(fmt, system, template, kind, layout=layout)
        out.parser, out.tools = parser, tools
        return out

    def parser_of(self, cfg, fmt) -> str:
        s = self.section(cfg)
        if s.parser != "auto":
            return s.parser
        from satseq.envs.conversation import ChatTemplateFormat

        if isinstance(fmt, ChatTemplateFormat):  # does the template render the tools it is given?
            from satseq.envs.conversation import Message

            msgs = [Message("user", "hi")]
            with_tools = fmt.render(msgs, add_generation_prompt=True)
            bare = type(fmt)(fmt.tokenizer, tools=None, check=False).render(msgs, add_generation_prompt=True)
            if with_tools != bare and "tool_call" in with_tools:
                return "hermes"
        return "python_block"

    def make_workflow(self, cfg, roles, prompt_format, sampling, options=None):
        from satseq.envs.tool_use.journal import ToolJournal
        from satseq.envs.tool_use.session import ToolSession
        from satseq.workflows.interactive import InteractiveWorkflow

        roles = {roles: roles} if isinstance(roles, str) else dict(roles)  # one model evaluated: its name
        role, = roles
        s = self.section(cfg)
        journal = ToolJournal.for_run(cfg.run_dir) if (options or {}).get("journal", True) else ToolJournal(None)
        budget = s.max_tool_calls

        def start(problem):
            return ToolSession(prompt_format, problem, role=role, budget=budget, journal=journal,
                               **self.episode_tools(cfg, problem))

        return InteractiveWorkflow(roles, prompt_format, sampling, start=start, max_turns=self.max_turns_of(cfg))

    def episode_tools(self, cfg, problem) -> dict:
        """What one episode's session gets besides the format's tools (a TRL environment's instance)."""
        return {}

    def workflow_options(self, cfg) -> dict:
        return {"journal": False}  # satseq eval: results are not recorded

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        from satseq.rewards.turn_rewards import grade_episodes

        grade_episodes(episodes)
        for ep in episodes:
            for t in ep.turns:
                t.reward = 0.0
            last = ep.turns[-1]
            if "env_reward" in ep.info:  # the environment instance's own (a TRL environment's get_reward)
                last.reward = ep.info["env_reward"]
            elif ctx.custom:
                last.reward = float(ctx.custom(last.prompt_text, last.text, ep.problem.answer))
            else:
                last.reward = float(ep.prediction_correct)
        return {}

    def rollout_metrics(self, cfg, episodes) -> dict:
        from satseq.envs.tool_use.session import tool_metrics

        return tool_metrics(episodes)

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        from satseq.envs.common import held_out_rollout
        from satseq.envs.tool_use.session import tool_metrics

        return held_out_rollout(self, cfg, rt, workflow, generator, tool_metrics)

    def prediction_answers(self, episodes):
        return [ep.prediction for ep in episodes], [bool(ep.prediction_correct) for ep in episodes]

    def prediction_fields(self, episodes) -> dict:
        return {"turns": [len(ep.turns) for ep in episodes],
                "tool_calls": [[c for t in ep.turns for c in t.info.get("tool_calls", [])] for ep in episodes],
                "tool_results": [[r for t in ep.turns for r in t.info.get("tool_results", [])] for ep in episodes],
                "stop": [ep.info.get("stop") for ep in episodes],
                "responses": [[t.text for t in ep.turns] for ep in episodes]}

