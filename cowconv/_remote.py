"""``RemoteConversation``: a conversation that lives on an agent server.

``Conversation(agent=..., workspace=Workspace(host=url, working_dir=...))``
returns one; :meth:`RemoteConversation.attach` reopens one by id. It has the
local conversation's surface; every call is an HTTP request (httpx) to the
server started by ``python -m cowconv.agent_server``.

>>> from cowconv import LLM, Agent, Conversation, Workspace
>>> from cowconv.agent_server import BackgroundServer, create_app
>>> with BackgroundServer(create_app()) as server:
...     source = Conversation(
...         agent=Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-1")),
...         workspace=Workspace(host=server.url, working_dir="."),
...     )
...     _ = source.send_message("Analyse the sales report.")
...     fork = source.fork(title="Follow-up")
...     print(type(source).__name__, len(fork.state.events), fork.state.title)
...     fork.close(), source.close()
RemoteConversation 1 Follow-up
(None, None)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any, overload

import httpx
from pydantic import ValidationError

from cowconv._agent import Agent
from cowconv._conversation import EventCallback, _check_tags, notify
from cowconv._events import Event, MessageEvent
from cowconv._exceptions import RemoteError
from cowconv._ids import ConversationID, id_text, public_id
from cowconv._state import ConversationInfo, ConversationStats, ExecutionStatus
from cowconv._visualizer import DEFAULT_VISUALIZER, VisualizerSetting, make_visualizer
from cowconv._workspace import SESSION_API_KEY_HEADER, Workspace

__all__ = ["RemoteConversation", "RemoteEventLog", "RemoteState"]

_PAGE = 100
_RECONNECTS = 5


def _read_info(data: Any) -> ConversationInfo:
    """A server's conversation summary, as a client that must outlive server versions reads it.

    Fields this cowconv does not know are ignored; an optional field it
    cannot read (another server's shape of ``stats``, say) is left at its
    default; a missing ``event_count`` is counted from the events when needed.
    Only a summary without a usable ``id``, ``execution_status`` or dates fails.
    """
    if not isinstance(data, dict):
        raise RemoteError(0, f"the server sent no conversation summary: {data!r}")
    fields = ConversationInfo.model_fields
    known = {key: value for key, value in data.items() if key in fields}
    try:
        return ConversationInfo.model_validate(known)
    except ValidationError as error:
        unreadable = {str(item["loc"][0]) for item in error.errors() if item["loc"]}
        if any(fields[name].is_required() for name in unreadable if name in fields):
            raise
        readable = {key: value for key, value in known.items() if key not in unreadable}
        return ConversationInfo.model_validate(readable)


def _raise_for_status(response: httpx.Response) -> httpx.Response:
    if response.is_success:
        return response
    response.read()
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        detail = response.text
    if isinstance(detail, list):  # validation errors: one message per bad field
        detail = "; ".join(
            f"{'.'.join(str(part) for part in item.get('loc', ()))}: {item.get('msg')}"
            for item in detail
            if isinstance(item, dict)
        )
    raise RemoteError(response.status_code, str(detail))


class RemoteEventLog(Sequence[Event]):
    """The events of a remote conversation, fetched page by page when read.

    Its length is the event count of the snapshot it belongs to; histories
    only grow, so the pages it fetches later are still those events.
    """

    def __init__(
        self, conversation: RemoteConversation, count: int | None, leaf: str | None = None
    ) -> None:
        self._conversation = conversation
        self._leaf = leaf  # a branch other than the active one: read by its leaf event
        self._pages: dict[int, list[Event]] = {}
        self._count = self._counted() if count is None else count

    def _counted(self) -> int:
        # A server that does not say how many events there are: read pages until a short one.
        number = 0
        while True:
            page = self._conversation._events(offset=number * _PAGE, limit=_PAGE, leaf=self._leaf)
            self._pages[number] = page
            if len(page) < _PAGE:
                return number * _PAGE + len(page)
            number += 1

    def __len__(self) -> int:
        return self._count

    def _page(self, number: int) -> list[Event]:
        page = self._pages.get(number)
        if page is None:
            start = number * _PAGE
            limit = min(_PAGE, self._count - start)
            page = self._conversation._events(offset=start, limit=limit, leaf=self._leaf)
            self._pages[number] = page
        return page

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(self._count))]
        position = index + self._count if index < 0 else index
        if not 0 <= position < self._count:
            raise IndexError(f"event index {index} out of range for {self._count} events")
        return self._page(position // _PAGE)[position % _PAGE]

    def __iter__(self) -> Iterator[Event]:
        for number in range((self._count + _PAGE - 1) // _PAGE):
            yield from self._page(number)

    @property
    def last(self) -> Event | None:
        """The last event, or ``None`` for an empty history."""
        return self[-1] if self._count else None

    def append(self, event: Event) -> Sequence[Event]:
        """Record ``event`` on the conversation (as the seed's ``state.events.append``).

        This page of the history does not change; the conversation's new
        history is returned.
        """
        self._conversation.append_event(event)
        return self._conversation.state.events

    def extend(self, events: Iterable[Event]) -> Sequence[Event]:
        """Record ``events`` on the conversation, in order; its new history."""
        for event in events:
            self._conversation.append_event(event)
        return self._conversation.state.events

    def __repr__(self) -> str:
        return f"<RemoteEventLog of {self._conversation.id} len={self._count}>"


class RemoteState:
    """A snapshot of a remote conversation: its summary, read once; events on demand."""

    def __init__(self, conversation: RemoteConversation, info: ConversationInfo) -> None:
        self._conversation = conversation
        self.info = info
        self.events = RemoteEventLog(conversation, info.event_count)
        self._listed: list[dict[str, Any]] | None = None

    @property
    def id(self) -> ConversationID:
        """The conversation id."""
        return self.info.id

    @property
    def title(self) -> str | None:
        """``tags["title"]``, if set."""
        return self.info.title

    @property
    def tags(self) -> Mapping[str, str]:
        """The conversation's tags."""
        return MappingProxyType(dict(self.info.tags))

    @property
    def execution_status(self) -> ExecutionStatus:
        """Where the conversation's run stood when this snapshot was read."""
        return self.info.execution_status

    @property
    def stats(self) -> ConversationStats:
        """Cost and tokens spent by the conversation."""
        return self.info.stats

    @property
    def forked_from_conversation_id(self) -> ConversationID | None:
        """The conversation this one was forked from."""
        return self.info.forked_from_conversation_id

    @property
    def forked_from_event_id(self) -> str | None:
        """The event a fork was made at (``None`` for a fork of the whole conversation)."""
        return self.info.forked_from_event_id

    @property
    def forked_from_event_count(self) -> int | None:
        """How many of its source's events the fork took."""
        return self.info.forked_from_event_count

    @property
    def leaf_event_id(self) -> str | None:
        """The id of the last event of the active branch (``None`` when it is empty)."""
        if self.info.leaf_event_id is None and self.info.event_count != 0:
            last = self.events.last
            return None if last is None else last.id
        return self.info.leaf_event_id

    @property
    def other_branches(self) -> tuple[Sequence[Event], ...]:
        """The branches other than the one holding the active branch (see ``branches``)."""
        return self.branches[:-1] if self._active_is_listed() else self.branches

    def _active_is_listed(self) -> bool:
        return bool(self._branch_list()) and self._branch_list()[-1]["active"]

    def _branch_list(self) -> list[dict[str, Any]]:
        if self._listed is None:
            conversation = self._conversation
            response = conversation._client.get(conversation._path("/branches"))
            self._listed = list(_raise_for_status(response).json()["items"])
        return self._listed

    @property
    def branches(self) -> tuple[Sequence[Event], ...]:
        """Every branch of the conversation tree, each up to its leaf; the active one last."""
        conversation = self._conversation
        return tuple(
            self.events
            if item["active"]
            else RemoteEventLog(conversation, item["event_count"], item["leaf_event_id"])
            for item in self._branch_list()
        )

    @property
    def created_at(self) -> datetime:
        """When the conversation was created."""
        return self.info.created_at

    @property
    def updated_at(self) -> datetime:
        """When the conversation last changed."""
        return self.info.updated_at

    @property
    def agent(self) -> Agent:
        """The conversation's agent (its api key redacted if read from the server)."""
        return self._conversation.agent

    @property
    def workspace(self) -> Workspace:
        """The workspace the conversation was opened with."""
        return self._conversation.workspace

    def __repr__(self) -> str:
        return (
            f"<RemoteState {self.id} events={len(self.events)} "
            f"status={self.execution_status.value}>"
        )


class RemoteConversation:
    """A conversation on an agent server, with the local conversation's surface.

    ``RemoteConversation(agent, workspace)`` creates the conversation on the
    server at ``workspace.host`` (``workspace.api_key`` is the server's
    session API key). Given the id of a conversation the server already
    has, it attaches to it instead, like a local conversation resumes from
    its store. HTTP errors raise :class:`~cowconv.RemoteError` with the
    server's status code and message.

    >>> from cowconv import LLM, Agent, Conversation, Workspace
    >>> from cowconv.agent_server import BackgroundServer, create_app
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-kept-on-the-server"))
    >>> with BackgroundServer(create_app()) as server:
    ...     workspace = Workspace(host=server.url, working_dir=".")
    ...     source = Conversation(agent=agent, workspace=workspace)
    ...     _ = source.send_message("Analyse the sales report.")
    ...     fork = source.fork(title="Follow-up fork")
    ...     print(type(source).__name__, len(fork.state.events), fork.state.tags["title"])
    ...     source.close(); fork.close()
    RemoteConversation 1 Follow-up fork
    """

    def __init__(
        self,
        agent: Agent,
        workspace: Workspace,
        *,
        conversation_id: ConversationID | None = None,
        tags: Mapping[str, str] | None = None,
        callbacks: Iterable[EventCallback] = (),
        max_iteration_per_run: int | None = None,
        visualizer: VisualizerSetting = DEFAULT_VISUALIZER,
        stuck_detection: bool = True,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"agent must be a cowconv.Agent, got {type(agent).__name__}")
        if not isinstance(workspace, Workspace) or workspace.host is None:
            raise ValueError("a RemoteConversation needs a Workspace with host= (the server URL)")
        body: dict[str, Any] = {
            # The server keeps the credentials so the conversation and its forks can run.
            "agent": agent.model_dump(mode="json", context={"expose_secrets": True}),
            "workspace": {"working_dir": workspace.working_dir},
            "tags": _check_tags(tags),
        }
        if conversation_id is not None:
            conversation_id = body["id"] = id_text(conversation_id)
        if max_iteration_per_run is not None:
            body["max_iteration_per_run"] = max_iteration_per_run
        if not isinstance(stuck_detection, bool):
            raise TypeError(f"stuck_detection must be a bool, got {stuck_detection!r}")
        shown = make_visualizer(visualizer)
        self._open(workspace, callbacks if shown is None else (shown, *callbacks))
        self._agent: Agent | None = agent
        try:
            created = self._client.post("/api/conversations", json=body)
            if created.status_code == 409 and conversation_id is not None:
                info = self._info(conversation_id)
            else:
                info = _read_info(_raise_for_status(created).json())
        except BaseException:
            self.close()
            raise
        self._id = str(info.id)
        if shown is not None:
            shown.initialize(self)

    def _open(self, workspace: Workspace, callbacks: Iterable[EventCallback]) -> None:
        assert workspace.host is not None
        headers = {}
        if workspace.api_key is not None:
            headers[SESSION_API_KEY_HEADER] = workspace.api_key.get_secret_value()
        self._workspace = workspace
        self._callbacks = tuple(callbacks)
        self._client = httpx.Client(
            base_url=workspace.host.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(30.0),
        )

    @classmethod
    def attach(
        cls,
        host: str,
        conversation_id: ConversationID,
        *,
        api_key: str | None = None,
        working_dir: str | os.PathLike[str] = ".",
        callbacks: Iterable[EventCallback] = (),
    ) -> RemoteConversation:
        """Attach to the conversation ``conversation_id`` the server at ``host`` has.

        ``RemoteError`` with status 404 if it has none.
        """
        workspace = Workspace(host=host, working_dir=working_dir, api_key=api_key)
        return cls._attach(workspace, id_text(conversation_id), callbacks=callbacks)

    @classmethod
    def _attach(
        cls,
        workspace: Workspace,
        conversation_id: str,
        *,
        callbacks: Iterable[EventCallback] = (),
    ) -> RemoteConversation:
        conversation = cls.__new__(cls)
        conversation._open(workspace, callbacks)
        conversation._agent = None
        try:
            conversation._id = str(conversation._info(conversation_id).id)
        except BaseException:
            conversation.close()
            raise
        return conversation

    # -- HTTP --------------------------------------------------------------------

    def _path(self, suffix: str = "", conversation_id: str | None = None) -> str:
        return f"/api/conversations/{conversation_id or self._id}{suffix}"

    def _info(self, conversation_id: str | None = None) -> ConversationInfo:
        response = _raise_for_status(self._client.get(self._path("", conversation_id)))
        return _read_info(response.json())

    def _events(self, *, offset: int, limit: int, leaf: str | None = None) -> list[Event]:
        suffix = "/events" if leaf is None else f"/branches/{leaf}/events"
        response = self._client.get(self._path(suffix), params={"offset": offset, "limit": limit})
        page = _raise_for_status(response).json()
        return [Event.model_validate(item) for item in page["items"]]

    def _notify(self, event: Event) -> None:
        notify(self._callbacks, event)

    # -- reading -------------------------------------------------------------

    @property
    def id(self) -> ConversationID:
        """The conversation id: a ``uuid.UUID`` for UUID ids (as the seed SDK's), else the str."""
        return public_id(self._id)

    @property
    def state(self) -> RemoteState:
        """A fresh snapshot read from the server (one request; events on demand)."""
        return RemoteState(self, self._info())

    @property
    def agent(self) -> Agent:
        """The agent; read from the server, api key redacted, when attached by id."""
        if self._agent is None:
            response = _raise_for_status(self._client.get(self._path("/agent")))
            self._agent = Agent.model_validate(response.json())
        return self._agent

    @property
    def workspace(self) -> Workspace:
        """The workspace: the server's URL and the working directory there."""
        return self._workspace

    def __repr__(self) -> str:
        return f"<RemoteConversation {self._id} at {self._workspace.host}>"

    # -- changing ------------------------------------------------------------

    def append_event(self, event: Event) -> Event:
        """Record ``event`` at the end of the history on the server and return it.

        ``RemoteError`` 409 if the history already has an event with its id.
        """
        if not isinstance(event, Event):
            raise TypeError(f"expected an Event, got {type(event).__name__}")
        response = self._client.post(self._path("/events"), json=event.model_dump(mode="json"))
        recorded: Event = Event.model_validate(_raise_for_status(response).json())
        self._notify(recorded)
        return recorded

    def send_message(self, text: str) -> MessageEvent:
        """Record a user message on the server and return its event."""
        if not isinstance(text, str):
            raise TypeError(f"send_message() takes a str, got {type(text).__name__}")
        response = self._client.post(self._path("/messages"), json={"text": text})
        event: MessageEvent = MessageEvent.model_validate(_raise_for_status(response).json())
        self._notify(event)
        return event

    def run(self) -> None:
        """Run the agent on the server; blocks until the run ends.

        It follows the server's event stream (no polling) and hands every
        new event to the callbacks. Like a local run, agent failures end the
        run with status ``error`` instead of raising. If a run is already
        going (started elsewhere), it waits for that one.
        """
        response = self._client.post(self._path("/run"))
        if response.status_code == 409:
            start = self._info().event_count
        else:
            start = _read_info(_raise_for_status(response).json()).event_count
        self._follow(len(self.state.events) if start is None else start)

    def _follow(self, cursor: int) -> None:
        for _attempt in range(_RECONNECTS):
            try:
                cursor, finished = self._read_stream(cursor)
            except httpx.TransportError:
                continue
            if finished:
                return
        raise RemoteError(0, f"lost the event stream of conversation {self._id} repeatedly")

    def _read_stream(self, cursor: int) -> tuple[int, bool]:
        params: dict[str, str | int] = {"offset": cursor, "until_idle": "true"}
        timeout = httpx.Timeout(30.0, read=60.0)  # the server sends a keepalive every 15 s
        with self._client.stream(
            "GET", self._path("/events/stream"), params=params, timeout=timeout
        ) as response:
            _raise_for_status(response)
            kind, data = "message", []
            running = True
            for line in response.iter_lines():
                if line:
                    field, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if field == "event":
                        kind = value
                    elif field == "data":
                        data.append(value)
                    continue
                if kind == "event" and data:
                    self._notify(Event.model_validate_json("\n".join(data)))
                    cursor += 1
                elif kind == "status" and data:
                    running = bool(_status_running("\n".join(data)))
                kind, data = "message", []
        # The server ends an until_idle stream only after a status with running=false.
        return cursor, not running

    def navigate_to(self, event_id: str | None) -> None:
        """Move the active branch back to ``event_id`` on the server (see the local one).

        ``RemoteError`` 404 for an unknown event, 409 while a run is going.
        """
        if event_id is not None and not isinstance(event_id, str):
            raise TypeError(f"event_id must be a str or None, got {type(event_id).__name__}")
        _raise_for_status(self._client.post(self._path("/navigate"), json={"event_id": event_id}))

    def pause(self) -> None:
        """Ask the server to pause the run after its current step (returns at once)."""
        _raise_for_status(self._client.post(self._path("/pause")))

    def fork(
        self,
        *,
        conversation_id: ConversationID | None = None,
        agent: Agent | None = None,
        title: str | None = None,
        tags: Mapping[str, str] | None = None,
        reset_metrics: bool = True,
        from_event_id: str | None = None,
    ) -> RemoteConversation:
        """Fork on the server (O(1) there); a new ``RemoteConversation`` for the fork.

        The fork keeps the server-side agent with its LLM settings and
        credentials; ``agent=`` is not supported remotely.
        """
        if agent is not None:
            raise NotImplementedError(
                "fork(agent=...) is not supported on a RemoteConversation: a remote fork keeps "
                "the agent the server manages; to fork with another agent, fork a local "
                "Conversation: Conversation(...).fork(agent=...)"
            )
        body: dict[str, Any] = {"reset_metrics": reset_metrics}
        if conversation_id is not None:
            body["id"] = id_text(conversation_id)
        if title is not None:
            body["title"] = title
        if tags is not None:
            body["tags"] = _check_tags(tags)
        if from_event_id is not None:
            body["from_event_id"] = from_event_id
        response = _raise_for_status(self._client.post(self._path("/fork"), json=body))
        info = _read_info(response.json())
        return type(self)._attach(self._workspace, str(info.id))

    def close(self) -> None:
        """Close the HTTP connection; the conversation stays on the server."""
        self._client.close()

    def __enter__(self) -> RemoteConversation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _status_running(data: str) -> bool:
    status = json.loads(data)
    return bool(status.get("running")) if isinstance(status, dict) else True
