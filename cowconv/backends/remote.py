"""``RemoteBackend``: a conversation kept by an agent server, reached over HTTP.

``Conversation(agent=..., workspace=Workspace(host=url, working_dir=...))``
puts the conversation on the server at ``url`` (``python -m
cowconv.agent_server`` or ``cowconv serve``); the conversation is the same
class as a local one, with this backend under it. Snapshots are real
:class:`~cowconv.ConversationState` values read in one request; their events
are fetched page by page when first read, and pages are shared by later
snapshots (a history only grows).

>>> from cowconv import LLM, Agent, Conversation, Workspace
>>> from cowconv.agent_server import BackgroundServer, create_app
>>> with BackgroundServer(create_app()) as server:
...     source = Conversation(
...         agent=Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-1")),
...         workspace=Workspace(host=server.url, working_dir="."),
...     )
...     _ = source.send_message("Analyse the sales report.")
...     fork = source.fork(title="Follow-up")
...     print(type(fork.backend).__name__, len(fork.state.events), fork.state.title)
...     fork.close(), source.close()
RemoteBackend 2 Follow-up
(None, None)
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload
from urllib.parse import urlsplit

import httpx
import httpx_sse
from pydantic import ValidationError
from websockets.sync.client import connect as ws_connect

from cowconv._exceptions import (
    ConversationConflictError,
    EventIndexError,
    InvalidValueError,
    RemoteError,
    remote_error_class,
)
from cowconv.backends.wire import (
    CHANGE_ROUTES,
    SERVER_HEADER,
    SESSION_API_KEY_HEADER,
    SYSTEM_PROMPT_AT_HEADER,
    agent_from_openhands,
    agent_to_openhands,
    event_from_openhands,
)
from cowconv.core.agent import Agent
from cowconv.core.changes import AppendEvent, Change, NavigateTo, SetTag
from cowconv.core.events import ROOT_PARENT_ID, Event, MessageEvent
from cowconv.core.history import EventLog
from cowconv.core.ids import id_text
from cowconv.core.state import DEFAULT_MAX_ITERATION_PER_RUN, ConversationInfo, ConversationState
from cowconv.core.storable import check_storable_event
from cowconv.core.workspace import Workspace
from cowconv.ports import EventCallback, ForkSpec, notify

__all__ = ["RemoteBackend", "RemoteEvents", "raise_for_status", "read_info"]

_SEARCH_PAGE = 100  # OpenHands' largest page of /events/search
# A quiet socket is checked over REST this often (seconds): a run that ended while the socket
# was being reconnected elsewhere still ends the wait.
_SOCKET_TIMEOUT = 30.0


def _active_branch(events: EventLog, info: Mapping[str, Any]) -> EventLog:
    """The events of the branch ending at the server's ``leaf_event_id`` (OpenHands sends all)."""
    if info.get("head_is_empty"):
        return EventLog()
    leaf = info.get("leaf_event_id")
    if not isinstance(leaf, str) or events.position_of(leaf) is None:
        return events
    path: list[Event] = []
    current: str | None = leaf
    while current is not None:
        position = events.position_of(current)
        if position is None:  # a parent the server did not send: keep the history as sent
            return events
        event = events[position]
        path.append(event)
        parent = getattr(event, "parent_id", None)
        current = (
            parent if isinstance(parent, str) and parent not in (current, ROOT_PARENT_ID) else None
        )
        if len(path) > len(events):  # a cycle: keep the history as sent
            return events
    path.reverse()
    if len(path) == len(events):
        return events
    return EventLog(path)


def _is_state_update(message: Any) -> bool:
    return isinstance(message, dict) and message.get("kind") == "ConversationStateUpdateEvent"


_PAGE = 100
_RECONNECTS = 5
_TIMEOUT = httpx.Timeout(60.0)
# The server sends a keepalive every 15 s while a run goes on.
_STREAM_TIMEOUT = httpx.Timeout(60.0, read=60.0)


def raise_for_status(response: httpx.Response) -> httpx.Response:
    """``response`` if it succeeded, else the :class:`~cowconv.RemoteError` it carries.

    When the server names one of cowconv's errors, the exception is also an
    instance of that error (a 404 for an unknown event is an
    :class:`~cowconv.EventNotFoundError` too).

    >>> import httpx
    >>> from cowconv import EventNotFoundError, RemoteError
    >>> answer = httpx.Response(404, json={"detail": "gone", "error": "EventNotFoundError"})
    >>> try:
    ...     raise_for_status(answer)
    ... except EventNotFoundError as error:
    ...     print(error.status_code, isinstance(error, RemoteError))
    404 True
    """
    if response.is_success:
        return response
    response.read()
    name = None
    try:
        body = response.json()
        detail = body.get("detail", response.text)
        name = body.get("error")
    except (ValueError, AttributeError):
        detail = response.text
    if isinstance(detail, list):  # validation errors: one message per bad field
        detail = "; ".join(
            f"{'.'.join(str(part) for part in item.get('loc', ()))}: {item.get('msg')}"
            for item in detail
            if isinstance(item, dict)
        )
    raise remote_error_class(name if isinstance(name, str) else None)(
        response.status_code, str(detail)
    )


def read_info(data: Any) -> ConversationInfo:
    """A server's conversation summary, as a client that must outlive server versions reads it.

    Fields this cowconv does not know are ignored; an optional field it
    cannot read (another server's shape of ``stats``, say) is left at its
    default. Only a summary without a usable ``id``, ``execution_status`` or
    dates fails.

    >>> read_info({"id": "c1", "execution_status": "idle", "created_at": "2026-01-01T00:00:00Z",
    ...            "updated_at": "2026-01-01T00:00:00Z", "event_count": 2, "new": 1}).event_count
    2
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


class _Transport(httpx.BaseTransport):
    """The transport under a remote backend's client: every failure to reach the server is a
    :class:`~cowconv.RemoteError` with status 0.

    Over ``inner`` when one is given (an in-process transport, ``httpx.MockTransport``),
    which stays the caller's to close; else over a real HTTP connection pool.
    """

    def __init__(self, host: str, inner: httpx.BaseTransport | None) -> None:
        self._host = host
        self._owned = inner is None
        self._inner = httpx.HTTPTransport() if inner is None else inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return self._inner.handle_request(request)
        except httpx.TransportError as error:
            raise RemoteError(
                0, f"cannot reach the agent server at {self._host}: {error}"
            ) from error

    def close(self) -> None:
        if self._owned:
            self._inner.close()


def _without_key(agent: Agent) -> dict[str, Any]:
    # The server never shows an API key: agents are compared on everything else.
    return agent.model_dump(mode="json", exclude={"llm": {"api_key"}})


class _Connection:
    """One pooled HTTP client, shared by a conversation and the forks made from it."""

    def __init__(self, workspace: Workspace, transport: httpx.BaseTransport | None) -> None:
        assert workspace.host is not None
        headers = {}
        if workspace.api_key is not None:
            headers[SESSION_API_KEY_HEADER] = workspace.api_key.get_secret_value()
        self.workspace = workspace
        self.client = httpx.Client(
            base_url=workspace.host.rstrip("/"),
            headers=headers,
            timeout=_TIMEOUT,
            transport=_Transport(workspace.host, transport),
        )
        self._users = 1  # the creator's share, released when it is done with it
        self._lock = threading.Lock()
        self.cowconv = True
        """Whether the server is cowconv's (its answers carry ``X-Cowconv-Server``): then the
        client also uses cowconv's additions (``/state``, the event stream); against another
        OpenHands agent server it uses OpenHands' routes only."""

    def learn(self, response: httpx.Response) -> httpx.Response:
        """Note from an answer which server this is (see :attr:`cowconv`)."""
        self.cowconv = SERVER_HEADER in response.headers
        return response

    def acquire(self) -> _Connection:
        with self._lock:
            self._users += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self.client.close()


class RemoteEvents(Sequence[Event]):
    """Events ``start`` to ``start + count`` of a remote conversation, fetched when read.

    Pages of 100 events are fetched on first access and kept; histories only
    grow, so a page read later holds the same events.
    """

    def __init__(self, backend: RemoteBackend, start: int, count: int) -> None:
        self._backend = backend
        self._start = start
        self._count = count
        self._pages: dict[int, list[Event]] = {}

    def __len__(self) -> int:
        return self._count

    def _page(self, number: int) -> list[Event]:
        page = self._pages.get(number)
        if page is None:
            offset = number * _PAGE
            limit = min(_PAGE, self._count - offset)
            page = self._backend.events(offset=self._start + offset, limit=limit)
            if len(page) != limit:
                raise RemoteError(0, f"the server sent {len(page)} events where {limit} exist")
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
            raise EventIndexError(f"event index {index} out of range for {self._count} events")
        return self._page(position // _PAGE)[position % _PAGE]

    def __iter__(self) -> Iterator[Event]:
        for number in range((self._count + _PAGE - 1) // _PAGE):
            yield from self._page(number)


class RemoteBackend:
    """A conversation on an agent server: snapshots read over HTTP, changes sent as requests.

    :meth:`create` makes the conversation on the server (or attaches to the
    one with that id), :meth:`attach` reopens one by id. Errors the server
    answers raise :class:`~cowconv.RemoteError` with its status and message.

    >>> from cowconv import LLM, Agent, Workspace
    >>> from cowconv.agent_server import BackgroundServer, create_app
    >>> from cowconv.core.changes import SetTag
    >>> with BackgroundServer(create_app()) as server:
    ...     workspace = Workspace(host=server.url, working_dir=".")
    ...     backend = RemoteBackend.create(Agent(llm=LLM(model="openai/gpt-4o")), workspace)
    ...     backend.commit(SetTag("owner", "ci"))
    ...     print(dict(backend.snapshot().tags))
    ...     backend.close()
    {'owner': 'ci'}
    """

    def __init__(
        self,
        connection: _Connection,
        conversation_id: str,
        *,
        agent: Agent | None,
        callbacks: Iterable[EventCallback],
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
    ) -> None:
        self.max_iteration_per_run = max_iteration_per_run
        self._connection = connection.acquire()
        self._client = connection.client
        self._id = conversation_id
        self._agent = agent
        self._callbacks = tuple(callbacks)
        self._events = EventLog()
        self._events_lock = threading.Lock()
        self._closed = False
        # Callbacks hear events in history order, once each, even when a callback records
        # more (the local backend's rule): nested events wait until the current one is done.
        self._unnotified: collections.deque[Event] = collections.deque()
        self._notifying = False
        self._notify_lock = threading.Lock()
        # Sent from here while run() follows the stream: heard from the stream, in order.
        self._held: dict[str, Event] = {}
        self._following = 0  # run() calls following the event stream
        self._cowconv = connection.cowconv

    @classmethod
    def create(
        cls,
        agent: Agent,
        workspace: Workspace,
        *,
        conversation_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        callbacks: Iterable[EventCallback] = (),
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
        transport: httpx.BaseTransport | None = None,
    ) -> RemoteBackend:
        """Create the conversation on the server; attach if ``conversation_id`` exists there.

        ``transport`` (an ``httpx.BaseTransport``) carries the requests instead of
        HTTP, e.g. :class:`~cowconv.agent_server.InProcessTransport` to an app in
        this process or an ``httpx.MockTransport``; it stays the caller's to close.
        """
        # OpenHands' StartConversationRequest; the server keeps the credentials so the
        # conversation and its forks can run.
        body: dict[str, Any] = {
            "agent": agent_to_openhands(
                agent.model_dump(mode="json", context={"expose_secrets": True})
            ),
            "workspace": {"kind": "LocalWorkspace", "working_dir": workspace.working_dir},
            "max_iterations": max_iteration_per_run,
            "tags": dict(tags or {}),
        }
        if conversation_id is not None:
            body["conversation_id"] = conversation_id
        limit = {"max_iteration_per_run": max_iteration_per_run}
        connection = _Connection(workspace, transport)
        try:
            created = connection.learn(connection.client.post("/api/conversations", json=body))
            # 200: a conversation with that id exists (OpenHands' idempotent start); 409: an
            # older cowconv server says the same.
            if created.status_code in (200, 409) and conversation_id is not None:
                backend = cls._attach(
                    connection, conversation_id, agent=agent, callbacks=callbacks, **limit
                )
            else:
                chosen = raise_for_status(created).json()["id"]
                backend = cls(connection, chosen, agent=agent, callbacks=callbacks, **limit)
        finally:
            connection.release()  # the backend holds its own share
        return backend

    @classmethod
    def attach(
        cls,
        workspace: Workspace,
        conversation_id: str,
        *,
        callbacks: Iterable[EventCallback] = (),
        transport: httpx.BaseTransport | None = None,
    ) -> RemoteBackend:
        """The conversation ``conversation_id`` the server has (``RemoteError`` 404 if none)."""
        connection = _Connection(workspace, transport)
        try:
            connection.learn(
                raise_for_status(connection.client.get(f"/api/conversations/{conversation_id}"))
            )
            return cls._attach(connection, conversation_id, agent=None, callbacks=callbacks)
        finally:
            connection.release()

    @classmethod
    def _attach(
        cls,
        connection: _Connection,
        conversation_id: str,
        *,
        agent: Agent | None,
        callbacks: Iterable[EventCallback],
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
    ) -> RemoteBackend:
        backend = cls(
            connection,
            conversation_id,
            agent=agent,
            callbacks=callbacks,
            max_iteration_per_run=max_iteration_per_run,
        )
        try:
            served = backend.snapshot(as_served=True)  # fails now if the server has no such id
            if agent is not None and _without_key(served.agent) != _without_key(agent):
                raise remote_error_class(ConversationConflictError)(
                    409,
                    f"conversation {conversation_id!r} on {connection.workspace.host} runs another "
                    f"agent ({served.agent.llm.model!r}, {len(served.agent.tools)} tools) than "
                    f"the one given ({agent.llm.model!r}, {len(agent.tools)} tools); attach "
                    "without an agent (RemoteConversation.attach), or fork it with yours",
                )
        except BaseException:
            backend.close()
            raise
        return backend

    # -- reading ---------------------------------------------------------------

    @property
    def id(self) -> str:
        """The conversation id (its text)."""
        return self._id

    @property
    def workspace(self) -> Workspace:
        """The workspace: the server's URL and the working directory there."""
        return self._connection.workspace

    def _path(self, suffix: str = "") -> str:
        return f"/api/conversations/{self._id}{suffix}"

    def events(self, *, offset: int, limit: int) -> list[Event]:
        """Events ``offset`` to ``offset + limit`` of the history (one request to cowconv)."""
        if not self._cowconv:
            return list(self._openhands_events()[offset : offset + limit])
        response = self._client.get(
            self._path("/events"), params={"offset": offset, "limit": limit}
        )
        page = raise_for_status(response).json()
        return [Event.model_validate(item) for item in page["items"]]

    def snapshot(self, *, as_served: bool = False) -> ConversationState:
        """The conversation as the server holds it now (one request; events load lazily).

        The agent is the one this client gave (with its API key, which the
        server shows redacted), unless ``as_served``.
        """
        if not self._cowconv:
            return self._openhands_snapshot(as_served=as_served)
        with self._events_lock:
            known = self._events
        params: dict[str, Any] = {"known": len(known)}
        if known:
            last = known.last
            assert last is not None
            params["last"] = last.id
        response = raise_for_status(self._client.get(self._path("/state"), params=params))
        body = response.json()
        state = ConversationState.model_validate(body["state"])
        ids_from, event_ids = body["ids_from"], body["event_ids"]
        events = known if ids_from == len(known) else EventLog()
        if event_ids:
            chunk = RemoteEvents(self, ids_from, len(event_ids))
            events = events.extend_sealed(chunk, event_ids)
        with self._events_lock:
            if len(events) > len(self._events):
                self._events = events
        changes: dict[str, Any] = {"events": events, "workspace": self.workspace}
        if self._agent is not None and not as_served:
            changes["agent"] = self._agent  # the server shows the api key redacted
        return state._replace(**changes)

    def _openhands_events(self) -> EventLog:
        """Every event, through OpenHands' ``/events/search`` (kinds cowconv lacks left out)."""
        events: list[Event] = []
        page_id: str | None = None
        while True:
            params: dict[str, Any] = {"limit": _SEARCH_PAGE}
            if page_id is not None:
                params["page_id"] = page_id
            response = self._client.get(self._path("/events/search"), params=params)
            page = raise_for_status(response).json()
            for item in page["items"]:
                data = event_from_openhands(item)
                if data is not None:
                    events.append(Event.model_validate(data))
            page_id = page.get("next_page_id")
            if not page_id:
                return EventLog(events)

    def _openhands_snapshot(self, *, as_served: bool) -> ConversationState:
        info = raise_for_status(self._client.get(self._path())).json()
        agent = self._agent
        if agent is None or as_served:
            agent = Agent.model_validate(agent_from_openhands(info["agent"]))
        tags = dict(info.get("tags") or {})
        if info.get("title") is not None:
            tags["title"] = info["title"]
        events = _active_branch(self._openhands_events(), info)
        with self._events_lock:
            self._events = events
        fields = {
            key: info[key]
            for key in (
                "execution_status",
                "created_at",
                "updated_at",
                "forked_from_conversation_id",
                "forked_from_event_id",
            )
            if info.get(key) is not None
        }
        return ConversationState(
            id=info["id"],
            agent=agent,
            workspace=self.workspace,
            branch=events,
            tags=tags,
            activated_knowledge_skills=tuple(info.get("activated_knowledge_skills") or ()),
            **fields,
        )

    # -- changing ---------------------------------------------------------------

    def commit(self, change: Change) -> None:
        """Send a named change to the server (other changes are not supported remotely)."""
        if not self._cowconv and isinstance(change, SetTag):
            self._set_openhands_tag(change)
            return
        route = CHANGE_ROUTES.get(type(change))
        if route is None or (not self._cowconv and not isinstance(change, NavigateTo)):
            raise NotImplementedError(
                f"{change!r} is not supported on an agent server: a remote conversation "
                "changes through its methods (append_event, set_tag, update_agent_state, "
                "activate_skill, navigate_to, run; on an OpenHands agent server: set_tag, "
                "navigate_to, run)"
            )
        if isinstance(change, AppendEvent):
            # The server must store what was given, not what its JSON turned NaN into.
            check_storable_event(change.event)
        try:
            request = self._client.build_request(
                route.method, self._path(route.path), json=route.body(change)
            )
        except (ValueError, UnicodeError) as error:  # NaN, a lone surrogate: no JSON for it
            raise InvalidValueError(f"{change!r} cannot be sent as JSON: {error}") from None
        raise_for_status(self._client.send(request))
        if isinstance(change, AppendEvent):
            self._deliver(change.event, sent=True)

    def _deliver(self, event: Event, *, sent: bool = False, streamed: bool = False) -> None:
        """Hand ``event`` to the callbacks in order, once (see ``_unnotified``)."""
        if not self._callbacks:
            return
        with self._notify_lock:
            if sent and self._following:
                # run() follows the stream: the event is heard there, where the server put it.
                self._held[event.id] = event
                return
            if streamed:
                self._held.pop(event.id, None)
            self._unnotified.append(event)
            if self._notifying:
                return  # the delivery going on will hand it over after the current event
            self._notifying = True
        try:
            while True:
                with self._notify_lock:
                    if not self._unnotified:
                        self._notifying = False
                        return
                    current = self._unnotified.popleft()
                notify(self._callbacks, current)
        except BaseException:
            with self._notify_lock:
                self._notifying = False
            raise

    def _set_openhands_tag(self, change: SetTag) -> None:
        # OpenHands' PATCH sets the title, and replaces the tags with those given.
        if change.key == "title" and change.value is not None:
            body: dict[str, Any] = {"title": change.value}
        else:
            info = raise_for_status(self._client.get(self._path())).json()
            tags = {k: v for k, v in (info.get("tags") or {}).items() if k != change.key}
            if change.value is not None:
                tags[change.key] = change.value
            body = {"tags": tags}
        raise_for_status(self._client.patch(self._path(), json=body))

    def send_message(self, text: str) -> MessageEvent:
        """Send a user message (OpenHands' ``POST /events``); the server records the system
        prompt before it if needed.

        The callbacks get the prompt (if the server recorded one) and then the message.
        """
        before = None if self._cowconv else len(self._openhands_events())
        body = {"role": "user", "content": [{"type": "text", "text": text}], "run": False}
        response = raise_for_status(self._client.post(self._path("/events"), json=body))
        if not self._cowconv:  # OpenHands answers {"success": true}: read what it recorded
            assert before is not None
            new = list(self._openhands_events()[before:])
            sent = [e for e in new if isinstance(e, MessageEvent) and e.source == "user"]
            if not sent:
                raise RemoteError(0, "the server recorded no user message")
            for event in new[: new.index(sent[-1]) + 1]:
                notify(self._callbacks, event)
            return sent[-1]
        event = Event.model_validate(response.json()["event"])
        assert isinstance(event, MessageEvent)
        if self._callbacks:
            prompt_at = response.headers.get(SYSTEM_PROMPT_AT_HEADER)
            if prompt_at is not None:
                for prompt in self.events(offset=int(prompt_at), limit=1):
                    self._deliver(prompt, sent=True)
            self._deliver(event, sent=True)
        return event

    def fork(self, spec: ForkSpec, callbacks: Iterable[EventCallback]) -> RemoteBackend:
        """Fork on the server (O(1) there); the fork shares this connection."""
        if spec.agent is not None:
            raise NotImplementedError(
                "fork(agent=...) is not supported on an agent server: a remote fork keeps the "
                "agent the server manages; to fork with another agent, fork a local "
                "Conversation"
            )
        # OpenHands' ForkConversationRequest: title its own key, nothing sent that is unset.
        body: dict[str, Any] = {"reset_metrics": spec.reset_metrics}
        if spec.conversation_id is not None:
            body["id"] = id_text(spec.conversation_id)
        title = spec.title if spec.title is not None else spec.tags.get("title")
        if title is not None:
            body["title"] = title
        tags = {key: value for key, value in spec.tags.items() if key != "title"}
        if tags:
            body["tags"] = tags
        if spec.from_event_id is not None:
            body["from_event_id"] = spec.from_event_id
        info = raise_for_status(self._client.post(self._path("/fork"), json=body)).json()
        return RemoteBackend(
            self._connection,
            info["id"],
            agent=self._agent,
            callbacks=callbacks,
            max_iteration_per_run=self.max_iteration_per_run,
        )

    # -- running ---------------------------------------------------------------

    def run(self) -> None:
        """Run the agent on the server; blocks until the run ends.

        It follows the server's event stream (no polling) and hands every
        new event to the callbacks. If a run is already going (started
        elsewhere), it waits for that one.
        """
        if not self._cowconv:
            self._run_on_openhands()
            return
        response = self._client.post(self._path("/run"))
        if response.status_code == 409:
            start = len(self.snapshot().branch)
        else:
            counted = raise_for_status(response).json().get("event_count")
            start = counted if isinstance(counted, int) else len(self.snapshot().branch)
        with self._notify_lock:
            self._following += 1
        try:
            self._follow_to_the_end(start)
        finally:
            with self._notify_lock:
                self._following -= 1
                left = [] if self._following else list(self._held.values())
                if not self._following:
                    self._held.clear()
            for event in left:  # recorded after the run's stream ended: heard now
                self._deliver(event)

    def _follow_to_the_end(self, start: int) -> None:
        for _attempt in range(_RECONNECTS):
            try:
                start, finished = self._follow(start)
            except httpx.TransportError:
                continue
            except RemoteError as error:
                if error.status_code != 0:  # 0: the server could not be reached; try again
                    raise
                continue
            if finished:
                return
        raise RemoteError(0, f"lost the event stream of conversation {self._id} repeatedly")

    def _follow(self, cursor: int) -> tuple[int, bool]:
        params: dict[str, str | int] = {"offset": cursor, "until_idle": "true"}
        running = True
        with httpx_sse.connect_sse(
            self._client,
            "GET",
            self._path("/events/stream"),
            params=params,
            timeout=_STREAM_TIMEOUT,
        ) as source:
            raise_for_status(source.response)
            for message in source.iter_sse():
                if message.event == "event":
                    self._deliver(Event.model_validate_json(message.data), streamed=True)
                    cursor += 1
                elif message.event == "status":
                    running = bool(message.json().get("running", True))
        # The server ends an until_idle stream only after a status with running=false.
        return cursor, not running

    def _socket_url(self) -> str:
        host = self.workspace.host
        assert host is not None
        parts = urlsplit(host.rstrip("/"))
        scheme = "wss" if parts.scheme == "https" else "ws"
        return f"{scheme}://{parts.netloc}{parts.path}/sockets/events/{self._id}"

    def _run_on_openhands(self) -> None:
        """Run on an OpenHands agent server: follow its events WebSocket until the run ends.

        The socket is open (and subscribed: the server's first full-state
        update) before the run starts, so no event is missed; the run has
        ended at the first full-state update after it that is not
        ``running``, or at a per-field ``error``/``stuck`` status.
        """
        with ws_connect(self._socket_url(), open_timeout=_TIMEOUT.connect, max_size=None) as socket:
            if self.workspace.api_key is not None:
                key = self.workspace.api_key.get_secret_value()
                socket.send(json.dumps({"type": "auth", "session_api_key": key}))
            while not _is_state_update(json.loads(socket.recv(timeout=_SOCKET_TIMEOUT))):
                pass
            response = self._client.post(self._path("/run"))
            if response.status_code != 409:
                raise_for_status(response)
            while True:
                try:
                    message = json.loads(socket.recv(timeout=_SOCKET_TIMEOUT))
                except TimeoutError:
                    status = raise_for_status(self._client.get(self._path())).json()
                    if status.get("execution_status") != "running":
                        return  # ended while the socket was quiet
                    continue
                if _is_state_update(message):
                    value = message.get("value")
                    if message.get("key") == "full_state" and isinstance(value, dict):
                        if value.get("execution_status") != "running":
                            return
                    elif message.get("key") == "execution_status" and value in ("error", "stuck"):
                        return
                    continue
                data = event_from_openhands(message)
                if data is not None:
                    notify(self._callbacks, Event.model_validate(data))

    def pause(self) -> None:
        """Ask the server to pause the run after its current step (returns at once)."""
        raise_for_status(self._client.post(self._path("/pause")))

    def interrupt(self) -> None:
        """Ask the server to end the run now (returns at once)."""
        raise_for_status(self._client.post(self._path("/interrupt")))

    def close(self) -> None:
        """Let go of the connection (closed with its last user); the conversation stays."""
        if not self._closed:
            self._closed = True
            self._connection.release()

    def __repr__(self) -> str:
        return f"<RemoteBackend {self._id} at {self.workspace.host}>"
