"""One conversation as the routes reach it: messages, runs, events (OpenHands' ``EventService``).

An :class:`EventService` stands for one conversation of a
:class:`~cowconv.agent_server.ConversationRegistry`; its methods are async
(the store's blocking work runs in a worker thread) and raise cowconv's
errors (:class:`~cowconv.ConversationNotFoundError`,
:class:`~cowconv.ConversationConflictError`,
:class:`~cowconv.InvalidValueError`...), which the app answers 404, 409,
422. :class:`~cowconv.agent_server.conversation_service.ConversationService`
hands them out.

>>> import asyncio
>>> from cowconv import LLM, Agent, Message, TextContent, Workspace
>>> registry = ConversationRegistry()
>>> agent, workspace = Agent(llm=LLM(model="openai/gpt-4o")), Workspace(working_dir=".")
>>> conversation = registry.create(agent, workspace)
>>> service = EventService(stored_conversation(conversation), registry=registry)
>>> asyncio.run(service.start())
>>> message = Message(role="user", content=[TextContent(text="hi")])
>>> sent = asyncio.run(service.send_message(message))
>>> sent.event.text, sent.system_prompt_at
('hi', 0)
>>> asyncio.run(service.count_events(kind="MessageEvent"))
1
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cowconv._exceptions import (
    ConversationConflictError,
    EventNotFoundError,
    InactiveServiceError,
)
from cowconv.agent_server.models import (
    SERVER_FIELDS,
    BranchInfo,
    BranchList,
    ConversationInfo,
    EventPage,
    EventSortOrder,
    OpenHandsEventPage,
    StateResponse,
    StoredConversation,
    StreamStatus,
)
from cowconv.agent_server.registry import ConversationRegistry
from cowconv.backends.wire import agent_to_openhands, event_to_openhands, mask_secrets, unsupported
from cowconv.conversation import Conversation
from cowconv.core.agent import Agent
from cowconv.core.analyzers import SecurityAnalyzerBase
from cowconv.core.events import Event, MessageEvent, SystemPromptEvent
from cowconv.core.frozen import thaw
from cowconv.core.history import EventLog
from cowconv.core.ids import ConversationID, id_dir_name, id_text
from cowconv.core.kinds import Kinded
from cowconv.core.message import Message, TextContent
from cowconv.core.security import ConfirmationPolicyBase
from cowconv.core.state import ConversationInfo as ConversationSummary
from cowconv.core.state import ConversationState, dump_state
from cowconv.core.workspace import Workspace

__all__ = [
    "OPENHANDS_KEY",
    "EventService",
    "RecordedMessage",
    "active_branch",
    "compose_conversation_info",
    "conversation_dir",
    "conversation_info",
    "matching_events",
    "stored_conversation",
]

OPENHANDS_KEY = "openhands"
"""The ``agent_state`` key under which the server keeps what OpenHands' SDK sent and cowconv does
not implement (the agent's JSON, secrets masked, and other request fields), to show it again."""


def _validated(family: type[Kinded], data: Mapping[str, Any], field: str) -> Any:
    """``data`` as the member of ``family`` its ``kind`` names, or a 422 naming ``field``."""
    try:
        return family.model_validate(dict(data))
    except (ValueError, TypeError) as error:
        raise unsupported(field, f"not a known {family.__name__}: {error}") from None


def _kept(state: ConversationState) -> dict[str, Any]:
    kept = state.agent_state.get(OPENHANDS_KEY)
    kept = thaw(kept) if kept is not None else {}
    return kept if isinstance(kept, dict) else {}


def stored_conversation(conversation: Conversation) -> StoredConversation:
    """What the server stores about ``conversation``, read off its snapshot: the start request's
    fields kept with it, its id, workspace, title, tags, times and fork lineage.

    >>> from cowconv import LLM, Agent
    >>> conversation = ConversationRegistry().create(
    ...     Agent(llm=LLM(model="openai/gpt-4o")), ".", conversation_id="c1", tags={"a": "b"})
    >>> stored = stored_conversation(conversation)
    >>> stored.id, stored.tags, stored.max_iterations
    ('c1', {'a': 'b'}, 500)
    """
    state = conversation.state
    request = _kept(state).get("request")
    sent = request if isinstance(request, dict) else {}
    return StoredConversation.model_validate(
        {
            **{key: value for key, value in sent.items() if key not in SERVER_FIELDS},
            "id": state.id,
            "workspace": state.workspace,
            **_live_fields(conversation),
        }
    )


def _live_fields(conversation: Conversation) -> dict[str, Any]:
    """The stored fields a live conversation decides: title, tags, times, lineage, bound."""
    state = conversation.state
    return {
        "tags": dict(state.tags),
        "title": state.title,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "forked_from_conversation_id": state.forked_from_conversation_id,
        "forked_from_event_id": state.forked_from_event_id,
        "max_iterations": conversation.max_iteration_per_run,
    }


def compose_conversation_info(
    stored: StoredConversation, state: ConversationState
) -> ConversationInfo:
    """The answer for a conversation: what the server stores about it and its snapshot
    (OpenHands' ``_compose_conversation_info``). Title, tags, times and lineage are the
    stored ones; the status, stats and agent the snapshot's (api keys masked).

    >>> from cowconv import LLM, Agent, Workspace
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="m", api_key="sk-1")),
    ...                           workspace=Workspace(working_dir="/tmp"))
    >>> stored = StoredConversation(id="c1", workspace=state.workspace, title="T")
    >>> info = compose_conversation_info(stored, state)
    >>> info.title, info.agent["llm"]["api_key"], info.max_iterations
    ('T', '**********', 500)
    """
    kept = _kept(state)
    ours = agent_to_openhands(state.agent.model_dump(mode="json"))
    sent: dict[str, Any] = kept["agent"] if isinstance(kept.get("agent"), dict) else {}
    agent = {**sent, **ours, "llm": {**sent.get("llm", {}), **ours["llm"]}}
    if "tools" in sent:  # as sent: tools cowconv lacks are kept (and not run)
        agent["tools"] = sent["tools"]
    summary = ConversationSummary.of(state)
    return ConversationInfo.model_validate(
        {
            **mask_secrets(stored.kept),
            **{name: getattr(summary, name) for name in ConversationSummary.model_fields},
            "title": stored.title,
            "tags": stored.tags,
            "created_at": stored.created_at,
            "updated_at": stored.updated_at,
            "forked_from_conversation_id": stored.forked_from_conversation_id,
            "forked_from_event_id": stored.forked_from_event_id,
            "agent": mask_secrets(agent),
            "workspace": _workspace_json(state.workspace),
            "max_iterations": stored.max_iterations,
            "head_is_empty": state.head_is_empty,
            "agent_state": {k: v for k, v in thaw(state.agent_state).items() if k != OPENHANDS_KEY},
            # The conversation's own (the state's): set at start, changed by their routes.
            "confirmation_policy": state.confirmation_policy.model_dump(mode="json"),
            "security_analyzer": None
            if state.security_analyzer is None
            else state.security_analyzer.model_dump(mode="json"),
            "hook_config": None
            if state.hook_config is None
            else state.hook_config.model_dump(mode="json"),
        }
    )


def _workspace_json(workspace: Workspace) -> dict[str, Any]:
    # OpenHands' LocalWorkspace JSON; a conversation with its own copy of the files (a fork
    # with workspace="copy", worktree=True) also names where they were copied from.
    shown: dict[str, Any] = {"kind": "LocalWorkspace", "working_dir": workspace.working_dir}
    if workspace.copied_from:
        shown["copied_from"] = list(workspace.copied_from)
    if workspace.max_snapshot_file_size is not None:  # cowconv's: its snapshots' size limit
        shown["max_snapshot_file_size"] = workspace.max_snapshot_file_size
    return shown


def conversation_info(conversation: Conversation) -> ConversationInfo:
    """The answer for a conversation: OpenHands' ``ConversationInfo`` and cowconv's summary."""
    return compose_conversation_info(stored_conversation(conversation), conversation.state)


def conversation_dir(
    conversations_dir: str | os.PathLike[str] | None, conversation_id: ConversationID
) -> Path | None:
    """The directory of a conversation's ``meta.json`` under ``conversations_dir`` (OpenHands'
    ``<dir>/<id hex>``; an id that is not a UUID is percent-encoded, dots too, so it is one
    path component); ``None`` without a directory.

    >>> conversation_dir("/data", "../x").name, conversation_dir(None, "c1")
    ('%2E%2E%2Fx', None)
    """
    if conversations_dir is None:
        return None
    return Path(conversations_dir) / id_dir_name(conversation_id)


def active_branch(state: ConversationState) -> EventLog:
    """The events of the conversation's active branch: what the routes page, search and stream
    (``state.events`` keeps abandoned branches too, as OpenHands' tree does)."""
    return state.branch


@dataclass(frozen=True)
class RecordedMessage:
    """What :meth:`EventService.send_message` recorded: the message's event, and the position
    of the system prompt recorded just before it (``None`` when none was)."""

    event: MessageEvent
    system_prompt_at: int | None


def _aware(moment: datetime | str) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _bound(moment: datetime) -> datetime:
    """A query's time bound: a naive one is the server's local time (OpenHands' rule)."""
    return moment if moment.tzinfo is not None else moment.astimezone()


def _in_time(timestamp: str, test: Callable[[datetime], bool]) -> bool:
    # An event's timestamp is any text the schema allows: one that is not ISO 8601 has no
    # time, so no time filter matches it (it used to be a 500).
    try:
        moment = _aware(timestamp)
    except ValueError:
        return False
    return test(moment)


def _text_of(event: Event) -> str | None:
    if isinstance(event, MessageEvent):
        return event.text
    return None


def matching_events(
    events: Sequence[Event],
    kind: str | None = None,
    source: str | None = None,
    body: str | None = None,
    since: datetime | None = None,
    before: datetime | None = None,
) -> list[Event]:
    """The events that pass OpenHands' event filters (``body``: case-insensitive, messages)."""
    needle = None if body is None else body.lower()
    low = None if since is None else _bound(since)
    high = None if before is None else _bound(before)
    found = []
    for event in events:
        if kind is not None and event.kind != kind:
            continue
        if source is not None and event.source != source:
            continue
        if needle is not None:
            text = _text_of(event)
            if text is None or needle not in text.lower():
                continue
        if low is not None and not _in_time(event.timestamp, lambda moment: moment >= low):
            continue
        if high is not None and not _in_time(event.timestamp, lambda moment: moment < high):
            continue
        found.append(event)
    return found


def _page(events: EventLog, start: int, limit: int) -> EventPage:
    end = min(start + limit, len(events))
    return EventPage(
        items=list(events[start:end]),
        offset=start,
        total=len(events),
        next_offset=end if end < len(events) else None,
    )


def _page_start(page_id: str | None) -> int:
    """Where a page of OpenHands' search starts: ``page_id`` is the offset cowconv handed out;
    another value starts from the beginning (as OpenHands does for an unknown page id)."""
    if page_id is None or not page_id.isascii() or not page_id.isdigit() or len(page_id) > 15:
        return 0
    return int(page_id)


class EventService:
    """One conversation for the routes (async): OpenHands' ``EventService``.

    ``stored`` is what the server stores about the conversation (its id
    says which); :meth:`start` opens it in ``registry`` (a new in-memory
    one if none is given): a new conversation with ``agent`` (and the
    agent JSON kept as ``openhands_agent``), or, without an agent, the one
    the registry holds. With ``conversations_dir``, :meth:`save_meta` writes
    ``stored`` to ``<conversations_dir>/<id hex>/meta.json`` as OpenHands'
    server does (:meth:`start` writes it once). Before :meth:`start`
    (or after :meth:`close`) the methods raise
    :class:`~cowconv.InactiveServiceError`.

    >>> import asyncio
    >>> from cowconv import LLM, Agent
    >>> registry = ConversationRegistry()
    >>> conversation = registry.create(Agent(llm=LLM(model="openai/gpt-4o")), ".")
    >>> service = EventService(stored_conversation(conversation), registry=registry)
    >>> asyncio.run(service.start())
    >>> asyncio.run(service.list_events()).total
    0
    """

    def __init__(
        self,
        stored: StoredConversation,
        conversations_dir: str | os.PathLike[str] | None = None,
        agent: Agent | None = None,
        *,
        registry: ConversationRegistry | None = None,
        openhands_agent: Mapping[str, Any] | None = None,
    ) -> None:
        self._stored = stored
        self.conversations_dir = None if conversations_dir is None else Path(conversations_dir)
        self.agent = agent
        self._openhands_agent = None if openhands_agent is None else dict(openhands_agent)
        self._registry = registry
        self._started = False
        # A conversation object handed in by assignment (OpenHands' code sets
        # ``service._conversation``); a started service reads the registry's live one instead.
        self._assigned: Any = None

    @property
    def conversation_id(self) -> str:
        """The conversation's id (its text)."""
        return id_text(self._stored.id)

    @property
    def conversation_dir(self) -> Path | None:
        """Where ``meta.json`` is written (``None`` without ``conversations_dir``)."""
        return conversation_dir(self.conversations_dir, self._stored.id)

    @property
    def stored(self) -> StoredConversation:
        """What the server stores about the conversation; title, tags, times and lineage are
        read off the live conversation once started."""
        conversation = self._conversation
        if not isinstance(conversation, Conversation):
            return self._stored
        return self._stored.model_copy(update=_live_fields(conversation))

    @stored.setter
    def stored(self, stored: StoredConversation) -> None:
        self._stored = stored

    @property
    def _conversation(self) -> Any:
        """The conversation served: the registry's live one once started (``None`` once it is
        gone), else one assigned (OpenHands' attribute)."""
        if self._assigned is not None:
            return self._assigned
        if self._started and self._registry is not None:
            return self._registry.find(self.conversation_id)
        return None

    @_conversation.setter
    def _conversation(self, conversation: Any) -> None:
        self._assigned = conversation

    def _live(self) -> Conversation:
        if self._assigned is not None:
            assigned: Conversation = self._assigned
            return assigned
        return self._serving().get(self.conversation_id)

    def _serving(self) -> ConversationRegistry:
        """The registry of a started service (:class:`~cowconv.InactiveServiceError` before)."""
        if not self._started or self._registry is None:
            raise InactiveServiceError(f"conversation {self.conversation_id!r} is not started")
        return self._registry

    def get_conversation(self) -> Conversation:
        """The live conversation (OpenHands' method of the same name); blocking, for
        in-process code. :class:`~cowconv.ConversationNotFoundError` once it is gone."""
        return self._live()

    # -- lifecycle -----------------------------------------------------------------

    def _open(self) -> Conversation:
        if self._registry is None:
            self._registry = ConversationRegistry()
        registry = self._registry
        stored = self._stored
        if self.agent is None:  # resume: the registry holds it (or raises not found)
            return registry.get(stored.id)
        kept: dict[str, Any] = {}
        if self._openhands_agent:
            kept["agent"] = self._openhands_agent
        if stored.kept:
            kept["request"] = mask_secrets(stored.kept)
        # The kept JSON is part of the first snapshot: what cannot be stored refuses it.
        conversation = registry.create(
            self.agent,
            stored.workspace,
            conversation_id=self.conversation_id,
            tags=stored.tags,
            max_iteration_per_run=stored.max_iterations,
            agent_state={OPENHANDS_KEY: kept} if kept else None,
            oversight={
                "confirmation_policy": stored.confirmation_policy,
                "security_analyzer": stored.security_analyzer,
                "hook_config": stored.hook_config,
            },
        )
        message = stored.initial_message
        if message is not None:
            conversation.send_message(message.message_text(), message.sender)
        return conversation

    async def start(self) -> None:
        """Open the conversation (create it with ``agent``, else resume it), record the
        initial message and start its run if it asks, and write ``meta.json``."""
        if self._started:
            return
        await self._call(self._open)
        self._started = True
        await self.save_meta()
        message = self._stored.initial_message
        if self.agent is not None and message is not None and message.run:
            await self.run()

    async def save_meta(self) -> None:
        """Write :attr:`stored` to ``meta.json`` (nothing without ``conversations_dir``)."""
        directory = self.conversation_dir
        if directory is None:
            return
        stored = await self._call(lambda: self.stored)

        def write() -> None:
            directory.mkdir(parents=True, exist_ok=True)
            meta = mask_secrets(stored.model_dump(mode="json"))
            temporary = directory / "meta.json.tmp"
            temporary.write_text(json.dumps(meta, indent=2), encoding="utf-8")
            temporary.replace(directory / "meta.json")

        await asyncio.to_thread(write)

    async def close(self) -> None:
        """Stop serving the conversation (the registry keeps it; nothing stored is removed)."""
        self._started = False
        self._assigned = None

    async def _call(self, work: Callable[[], Any]) -> Any:
        return await asyncio.to_thread(work)

    # -- reading -----------------------------------------------------------------

    async def get_state(self) -> ConversationState:
        """The conversation's current snapshot."""
        conversation: Conversation = await self._call(self._live)
        return conversation.state

    async def get_info(self) -> ConversationInfo:
        """The conversation as :class:`~cowconv.agent_server.models.ConversationInfo`."""
        info: ConversationInfo = await self._call(lambda: conversation_info(self._live()))
        return info

    async def get_agent(self) -> Agent:
        """The agent as cowconv runs it."""
        return (await self.get_state()).agent

    async def get_state_response(self, known: int = 0, last: str | None = None) -> StateResponse:
        """The snapshot but its events (api keys redacted), and the ids of the events a client
        lacks: it has ``known`` of them, the last one ``last``."""
        state = await self.get_state()
        events = active_branch(state)
        start = known if known <= len(events) else 0
        if start and (last is None or events[start - 1].id != last):
            start = 0
        dumped = dump_state(state, secrets="masked", branches=True)
        if isinstance(dumped.get("agent_state"), dict):  # what OpenHands sent stays server-side
            dumped["agent_state"] = {
                k: v for k, v in dumped["agent_state"].items() if k != OPENHANDS_KEY
            }
        return StateResponse(
            state=dumped,
            ids_from=start,
            event_ids=[events[position].id for position in range(start, len(events))],
        )

    def _start(self, events: EventLog, offset: int | None, after: str | None) -> int:
        if after is None:
            return min(offset or 0, len(events))
        try:
            start = events.index_of(after) + 1
        except KeyError:
            raise EventNotFoundError(
                f"conversation {self.conversation_id!r} has no event with id {after!r}"
            ) from None
        return min(start + (offset or 0), len(events))

    async def list_events(
        self, offset: int | None = None, after: str | None = None, limit: int = 100
    ) -> EventPage:
        """A page of events, oldest first, from ``offset`` or after the event ``after``."""
        events = active_branch(await self.get_state())
        return _page(events, self._start(events, offset, after), limit)

    async def stream_start(self, offset: int | None, after: str | None) -> int:
        """Where an event stream starts: at the end, given neither ``offset`` nor ``after``."""
        events = active_branch(await self.get_state())
        if offset is None and after is None:
            return len(events)
        return self._start(events, offset, after)

    async def _searched(self) -> Sequence[Event]:
        """The events search and count look at: the active branch, or, for a conversation
        object of OpenHands' shape assigned to ``_conversation``, its ``_state.events``."""
        conversation: Any = await self._call(self._live)
        if isinstance(conversation, Conversation):
            return active_branch(conversation.state)
        events: Sequence[Event] = conversation._state.events
        return events

    async def search_events(
        self,
        page_id: str | None = None,
        limit: int = 100,
        kind: str | None = None,
        source: str | None = None,
        body: str | None = None,
        sort_order: EventSortOrder = EventSortOrder.TIMESTAMP,
        timestamp__gte: datetime | None = None,
        timestamp__lt: datetime | None = None,
    ) -> OpenHandsEventPage:
        """A page of the events matching OpenHands' filters, in OpenHands' JSON shapes.

        Events are in history order (which is timestamp order); a naive time
        bound is the server's local time. ``next_page_id`` continues.
        """
        events = await self._searched()
        found = matching_events(events, kind, source, body, timestamp__gte, timestamp__lt)
        if sort_order == EventSortOrder.TIMESTAMP_DESC:
            found.reverse()
        start = _page_start(page_id)
        page = found[start : start + limit]
        return OpenHandsEventPage(
            items=[event_to_openhands(event.model_dump(mode="json")) for event in page],
            next_page_id=str(start + limit) if start + limit < len(found) else None,
        )

    async def count_events(
        self,
        kind: str | None = None,
        source: str | None = None,
        body: str | None = None,
        timestamp__gte: datetime | None = None,
        timestamp__lt: datetime | None = None,
    ) -> int:
        """How many events match OpenHands' filters."""
        events = await self._searched()
        return len(matching_events(events, kind, source, body, timestamp__gte, timestamp__lt))

    async def get_event(self, event_id: str) -> dict[str, Any]:
        """One event in OpenHands' JSON shape (:class:`~cowconv.EventNotFoundError` if none)."""
        events = active_branch(await self.get_state())
        position = events.position_of(event_id)
        if position is None:
            raise EventNotFoundError(
                f"conversation {self.conversation_id!r} has no event with id {event_id!r}"
            )
        return event_to_openhands(events[position].model_dump(mode="json"))

    async def branches(self) -> BranchList:
        """Every branch of the conversation tree, each by its leaf event; the active one last."""
        state = await self.get_state()
        active = active_branch(state)
        return BranchList(
            items=[
                BranchInfo(
                    leaf_event_id=None if branch.last is None else branch.last.id,
                    event_count=len(branch),
                    active=len(branch) == len(active) and branch.starts_with(active),
                )
                for branch in state.branches
            ]
        )

    async def branch_events(
        self, leaf_event_id: str, offset: int = 0, limit: int = 100
    ) -> EventPage:
        """A page of the events of the branch ending at ``leaf_event_id``."""
        state = await self.get_state()
        for branch in state.branches:
            if branch.last is not None and branch.last.id == leaf_event_id:
                return _page(branch, min(offset, len(branch)), limit)
        raise EventNotFoundError(
            f"conversation {self.conversation_id!r} has no branch ending at event {leaf_event_id!r}"
        )

    # -- changing ----------------------------------------------------------------

    def _record(self, text: str, sender: str | None) -> RecordedMessage:
        conversation = self._live()
        before = active_branch(conversation.state)
        event = conversation.send_message(text, sender)
        events = active_branch(conversation.state)
        position = events.position_of(event.id)
        prompt_at = None
        if position:
            prompt = events[position - 1]
            if isinstance(prompt, SystemPromptEvent) and before.position_of(prompt.id) is None:
                prompt_at = position - 1
        return RecordedMessage(event=event, system_prompt_at=prompt_at)

    async def send_message(
        self, message: Message, run: bool = False, *, sender: str | None = None
    ) -> RecordedMessage:
        """Record a user message (its text parts); with ``run`` a run starts unless one is going.

        The agent's system prompt is recorded just before it when it is not
        current (the first message, or after the agent changed). Only
        ``user`` messages are taken (:class:`~cowconv.InvalidValueError`).
        """
        if message.role != "user":
            raise unsupported("role", "only user messages can be sent to a conversation")
        text = "".join(part.text for part in message.content if isinstance(part, TextContent))
        recorded: RecordedMessage = await self._call(lambda: self._record(text, sender))
        if run:
            try:
                await self.run()
            except ConversationConflictError:
                pass  # already running: the run reads the message (OpenHands does the same)
        return recorded

    async def append_event(self, event: Event) -> Event:
        """Append an event as given (:class:`~cowconv.ConversationConflictError` if its id is
        already in the history)."""

        def append() -> Event:
            conversation = self._live()
            if active_branch(conversation.state).position_of(event.id) is not None:
                raise ConversationConflictError(
                    f"conversation {self.conversation_id!r} already has an event with id "
                    f"{event.id!r}"
                )
            return conversation.append_event(event)

        appended: Event = await self._call(append)
        return appended

    async def set_tags(self, tags: Mapping[str, str | None]) -> ConversationSummary:
        """Set tags; a ``None`` value removes the tag."""

        def change() -> ConversationSummary:
            conversation = self._live()
            for key, value in tags.items():
                conversation.set_tag(key, value)
            return ConversationSummary.of(conversation.state)

        summary: ConversationSummary = await self._call(change)
        return summary

    async def update_agent_state(self, changes: Mapping[str, Any]) -> ConversationSummary:
        """Merge the given keys into the agent state."""

        def change() -> ConversationSummary:
            conversation = self._live()
            conversation.update_agent_state(dict(changes))
            return ConversationSummary.of(conversation.state)

        summary: ConversationSummary = await self._call(change)
        return summary

    async def activate_skill(self, name: str) -> ConversationSummary:
        """Activate a knowledge skill (once)."""

        def change() -> ConversationSummary:
            conversation = self._live()
            conversation.activate_skill(name)
            return ConversationSummary.of(conversation.state)

        summary: ConversationSummary = await self._call(change)
        return summary

    async def update_secrets(self, secrets: Mapping[str, Any]) -> None:
        """OpenHands' secrets: cowconv injects none, so a secret is refused
        (:class:`~cowconv.InvalidValueError`, a 422); no secrets is nothing to do."""
        await self.get_state()  # an unknown conversation is a 404 first
        if secrets:
            raise unsupported("secrets", "cowconv does not inject or mask conversation secrets")

    async def set_confirmation_policy(self, policy: Mapping[str, Any]) -> None:
        """Set the conversation's confirmation policy (its JSON: OpenHands' ``kind``)."""
        await self.get_state()  # an unknown conversation is a 404 first
        chosen = _validated(ConfirmationPolicyBase, policy, "policy")
        await self._call(lambda: self._live().set_confirmation_policy(chosen))

    async def set_security_analyzer(self, analyzer: Mapping[str, Any] | None) -> None:
        """Set (``None``: remove) the conversation's security analyzer (its JSON)."""
        await self.get_state()
        chosen = (
            None
            if analyzer is None
            else _validated(SecurityAnalyzerBase, analyzer, "security_analyzer")
        )
        await self._call(lambda: self._live().set_security_analyzer(chosen))

    async def reject_pending_actions(self, reason: str) -> None:
        """Answer the tool calls waiting for confirmation with a rejection each."""
        await self.get_state()
        await self._call(lambda: self._live().reject_pending_actions(reason))

    async def respond_to_confirmation(self, accept: bool, reason: str) -> None:
        """OpenHands' answer to a waiting conversation: run what waits, or reject it.

        Accepting while a run is going is nothing to do (as OpenHands' server).
        """
        if not accept:
            await self.reject_pending_actions(reason)
            return
        try:
            await self.run()
        except ConversationConflictError:
            pass

    # -- running -----------------------------------------------------------------

    async def run(self) -> ConversationState:
        """Start a run in the background; the snapshot it starts from.

        :class:`~cowconv.ConversationConflictError` if one is going.
        """
        state: ConversationState = await self._call(
            lambda: self._serving().run(self.conversation_id)
        )
        return state

    async def pause(self) -> ConversationState:
        """Ask a running conversation to pause after its current step."""
        state: ConversationState = await self._call(
            lambda: self._serving().pause(self.conversation_id)
        )
        return state

    async def interrupt(self) -> ConversationState:
        """End a run now: kill its running command, run no further tool call, end paused."""
        state: ConversationState = await self._call(
            lambda: self._serving().interrupt(self.conversation_id)
        )
        return state

    async def navigate(self, event_id: str | None) -> ConversationState:
        """Move the active branch to end at ``event_id`` (404 unknown, 409 while running)."""
        state: ConversationState = await self._call(
            lambda: self._serving().navigate(self.conversation_id, event_id)
        )
        return state

    # -- following ---------------------------------------------------------------

    async def follow(self, start: int, until_idle: bool) -> AsyncIterator[Event | StreamStatus]:
        """The events from ``start`` on, then live, and the status whenever it changes.

        The first item after the events already there is always a status.
        Ends when the conversation is deleted, the server closes, or
        (``until_idle``) no run is going.
        """
        registry = self._serving()
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(woken.set)
            except RuntimeError:  # the loop has closed: the stream is gone anyway
                pass

        unsubscribe = registry.subscribe(self.conversation_id, wake)
        try:
            cursor = start
            last_status: StreamStatus | None = None
            while True:
                woken.clear()
                conversation = registry.find(self.conversation_id)
                if conversation is None or registry.closed:
                    return
                # Read "running" before the snapshot: once a run is seen finished, every
                # event it recorded is already in the snapshot read after it.
                running = registry.is_running(self.conversation_id)
                state = conversation.state
                events = active_branch(state)
                for position in range(cursor, len(events)):
                    yield events[position]
                cursor = max(cursor, len(events))
                status = StreamStatus(
                    execution_status=state.execution_status, running=running, event_count=cursor
                )
                if status != last_status:
                    yield status
                    last_status = status
                if until_idle and not running:
                    return
                await woken.wait()
        finally:
            unsubscribe()

    def current_info(self) -> ConversationInfo | None:
        """The conversation's info now, or ``None`` once it is gone (for the socket)."""
        if not self._started or self._registry is None:
            return None
        conversation = self._registry.find(self.conversation_id)
        return None if conversation is None else conversation_info(conversation)
