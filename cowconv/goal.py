"""Goal loops: run a conversation until a second, judging LLM finds its objective done.

As OpenHands' SDK's ``openhands.sdk.conversation.goal``: :func:`run_goal`
sends the objective, runs the agent, and asks a judge LLM (with the
transcript) whether the objective is provably complete; if not, it sends the
judge's list of what is missing and runs again, up to ``max_iterations``
audits. :class:`GoalController` holds that decision without doing any I/O,
so another driver (an async one) can reuse it. Every turn lands in the same
conversation's history.

>>> verdict = parse_verdict('Verdict: {"score": 0.4, "complete": false, "missing": "tests"}')
>>> verdict.score, verdict.complete, verdict.missing
(0.4, False, 'tests')
>>> parse_verdict("no JSON here").missing
'The judge verdict could not be parsed.'
"""

import json
import logging
import re
from collections.abc import Sequence
from typing import Any, Literal, Protocol, TypeAlias

from pydantic import BaseModel, Field

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.agent.messages import build_messages
from cowconv.core.events import Event
from cowconv.core.llm import LLM
from cowconv.core.message import Message, TextContent

__all__ = [
    "GoalContinue",
    "GoalController",
    "GoalDone",
    "GoalOutcome",
    "GoalStep",
    "GoalVerdict",
    "judge_goal",
    "parse_verdict",
    "run_goal",
]

logger = logging.getLogger("cowconv.goal")

JUDGE_SYSTEM_PROMPT = """\
You check whether an AI software agent has COMPLETED a goal.
List the concrete requirements the objective implies. For each one, find \
evidence the agent produced in the transcript: file contents, command output, \
test results. A requirement that is only claimed, uncertain or without \
evidence is NOT met.
Answer with JSON only, exactly in this shape:
{"score": <0.0 to 1.0, how likely the WHOLE objective is provably done>, \
"complete": <true or false>, "missing": "<what remains, briefly; empty if complete>"}"""

JUDGE_USER_PROMPT = """\
<objective>
{objective}
</objective>
<transcript>
{transcript}
</transcript>"""

FOLLOWUP_PROMPT = """\
The goal is NOT complete yet (audit {iteration}).
Still missing: {missing}
Look at the workspace as it is now (not as you remember it). For each \
requirement left, make real progress and show evidence by running the tests or \
commands that prove it. Keep to the whole objective, and finish only when every \
requirement is provably met."""


class GoalVerdict(BaseModel):
    """The judge's answer: how likely the objective is done, whether it is, what is missing.

    >>> GoalVerdict(score=1.0, complete=True).missing
    ''
    """

    score: float = Field(ge=0.0, le=1.0)
    complete: bool
    missing: str = ""


class GoalOutcome(BaseModel):
    """How a goal loop ended: ``"complete"`` (the judge agreed) or ``"capped"`` (out of audits).

    >>> GoalOutcome(status="capped", iterations=3,
    ...             verdict=GoalVerdict(score=0.2, complete=False)).status
    'capped'
    """

    status: Literal["complete", "capped"]
    iterations: int = Field(ge=1)
    verdict: GoalVerdict


class GoalContinue(BaseModel):
    """Keep going: send ``followup``, then run again.

    >>> GoalContinue(followup="More.", verdict=GoalVerdict(score=0, complete=False)).followup
    'More.'
    """

    followup: str
    verdict: GoalVerdict


class GoalDone(BaseModel):
    """Stop: the loop ended with ``outcome``.

    >>> verdict = GoalVerdict(score=1, complete=True)
    >>> done = GoalDone(outcome=GoalOutcome(status="complete", iterations=1, verdict=verdict))
    >>> done.outcome.status
    'complete'
    """

    outcome: GoalOutcome


GoalStep: TypeAlias = GoalContinue | GoalDone
"""One decision of :meth:`GoalController.on_run_finished`."""


def parse_verdict(text: str) -> GoalVerdict:
    """The judge's answer as a :class:`GoalVerdict`; an answer without JSON scores 0.

    The first JSON object in ``text`` is read; ``score`` is clamped to
    [0, 1]; ``complete`` defaults to ``score >= 1``.

    >>> parse_verdict('{"score": 7}').score, parse_verdict('{"score": 7}').complete
    (1.0, True)
    """
    candidates = [text.strip()]
    block = re.search(r"\{.*\}", text, re.DOTALL)
    if block is not None:
        candidates.append(block.group(0))
    data: dict[str, Any] | None = None
    for candidate in candidates:
        try:
            parsed = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            data = parsed
            break
    if data is None:
        logger.warning("the goal judge's answer holds no JSON verdict: %r", text[:200])
        return GoalVerdict(
            score=0.0, complete=False, missing="The judge verdict could not be parsed."
        )
    try:
        score = float(data.get("score", 0.0))
    except (TypeError, ValueError):
        score = 0.0
    score = min(1.0, max(0.0, score)) if score == score else 0.0  # NaN scores 0
    return GoalVerdict(
        score=score,
        complete=bool(data.get("complete", score >= 1.0)),
        missing=str(data.get("missing") or ""),
    )


def _transcript(events: Sequence[Event]) -> str:
    """``role: text`` turns of what the model saw (its system prompt left out: no evidence)."""
    turns = []
    for message in build_messages(events):
        if message.get("role") == "system":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(
                part.get("text", "[image]") for part in content if isinstance(part, dict)
            )
        lines = [str(content or "").strip()]
        lines += [
            f"[calls {call['function']['name']} {call['function']['arguments']}]"
            for call in message.get("tool_calls") or ()
        ]
        text = "\n".join(line for line in lines if line)
        if text:
            turns.append(f"{message.get('role')}: {text}")
    return "\n\n".join(turns)


def judge_goal(judge_llm: LLM, objective: str, events: Sequence[Event]) -> GoalVerdict:
    """Ask ``judge_llm`` whether ``objective`` is provably complete in ``events``.

    The judge gets a system prompt asking for a JSON verdict and the
    objective with the transcript; a streaming LLM is asked without streaming.

    >>> from cowconv.testing import TestLLM
    >>> from cowconv import Message
    >>> judge = TestLLM.from_messages(
    ...     [Message(role="assistant", content='{"score": 1.0, "complete": true}')])
    >>> judge_goal(judge, "Say hi.", []).complete
    True
    """
    if judge_llm.stream:
        judge_llm = judge_llm.model_copy(update={"stream": False})
    prompt = JUDGE_USER_PROMPT.format(objective=objective, transcript=_transcript(events))
    response = judge_llm.completion(
        [
            Message(role="system", content=[TextContent(text=JUDGE_SYSTEM_PROMPT)]),
            Message(role="user", content=[TextContent(text=prompt)]),
        ]
    )
    return parse_verdict(response.content)


class GoalController:
    """Decides, after each run, whether a goal loop goes on; it does no I/O.

    ``start()`` is the first message to send; ``on_run_finished(events)``
    asks the judge and returns a :class:`GoalContinue` (with a followup) or a
    :class:`GoalDone`. A judge call that fails raises and counts no audit.

    >>> from cowconv import LLM
    >>> controller = GoalController("Make the tests pass.", LLM(model="openai/gpt-4o"))
    >>> controller.start(), controller.iteration
    ('Make the tests pass.', 0)
    """

    def __init__(self, objective: str, judge_llm: LLM, *, max_iterations: int = 10) -> None:
        if not isinstance(objective, str) or not objective.strip():
            raise InvalidValueError("a goal objective must be a non-empty text")
        if not isinstance(judge_llm, LLM):
            raise InvalidTypeError(f"judge_llm is a cowconv.LLM, got {type(judge_llm).__name__}")
        if not isinstance(max_iterations, int) or max_iterations < 1:
            raise InvalidValueError(f"max_iterations must be an int >= 1, got {max_iterations!r}")
        self.objective = objective
        self.judge_llm = judge_llm
        self.max_iterations = max_iterations
        self.iteration = 0

    def start(self) -> str:
        """The first message to send: the objective."""
        return self.objective

    def on_run_finished(self, events: Sequence[Event]) -> GoalStep:
        """Judge the history after a run; say whether to go on (and with what) or stop."""
        verdict = judge_goal(self.judge_llm, self.objective, events)
        self.iteration += 1
        logger.info(
            "goal audit %d/%d: score %.2f, complete %s",
            self.iteration,
            self.max_iterations,
            verdict.score,
            verdict.complete,
        )
        if verdict.complete or self.iteration >= self.max_iterations:
            status: Literal["complete", "capped"] = "complete" if verdict.complete else "capped"
            outcome = GoalOutcome(status=status, iterations=self.iteration, verdict=verdict)
            return GoalDone(outcome=outcome)
        missing = verdict.missing or "Some requirements are not verified yet."
        followup = FOLLOWUP_PROMPT.format(iteration=self.iteration, missing=missing)
        return GoalContinue(followup=followup, verdict=verdict)


class _Drivable(Protocol):
    def send_message(self, message: Any) -> Any: ...

    def run(self) -> None: ...

    @property
    def state(self) -> Any: ...


def run_goal(
    conversation: _Drivable, objective: str, judge_llm: LLM, *, max_iterations: int = 10
) -> GoalOutcome:
    """Drive ``conversation`` toward ``objective`` until ``judge_llm`` finds it done.

    Sends the objective and runs; after each run the judge audits the
    history; until it says complete (or ``max_iterations`` audits), its list
    of what is missing is sent and the agent runs again. Works with any
    conversation (local, stored, remote).

    >>> from cowconv import LLM
    >>> run_goal(object(), " ", LLM(model="openai/gpt-4o"))  # type: ignore[arg-type]
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: a goal objective must be a non-empty text
    """
    controller = GoalController(objective, judge_llm, max_iterations=max_iterations)
    conversation.send_message(controller.start())
    while True:
        conversation.run()
        step = controller.on_run_finished(conversation.state.events)
        if isinstance(step, GoalDone):
            return step.outcome
        conversation.send_message(step.followup)
