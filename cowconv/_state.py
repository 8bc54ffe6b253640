"""``ConversationState``: one immutable snapshot of a conversation.

A conversation holds its current snapshot and swaps in a new one on every
change; a fork is a new snapshot that shares the events, the agent and the
agent state with its source.

>>> from cowconv import LLM, Agent, EventLog, Workspace
>>> state = ConversationState(
...     id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=Workspace(working_dir=".")
... )
>>> later = state.evolve(tags={"title": "Draft"})
>>> dict(later.tags), dict(state.tags)
({'title': 'Draft'}, {})
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field
from pyrsistent import pmap

from cowconv._agent import Agent
from cowconv._events import _now
from cowconv._frozen import CheckedModel, FrozenJSONMap, FrozenMap, FrozenStrMap
from cowconv._history import EventLog
from cowconv._workspace import Workspace

__all__ = ["ConversationInfo", "ConversationState", "ConversationStats", "ExecutionStatus", "Usage"]


class ExecutionStatus(StrEnum):
    """Where a conversation's run stands.

    >>> ExecutionStatus("paused") is ExecutionStatus.PAUSED
    True
    """

    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    ERROR = "error"
    STUCK = "stuck"


class Usage(CheckedModel):
    """Cost and tokens spent.

    ``prompt_tokens`` counts every prompt token; ``cache_read_tokens`` of
    them were served from the provider's prompt cache (billed at its cache
    rate), ``cache_write_tokens`` were written to it.

    >>> total = Usage(accumulated_cost=0.5, prompt_tokens=10) + Usage(completion_tokens=3)
    >>> total.accumulated_cost, total.prompt_tokens, total.completion_tokens
    (0.5, 10, 3)
    >>> (Usage(prompt_tokens=10, cache_read_tokens=8) + total).cache_read_tokens
    8
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    accumulated_cost: float = Field(default=0.0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            accumulated_cost=self.accumulated_cost + other.accumulated_cost,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


class ConversationStats(Usage):
    """Totals of a conversation, and the same per LLM ``usage_id``.

    >>> stats = ConversationStats().record("main", Usage(accumulated_cost=0.25, prompt_tokens=7))
    >>> stats.accumulated_cost, stats.by_usage_id["main"].prompt_tokens
    (0.25, 7)
    """

    by_usage_id: FrozenMap[Usage] = pmap()

    def record(self, usage_id: str, usage: Usage) -> ConversationStats:
        """New stats with ``usage`` added under ``usage_id`` and to the totals."""
        total = (
            Usage.model_construct(
                accumulated_cost=self.accumulated_cost,
                prompt_tokens=self.prompt_tokens,
                completion_tokens=self.completion_tokens,
                cache_read_tokens=self.cache_read_tokens,
                cache_write_tokens=self.cache_write_tokens,
            )
            + usage
        )
        previous = self.by_usage_id.get(usage_id, Usage())
        by_usage_id = {**self.by_usage_id, usage_id: previous + usage}
        return ConversationStats(**total.model_dump(), by_usage_id=by_usage_id)


_NO_STATS = ConversationStats()


class ConversationState(CheckedModel):
    """An immutable snapshot of a conversation.

    ``evolve(**changes)`` returns a new, validated snapshot; nothing changes
    this one.

    >>> from cowconv import LLM, Agent, Conversation
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> snapshot = conversation.state
    >>> _ = conversation.send_message("hi")
    >>> len(snapshot.events), len(conversation.state.events)
    (0, 1)
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    id: str = Field(min_length=1)
    agent: Agent
    workspace: Workspace
    events: EventLog = EventLog()
    agent_state: FrozenJSONMap = pmap()
    activated_knowledge_skills: tuple[str, ...] = ()
    stats: ConversationStats = _NO_STATS
    tags: FrozenStrMap = pmap()
    execution_status: ExecutionStatus = ExecutionStatus.IDLE
    forked_from_conversation_id: str | None = None
    forked_from_event_id: str | None = None
    created_at: datetime = Field(default_factory=_now)
    updated_at: datetime = Field(default_factory=_now)

    @property
    def title(self) -> str | None:
        """``tags["title"]``, if set."""
        return self.tags.get("title")

    def evolve(self, **changes: Any) -> ConversationState:
        """A new snapshot with ``changes`` applied and validated."""
        unknown = changes.keys() - type(self).model_fields.keys()
        if unknown:
            raise TypeError(f"ConversationState has no field(s) {sorted(unknown)}")
        return type(self).model_validate({**self.__dict__, **changes})

    def _replace(self, **changes: Any) -> ConversationState:
        # Trusted, unvalidated copy for values cowconv built itself (hot paths: fork, append).
        # Like pydantic's model_copy, but the new __dict__ is built at its final size and the
        # (never mutated) fields-set is shared: half the memory of a fork.
        new = object.__new__(type(self))
        _set = object.__setattr__
        _set(new, "__dict__", {**self.__dict__, **changes})
        _set(new, "__pydantic_extra__", None)
        _set(new, "__pydantic_fields_set__", self.__pydantic_fields_set__)
        _set(new, "__pydantic_private__", None)
        return new


class ConversationInfo(CheckedModel):
    """A summary of a conversation without its events (listings, the REST API).

    >>> from cowconv import LLM, Agent, Conversation
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> ConversationInfo.of(conversation.state).event_count
    0
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str
    title: str | None = None
    tags: FrozenStrMap = pmap()
    execution_status: ExecutionStatus
    stats: ConversationStats = _NO_STATS
    created_at: datetime
    updated_at: datetime
    forked_from_conversation_id: str | None = None
    forked_from_event_id: str | None = None
    event_count: int = Field(ge=0)

    @classmethod
    def of(cls, state: ConversationState) -> ConversationInfo:
        """The summary of a snapshot."""
        return cls(
            id=state.id,
            title=state.title,
            tags=state.tags,
            execution_status=state.execution_status,
            stats=state.stats,
            created_at=state.created_at,
            updated_at=state.updated_at,
            forked_from_conversation_id=state.forked_from_conversation_id,
            forked_from_event_id=state.forked_from_event_id,
            event_count=len(state.events),
        )
