"""Condensing: keep a long conversation within the model's window.

An agent with a condenser (``Agent(condenser=...)``) does not send the whole
history to the model. It sends a *view*: the first ``keep_first`` events,
a summary of what came between, and the recent events. When the view grows
past ``max_size`` events, the condenser asks its LLM for a new summary of
the events that leave the view and the runtime appends a
:class:`~cowconv.Condensation` recording them. Nothing is deleted: the
history stays append-only, and forks share the condensation.

>>> from cowconv import LLM, EventLog, LLMSummarizingCondenser, MessageEvent
>>> condenser = LLMSummarizingCondenser(llm=LLM(model="openai/gpt-4o"), max_size=6, keep_first=1)
>>> log = EventLog(MessageEvent(source="user", role="user", content=str(i)) for i in range(8))
>>> view = condenser_view(condenser, log)
>>> len(view), should_condense(condenser, view)
(8, True)
>>> plan = plan_condensation(condenser, view)
>>> [log[log.index_of(i)].text for i in plan.forgotten_event_ids]  # keeps "0" and "7"
['1', '2', '3', '4', '5', '6']
>>> condensed = log.append(plan.event("Counted from 1 to 6."))
>>> [m["content"] for m in condenser_view(condenser, condensed).messages()]
['0', 'Counted from 1 to 6.', '7']

Computing the view costs O(events since the last condensation), not
O(history). A condensation never separates a tool call from its result:
the cut moves to the nearest point that splits no pair.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cowconv.agent.messages import build_messages, render
from cowconv.core.agent import LLMSummarizingCondenser
from cowconv.core.events import (
    ActionEvent,
    AgentErrorEvent,
    Condensation,
    CondensationRequest,
    Event,
    Message,
    MessageEvent,
    ObservationEvent,
)
from cowconv.core.history import EventLog
from cowconv.core.llm import LLMResponse

__all__ = [
    "CondensationPlan",
    "CondenserView",
    "condenser_view",
    "plan_condensation",
    "should_condense",
    "summarize",
]

SUMMARY_INSTRUCTIONS = (
    "You maintain the memory of a software agent whose older conversation turns are being "
    "removed from its context. Write a concise summary that lets the agent continue: the "
    "user's goals, what was done and found (files, commands, results, errors), decisions, "
    "and what is still open. Merge the previous summary, if any, with the new turns. Reply "
    "with the summary only."
)


def _call_id(event: Event) -> tuple[str | None, str | None]:
    """(id of the call it makes, id of the call it answers)."""
    if isinstance(event, ActionEvent):
        return event.tool_call_id, None
    if isinstance(event, ObservationEvent | AgentErrorEvent):
        return None, event.tool_call_id
    return None, None


@dataclass(frozen=True)
class CondenserView:
    """What the model sees of a history under a condenser: head, summary, recent events.

    >>> from cowconv import MessageEvent
    >>> view = CondenserView(head=(), summary="Earlier: hello.",
    ...                      recent=(MessageEvent(source="user", role="user", content="hi"),))
    >>> len(view), [m["role"] for m in view.messages()]
    (2, ['user', 'user'])
    """

    head: tuple[Event, ...]
    summary: str | None
    recent: Sequence[Event]
    """The events after the summary (before any condensation: the whole history, not copied)."""
    requested: bool = False
    """A :class:`~cowconv.CondensationRequest` came after the last condensation."""

    def __len__(self) -> int:
        return len(self.head) + (self.summary is not None) + len(self.recent)

    def events(self) -> list[Event]:
        """The view as events; the summary is a user message after the head."""
        summary = (
            [
                MessageEvent(
                    id="condensation-summary",
                    source="environment",
                    llm_message=Message(role="user", content=self.summary),
                )
            ]
            if self.summary is not None
            else []
        )
        return [*self.head, *summary, *self.recent]

    def messages(self, system_prompt: str | None = None) -> list[dict[str, Any]]:
        """The chat messages of the view (see :func:`cowconv.agent.messages.build_messages`)."""
        if self.summary is None and not self.head and isinstance(self.recent, EventLog):
            return build_messages(self.recent, system_prompt)
        return render(self.events()).to_list(system_prompt)


@dataclass(frozen=True)
class CondensationPlan:
    """The events a condensation forgets, and the prompt that asks for their summary.

    >>> plan = CondensationPlan(forgotten_event_ids=("e1",), summary_offset=0, prompt=[])
    >>> plan.event("Done.").summary
    'Done.'
    """

    forgotten_event_ids: tuple[str, ...]
    summary_offset: int
    prompt: list[dict[str, Any]]

    def event(self, summary: str, llm_response_id: str | None = None) -> Condensation:
        """The :class:`~cowconv.Condensation` recording this plan with ``summary``."""
        return Condensation(
            forgotten_event_ids=self.forgotten_event_ids,
            summary=summary,
            summary_offset=self.summary_offset,
            llm_response_id=llm_response_id,
        )


def condenser_view(condenser: LLMSummarizingCondenser, events: Sequence[Event]) -> CondenserView:
    """The view ``condenser`` gives of a history: O(events since its last condensation).

    >>> from cowconv import LLM, LLMSummarizingCondenser, MessageEvent
    >>> condenser = LLMSummarizingCondenser(llm=LLM(model="openai/gpt-4o"))
    >>> len(condenser_view(condenser, [MessageEvent(source="user", role="user", content="hi")]))
    1
    """
    length = len(events)
    position = length - 1
    requested = False
    while position >= 0 and not isinstance(events[position], Condensation):
        requested = requested or isinstance(events[position], CondensationRequest)
        position -= 1
    if position < 0:
        return CondenserView(head=(), summary=None, recent=events, requested=requested)
    last = events[position]
    assert isinstance(last, Condensation)
    head_size = last.summary_offset or 0
    start = head_size
    if last.forgotten_event_ids:
        # The view resumes after the latest forgotten event: walking back from the
        # condensation visits only the events it kept (forgotten_event_ids is a set).
        latest = position - 1
        while latest >= 0 and events[latest].id not in last.forgotten_event_ids:
            latest -= 1
        start = max(latest + 1, head_size)
    head = tuple(events[index] for index in range(min(head_size, length)))
    recent = tuple(
        event
        for event in (events[index] for index in range(start, length))
        if not isinstance(event, Condensation)
    )
    return CondenserView(head=head, summary=last.summary, recent=recent, requested=requested)


def should_condense(condenser: LLMSummarizingCondenser, view: CondenserView) -> bool:
    """Whether ``view`` has outgrown the condenser's ``max_size`` events, or asks to condense.

    >>> from cowconv import LLM, LLMSummarizingCondenser
    >>> condenser = LLMSummarizingCondenser(llm=LLM(model="openai/gpt-4o"), max_size=10)
    >>> should_condense(condenser, CondenserView(head=(), summary=None, recent=()))
    False
    """
    return len(view) > condenser.max_size or view.requested


def plan_condensation(
    condenser: LLMSummarizingCondenser, view: CondenserView
) -> CondensationPlan | None:
    """What to forget, or ``None`` when no cut keeps every call with its result.

    >>> from cowconv import LLM, LLMSummarizingCondenser
    >>> condenser = LLMSummarizingCondenser(llm=LLM(model="openai/gpt-4o"), max_size=10)
    >>> plan_condensation(condenser, CondenserView(head=(), summary=None, recent=())) is None
    True
    """
    if view.summary is None:
        candidates = (*view.head, *view.recent)
        head = candidates[: condenser.keep_first]
        rest = candidates[condenser.keep_first :]
    else:
        head, rest = view.head, tuple(view.recent)
    # Down to half of max_size; asked to condense a smaller view (a CondensationRequest),
    # down to half of that view (as OpenHands' SDK does).
    target = condenser.max_size // 2
    if view.requested and len(view) <= condenser.max_size:
        target = len(view) // 2
    keep_recent = max(target - len(head) - 1, 0)
    cut = _safe_cut(head, rest, len(rest) - keep_recent)
    # The summary takes a place in the view: forgetting must free more than that.
    if cut <= (1 if view.summary is None else 0):
        return None
    forgotten = rest[:cut]
    return CondensationPlan(
        forgotten_event_ids=tuple(event.id for event in forgotten),
        summary_offset=len(head),
        prompt=_summary_prompt(view.summary, forgotten),
    )


def summarize(
    condenser: LLMSummarizingCondenser, plan: CondensationPlan
) -> tuple[Condensation, LLMResponse]:
    """Ask the condenser's LLM for the summary; :class:`~cowconv.LLMError` if it fails.

    >>> callable(summarize)  # it calls the model: see tests/test_condenser.py
    True
    """
    response = condenser.llm.completion(plan.prompt)
    return plan.event(response.content, llm_response_id=response.id), response


def _safe_cut(head: Sequence[Event], rest: Sequence[Event], cut: int) -> int:
    """The largest ``k <= cut`` such that ``rest[:k]`` holds no half of a call/result pair."""
    if cut <= 0:
        return 0
    # Ids of calls made / answered outside the forgotten part, and inside it.
    outside_calls: collections.Counter[str] = collections.Counter()
    outside_answers: collections.Counter[str] = collections.Counter()
    inside_calls: collections.Counter[str] = collections.Counter()
    inside_answers: collections.Counter[str] = collections.Counter()

    def count(
        events: Iterable[Event], calls: collections.Counter[str], answers: collections.Counter[str]
    ) -> None:
        for event in events:
            call, answer = _call_id(event)
            if call is not None:
                calls[call] += 1
            if answer is not None:
                answers[answer] += 1

    count(head, outside_calls, outside_answers)
    count(rest[cut:], outside_calls, outside_answers)
    count(rest[:cut], inside_calls, inside_answers)
    while cut > 0:
        if not (inside_calls.keys() & outside_answers.keys()) and not (
            inside_answers.keys() & outside_calls.keys()
        ):
            return cut
        cut -= 1
        call, answer = _call_id(rest[cut])
        if call is not None:
            _move(call, inside_calls, outside_calls)
        if answer is not None:
            _move(answer, inside_answers, outside_answers)
    return 0


def _move(key: str, source: collections.Counter[str], target: collections.Counter[str]) -> None:
    source[key] -= 1
    if source[key] <= 0:
        del source[key]
    target[key] += 1


def _summary_prompt(previous: str | None, forgotten: Sequence[Event]) -> list[dict[str, Any]]:
    lines = []
    for message in build_messages(forgotten, system_prompt=""):
        content = message.get("content")
        text = content if isinstance(content, str) else str(content or "")
        calls = message.get("tool_calls") or ()
        called = "; ".join(
            f"{call['function']['name']}({call['function']['arguments']})" for call in calls
        )
        lines.append(f"{message['role']}: {text}{' -> ' + called if called else ''}")
    body = "\n".join(lines)
    earlier = f"Previous summary:\n{previous}\n\n" if previous else ""
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": f"{earlier}New turns to fold in:\n{body}"},
    ]
