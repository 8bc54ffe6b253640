"""Compare two conversations of one tree: what each did past their common prefix.

>>> from cowconv import LLM, Agent, Conversation
>>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
>>> _ = source.send_message("Analyse the sales report.")
>>> a = source.fork(tags={"variant": "A"})
>>> b = source.fork(tags={"variant": "B"})
>>> _ = a.send_message("Focus on EMEA.")
>>> diff = compare(a, b)
>>> diff.common, [event.text for event in diff.a.events], diff.b.events
(2, ['Focus on EMEA.'], ())
>>> print(diff.text())  # doctest: +ELLIPSIS
a: ...
   variant=A  openai/gpt-4o  idle  $0.0000  0 tokens
b: ...
   variant=B  openai/gpt-4o  idle  $0.0000  0 tokens
2 events in common; a has 1 more, b has 0 more
- [2] MessageEvent user: Focus on EMEA.
cost: +$0.0000; tokens: +0

The common prefix comes from the histories' lineage
(:meth:`EventLog.common_prefix_length`): O(1) for a fork and its source or
two forks of one source in this process, O(log n) event-id comparisons for
histories loaded from a store. Only the events past it are read, so a
comparison costs what differs, not what the two share.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cowconv._exceptions import InvalidTypeError
from cowconv.core.events import (
    ActionEvent,
    AgentErrorEvent,
    Condensation,
    Event,
    LLMConvertibleEvent,
    MessageEvent,
    ObservationEvent,
    SystemPromptEvent,
)
from cowconv.core.state import ConversationState

__all__ = ["Comparison", "ComparisonSide", "FileDiff", "HasState", "compare", "describe_event"]


class FileDiff(Protocol):
    """What a side did to its files (``cowconv.workspaces.changes.FileChanges`` is one)."""

    @property
    def changes(self) -> Mapping[str, str]: ...

    def summary(self) -> str: ...

    def lines(self) -> list[str]: ...

    def patch(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


class HasState(Protocol):
    """Anything with a ``state`` (a :class:`~cowconv.Conversation`, local or remote)."""

    @property
    def state(self) -> ConversationState: ...


def describe_event(event: Event, width: int | None = None) -> str:
    """One line saying what ``event`` is: its class, source and the gist of its content.

    >>> from cowconv import MessageEvent
    >>> describe_event(MessageEvent(source="user", role="user", content="Hello\\nthere"))
    'MessageEvent user: Hello there'
    >>> describe_event(MessageEvent(source="user", role="user", content="Hello there"), 20)
    'MessageEvent user: …'
    """
    gist: str
    if isinstance(event, MessageEvent):
        gist = event.text
    elif isinstance(event, ActionEvent):
        arguments = json.dumps(dict(event.arguments), ensure_ascii=False, default=str)
        gist = f"{event.tool_name}({arguments})"
    elif isinstance(event, ObservationEvent):
        code = "" if event.exit_code is None else f" [exit {event.exit_code}]"
        gist = f"{event.tool_name}{code}: {event.output}"
    elif isinstance(event, AgentErrorEvent):
        gist = event.error
    elif isinstance(event, SystemPromptEvent):
        gist = event.system_prompt
    elif isinstance(event, Condensation):
        gist = f"{len(event.forgotten_event_ids)} events forgotten: {event.summary or ''}"
    elif isinstance(event, LLMConvertibleEvent):
        gist = str(event)
    else:
        gist = ""
    line = " ".join(f"{type(event).__name__} {event.source}: {gist}".split())
    if width is not None and len(line) > width:
        line = line[: max(width - 1, 0)] + "…"
    return line


@dataclass(frozen=True)
class ComparisonSide:
    """One conversation of a comparison: who it is, how it ended, what it spent.

    ``events`` are the events it has past the common prefix, in order;
    ``tokens`` holds every token count of its stats (prompt, completion,
    cached). ``files`` is what it did to its workspace's files since the
    fork point (``cowconv.compare`` fills it where snapshots are recorded;
    ``None``: not known).

    >>> from cowconv import LLM, Agent, Conversation
    >>> state = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".").state
    >>> side = ComparisonSide.of(state, 0)
    >>> side.model, side.status, side.events, side.total_tokens
    ('openai/gpt-4o', 'idle', (), 0)
    """

    conversation_id: str
    title: str | None
    tags: Mapping[str, str]
    model: str
    status: str
    cost: float
    tokens: Mapping[str, int]
    events: tuple[Event, ...]
    files: FileDiff | None = None

    @classmethod
    def of(cls, state: ConversationState, common: int) -> ComparisonSide:
        """The side of ``state``, with its events past the first ``common``."""
        stats = state.stats
        return cls(
            conversation_id=str(state.id),
            title=state.title,
            tags={key: value for key, value in state.tags.items() if key != "title"},
            model=state.agent.llm.model,
            status=state.execution_status.value,
            cost=stats.accumulated_cost,
            tokens={
                "prompt_tokens": stats.prompt_tokens,
                "completion_tokens": stats.completion_tokens,
                "cache_read_tokens": stats.cache_read_tokens,
                "cache_write_tokens": stats.cache_write_tokens,
            },
            events=tuple(state.branch[common:]),
        )

    @property
    def total_tokens(self) -> int:
        """Prompt and completion tokens together (cached ones are part of the prompt's)."""
        return self.tokens["prompt_tokens"] + self.tokens["completion_tokens"]

    def headline(self) -> str:
        """``title  tags  model  status  $cost  tokens`` on one line (the id apart).

        >>> from cowconv import LLM, Agent, Conversation
        >>> fork = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".").fork(
        ...     title="B", tags={"variant": "B"})
        >>> ComparisonSide.of(fork.state, 0).headline()
        "'B'  variant=B  openai/gpt-4o  idle  $0.0000  0 tokens"
        """
        parts = []
        if self.title:
            parts.append(repr(self.title))
        if self.tags:
            parts.append(", ".join(f"{key}={value}" for key, value in sorted(self.tags.items())))
        parts += [self.model, self.status, f"${self.cost:.4f}", f"{self.total_tokens:,} tokens"]
        return "  ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (events as their JSON documents)."""
        return {
            "conversation_id": self.conversation_id,
            "title": self.title,
            "tags": dict(self.tags),
            "model": self.model,
            "status": self.status,
            "cost": self.cost,
            "tokens": dict(self.tokens),
            "events": [event.model_dump(mode="json") for event in self.events],
            "files": None if self.files is None else self.files.to_dict(),
        }


@dataclass(frozen=True)
class Comparison:
    """What two conversations share and where they part: :func:`compare` makes one.

    ``common`` is how many first events both histories hold; ``a`` and ``b``
    carry each one's events past them with its status, model, cost and
    tokens. The differences are ``b`` minus ``a``.

    >>> from cowconv import LLM, Agent, Conversation
    >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> diff = compare(source, source.fork())
    >>> diff.identical, diff.cost_difference, diff.token_differences["prompt_tokens"]
    (True, 0.0, 0)
    """

    common: int
    a: ComparisonSide
    b: ComparisonSide

    @property
    def identical(self) -> bool:
        """Whether both histories hold the same events (status and spending aside)."""
        return not self.a.events and not self.b.events

    @property
    def cost_difference(self) -> float:
        """``b.cost - a.cost`` in USD."""
        return self.b.cost - self.a.cost

    @property
    def token_differences(self) -> dict[str, int]:
        """``b``'s token counts minus ``a``'s, per kind."""
        return {kind: self.b.tokens[kind] - self.a.tokens[kind] for kind in self.a.tokens}

    def to_dict(self) -> dict[str, Any]:
        """Plain data, ready for ``json.dumps``."""
        return {
            "common": self.common,
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "status_changed": self.a.status != self.b.status,
            "cost_difference": self.cost_difference,
            "token_differences": self.token_differences,
        }

    def to_json(self, **dumps: Any) -> str:
        """:meth:`to_dict` as JSON (``dumps`` goes to ``json.dumps``, e.g. ``indent=2``)."""
        return json.dumps(self.to_dict(), **dumps)

    def lines(self, width: int | None = 80) -> list[str]:
        """The comparison as text lines, each at most ``width`` characters (None: whole).

        ``a`` and ``b`` first (id, then the rest), then each one's events past the common prefix
        (``-`` for ``a``'s, ``+`` for ``b``'s, with their positions), then the
        differences in status, cost and tokens.
        """

        def cut(line: str) -> str:
            if width is not None and len(line) > width:
                return line[: max(width - 1, 0)] + "…"
            return line

        out = []
        for name, side in (("a", self.a), ("b", self.b)):
            out += [f"{name}: {side.conversation_id}", f"   {side.headline()}"]
        out.append(
            f"{self.common} events in common; a has {len(self.a.events)} more,"
            f" b has {len(self.b.events)} more"
        )
        for mark, side in (("-", self.a), ("+", self.b)):
            for offset, event in enumerate(side.events):
                out.append(f"{mark} [{self.common + offset}] {describe_event(event)}")
        for name, side in (("a", self.a), ("b", self.b)):
            if side.files is not None:
                out.append(f"{name}'s files since the fork point: {side.files.summary()}")
                out += [f"   {line}" for line in side.files.lines()]
        changes = []
        if self.a.status != self.b.status:
            changes.append(f"status: {self.a.status} -> {self.b.status}")
        cost = self.cost_difference
        changes.append(f"cost: {'-' if cost < 0 else '+'}${abs(cost):.4f}")
        total = self.b.total_tokens - self.a.total_tokens
        details = [
            f"{kind.removesuffix('_tokens').replace('_', ' ')} {difference:+,}"
            for kind, difference in self.token_differences.items()
            if difference
        ]
        changes.append(f"tokens: {total:+,}" + (f" ({', '.join(details)})" if details else ""))
        out.append("; ".join(changes))
        return [cut(line) for line in out]

    def text(self, width: int | None = 80) -> str:
        """:meth:`lines` joined by newlines."""
        return "\n".join(self.lines(width))


def _state_of(value: ConversationState | HasState, name: str) -> ConversationState:
    if isinstance(value, ConversationState):
        return value
    state = getattr(value, "state", None)
    if isinstance(state, ConversationState):
        return state
    raise InvalidTypeError(
        f"compare() takes conversations or ConversationState values, got {name}={value!r}"
    )


def compare(a: ConversationState | HasState, b: ConversationState | HasState) -> Comparison:
    """Compare ``a`` and ``b`` (conversations, or states such as a store loads).

    Returns a :class:`Comparison`: how many first events they share, the
    events each has past them, and their status, model, cost and tokens.
    Made for conversations of one fork tree (a fork and its source, two
    forks, two branches a suite ran); for unrelated ones the common prefix
    is simply empty.

    >>> from cowconv import LLM, Agent, Conversation
    >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> fork = source.fork()
    >>> _ = fork.send_message("Hi")
    >>> diff = compare(source, fork)
    >>> diff.common, len(diff.a.events), len(diff.b.events), diff.identical
    (0, 0, 2, False)
    >>> compare(source, "not a conversation")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidTypeError: compare() takes conversations or ConversationState ...
    """
    left, right = _state_of(a, "a"), _state_of(b, "b")
    common = left.branch.common_prefix_length(right.branch)
    return Comparison(
        common=common, a=ComparisonSide.of(left, common), b=ComparisonSide.of(right, common)
    )
