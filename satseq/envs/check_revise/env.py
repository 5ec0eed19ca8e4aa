"""``env.name=check_revise``: a solver, a checker that may run the solver's arithmetic through a sandboxed
Python before it judges, and a reviser (issue 63's second task whose roles differ).

An episode (:mod:`satseq.envs.check_revise.session`)::

    solver    sees the problem; writes an attempt
    checker   sees the problem and the attempt; may write ```python blocks (``env.check_revise.max_tool_calls``
              programs an episode, run in the sandbox, their output shown as tool messages), then ends
              with a verdict: "The answer is correct" / "The answer is wrong"
    reviser   only when the verdict is not "correct" (PAG's selective revision): sees the problem, the
              attempt, the verdict and the check; gives the final answer

This is PAG's protocol (solve → verify → revise on "wrong", spec ``apo_pag.md``) with the verifier a
separate seat that has a tool: under SAT-Seq and the simultaneous update each role is its own agent
(``sat_seq.agents`` one per role, named after them when unset), under ``shared_policy`` one adapter
plays every seat (PAG's one policy), and under GRPO one policy plays every seat credited by the episode's
outcome.

**Rewards, per seat** (PAG's turn-independent rewards; no ``reward.own`` / ``reward.team``): the solver's
turn its answer's score under the problem's scorer (math-verify, or reasoning-gym's), the checker's last
turn 1 when its verdict matches the attempt's correctness (a missing verdict never does; its
tool-calling turns 0), the reviser's turn its answer's score. The credit is per role
(:attr:`CheckRevise.credit` = ``"role"``, :mod:`satseq.update.turn_credit`): each role's advantages over its
own turns, normalised over the group's episodes that have them, so a reviser is compared only with
other revisions. The last turn's reward is the episode's outcome (:attr:`CheckRevise.last_turn_outcome`):
an episode that ends on "correct" ends on the checker, whose verdict is then right exactly when the
attempt, the prediction, is; otherwise it ends on the reviser's answer, the prediction. (With
reasoning-gym's partial scores the checker's 0/1 stands for the attempt's score == 1.)

**Metrics per seat** (:mod:`satseq.envs.check_revise.metrics`): ``solver/accuracy``,
``checker/balanced_accuracy`` (and its recalls, ``verdict_accuracy``, ``says_correct``, ``no_verdict``,
``tool_calls``, ``tool_errors``), ``reviser/{revision_rate,accuracy,fixed,broke}``, ``final/accuracy``;
held out under ``eval/``, the prediction's accuracy as ``eval/vote_accuracy``. ``satseq eval`` writes
prediction lines of ``self_verify``'s shape (the solver's and reviser's answers as the attempts, the
checker's verdict as the verifier's), so its table and ``satseq compare`` report Acc@t1 (the solver),
Acc@final and the checker's balanced accuracy beside the constant verifiers; the lines also hold each
episode's ``roles``, ``tool_calls`` and ``tool_results``.
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from satseq.config.section import Section
from satseq.envs.base import Environment
from satseq.envs.check_revise.session import CHECKER, REVISER, SOLVER
from satseq.registry import register_env

CHECKER_PROMPT = (
    "{problem}\n\nA proposed solution:\n{attempt}\n\nCheck whether its final answer ({answer}) is right. You may run "
    "Python to check the arithmetic: write a program in one fenced block,\n```python\nprint(12 + 25)\n```\nand you "
    'will see what it printed. End with exactly "The answer is correct" or "The answer is wrong".')
REVISER_PROMPT = (
    "{problem}\n\nA proposed solution:\n{attempt}\n\nA checker judged its answer {verdict}. What the checker's program "
    "printed: {output}\nIts check:\n{check}\n\nSolve the problem again, correcting any mistake. Give the final answer "
    "within \\boxed{{}}.")

#: the embedded model's (a character model with a 256-token context): short prompts, the attempt's answer only
EMBEDDED_CHECKER_PROMPT = "{problem}{answer}|chk?"
EMBEDDED_REVISER_PROMPT = "{problem}{answer}|{verdict}|"


class CheckReviseConfig(Section):
    """``env.check_revise``: the checker's tool budget, the sandbox's limits, the checker's and reviser's prompts."""

    max_tool_calls: int = Field(1, ge=0, description="programs the checker may run in an episode (0: no tool); a checker turn that writes one past the budget is its last")
    timeout_s: float = Field(5.0, gt=0.0, description="wall-clock seconds a checker's program may run")
    memory_mb: int = Field(512, ge=16, description="address space per process, MiB")
    max_output_bytes: int = Field(1024, ge=64, description="bytes of a program's output the checker reads")
    attempt_chars: int = Field(2000, ge=16, description="the last characters of the attempt (and of the check) that the checker and the reviser are shown")
    checker_prompt: Optional[str] = Field(None, description="the checker's first message, with {problem}, {attempt} (the solver's response) and {answer} (its extracted answer) (None: the default, which offers a ```python block and asks for the verdict phrase; the embedded model's is short)")
    reviser_prompt: Optional[str] = Field(None, description="the reviser's message, with {problem}, {attempt}, {answer}, {verdict} (wrong, or no verdict), {check} (the checker's last turn) and {output} (what its programs printed) (None: the default, which asks for a boxed answer; the embedded model's is short)")


def _fill(template: str, **fields) -> str:
    for k, v in fields.items():
        template = template.replace("{" + k + "}", v)
    return template.replace("{{}}", "{}")


class CheckReviseFormat:
    """The three seats' first messages in the model's conversation format (its chat template, or the
    plain format of the embedded model and of ``model.chat_template=never``)."""

    def __init__(self, conversation_format, section: CheckReviseConfig, template: str, embedded: bool):
        self.conversation, self.section, self.template = conversation_format, section, template
        self.short_verdicts = embedded
        self.checker_prompt = section.checker_prompt or (EMBEDDED_CHECKER_PROMPT if embedded else CHECKER_PROMPT)
        self.reviser_prompt = section.reviser_prompt or (EMBEDDED_REVISER_PROMPT if embedded else REVISER_PROMPT)
        self.name = f"check_revise-{conversation_format.name}"

    def _tail(self, text: str) -> str:
        n = self.section.attempt_chars
        return text if len(text) <= n else text[-n:]

    def solver_messages(self, problem: str) -> list:
        from satseq.envs.conversation import Message
        from satseq.workflows.prompts import render_problem

        return [Message("user", render_problem(self.template, problem) if self.template else problem)]

    def checker_messages(self, problem: str, attempt: str, answer: Optional[str]) -> list:
        from satseq.envs.conversation import Message

        return [Message("user", _fill(self.checker_prompt, problem=problem,
                                      attempt=self._tail(attempt.strip()), answer=answer or "none"))]

    def reviser_messages(self, problem: str, attempt: str, answer: Optional[str], verdict: Optional[str],
                         check: str, output: str) -> list:
        from satseq.envs.conversation import Message

        return [Message("user", _fill(self.reviser_prompt, problem=problem,
                                      attempt=self._tail(attempt.strip()), answer=answer or "none",
                                      verdict=verdict or "no verdict", check=self._tail(check.strip()),
                                      output=output))]

    def parse_verdict(self, text: str) -> Optional[str]:
        from satseq.workflows.pag_prompts import parse_verdict

        return parse_verdict(text, short_markers=self.short_verdicts)

    def single(self, problem: str) -> str:
        """The first prompt (the runtime's length check); later prompts past the context end the episode
        (stop ``context``)."""
        return self.conversation.render(self.solver_messages(problem), add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        return self.conversation.encode(text)


@register_env
class CheckRevise(Environment):
    name = "check_revise"
    title = "a solver answers, a checker that may run Python judges the answer, a reviser revises after 'wrong'"
    config_section = ("check_revise", CheckReviseConfig, "the solver → checker → reviser environment")
    supports_custom_reward = False  # the checker's reward is defined by the attempt's correctness
    credit = "role"                 # each role's advantages over its own turns (satseq.update.turn_credit)
    last_turn_outcome = True        # the last turn's reward is the episode's outcome (module docstring)

    def config_defaults(self, cfg) -> dict:
        return {"sat_seq.certificate.prompts": 0}  # the certificate bounds the relay's vote

    def max_turns_of(self, cfg) -> int:
        return cfg.env.check_revise.max_tool_calls + 3  # solver, the checker's programs and verdict, reviser

    def check(self, cfg) -> None:
        most = self.max_turns_of(cfg)
        if cfg.env.max_turns is not None and cfg.env.max_turns != most:
            from satseq.errors import ConfigError

            raise ConfigError(f"config key 'env.max_turns': check_revise's turns are set by "
                              f"env.check_revise.max_tool_calls (at most {most} here), not {cfg.env.max_turns}")

    def role_names(self, cfg) -> list[str]:
        return [SOLVER, CHECKER, REVISER]

    def prompt_format(self, kind, tokenizer, cfg):
        from satseq.envs.conversation import conversation_format

        if cfg.env.check_revise.max_tool_calls > 0:
            from satseq.tools.sandbox import ensure_available

            ensure_available()  # no sandbox here: the run stops now, with one line (never unconfined)
        chat = kind != "embedded" and getattr(tokenizer, "chat_template", None) is not None \
            and cfg.model.chat_template != "never"
        template = "" if kind == "embedded" else cfg.data.prompt_template
        return CheckReviseFormat(conversation_format(tokenizer, kind="chat" if chat else "plain"),
                                 cfg.env.check_revise, template, embedded=kind == "embedded")

    def make_workflow(self, cfg, roles, prompt_format, sampling, options=None):
        from satseq.envs.check_revise.session import CheckReviseSession
        from satseq.envs.tool_use.journal import ToolJournal
        from satseq.tools.sandbox import format_result, run_python
        from satseq.workflows.interactive import InteractiveWorkflow

        roles = {r: roles for r in self.role_names(cfg)} if isinstance(roles, str) else dict(roles)
        s = cfg.env.check_revise
        journal = ToolJournal.for_run(cfg.run_dir) if (options or {}).get("journal", True) else ToolJournal(None)

        def run(code: str) -> str:
            r = run_python(code, timeout_s=s.timeout_s, memory_mb=s.memory_mb, max_output_bytes=s.max_output_bytes)
            return format_result(r, timeout_s=s.timeout_s, max_output_bytes=s.max_output_bytes)

        return InteractiveWorkflow(roles, prompt_format, sampling, max_turns=self.max_turns_of(cfg),
                                   start=lambda p: CheckReviseSession(prompt_format, p, run=run, journal=journal,
                                                                      budget=s.max_tool_calls))

    def workflow_options(self, cfg) -> dict:
        return {"journal": False}  # satseq eval: results are not recorded

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        from satseq.envs.check_revise.session import grade_check_revise
        from satseq.rewards.turn_rewards import turn_score

        grade_check_revise(episodes)
        for ep in episodes:
            for t in ep.turns:
                t.reward = float(t.correct) if t.role == CHECKER else turn_score(t)
        return {}

    def reward_bound(self, cfg, n_agents, custom):
        return 3.0  # an attempt, a verdict and a revision, each worth at most 1

    def metric_roles(self, cfg, rt, workflow) -> list[str]:
        return [SOLVER, REVISER]  # the checker's figures are its verdicts' (checker/...), not its turns'

    def rollout_metrics(self, cfg, episodes) -> dict:
        from satseq.envs.check_revise.metrics import seat_metrics

        return seat_metrics(episodes)

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        from satseq.envs.check_revise.metrics import seat_metrics
        from satseq.envs.check_revise.session import grade_check_revise
        from satseq.envs.common import held_out_rollout

        def graded(episodes):
            grade_check_revise(episodes)
            return seat_metrics(episodes)

        m = held_out_rollout(self, cfg, rt, workflow, generator, graded)
        m["eval/vote_accuracy"] = m.pop("eval/accuracy")
        return m

    def grade(self, episodes) -> None:
        from satseq.envs.check_revise.session import grade_check_revise

        grade_check_revise(episodes)

    def prediction_answers(self, episodes):
        return [ep.prediction for ep in episodes], [bool(ep.prediction_correct) for ep in episodes]

    def prediction_fields(self, episodes) -> dict:
        """``self_verify``'s fields (the solver's and reviser's turns as the attempts, ``policy``; the
        checker's verdict as the ``verifier``'s), then this environment's own."""
        from satseq.rewards.scorers import grade

        def final_checks(ep):
            return [t for t in ep.turns if t.role == CHECKER and t.info.get("final")]

        def pag_roles(ep):
            return ["verifier" if t.role == CHECKER else "policy" for t in ep.turns
                    if t.role != CHECKER or t.info.get("final")]

        def changed(ep):
            first, last = ep.info.get("answer_t1"), ep.prediction
            if first is None or last is None:
                return not (first is None and last is None)
            return first.strip() != last.strip() and not (grade(first, ep.problem)[0] and grade(last, ep.problem)[0])

        eps = episodes
        return {"turn1_answers": [ep.info.get("answer_t1") for ep in eps],
                "turn1_correct": [bool(ep.turns[0].correct) if ep.turns else False for ep in eps],
                "verdicts": [[t.info.get("verdict") for t in final_checks(ep)] for ep in eps],
                "verifier_correct": [[bool(t.correct) for t in final_checks(ep)] for ep in eps],
                "revised": [bool(ep.info.get("revised")) for ep in eps],
                "answer_changed": [changed(ep) for ep in eps],
                "pag_roles": [pag_roles(ep) for ep in eps],
                "roles": [[t.role for t in ep.turns] for ep in eps],
                "tool_calls": [[c for t in ep.turns for c in t.info.get("tool_calls", [])] for ep in eps],
                "tool_results": [[r for t in ep.turns for r in t.info.get("tool_results", [])] for ep in eps],
                "responses": [[t.text for t in ep.turns] for ep in eps],
                "finish_reasons": [[t.finish_reason for t in ep.turns] for ep in eps]}
