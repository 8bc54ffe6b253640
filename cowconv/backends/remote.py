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

import bisect
import collections
import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, overload
from urllib.parse import quote, urlsplit

import httpx
import httpx_sse
from pydantic import BaseModel, ValidationError
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from cowconv._exceptions import (
    ConversationConflictError,
    ConversationRunError,
    CowconvError,
    InvalidTypeError,
    InvalidValueError,
    LLMError,
    RemoteError,
    WebSocketConnectionError,
    remote_error_class,
)
from cowconv.backends.wire import (
    CHANGE_ROUTES,
    SERVER_HEADER,
    SYSTEM_PROMPT_AT_HEADER,
    agent_from_openhands,
    agent_to_openhands,
    event_from_openhands,
)
from cowconv.core.agent import Agent
from cowconv.core.changes import AppendEvent, Change, NavigateTo, SetTag
from cowconv.core.events import (
    ROOT_PARENT_ID,
    ConversationStateUpdateEvent,
    Event,
    Message,
    MessageEvent,
    TextContent,
    run_failure,
)
from cowconv.core.frozen import decode_json
from cowconv.core.history import EventLog, EventSequence
from cowconv.core.ids import id_text, new_uuid, public_id
from cowconv.core.llm import LLM
from cowconv.core.state import (
    DEFAULT_MAX_ITERATION_PER_RUN,
    ConversationInfo,
    ConversationState,
    ExecutionStatus,
)
from cowconv.core.storable import check_storable_event
from cowconv.core.workspace import RemoteWorkspace, Workspace
from cowconv.ports import EventCallback, ForkSpec, notify

__all__ = [
    "CONVERSATIONS_PATH",
    "FULL_STATE_KEY",
    "ConversationStateUpdateEvent",
    "RemoteBackend",
    "RemoteEvents",
    "RemoteEventsList",
    "SocketCallback",
    "WebSocketCallbackClient",
    "generate_conversation_title",
    "raise_for_status",
    "read_info",
    "send_request",
]

logger = logging.getLogger("cowconv.remote")

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


# -- OpenHands' client surface: requests, the events socket, the events cache -----------------
# What OpenHands' RemoteConversation is built from, under OpenHands' names, so that code
# written for it (and its tests, which replace these names) runs against cowconv. The remote
# backend uses them whenever the server is not cowconv's (see _Connection.cowconv).

CONVERSATIONS_PATH = "/api/conversations"
"""Where OpenHands' agent-server protocol keeps conversations."""

FULL_STATE_KEY = "full_state"
"""The ``key`` of a :class:`ConversationStateUpdateEvent` carrying the whole conversation info."""

_FATAL_CLOSE_CODES = frozenset({4001, 4004})  # the server refused the key / has no such id


_SHOWN_CHARACTERS = 1_000  # of an error answer that is not JSON, in the error's message


def _shown(text: str) -> str:
    """``text`` for an error message: at most its first 1,000 characters, saying how many more."""
    if len(text) <= _SHOWN_CHARACTERS:
        return text
    return f"{text[:_SHOWN_CHARACTERS]}... ({len(text) - _SHOWN_CHARACTERS:,} more characters)"


def _status_error_class(base: type[RemoteError]) -> type[RemoteError]:
    made = _HTTP_ERRORS.get(base)
    if made is None:
        made = type(
            base.__name__,
            (base, httpx.HTTPStatusError),
            {"__module__": base.__module__, "__doc__": base.__doc__},
        )
        made = _HTTP_ERRORS.setdefault(base, made)
    return made


_HTTP_ERRORS: dict[type[RemoteError], type[RemoteError]] = {}


def _status_error(response: Any, fallback: str) -> RemoteError:
    """The error for an answer with an error status: a :class:`~cowconv.RemoteError` (and the
    cowconv error the server named) that is also an ``httpx.HTTPStatusError``."""
    name: str | None = None
    detail: Any = fallback
    if isinstance(response, httpx.Response):
        response.read()
        detail = _shown(response.text)
        try:
            body = decode_json(response.text)
        except ValueError:
            body = None
        if isinstance(body, dict):
            detail = body.get("detail", detail)
            error_name = body.get("error")
            name = error_name if isinstance(error_name, str) else None
    if isinstance(detail, list):  # validation errors: one message per bad field
        detail = "; ".join(
            f"{'.'.join(str(part) for part in item.get('loc', ()))}: {item.get('msg')}"
            for item in detail
            if isinstance(item, dict)
        )
    status = getattr(response, "status_code", 0)
    error = _status_error_class(remote_error_class(name))(
        status if isinstance(status, int) else 0, str(detail)
    )
    error.request = getattr(response, "request", None)  # type: ignore[attr-defined]
    error.response = response  # type: ignore[attr-defined]
    return error


def _segment(conversation_id: object) -> str:
    """An id as one segment of a URL path: percent-encoded, so that an id a server answered
    (any text) never breaks the URL (a control character made httpx raise InvalidURL)."""
    return quote(str(conversation_id), safe="")


def answer_json(response: Any) -> Any:
    """The JSON of a server's answer: a response, an event of the event stream, or any object
    answering ``.json()`` as an ``httpx.Response`` does.

    A real response's bytes are decoded by :func:`~cowconv.core.frozen.decode_json`: an answer
    that is not JSON, or is nested deeper than 512 levels, is a :class:`~cowconv.RemoteError`
    saying why (``json.loads``, which ``response.json()`` calls, would recurse down to the
    interpreter's limit on it). Anything else that stands for a response (a test double built
    the way OpenHands' SDK's tests build one, with ``.json()`` returning the body, or a
    response-like object from a client of the user's own) is read through its ``.json()``, as
    OpenHands' client reads every answer.

    >>> import httpx
    >>> answer_json(httpx.Response(200, json={"id": "c1"}))
    {'id': 'c1'}
    >>> try:
    ...     answer_json(httpx.Response(200, text="[" * 100_000 + "]" * 100_000))
    ... except RemoteError as error:
    ...     print(error)
    agent server answered 200: not JSON (JSON nested deeper than 512 levels)
    >>> from unittest.mock import Mock
    >>> double = Mock()
    >>> double.json.return_value = {"id": "c2"}
    >>> answer_json(double)
    {'id': 'c2'}
    """
    status = getattr(response, "status_code", 200)
    if isinstance(response, httpx_sse.ServerSentEvent):
        text: Any = response.data
    elif isinstance(response, httpx.Response) and isinstance(content := response.read(), bytes):
        text = content
    else:
        reader = getattr(response, "json", None)
        if not callable(reader):
            raise RemoteError(
                status if isinstance(status, int) else 200,
                f"not an answer: {type(response).__name__} has no json()",
            )
        try:
            return reader()
        except (ValueError, RecursionError) as error:
            raise RemoteError(
                status if isinstance(status, int) else 200, f"not JSON ({error})"
            ) from None
    try:
        return decode_json(text)
    except ValueError as error:
        raise RemoteError(status, f"not JSON ({error})") from None


@contextlib.contextmanager
def reading(response: httpx.Response) -> Iterator[None]:
    """Read the server's answer ``response`` in the ``with`` block: an answer not shaped as the
    protocol says (a key missing, a value of the wrong type, an event that does not validate)
    is a :class:`~cowconv.RemoteError` saying so, with the answer's status.

    >>> import httpx
    >>> answer = httpx.Response(200, json={"next_page_id": None})
    >>> try:
    ...     with reading(answer):
    ...         answer_json(answer)["items"]
    ... except RemoteError as error:
    ...     print(error)
    agent server answered 200: an answer not in the protocol's shape (KeyError: 'items')
    """
    try:
        yield
    except CowconvError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError) as error:  # pydantic's too
        reason = f"{type(error).__name__}: {error}"
        raise RemoteError(
            response.status_code, f"an answer not in the protocol's shape ({_shown(reason)})"
        ) from None


def send_request(
    client: Any,
    method: str,
    url: str,
    acceptable_status_codes: Iterable[int] = (),
    **kwargs: Any,
) -> Any:
    """``client.request(method, url, **kwargs)``, its answer checked as OpenHands' client does.

    An answer whose status is in ``acceptable_status_codes`` is returned as
    it is; any other error status raises the server's error as a
    :class:`~cowconv.RemoteError` that is also an ``httpx.HTTPStatusError``.

    >>> import httpx
    >>> from cowconv import ConversationNotFoundError
    >>> client = httpx.Client(base_url="http://server", transport=httpx.MockTransport(
    ...     lambda request: httpx.Response(404, json={"detail": "no conversation 'x'",
    ...                                               "error": "ConversationNotFoundError"})))
    >>> send_request(client, "GET", "/api/conversations/x", {404}).status_code
    404
    >>> try:
    ...     send_request(client, "GET", "/api/conversations/x")
    ... except ConversationNotFoundError as error:
    ...     print(error.status_code, isinstance(error, httpx.HTTPStatusError))
    404 True
    """
    response = client.request(method, url, **kwargs)
    if response.status_code in set(acceptable_status_codes):
        return response
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as error:
        if isinstance(error, RemoteError):
            raise
        raise _status_error(error.response, str(error)) from None
    return response


def _history_event(data: Any) -> Event | None:
    """A history event from the JSON a server sent; ``None`` for a kind cowconv lacks, and for
    an event it cannot read (left out with a warning that says why)."""
    try:
        converted = event_from_openhands(data)
        return None if converted is None else Event.model_validate(converted)
    except ValueError as error:  # InvalidValueError, pydantic's ValidationError
        named = data.get("id") if isinstance(data, Mapping) else None
        logger.warning("left out an event cowconv cannot read (%s): %s", named, error)
        return None


def _socket_event(data: Any) -> Event | ConversationStateUpdateEvent | None:
    if isinstance(data, Mapping) and data.get("kind") == "ConversationStateUpdateEvent":
        return ConversationStateUpdateEvent.model_validate(
            {key: data[key] for key in ("id", "timestamp", "key", "value") if key in data}
        )
    return _history_event(data)


SocketCallback = Callable[[Any], None]
"""What :class:`WebSocketCallbackClient` hands each message to: a history
:class:`~cowconv.Event` or a :class:`ConversationStateUpdateEvent`."""


class WebSocketCallbackClient:
    """The agent server's events socket of one conversation, followed in a daemon thread.

    Each event the server sends (``/sockets/events/{id}``) goes to
    ``callback``. The socket reconnects after a failure (1 s, doubling to
    30 s between tries) until :meth:`stop`; the server refusing the key
    (close code 4001) or not knowing the conversation (4004) ends it. After
    a reconnection ``on_reconnect`` runs (to catch up on what was missed).
    :meth:`wait_until_ready` returns once the server has subscribed the
    socket (its first :class:`ConversationStateUpdateEvent`).

    >>> from cowconv import LLM, Agent, Conversation, Workspace
    >>> from cowconv.agent_server import BackgroundServer, create_app
    >>> with BackgroundServer(create_app()) as server:
    ...     conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")),
    ...                                 workspace=Workspace(host=server.url, working_dir="."))
    ...     heard = []
    ...     socket = WebSocketCallbackClient(server.url, str(conversation.id), heard.append)
    ...     socket.start()
    ...     ready = socket.wait_until_ready(timeout=30)
    ...     socket.stop(); conversation.close()
    >>> ready, type(heard[0]).__name__
    (True, 'ConversationStateUpdateEvent')
    """

    def __init__(
        self,
        host: str,
        conversation_id: str,
        callback: SocketCallback,
        api_key: str | None = None,
        on_reconnect: Callable[[], object] | None = None,
    ) -> None:
        self.host = host
        self.conversation_id = conversation_id
        self.callback = callback
        self.api_key = api_key
        self.on_reconnect = on_reconnect
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        """The socket's URL (``ws://`` or ``wss://``, beside the HTTP one)."""
        parts = urlsplit(self.host.rstrip("/"))
        scheme = "wss" if parts.scheme == "https" else "ws"
        return f"{scheme}://{parts.netloc}{parts.path}/sockets/events/{self.conversation_id}"

    def start(self) -> None:
        """Connect in a daemon thread (once; a started client is left as it is)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._follow, name=f"cowconv-socket-{self.conversation_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Close the socket and end the thread (waits up to 5 s for it)."""
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        thread.join(timeout=5)
        self._thread = None

    def wait_until_ready(self, timeout: float | None = None) -> bool:
        """Whether the server subscribed the socket within ``timeout`` seconds (``None``: no
        limit); ``False`` at once if the client was stopped."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stop.is_set():
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                return False
            if self._ready.wait(left):
                return True
        return self._ready.is_set()

    def _follow(self) -> None:
        delay = 1.0
        connected_before = False
        while not self._stop.is_set():
            try:
                with ws_connect(self.url, open_timeout=30, max_size=None) as socket:
                    if self.api_key:
                        socket.send(json.dumps({"type": "auth", "session_api_key": self.api_key}))
                    delay = 1.0
                    subscribed = False
                    while not self._stop.is_set():
                        try:
                            raw = socket.recv(timeout=0.2)
                        except TimeoutError:
                            continue
                        event = self._parse(raw)
                        if event is None:
                            continue
                        if isinstance(event, ConversationStateUpdateEvent) and not subscribed:
                            subscribed = True
                            if connected_before:
                                self._reconnected()
                            connected_before = True
                            self._ready.set()
                        try:
                            self.callback(event)
                        except Exception:
                            logger.exception("socket callback failed on event %s", event.id)
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd is not None else None
                if code in _FATAL_CLOSE_CODES:
                    logger.warning("the server closed the events socket (%s)", code)
                    self._stop.set()
                    return
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)
            except Exception:
                logger.debug("events socket failed; retrying", exc_info=True)
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)

    @staticmethod
    def _parse(raw: str | bytes) -> Event | ConversationStateUpdateEvent | None:
        try:
            return _socket_event(decode_json(raw if isinstance(raw, str) else raw.decode()))
        except (ValueError, ValidationError):
            logger.warning("left out a socket message cowconv cannot read")
            return None

    def _reconnected(self) -> None:
        if self.on_reconnect is None:
            return
        try:
            self.on_reconnect()
        except Exception:
            logger.exception("the reconnection callback failed")


class RemoteEventsList(Sequence[Event]):
    """A conversation's events on an agent server, cached here (OpenHands' ``RemoteEventsList``).

    Made from the server's ``/events/search`` (every page, at once); then
    kept current by :meth:`add_event` (the events socket's callback,
    :meth:`create_default_callback`) and :meth:`reconcile`. Events are kept
    in timestamp order (equal timestamps in the order they came), once per
    id. Kinds cowconv lacks are left out.

    >>> import httpx
    >>> from cowconv import MessageEvent
    >>> def server(request):
    ...     event = MessageEvent(id="e1", timestamp="2026-01-01T10:00:00", source="user",
    ...                          role="user", content="hi")
    ...     return httpx.Response(200, json={"items": [event.model_dump(mode="json")],
    ...                                      "next_page_id": None})
    >>> client = httpx.Client(base_url="http://server", transport=httpx.MockTransport(server))
    >>> events = RemoteEventsList(client, "c1")
    >>> late = MessageEvent(id="e0", timestamp="2026-01-01T09:00:00", source="user",
    ...                     role="user", content="earlier")
    >>> events.add_event(late); events.add_event(late)
    >>> [event.id for event in events]
    ['e0', 'e1']
    """

    def __init__(
        self, client: Any, conversation_id: str, events_base_path: str = CONVERSATIONS_PATH
    ) -> None:
        self._client = client
        self._conversation_id = conversation_id
        self._events_base_path = events_base_path
        self._lock = threading.RLock()
        self._events: list[Event] = []
        self._ids: set[str] = set()
        for event in self._fetch_all():
            self._insert(event)

    def _fetch_all(self) -> list[Event]:
        events: list[Event] = []
        page_id: str | None = None
        seen: set[str] = set()  # a page id the server names again would page forever
        url = f"{self._events_base_path}/{_segment(self._conversation_id)}/events/search"
        while True:
            params: dict[str, Any] = {"limit": _SEARCH_PAGE}
            if page_id:
                params["page_id"] = page_id
            answer = send_request(self._client, "GET", url, params=params)
            with reading(answer):
                page = answer_json(answer)
                for item in page["items"]:
                    event = _history_event(item)
                    if event is not None:
                        events.append(event)
                page_id = page.get("next_page_id")
            if not page_id:
                return events
            if not isinstance(page_id, str) or page_id in seen:
                raise RemoteError(
                    answer.status_code,
                    f"an answer not in the protocol's shape (next_page_id {page_id!r} is not "
                    "a page not yet read)",
                )
            seen.add(page_id)

    def _insert(self, event: Event) -> bool:
        # Caller holds the lock. The socket may deliver events out of order: keep time order.
        if event.id in self._ids:
            return False
        position = bisect.bisect_right(self._events, event.timestamp, key=_timestamp)
        self._events.insert(position, event)
        self._ids.add(event.id)
        return True

    def add_event(self, event: Event) -> None:
        """Add ``event`` where its timestamp puts it, unless an event with its id is here."""
        with self._lock:
            self._insert(event)

    def append(self, event: Event) -> int:
        """:meth:`add_event`, returning the length minus one (OpenHands' ``EventLog`` shape)."""
        self.add_event(event)
        return len(self._events) - 1

    def reconcile(self) -> int:
        """Fetch every event again and add those missing here; returns how many were added.

        A server that cannot be reached leaves the cache as it is (0).
        """
        try:
            fetched = self._fetch_all()
        except (RemoteError, httpx.HTTPError) as error:
            logger.warning("could not fetch the events of %s: %s", self._conversation_id, error)
            return 0
        with self._lock:
            return sum(self._insert(event) for event in fetched)

    def create_default_callback(self) -> Callable[[Any], None]:
        """A socket callback that adds each history event here (state updates are not events)."""

        def add(event: Any) -> None:
            if isinstance(event, Event) and not isinstance(event, ConversationStateUpdateEvent):
                self.add_event(event)

        return add

    def __len__(self) -> int:
        return len(self._events)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        with self._lock:
            return self._events[index]

    def __iter__(self) -> Iterator[Event]:
        with self._lock:
            return iter(list(self._events))


def _timestamp(event: Event) -> str:
    return str(event.timestamp)


_TITLE_PROMPT = (
    "Write a short title for a conversation that starts with the user message below. "
    "Answer with the title only: no quotes, at most {max_length} characters."
)


def generate_conversation_title(
    events: Iterable[Event], llm: LLM | None = None, max_length: int = 50
) -> str:
    """A title for a conversation from its first user message (OpenHands' SDK's helper).

    ``llm`` writes it; without one, or when the call fails, the message itself,
    cut to ``max_length`` characters with an ellipsis, is the title.
    :class:`~cowconv.InvalidValueError` if there is no user message.

    >>> from cowconv import MessageEvent
    >>> first = MessageEvent(source="user", role="user", content="Analyse the Q3 sales report")
    >>> generate_conversation_title([first], max_length=12)
    'Analyse t...'
    """
    text = next(
        (
            event.text
            for event in events
            if isinstance(event, MessageEvent) and event.source == "user" and event.text.strip()
        ),
        None,
    )
    if text is None:
        raise InvalidValueError("the conversation has no user message to take a title from")
    text = " ".join(text.split())
    if llm is not None:
        prompt = _TITLE_PROMPT.format(max_length=max_length)
        try:
            answer = llm.completion(
                [{"role": "system", "content": prompt}, {"role": "user", "content": text}]
            )
        except LLMError as error:
            logger.warning("the LLM wrote no title (%s); the message is the title", error)
        else:
            title = " ".join(answer.content.split()).strip("\"'")
            if title:
                text = title
    return text if len(text) <= max_length else text[: max(max_length - 3, 0)] + "..."


_STATUSES = frozenset(status.value for status in ExecutionStatus)
# How long REST must say a run ended before a client on an OpenHands server takes its word
# without the socket's post-run state update (seconds).
_REST_ENDED_AFTER = 30.0
# How long send_message waits for the socket to bring the recorded message before it reads
# the history over REST instead (seconds).
_ECHO_WAIT = 5.0
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
        body = decode_json(response.text)
        detail = body.get("detail", _shown(response.text))
        name = body.get("error")
    except (ValueError, AttributeError):
        detail = _shown(response.text)
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


def _without_key(agent: Agent) -> dict[str, Any]:
    # The server never shows an API key: agents are compared on everything else.
    return agent.model_dump(mode="json", exclude={"llm": {"api_key"}})


class _Connection:
    """One pooled HTTP client, shared by a conversation and the forks made from it."""

    def __init__(self, workspace: Workspace, transport: httpx.BaseTransport | None) -> None:
        assert workspace.host is not None
        self.workspace = workspace
        # A client assigned to an OpenHands-style RemoteWorkspace (workspace._client = ...) is
        # used as it is and stays the workspace's: closing conversations leaves it open.
        given = workspace._client if isinstance(workspace, RemoteWorkspace) else None
        self.transport = transport
        self._owned = transport is not None or given is None
        if self._owned:
            self.client: Any = workspace.new_client(timeout=_TIMEOUT, transport=transport)
        else:
            self.client = given
        self._users = 1  # the creator's share, released when it is done with it
        self._lock = threading.Lock()
        self.cowconv = True
        """Whether the server is cowconv's (its answers carry ``X-Cowconv-Server``): then the
        client also uses cowconv's additions (``/state``, the event stream); against another
        OpenHands agent server it uses OpenHands' routes only."""

    def learn(self, response: httpx.Response) -> httpx.Response:
        """Note from an answer which server this is (see :attr:`cowconv`)."""
        # A test double of a response (even ``Mock(spec=httpx.Response)``) has no real headers.
        headers = getattr(response, "headers", None)
        self.cowconv = isinstance(headers, httpx.Headers) and SERVER_HEADER in headers
        return response

    def acquire(self) -> _Connection:
        with self._lock:
            self._users += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last and self._owned:
            self.client.close()


class RemoteEvents(EventSequence):
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

    def _event_at(self, position: int) -> Event:
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
        self._own_workspace: Workspace | None = None  # a fork's own copy of the files
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
        # On an OpenHands agent server, as OpenHands' client: the events cached here, kept
        # current by the events socket; the conversation info as the socket last told it;
        # run() waits for the server's post-run state update (or polls).
        self._cache: RemoteEventsList | None = None
        self._socket: WebSocketCallbackClient | None = None
        self._info: dict[str, Any] | None = None
        self._info_lock = threading.Lock()
        self._terminal: queue.Queue[str] = queue.Queue()
        self._armed = threading.Event()
        self._run_moved = threading.Event()  # since run() began: "running", or a new event
        self._heard: set[str] = set()  # events handed to the callbacks
        self._socket_live = False  # the socket confirmed its subscription
        self._user_messages: list[MessageEvent] = []  # user messages the socket brought
        self._arrivals = threading.Condition()
        if not self._cowconv:
            try:
                self._open_socket()
            except BaseException:
                self._closed = True
                self._connection.release()
                raise

    # -- OpenHands' client: the events socket -----------------------------------

    def _open_socket(self) -> None:
        self._cache = RemoteEventsList(self._client, self._id)
        host = self.workspace.host
        assert host is not None
        key = self.workspace.api_key
        socket = WebSocketCallbackClient(
            host=host,
            conversation_id=self._id,
            callback=self._on_socket,
            api_key=None if key is None else key.get_secret_value(),
            on_reconnect=self._catch_up,
        )
        self._socket = socket
        socket.start()
        # OpenHands' client's settings, under its names.
        timeout = float(os.environ.get("OPENHANDS_REMOTE_WS_READY_TIMEOUT", "30"))
        ready = socket.wait_until_ready(timeout=timeout)
        self._socket_live = ready is True
        if not ready:
            required = os.environ.get("OPENHANDS_REMOTE_WS_READY_REQUIRED", "true")
            if required.lower() in ("0", "false", "no"):
                logger.warning(
                    "the events socket of %s was not ready within %s s; going on without it",
                    self._id,
                    timeout,
                )
            else:
                self._socket = None
                try:
                    socket.stop()
                except Exception:
                    logger.debug("stopping the events socket failed", exc_info=True)
                raise WebSocketConnectionError(self._id, timeout)
        # Events recorded between the first fetch and the subscription.
        self._cache.reconcile()
        with self._notify_lock:
            self._heard.update(event.id for event in self._cache)

    def _on_socket(self, event: Any) -> None:
        if isinstance(event, ConversationStateUpdateEvent):
            self._note_update(event)
        elif isinstance(event, Event) and self._cache is not None:
            if event.id not in self._heard:
                self._run_moved.set()
            self._cache.add_event(event)
            self._hear([event])
            if isinstance(event, MessageEvent) and event.source == "user":
                with self._arrivals:
                    self._user_messages.append(event)
                    self._arrivals.notify_all()

    def receive_event(self, event: Event) -> None:
        """Take ``event`` as the events socket would bring it (OpenHands' ``add_event``).

        It joins this client's cache of an OpenHands server's events and goes
        to the callbacks; nothing is sent to the server. A client of cowconv's
        server reads every history from the server, so there it is an
        :class:`~cowconv.InvalidTypeError` (record events with ``append_event``).
        """
        if not isinstance(event, Event):
            raise InvalidTypeError(f"expected an Event, got {type(event).__name__}")
        if self._cache is None:
            raise InvalidTypeError(
                "only a client of OpenHands' agent server keeps a cache of received events; "
                "on cowconv's server record events with append_event"
            )
        self._on_socket(event)

    def _hear(self, events: Iterable[Event]) -> None:
        """Hand the callbacks those of ``events`` they have not had yet, in order."""
        with self._notify_lock:
            new = [event for event in events if event.id not in self._heard]
            self._heard.update(event.id for event in new)
            # Queued in the same step as marked: the socket's thread and this one both hand
            # events over in history order, so the callbacks hear them in that order.
            if not new or not self._callbacks:
                return
            self._unnotified.extend(new)
            if self._notifying:
                return
            self._notifying = True
        self._drain()

    def _catch_up(self) -> None:
        """After the socket reconnected: fetch what it missed, hand it to the callbacks."""
        if self._cache is not None:
            self._cache.reconcile()
            self._hear(list(self._cache))

    def update_info(self, update: ConversationStateUpdateEvent) -> None:
        """Keep ``update`` in the cached conversation info (OpenHands' ``update_state_from_event``).

        ``key`` :data:`FULL_STATE_KEY` updates every field its mapping holds,
        any other key sets that field. What :meth:`close` reports as the cost
        is read from it. Only the events socket's updates can end a run.
        """
        if not isinstance(update, ConversationStateUpdateEvent):
            raise InvalidTypeError(
                f"expected a ConversationStateUpdateEvent, got {type(update).__name__}"
            )
        value = update.value
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        with self._info_lock:
            info = {} if self._info is None else self._info
            if update.key == FULL_STATE_KEY:
                if isinstance(value, Mapping):
                    info.update(value)
            else:
                info[update.key] = value
            self._info = info

    def _note_update(self, update: ConversationStateUpdateEvent) -> None:
        self.update_info(update)
        # A per-field error or stuck ends a run at once; otherwise only a full update that
        # comes after the run moved does (a per-field "finished" may still be undone on the
        # server). The socket sends updates in order: one sent before the run started (after
        # a message, say) comes before the run's "running" and its first event, so a full
        # update read late, after run() began, cannot be taken for the end of the run.
        if update.key == "execution_status":
            if update.value == "running":
                self._run_moved.set()
            elif update.value in ("error", "stuck"):
                self._terminal.put(str(update.value))
        elif update.key == FULL_STATE_KEY and self._armed.is_set():
            value = update.value if isinstance(update.value, Mapping) else {}
            status = value.get("execution_status")
            if status == "running":
                self._run_moved.set()
            elif isinstance(status, str) and status in _STATUSES and self._run_moved.is_set():
                self._terminal.put(status)

    def _refresh_info(self) -> dict[str, Any]:
        info = answer_json(send_request(self._client, "GET", self._path()))
        if not isinstance(info, dict):
            raise RemoteError(0, f"the server sent no conversation info: {info!r}")
        with self._info_lock:
            # The answer sets the fields it carries; one only the socket brought (the "stats"
            # streamed after each LLM call, say) stays: it is the newest word on that field.
            self._info = {**(self._info or {}), **info}
        return info

    def request(
        self, method: str, suffix: str = "", acceptable: Iterable[int] = (), **kwargs: Any
    ) -> Any:
        """Send ``method`` to this conversation's path plus ``suffix`` (see :func:`send_request`).

        For OpenHands' routes the conversation methods name
        (``/secrets``, ``/confirmation_policy``, ``/ask_agent``, ...).
        """
        return send_request(self._client, method, self._path(suffix), acceptable, **kwargs)

    def request_json(self, method: str, suffix: str = "", **kwargs: Any) -> Any:
        """The JSON of :meth:`request`'s answer (see :func:`answer_json`)."""
        return answer_json(self.request(method, suffix, **kwargs))

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
        request_extras: Mapping[str, Any] | None = None,
    ) -> RemoteBackend:
        """Create the conversation on the server; attach if ``conversation_id`` exists there.

        As OpenHands' client: with a ``conversation_id``, ``GET`` it first and
        attach if the server has it (the agent must be the same, else
        :class:`~cowconv.ConversationConflictError`; another kind of agent is an
        :class:`~cowconv.InvalidValueError`), else create it with that id.

        ``transport`` (an ``httpx.BaseTransport``) carries the requests instead of
        HTTP, e.g. :class:`~cowconv.agent_server.InProcessTransport` to an app in
        this process or an ``httpx.MockTransport``; it stays the caller's to close.
        Without one, a client assigned to a :class:`~cowconv.RemoteWorkspace`'s
        ``_client`` (as code written for OpenHands' SDK does) carries them.
        ``request_extras`` are further fields of OpenHands' create request
        (``stuck_detection``, ``observability_tags``, ``user_id``, ...), sent as given.
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
        if workspace.snapshot_store is not None:  # cowconv's: the server records the files
            body["workspace"]["snapshot_store"] = workspace.snapshot_store
        if workspace.max_snapshot_file_size is not None:
            body["workspace"]["max_snapshot_file_size"] = workspace.max_snapshot_file_size
        body.update(request_extras or {})
        if conversation_id is not None:
            body["conversation_id"] = conversation_id
        limit = {"max_iteration_per_run": max_iteration_per_run}
        connection = _Connection(workspace, transport)
        client = connection.client
        try:
            if conversation_id is not None:
                # As OpenHands' client: a conversation the server has is attached to, not made.
                path = f"{CONVERSATIONS_PATH}/{_segment(conversation_id)}"
                found = connection.learn(send_request(client, "GET", path, {404}))
                if found.status_code != 404:
                    return cls._attach(
                        connection, conversation_id, answer_json(found), agent, callbacks, **limit
                    )
            created = connection.learn(
                send_request(client, "POST", CONVERSATIONS_PATH, {409}, json=body)
            )
            # Made by someone else since the GET: a cowconv server answers 200 (OpenHands'
            # idempotent start), an older one 409.
            if conversation_id is not None and (
                created.status_code == 409 or (connection.cowconv and created.status_code == 200)
            ):
                info = answer_json(
                    send_request(client, "GET", f"{CONVERSATIONS_PATH}/{_segment(conversation_id)}")
                )
                return cls._attach(connection, conversation_id, info, agent, callbacks, **limit)
            data = answer_json(created)
            chosen = (
                data.get("id") or data.get("conversation_id") if isinstance(data, dict) else None
            )
            if not isinstance(chosen, str) or not chosen:
                raise RemoteError(0, f"the server answered no conversation id: {data!r}")
            if isinstance(workspace, RemoteWorkspace):
                workspace.register_conversation(chosen)
            return cls(connection, chosen, agent=agent, callbacks=callbacks, **limit)
        finally:
            connection.release()  # the backend holds its own share

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
            path = f"{CONVERSATIONS_PATH}/{_segment(conversation_id)}"
            connection.learn(send_request(connection.client, "GET", path))
            backend = cls(connection, conversation_id, agent=None, callbacks=callbacks)
            if backend.speaks_cowconv:
                try:
                    backend.snapshot()  # the first snapshot (its events page in on first read)
                except BaseException:
                    backend.close()
                    raise
            return backend
        finally:
            connection.release()

    @classmethod
    def _attach(
        cls,
        connection: _Connection,
        conversation_id: str,
        info: Any,
        agent: Agent | None,
        callbacks: Iterable[EventCallback],
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
    ) -> RemoteBackend:
        served_json = info.get("agent") if isinstance(info, dict) else None
        served: Agent | None = None
        if agent is not None and isinstance(served_json, Mapping):
            kind = served_json.get("kind", "Agent")
            if kind != "Agent":
                raise InvalidValueError(
                    f"conversation {conversation_id!r} on {connection.workspace.host} was started "
                    f"with a different agent kind ({kind!r}); attach with the same kind of "
                    "agent, or without one (RemoteConversation.attach)"
                )
            if not connection.cowconv:
                served = Agent.model_validate(agent_from_openhands(served_json))
        backend = cls(
            connection,
            conversation_id,
            agent=agent,
            callbacks=callbacks,
            max_iteration_per_run=max_iteration_per_run,
        )
        try:
            if agent is not None and connection.cowconv:
                served = backend.snapshot(as_served=True).agent  # cowconv's own agent JSON
            if agent is not None and served is not None:
                if _without_key(served) != _without_key(agent):
                    raise remote_error_class(ConversationConflictError)(
                        409,
                        f"conversation {conversation_id!r} on {connection.workspace.host} runs "
                        f"another agent ({served.llm.model!r}, {len(served.tools)} tools) than "
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
        return self._own_workspace or self._connection.workspace

    @property
    def callbacks(self) -> tuple[EventCallback, ...]:
        """What each event is handed to, in order."""
        return self._callbacks

    @property
    def run_endings(self) -> queue.Queue[str]:
        """On an OpenHands agent server: the statuses the socket reported as ends of runs, not
        yet taken by a waiting ``run()`` (OpenHands' ``_terminal_status_queue``)."""
        return self._terminal

    @property
    def speaks_cowconv(self) -> bool:
        """Whether the server is cowconv's: then its additions (``/state``, the event stream)
        are used; on any other OpenHands agent server, OpenHands' routes and events socket."""
        return self._cowconv

    def _path(self, suffix: str = "") -> str:
        return f"{CONVERSATIONS_PATH}/{_segment(self._id)}{suffix}"

    def events(self, *, offset: int, limit: int) -> list[Event]:
        """Events ``offset`` to ``offset + limit`` of the history (one request to cowconv)."""
        if not self._cowconv:
            assert self._cache is not None
            return list(self._cache[offset : offset + limit])
        response = self._client.get(
            self._path("/events"), params={"offset": offset, "limit": limit}
        )
        with reading(response):
            page = answer_json(raise_for_status(response))
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
        with reading(response):
            body = answer_json(response)
            state = ConversationState.model_validate(body["state"])
            ids_from, event_ids = int(body["ids_from"]), list(body["event_ids"])
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

    def _openhands_snapshot(self, *, as_served: bool) -> ConversationState:
        info = self._refresh_info()
        agent = self._agent
        if agent is None or as_served:
            agent = Agent.model_validate(agent_from_openhands(info["agent"]))
        tags = dict(info.get("tags") or {})
        if info.get("title") is not None:
            tags["title"] = info["title"]
        assert self._cache is not None
        events = _active_branch(EventLog(list(self._cache)), info)
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
            id=self._id,
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
        if not self._cowconv and isinstance(change, NavigateTo):
            body = {"event_id": change.event_id}
            send_request(self._client, "POST", self._path("/navigate"), json=body)
            self._refresh_info()  # the server does not announce the new leaf on the socket
            return
        route = CHANGE_ROUTES.get(type(change))
        if route is None or not self._cowconv:
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
        self._drain()

    def _drain(self) -> None:
        # The caller set _notifying: hand over _unnotified until it is empty.
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
            info = self._refresh_info()
            tags = {k: v for k, v in (info.get("tags") or {}).items() if k != change.key}
            if change.value is not None:
                tags[change.key] = change.value
            body = {"tags": tags}
        send_request(self._client, "PATCH", self._path(), json=body)

    def send_message(self, text: str) -> MessageEvent:
        """Send a user message (OpenHands' ``POST /events``); the server records the system
        prompt before it if needed.

        The callbacks get the prompt (if the server recorded one) and then the message.
        """
        body = {"role": "user", "content": [{"type": "text", "text": text}], "run": False}
        if not self._cowconv:
            return self._send_openhands_message(body)
        response = raise_for_status(self._client.post(self._path("/events"), json=body))
        with reading(response):
            event = Event.model_validate(answer_json(response)["event"])
        if not isinstance(event, MessageEvent):
            raise RemoteError(
                response.status_code,
                f"an answer not in the protocol's shape (a {type(event).__name__} where "
                "the MessageEvent sent goes)",
            )
        if self._callbacks:
            headers = getattr(response, "headers", None)
            prompt_at = (
                headers.get(SYSTEM_PROMPT_AT_HEADER) if isinstance(headers, httpx.Headers) else None
            )
            if prompt_at is not None:
                for prompt in self.events(offset=int(prompt_at), limit=1):
                    self._deliver(prompt, sent=True)
            self._deliver(event, sent=True)
        return event

    def _send_openhands_message(self, body: dict[str, Any]) -> MessageEvent:
        # OpenHands answers {"success": true}; the events socket brings what it recorded (and
        # the system prompt before it, to the callbacks, in order). Wait a moment for that;
        # else read the history again, so the message is in the next snapshot either way.
        assert self._cache is not None
        text = body["content"][0]["text"]
        with self._arrivals:
            before = len(self._user_messages)

        def echoed() -> MessageEvent | None:
            return next((e for e in self._user_messages[before:] if e.text == text), None)

        known = {event.id for event in self._cache}
        send_request(self._client, "POST", self._path("/events"), json=body)
        if self._socket_live:
            with self._arrivals:
                self._arrivals.wait_for(lambda: echoed() is not None, timeout=_ECHO_WAIT)
                heard = echoed()
            if heard is not None:
                return heard
        self._cache.reconcile()
        new = [event for event in self._cache if event.id not in known]
        self._hear(new)
        sent = [e for e in new if isinstance(e, MessageEvent) and e.source == "user"]
        if sent:
            return sent[-1]
        # Not in the server's history yet: the message as sent (its event comes on the socket).
        return MessageEvent(
            source="user", llm_message=Message(role="user", content=[TextContent(text=text)])
        )

    def generate_title(self, llm: LLM | None = None, max_length: int = 50) -> str:
        """A title from the first user message, by ``llm`` (the agent's by default).

        On an OpenHands agent server the events are fetched again first, so a
        message just sent is seen; nothing is recorded.
        """
        if self._cache is not None:
            self._cache.reconcile()
            events: Sequence[Event] = list(self._cache)
        else:
            events = self.snapshot().events
        if llm is None:
            llm = self._agent.llm if self._agent is not None else self.snapshot().agent.llm
        return generate_conversation_title(events=events, llm=llm, max_length=max_length)

    def fork(self, spec: ForkSpec, callbacks: Iterable[EventCallback]) -> RemoteBackend:
        """Fork on the server (O(1) there); the fork shares this connection."""
        info = self.fork_on_server(spec)
        fork = RemoteBackend(
            self._connection,
            str(info["id"]),
            agent=self._agent if spec.agent is None else spec.agent,
            callbacks=callbacks,
            max_iteration_per_run=self.max_iteration_per_run,
        )
        shown = info.get("workspace")
        if spec.workspace is not None and isinstance(shown, dict):
            # Its own copy of the files, on the server: the directory the server answered.
            fork._own_workspace = self.workspace.model_copy(
                update={
                    "working_dir": str(shown.get("working_dir")),
                    "copied_from": tuple(shown.get("copied_from") or ()),
                }
            )
        return fork

    def fork_on_server(self, spec: ForkSpec) -> dict[str, Any]:
        """Ask the server for the fork (``POST /fork``); its answer, the fork's info.

        A conversation on an OpenHands agent server is forked as OpenHands' client does:
        a new conversation is made from this answer (its tags are the server's).
        ``spec.agent`` goes in the request to cowconv's server (its ``agent`` field); on
        OpenHands' server, which takes no agent when forking, see :meth:`fork_with_agent`.
        """
        if spec.agent is not None and not self._cowconv:
            return self.fork_with_agent(spec)
        # OpenHands' ForkConversationRequest: title its own key, nothing sent that is unset.
        # The id is drawn here when none is asked for, as a local fork draws its own.
        fork_id = new_uuid() if spec.conversation_id is None else spec.conversation_id
        body: dict[str, Any] = {"reset_metrics": spec.reset_metrics, "id": id_text(fork_id)}
        title = spec.title if spec.title is not None else spec.tags.get("title")
        if title is not None:
            body["title"] = title
        tags = {key: value for key, value in spec.tags.items() if key != "title"}
        if tags:
            body["tags"] = tags
        if spec.from_event_id is not None:
            body["from_event_id"] = spec.from_event_id
        if spec.workspace is not None:  # cowconv's server: the fork gets its own copy there
            body["workspace"] = "copy"
        if spec.agent is not None:  # cowconv's server: the fork runs this agent
            body["agent"] = spec.agent.model_dump(mode="json", context={"expose_secrets": True})
        info = answer_json(send_request(self._client, "POST", self._path("/fork"), json=body))
        if not isinstance(info, dict) or not info.get("id"):
            raise RemoteError(0, f"the server answered no fork: {info!r}")
        return info

    def fork_with_agent(self, spec: ForkSpec) -> dict[str, Any]:
        """Fork with another agent on an OpenHands agent server (which takes no agent when
        forking); the fork's info.

        Another LLM only (model, base URL, key...): a fork, then OpenHands'
        ``POST /switch_llm``. Another system prompt or tools: a new conversation
        with that agent, given the history's user messages, when the history holds
        nothing else (the server records the system prompt of its own agent
        first); otherwise an :class:`~cowconv.InvalidValueError` before anything
        is made, saying what to do.
        """
        agent = spec.agent
        assert agent is not None
        ours = agent_to_openhands(agent.model_dump(mode="json", context={"expose_secrets": True}))
        messages = self.openhands_fork_plan(agent, spec.from_event_id)
        if messages is None:
            info = self.fork_on_server(spec._replace(agent=None))
            fork_path = f"{CONVERSATIONS_PATH}/{_segment(info['id'])}"
            send_request(self._client, "POST", f"{fork_path}/switch_llm", json={"llm": ours["llm"]})
            answered = answer_json(send_request(self._client, "GET", fork_path))
            return answered if isinstance(answered, dict) else info
        fork_id = new_uuid() if spec.conversation_id is None else spec.conversation_id
        tags = {key: value for key, value in spec.tags.items() if key != "title"}
        body: dict[str, Any] = {
            "agent": ours,
            "workspace": {"kind": "LocalWorkspace", "working_dir": self.workspace.working_dir},
            "max_iterations": self.max_iteration_per_run,
            "tags": tags,
            "conversation_id": id_text(fork_id),
        }
        created = answer_json(send_request(self._client, "POST", CONVERSATIONS_PATH, json=body))
        if not isinstance(created, dict) or not created.get("id"):
            raise RemoteError(0, f"the server answered no conversation: {_shown(str(created))}")
        fork_path = f"{CONVERSATIONS_PATH}/{_segment(created['id'])}"
        title = spec.title if spec.title is not None else spec.tags.get("title")
        if title is not None:
            send_request(self._client, "PATCH", fork_path, json={"title": title})
        for text in messages:
            message = {"role": "user", "content": [{"type": "text", "text": text}], "run": False}
            send_request(self._client, "POST", f"{fork_path}/events", json=message)
        answered = answer_json(send_request(self._client, "GET", fork_path))
        return answered if isinstance(answered, dict) else created

    def openhands_fork_plan(self, agent: Agent, from_event_id: str | None) -> list[str] | None:
        """How a fork on an OpenHands agent server gets ``agent`` (see :meth:`fork_with_agent`):
        ``None`` (a fork, then ``switch_llm``), or the user messages a new conversation is
        given; an :class:`~cowconv.InvalidValueError` if the server cannot do it.
        """
        source = self._agent if self._agent is not None else self.snapshot().agent
        if _without_key(source.model_copy(update={"llm": agent.llm})) == _without_key(agent):
            return None
        history = _active_branch(EventLog(list(self._cache or ())), self._refresh_info())
        if from_event_id is not None:
            ids = [event.id for event in history]
            if from_event_id not in ids:
                raise InvalidValueError(f"no event {from_event_id!r} in the history to fork")
            history = history.take(ids.index(from_event_id) + 1)
        messages: list[str] = []
        for event in history:
            if event.kind == "SystemPromptEvent":
                continue
            if not (isinstance(event, MessageEvent) and event.source == "user") or not all(
                isinstance(part, TextContent) for part in event.llm_message.content
            ):
                raise InvalidValueError(
                    "OpenHands' agent server cannot give a fork another system prompt or tools "
                    f"once its history holds more than user messages (it has a {event.kind}): "
                    "vary only the LLM there, or use cowconv's agent server"
                )
            messages.append(event.text)
        return messages

    @staticmethod
    def fork_class() -> Any:
        """The class a fork on an OpenHands agent server is made as, or ``None``: the source's.

        OpenHands' client makes its forks by its module's ``RemoteConversation``
        (from the server's answer, by keyword); code written for it that sets
        that name on this module (its tests do) gets its forks made the same way.
        """
        return globals().get("RemoteConversation")

    @property
    def transport(self) -> httpx.BaseTransport | None:
        """The transport this conversation was opened with (``None``: HTTP), which its forks
        share."""
        return self._connection.transport

    # -- running ---------------------------------------------------------------

    def run(
        self, *, blocking: bool = True, poll_interval: float = 1.0, timeout: float = 3600.0
    ) -> None:
        """Run the agent on the server; blocks until the run ends (unless not ``blocking``).

        On a cowconv server it follows the server's event stream (no
        polling) and hands every new event to the callbacks. On another
        OpenHands agent server it waits, as OpenHands' client does, for the
        server's state update after the run on the events socket, checking
        the status over REST every ``poll_interval`` seconds meanwhile; a
        run that goes on past ``timeout`` seconds raises
        :class:`~cowconv.ConversationRunError` (it may still be running
        there), as does a server that no longer has the conversation or
        answers its status out of the protocol's shape, and
        (on every backend: :meth:`cowconv.Conversation.run`) a run that ends
        in ``error`` or ``stuck``: on a cowconv server the conversation
        raises it after this returns, here the wait raises it.
        If a run is already going (started elsewhere), it waits for that one.
        ``blocking=False`` starts the run and returns.
        """
        if not self._cowconv:
            self._run_on_openhands(blocking, poll_interval, timeout)
            return
        response = self._client.post(self._path("/run"))
        if not blocking:
            if response.status_code != 409:
                raise_for_status(response)
            return
        if response.status_code == 409:
            start = len(self.snapshot().branch)
        else:
            with reading(response):
                counted = answer_json(raise_for_status(response)).get("event_count")
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
                    with reading(source.response):
                        event = Event.model_validate_json(message.data)
                    self._deliver(event, streamed=True)
                    cursor += 1
                elif message.event == "status":
                    with reading(source.response):
                        running = bool(answer_json(message).get("running", True))
        # The server ends an until_idle stream only after a status with running=false.
        return cursor, not running

    def _run_on_openhands(self, blocking: bool, poll_interval: float, timeout: float) -> None:
        assert self._cache is not None
        # Only a full state update that comes after the run moved ends this run: the one the
        # socket sent when it subscribed, or one left from an earlier run or a message, does not.
        self._armed.clear()
        self._run_moved.clear()
        while not self._terminal.empty():
            self._terminal.get_nowait()
        try:
            started = send_request(self._client, "POST", self._path("/run"), {409}, timeout=30)
        except (RemoteError, httpx.HTTPError) as error:
            raise ConversationRunError(public_id(self._id), error) from error
        if started.status_code == 409:  # a run is going (started elsewhere): wait for its end
            self._run_moved.set()
        if not blocking:
            return
        self._armed.set()
        try:
            self._wait_for_openhands_run(poll_interval, timeout)
        finally:
            self._armed.clear()
        self._catch_up()

    def _wait_for_openhands_run(self, poll_interval: float, timeout: float) -> None:
        started = time.monotonic()
        ended_since: float | None = None  # since when REST says the run ended
        while True:
            if time.monotonic() - started > timeout:
                raise ConversationRunError(
                    public_id(self._id),
                    TimeoutError(
                        f"the run timed out after {timeout} seconds; it may still be running "
                        "on the server"
                    ),
                )
            try:
                ended = self._terminal.get(timeout=poll_interval)
            except queue.Empty:
                pass
            else:  # the server's word on the socket: the run is over
                self._raise_if_failed(ended)
                return
            try:
                status = self._poll_status()
            except ConversationRunError:
                raise
            except (RemoteError, httpx.HTTPError) as error:
                code = getattr(error, "status_code", 0)
                if 200 <= code < 300:  # an answer not in the protocol's shape: not transient
                    raise ConversationRunError(public_id(self._id), error) from error
                if code == 404:
                    raise ConversationRunError(
                        self._id,
                        RemoteError(404, "the conversation was not found: the server lost it"),
                    ) from error
                if 400 <= code < 500 and code != 429:
                    raise ConversationRunError(public_id(self._id), error) from error
                logger.warning("checking the run of %s failed (trying again): %s", self._id, error)
                ended_since = None
                continue
            if status in ("error", "stuck"):
                self._refresh_info()
                self._raise_if_failed(status)
            if status in ("finished",):
                # A hook on the server may still undo "finished": trust REST alone only after
                # it has said so for _REST_ENDED_AFTER seconds without the socket's update.
                now = time.monotonic()
                ended_since = now if ended_since is None else ended_since
                if now - ended_since >= _REST_ENDED_AFTER:
                    logger.warning(
                        "no state update came on the socket of %s; the run ended per REST",
                        self._id,
                    )
                    self._refresh_info()
                    return
            else:
                ended_since = None

    def _raise_if_failed(self, status: object) -> None:
        # Every backend raises a run that ended in error or stuck (core.events.run_failure);
        # the server's history is read again first, for the error event it recorded.
        if status not in ("error", "stuck"):
            return
        assert self._cache is not None
        self._catch_up()  # the callbacks hear the run's last events before it is raised
        failure = run_failure(public_id(self._id), status, list(self._cache))
        assert failure is not None
        raise failure

    def _poll_status(self) -> str:
        response = send_request(self._client, "GET", self._path(), timeout=30)
        with reading(response):
            status = answer_json(response)["execution_status"]
        if not isinstance(status, str):
            reason = f"execution_status is {type(status).__name__}, not text"
            raise RemoteError(
                response.status_code, f"an answer not in the protocol's shape ({reason})"
            )
        return status

    def pause(self) -> None:
        """Ask the server to pause the run after its current step (returns at once)."""
        self.request("POST", "/pause")

    def interrupt(self) -> None:
        """Ask the server to end the run now (returns at once)."""
        self.request("POST", "/interrupt")

    def delete(self) -> None:
        """Delete the conversation on the server (``DELETE``; OpenHands' ``delete_on_close``)."""
        self.request("DELETE")

    def close(self) -> None:
        """Stop the events socket, let go of the connection (closed with its last user).

        The conversation stays on the server. As OpenHands' client, the cost
        the socket last reported is added to a :class:`~cowconv.RemoteWorkspace`
        (``accumulated_cost``); nothing is fetched to learn it.
        """
        if self._closed:
            return
        self._closed = True
        socket, self._socket = self._socket, None
        if socket is not None:
            try:
                socket.stop()
            except Exception:
                logger.debug("stopping the events socket failed", exc_info=True)
        cost = self._reported_cost()
        if cost is not None and isinstance(self.workspace, RemoteWorkspace):
            self.workspace.register_cost(cost)
        self._connection.release()

    def _reported_cost(self) -> float | None:
        with self._info_lock:
            stats = None if self._info is None else self._info.get("stats")
        if isinstance(stats, BaseModel):
            stats = stats.model_dump(mode="json")
        if not isinstance(stats, Mapping):
            return None
        per_llm = stats.get("usage_to_metrics")  # OpenHands' ConversationStats
        if isinstance(per_llm, Mapping):
            costs = [
                m.get("accumulated_cost", 0.0) for m in per_llm.values() if isinstance(m, Mapping)
            ]
            return float(sum(c for c in costs if isinstance(c, int | float)))
        cost = stats.get("accumulated_cost")  # cowconv's
        return float(cost) if isinstance(cost, int | float) else None

    def __repr__(self) -> str:
        return f"<RemoteBackend {self._id} at {self.workspace.host}>"
