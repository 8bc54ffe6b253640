"""Chat messages of a history, rendered incrementally and shared between forks.

:func:`build_messages` turns events into the OpenAI chat messages a model
sees. The messages are a pure function of immutable events, so the
rendering of a prefix is shared like the prefix itself: :func:`render`
keeps a :class:`Rendering` (a persistent value) per *line* of an
:class:`~cowconv.EventLog` (see ``cowconv.core.history``) and continues from
the longest cached prefix, so a step renders only the events that are new
since the last render of its prefix, in any branch. A fork's first step
continues from its source's rendering.

>>> from cowconv import ActionEvent, EventLog, MessageEvent, ObservationEvent
>>> source = EventLog([MessageEvent(source="user", role="user", content="List files.")])
>>> source = source.append(ActionEvent(tool_name="terminal", tool_call_id="c1",
...                                    arguments={"command": "ls"}, llm_response_id="r1"))
>>> [m["role"] for m in render(source).messages]  # no result yet: the call was interrupted
['user', 'assistant', 'tool']
>>> done = source.append(ObservationEvent(tool_name="terminal", tool_call_id="c1", output="a.py"))
>>> render(done).messages[-1]["content"]
'a.py'
>>> render(done).to_list() == build_messages(list(done))
True

Messages are shared by every rendering that contains them: treat them as
read-only (:class:`~cowconv.LLM` copies the one message it marks for
prompt caching).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, NamedTuple

from pyrsistent import PMap, PVector, pmap, pvector

from cowconv.core.events import (
    ActionEvent,
    AgentErrorEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    SystemPromptEvent,
)
from cowconv.core.frozen import thaw
from cowconv.core.history import EventLog, PrefixCache
from cowconv.core.message import chat_content

__all__ = ["INVALID_ARGUMENTS_KEY", "PrefixCache", "Rendering", "build_messages", "render"]

# Arguments that were not a JSON object are kept verbatim under this key, for the record.
INVALID_ARGUMENTS_KEY = "__invalid_json__"
_INTERRUPTED = "Error: this tool call was interrupted before it returned a result."

_NO_MESSAGES: PVector[dict[str, Any]] = pvector()
_NO_COUNTS: PMap[str, int] = pmap()
_NO_RESULTS: PMap[str, PVector[Event]] = pmap()
_NO_SLOTS: PMap[str, PVector[int]] = pmap()


def _message_content(event: MessageEvent) -> str | list[dict[str, Any]]:
    content = chat_content(event.content)
    if not event.extended_content:
        return content
    # What the agent context added (skills, suffix): after the message, as OpenHands' SDK
    # sends its text parts (one per line), or as more text parts beside images.
    if isinstance(content, str):
        return "\n".join([content, *(part.text for part in event.extended_content)])
    return [*content, *({"type": "text", "text": part.text} for part in event.extended_content)]


def _tool_message(tool_call_id: str, result: Event | None) -> dict[str, Any]:
    if isinstance(result, ObservationEvent):
        text = result.output
        if result.exit_code is not None:
            text += f"\n[exit code: {result.exit_code}]"
    elif isinstance(result, AgentErrorEvent):
        text = f"Error: {result.error}"
    else:
        text = _INTERRUPTED
    return {"role": "tool", "tool_call_id": tool_call_id, "content": text}


def _arguments_json(action: ActionEvent) -> str:
    if INVALID_ARGUMENTS_KEY in action.arguments:
        # The model's own bad text stays in the record; providers get valid JSON back.
        return "{}"
    return json.dumps(thaw(action.arguments))


def _assistant_message(group: Sequence[ActionEvent]) -> dict[str, Any]:
    thought = "".join(action.thought for action in group)
    return {
        "role": "assistant",
        **({"content": thought} if thought else {}),
        "tool_calls": [
            {
                "id": action.tool_call_id,
                "type": "function",
                "function": {"name": action.tool_name, "arguments": _arguments_json(action)},
            }
            for action in group
        ],
    }


def _result_id(event: Event) -> str | None:
    if isinstance(event, ObservationEvent):
        return event.tool_call_id
    if isinstance(event, AgentErrorEvent):
        return event.tool_call_id
    return None


class Rendering(NamedTuple):
    """The chat messages of the first ``length`` events of a history, as a persistent value.

    ``messages`` holds every message but the system message; a tool call
    whose result is not recorded yet has the "interrupted" tool message,
    replaced when the result arrives. ``add`` returns a new rendering and
    leaves this one unchanged, in O(log n) per event.

    >>> from cowconv import MessageEvent
    >>> empty = Rendering.empty()
    >>> one = empty.add([MessageEvent(source="user", role="user", content="hi")])
    >>> one.length, len(empty.messages), one.to_list(system_prompt="Be brief.")[0]["role"]
    (1, 0, 'system')
    """

    length: int
    messages: PVector[dict[str, Any]]
    system_prompt: str | None
    # Per tool_call_id: actions seen, results seen (history order), message index of each
    # action's tool message. The k-th call with an id is answered by its k-th result.
    action_counts: PMap[str, int]
    results: PMap[str, PVector[Event]]
    slots: PMap[str, PVector[int]]
    # The trailing group of calls of one LLM response, while the next event may extend it.
    group: tuple[ActionEvent, ...]
    group_index: int

    @classmethod
    def empty(cls) -> Rendering:
        """The rendering of no events."""
        return _EMPTY

    def add(self, events: Iterable[Event]) -> Rendering:
        """This rendering continued with ``events`` (the next events of the history)."""
        length = self.length
        messages = self.messages.evolver()
        system_prompt = self.system_prompt
        counts = self.action_counts
        results = self.results
        slots = self.slots
        group, group_index = self.group, self.group_index
        for event in events:
            length += 1
            if isinstance(event, ActionEvent):
                call_id = event.tool_call_id
                if group and event.llm_response_id == group[0].llm_response_id:
                    group = (*group, event)
                    messages[group_index] = _assistant_message(group)
                else:
                    group_index = len(messages)
                    group = (event,) if event.llm_response_id is not None else ()
                    messages.append(_assistant_message((event,)))
                occurrence = counts.get(call_id, 0)
                counts = counts.set(call_id, occurrence + 1)
                answers = results.get(call_id)
                answer = answers[occurrence] if answers and len(answers) > occurrence else None
                slots = slots.set(call_id, slots.get(call_id, pvector()).append(len(messages)))
                messages.append(_tool_message(call_id, answer))
                continue
            group = ()
            if isinstance(event, MessageEvent):
                if event.role in ("user", "assistant", "system"):
                    messages.append({"role": event.role, "content": _message_content(event)})
            elif isinstance(event, SystemPromptEvent):
                system_prompt = event.full_text
            else:
                call_id_or_none = _result_id(event)
                if call_id_or_none is None:
                    continue
                call_id = call_id_or_none
                answers = results.get(call_id, pvector())
                occurrence = len(answers)
                results = results.set(call_id, answers.append(event))
                if occurrence < counts.get(call_id, 0):
                    messages[slots[call_id][occurrence]] = _tool_message(call_id, event)
        return Rendering(
            length,
            messages.persistent(),
            system_prompt,
            counts,
            results,
            slots,
            group,
            group_index,
        )

    def to_list(self, system_prompt: str | None = None) -> list[dict[str, Any]]:
        """The messages as a list, led by the system message (``system_prompt``, else the
        last :class:`~cowconv.SystemPromptEvent`, if any and not empty)."""
        prompt = self.system_prompt if system_prompt is None else system_prompt
        if prompt:
            return [{"role": "system", "content": prompt}, *self.messages]
        return list(self.messages)


_EMPTY = Rendering(0, _NO_MESSAGES, None, _NO_COUNTS, _NO_RESULTS, _NO_SLOTS, (), 0)

_renderings: PrefixCache[Rendering] = PrefixCache()


def _events_from(events: EventLog, start: int, stop: int) -> Iterator[Event]:
    if start == 0:
        return islice(events, stop)
    return (events[position] for position in range(start, stop))


def render(events: Iterable[Event]) -> Rendering:
    """The rendering of a history; for an :class:`~cowconv.EventLog`, incremental and cached.

    Continues from the longest cached rendering of a prefix of ``events``
    (its own earlier steps, or its source's before a fork), renders only
    the events after it, and caches the result for the logs that extend
    this one. Other iterables are rendered in full.

    >>> from cowconv import EventLog, MessageEvent
    >>> log = EventLog([MessageEvent(source="user", role="user", content="hi")])
    >>> render(log) is render(log)
    True
    """
    if not isinstance(events, EventLog):
        return _EMPTY.add(events)
    _, start = _renderings.find(events)
    if start is None:
        start = _EMPTY
    length = len(events)
    if start.length == length:
        return start
    if length - start.length > 1:
        # Also keep the prefix without the last event: forks of a log nobody rendered
        # (a loaded history forked many times) then share it from the second fork on.
        before = start.add(_events_from(events, start.length, length - 1))
        _renderings.keep(events.take(length - 1), before)
        start = before
    rendering = start.add(_events_from(events, start.length, length))
    _renderings.keep(events, rendering)
    return rendering


def build_messages(
    events: Iterable[Event], system_prompt: str | None = None
) -> list[dict[str, Any]]:
    """The OpenAI chat messages an LLM sees for a history.

    The system message comes first (``system_prompt``, else the last
    :class:`~cowconv.SystemPromptEvent`). Consecutive tool calls of one LLM
    response (same ``llm_response_id``) form one assistant message, followed
    by one tool message per call, paired by ``tool_call_id`` wherever the
    result sits in the history; a call without a result (an interrupted step)
    still gets a tool message saying so. Errors that answer no tool call,
    pauses and unknown event kinds are not shown to the model. For an
    :class:`~cowconv.EventLog` only the events since the last cached prefix
    are rendered (:func:`render`); the message dicts are shared, read-only.

    >>> from cowconv import ActionEvent, MessageEvent
    >>> calls = [ActionEvent(tool_name="terminal", tool_call_id=c, arguments={"command": "ls"},
    ...                      llm_response_id="r1") for c in ("c1", "c2")]
    >>> messages = build_messages([MessageEvent(source="user", role="user", content="Go"), *calls],
    ...                           system_prompt="Be brief.")
    >>> [(m["role"], m.get("tool_call_id")) for m in messages]
    [('system', None), ('user', None), ('assistant', None), ('tool', 'c1'), ('tool', 'c2')]
    >>> messages[-1]["content"]
    'Error: this tool call was interrupted before it returned a result.'
    """
    return render(events).to_list(system_prompt)
