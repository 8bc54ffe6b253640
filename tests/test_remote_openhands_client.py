"""cowconv's remote client, the way OpenHands' client speaks to an agent server.

On any agent server that is not cowconv's, :class:`~cowconv.RemoteConversation`
uses OpenHands' protocol only: ``/events/search`` pages cached in a
:class:`~cowconv.RemoteEventsList`, the events socket
(:class:`~cowconv.WebSocketCallbackClient`) kept open from creation, ``run()``
ended by the server's post-run state update. These tests drive it against a
real cowconv agent server (uvicorn on 127.0.0.1) seen through
:class:`Anonymous`, a real HTTP transport that drops the ``X-Cowconv-Server``
header, so the client cannot tell it from another OpenHands agent server; the
routes cowconv's server lacks are driven against ``python -m
openhands.agent_server`` (the cached OpenHands 1.58.2 environment of
``tests/test_openhands_wire.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cowconv import (
    FULL_STATE_KEY,
    LLM,
    Agent,
    Conversation,
    ConversationErrorEvent,
    ConversationNotFoundError,
    ConversationRunError,
    ConversationStateUpdateEvent,
    Event,
    InvalidTypeError,
    InvalidValueError,
    MessageEvent,
    PauseEvent,
    RemoteConversation,
    RemoteError,
    RemoteEventsList,
    RemoteWorkspace,
    WebSocketCallbackClient,
    WebSocketConnectionError,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.backends.wire import SERVER_HEADER, event_to_openhands
from cowconv.core.events import run_failure
from cowconv.testing import StubLLMServer
from tests.strategies import events, json_values

pytestmark = pytest.mark.timeout(3600)

KEY = "client-test-session-key"
WAIT = 60.0  # seconds: generous, for a loaded machine


class Anonymous(httpx.HTTPTransport):
    """Real HTTP to a cowconv server, its ``X-Cowconv-Server`` header dropped; requests kept."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        response = super().handle_request(request)
        del response.headers[SERVER_HEADER]
        return response

    def sent(self, method: str, suffix: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path.endswith(suffix)]


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT} s for {what}"
        time.sleep(0.02)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[BackgroundServer]:
    with BackgroundServer(create_app(data_dir=tmp_path / "data", session_api_key=KEY)) as running:
        yield running


@pytest.fixture
def agent(stub: StubLLMServer) -> Agent:
    return Agent(
        llm=LLM(model="openai/stub", base_url=stub.base_url, api_key="sk-stub", num_retries=0)
    )


def _workspace(server: BackgroundServer, tmp_path: Path) -> RemoteWorkspace:
    return RemoteWorkspace(host=server.url, working_dir=str(tmp_path), api_key=KEY)


def _client(server: BackgroundServer, transport: httpx.BaseTransport | None = None) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"X-Session-API-Key": KEY}, timeout=WAIT, transport=transport
    )


# What a server may send as an event of a kind cowconv has: its parts of any JSON shape.
_garbled = (
    st.builds(
        lambda kind, parts: {**parts, "kind": kind},
        st.sampled_from(
            [
                "MessageEvent",
                "ActionEvent",
                "ObservationEvent",
                "SystemPromptEvent",
                "AgentErrorEvent",
                "ConversationErrorEvent",
                "Condensation",
                "PauseEvent",
                "ConversationStateUpdateEvent",
            ]
        ),
        st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "timestamp",
                    "source",
                    "llm_message",
                    "tool_call",
                    "observation",
                    "thought",
                    "system_prompt",
                    "tool_name",
                    "tool_call_id",
                    "classification",
                    "forgotten_event_ids",
                    "key",
                    "value",
                ]
            ),
            json_values,
            max_size=5,
        ),
    )
    | json_values
)


KINDS = {"MessageEvent", "ActionEvent", "ObservationEvent", "SystemPromptEvent", "PauseEvent"}
KINDS |= {"AgentErrorEvent", "ConversationErrorEvent", "Condensation"}
"""The kinds of OpenHands' events a cowconv history holds (the others are not read)."""


@contextlib.contextmanager
def _warnings(name: str) -> Iterator[list[str]]:
    """The messages logged at WARNING or above by logger ``name`` in the ``with`` block."""
    messages: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    target = logging.getLogger(name)
    target.addHandler(handler)
    try:
        yield messages
    finally:
        target.removeHandler(handler)


def _message(event_id: str, timestamp: str) -> MessageEvent:
    return MessageEvent(id=event_id, timestamp=timestamp, source="user", role="user", content="m")


# -- RemoteEventsList ---------------------------------------------------------------------------


class TestRemoteEventsList:
    def test_reads_every_page_of_a_real_server(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        conversation = Conversation(agent=agent, workspace=_workspace(server, tmp_path))
        try:
            conversation.send_message("first")
            for _ in range(130):  # two pages of OpenHands' 100
                conversation.append_event(PauseEvent())
            expected = [event.id for event in conversation.state.events]
            with Anonymous() as transport, _client(server, transport) as client:
                events = RemoteEventsList(client, str(conversation.id))
                pages = transport.sent("GET", "/events/search")
            assert [event.id for event in events] == expected
            assert len(events) == 132 and events[-1].id == expected[-1]
            assert [event.id for event in events[1:3]] == expected[1:3]
            assert len(pages) == 2 and "page_id" in pages[1].url.params
        finally:
            conversation.close()

    def test_reconcile_adds_what_others_recorded(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        conversation = Conversation(agent=agent, workspace=_workspace(server, tmp_path))
        try:
            with _client(server) as client:
                events = RemoteEventsList(client, str(conversation.id))
                assert len(events) == 0
                sent = conversation.send_message("later")
                assert events.reconcile() == 2  # the system prompt and the message
                assert events.reconcile() == 0
                assert events[-1].id == sent.id
        finally:
            conversation.close()

    def test_a_missing_conversation_is_both_errors(self, server: BackgroundServer):
        with _client(server) as client, pytest.raises(ConversationNotFoundError) as caught:
            RemoteEventsList(client, "no-such-conversation")
        assert isinstance(caught.value, httpx.HTTPStatusError)
        assert isinstance(caught.value, RemoteError) and caught.value.status_code == 404
        assert caught.value.response.status_code == 404

    @settings(max_examples=50, deadline=None)
    @given(
        st.lists(
            st.tuples(st.sampled_from(["a", "b", "c", "d", "e"]), st.integers(0, 3)), max_size=12
        )
    )
    def test_kept_in_time_order_once_per_id(self, arrivals: list[tuple[str, int]]):
        empty = httpx.MockTransport(lambda _: httpx.Response(200, json={"items": []}))
        with httpx.Client(base_url="http://server", transport=empty) as client:
            events = RemoteEventsList(client, "c1")
            add = events.create_default_callback()
            add(ConversationStateUpdateEvent(key="execution_status", value="idle"))  # not kept
            first_seen: dict[str, int] = {}
            for event_id, second in arrivals:
                event = _message(event_id, f"2026-01-01T10:00:0{second}")
                add(event)
                first_seen.setdefault(event_id, second)
        # each id once, as first added; by time; equal times in the order they came
        order = sorted(first_seen, key=lambda i: (first_seen[i], list(first_seen).index(i)))
        assert [event.id for event in events] == order
        assert [event.timestamp[-1] for event in events] == sorted(
            event.timestamp[-1] for event in events
        )

    @settings(max_examples=200, deadline=None)
    @given(good=st.lists(events, min_size=1, max_size=3), garbled=st.lists(_garbled, max_size=4))
    @example(good=[PauseEvent()], garbled=[{"kind": "ActionEvent", "tool_call": True}])
    @example(good=[PauseEvent()], garbled=[{"kind": "ObservationEvent", "observation": [1]}])
    @example(good=[PauseEvent()], garbled=[{"kind": "SystemPromptEvent", "system_prompt": 5}])
    @example(good=[PauseEvent()], garbled=[{"kind": "ActionEvent", "tool_call": {"arguments": 5}}])
    def test_an_event_it_cannot_read_is_left_out(self, good: list[Event], garbled: list[Any]):
        """A page of OpenHands' events search holding events of any shape: the ones cowconv
        can read are read, the others left out with a warning saying why; never an error that
        loses the page. The events socket reads each message the same way."""
        items = [event_to_openhands(event.model_dump(mode="json")) for event in good] + garbled
        page = httpx.MockTransport(lambda _: httpx.Response(200, json={"items": items}))
        with httpx.Client(base_url="http://server", transport=page) as client:
            read = RemoteEventsList(client, "c1")
        good_ids = {event.id for event in good}
        assert [e.id for e in read if e.id in good_ids] == list(dict.fromkeys(e.id for e in good))
        for item in garbled:
            with _warnings("cowconv.remote") as warned:
                parsed = WebSocketCallbackClient._parse(json.dumps(item))
            if isinstance(parsed, ConversationStateUpdateEvent):
                assert item["kind"] == "ConversationStateUpdateEvent"
            elif parsed is None and (not isinstance(item, dict) or item.get("kind") in KINDS):
                assert any("cannot read" in message for message in warned), item
            else:
                assert parsed is None or isinstance(parsed, Event)


# -- WebSocketCallbackClient --------------------------------------------------------------------


class TestWebSocketCallbackClient:
    def test_subscribes_and_hears_what_is_recorded(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        conversation = Conversation(agent=agent, workspace=_workspace(server, tmp_path))
        heard: list[Any] = []
        socket = WebSocketCallbackClient(
            server.url, str(conversation.id), heard.append, api_key=KEY
        )
        try:
            socket.start()
            assert socket.wait_until_ready(timeout=WAIT)
            first = heard[0]
            assert isinstance(first, ConversationStateUpdateEvent)
            assert first.key == FULL_STATE_KEY and first.value["id"] == str(conversation.id)
            sent = conversation.send_message("over the socket")
            _until(lambda: any(getattr(e, "id", None) == sent.id for e in heard), "the message")
            message = next(e for e in heard if getattr(e, "id", None) == sent.id)
            assert isinstance(message, MessageEvent) and message.text == "over the socket"
        finally:
            socket.stop()
            conversation.close()
        threads = {thread.name for thread in threading.enumerate()}
        assert f"cowconv-socket-{conversation.id}" not in threads

    def test_reconnects_and_catches_up_after_a_restart(self, agent: Agent, tmp_path: Path):
        """The server goes away and comes back (same port, same data): the socket reconnects,
        and what was recorded meanwhile reaches the callbacks once, in the cache too."""
        app = create_app(data_dir=tmp_path / "data", session_api_key=KEY)
        first = BackgroundServer(app).start()
        port = first.port
        heard: list[str] = []
        conversation, _ = _anonymous(
            agent, first, tmp_path, callbacks=[lambda event: heard.append(event.id)]
        )
        try:
            conversation.send_message("before")
            first.stop()
            again = BackgroundServer(
                create_app(data_dir=tmp_path / "data", session_api_key=KEY), port=port
            ).start()
            try:
                with RemoteConversation.attach(
                    again.url, str(conversation.id), api_key=KEY
                ) as other:
                    late = other.send_message("while the socket was away")
                # Only a reconnected socket (live, or its catch-up over REST) brings it here.
                _until(lambda: late.id in heard, "the message recorded during the restart")
                assert heard.count(late.id) == 1
                assert conversation.state.events[-1].id == late.id
                assert len(heard) == len(set(heard)) == 3  # the prompt and two messages, once each
            finally:
                conversation.close()
                again.stop()
        finally:
            first.stop()

    def test_a_refused_key_stops_it(self, server: BackgroundServer, agent: Agent, tmp_path: Path):
        conversation = Conversation(agent=agent, workspace=_workspace(server, tmp_path))
        socket = WebSocketCallbackClient(server.url, str(conversation.id), print, api_key="wrong")
        try:
            socket.start()
            assert socket.wait_until_ready(timeout=WAIT) is False  # 4001: no retrying
        finally:
            socket.stop()
            conversation.close()

    def test_an_unknown_conversation_stops_it(self, server: BackgroundServer):
        socket = WebSocketCallbackClient(server.url, "no-such-conversation", print, api_key=KEY)
        socket.start()
        assert socket.wait_until_ready(timeout=WAIT) is False  # 4004
        socket.stop()


# -- RemoteConversation on a server it cannot tell from OpenHands' -------------------------------


def _anonymous(
    agent: Agent, server: BackgroundServer, tmp_path: Path, **options: Any
) -> tuple[RemoteConversation, Anonymous]:
    transport = Anonymous()
    conversation = Conversation(
        agent=agent,
        workspace=_workspace(server, tmp_path),
        transport=transport,
        visualizer=None,
        **options,
    )
    assert isinstance(conversation, RemoteConversation)
    assert conversation.backend.speaks_cowconv is False  # type: ignore[attr-defined]
    return conversation, transport


class TestOpenHandsProtocol:
    def test_create_message_run_fork_navigate_pause(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        heard: list[str] = []
        conversation, transport = _anonymous(
            agent,
            server,
            tmp_path,
            callbacks=[lambda event: heard.append(event.kind)],
            tags={"owner": "ci"},
        )
        try:
            (create,) = transport.sent("POST", "/api/conversations")
            body = json.loads(create.read())
            # OpenHands' create request (its further fields, as its client sends them), accepted
            assert body["observability_tags"] == [] and body["user_id"] is None
            assert body["stuck_detection"] is True and body["tags"] == {"owner": "ci"}

            searches = len(transport.sent("GET", "/events/search"))
            message = conversation.send_message("Analyse the sales report.")
            assert heard == ["SystemPromptEvent", "MessageEvent"]
            # the socket brought the recorded message: no history read for it
            assert len(transport.sent("GET", "/events/search")) == searches
            assert conversation.state.events[-1].id == message.id

            conversation.run()
            state = conversation.state
            assert state.execution_status == "finished"
            assert [e.kind for e in state.events][-1] == "MessageEvent"
            _until(lambda: len(heard) == len(state.events), "every event on the socket")
            assert heard == [event.kind for event in state.events]
            assert transport.sent("POST", "/run")
            # OpenHands' protocol only: no cowconv additions
            assert not transport.sent("GET", "/state") and not transport.sent("GET", "/stream")

            fork = conversation.fork(title="B", tags={"variant": "b"}, from_event_id=message.id)
            try:
                assert fork.state.title == "B" and fork.state.tags["variant"] == "b"
                assert fork.state.events[-1].id == message.id
            finally:
                fork.close()

            conversation.navigate_to(message.id)
            assert conversation.state.leaf_event_id == message.id
            conversation.pause()
            conversation.set_title("Renamed")
            assert conversation.state.title == "Renamed"
        finally:
            conversation.close()

    def test_a_received_event_joins_the_cache_and_names_the_run_error(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        """``state.events.add_event`` (OpenHands' remote events list): the event joins the
        client's history as the same object, reaches the callbacks, is not sent; a run the
        socket then reports ``error`` raises with it attached."""
        heard: list[str] = []
        conversation, transport = _anonymous(
            agent, server, tmp_path, callbacks=[lambda event: heard.append(event.id)]
        )
        try:
            posts = len([r for r in transport.requests if r.method != "GET"])
            error = ConversationErrorEvent(
                source="environment", code="LLMAuthenticationError", detail="invalid api key"
            )
            conversation.state.events.add_event(error)
            assert any(event is error for event in conversation.state.events)
            assert heard[-1] == error.id  # heard; nothing sent (reads refresh the info only)
            assert len([r for r in transport.requests if r.method != "GET"]) == posts
            conversation.update_state_from_event(
                ConversationStateUpdateEvent(key="execution_status", value="error")
            )
            failure = run_failure(conversation.id, "error", conversation.state.events)
            assert failure is not None and failure.conversation_error is error
            with pytest.raises(InvalidTypeError, match="expected an Event"):
                conversation.state.events.add_event("not an event")  # type: ignore[arg-type]
        finally:
            conversation.close()

    def test_only_a_full_state_after_the_run_moved_ends_its_wait(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        """While run() waits, a full-state update ends the wait only once the run has moved (a
        "running" status, or a new event, since run() began) and only if its status is a known
        one other than running: an idle update the socket brings late, sent before the run
        started (after a message), does not end it; one of any other shape is kept as info,
        never an error (a list as the status raised TypeError in the socket's thread)."""
        conversation, _ = _anonymous(agent, server, tmp_path)
        backend = conversation.backend
        events = conversation.state.events

        def update(key: str, value: Any) -> None:
            events.add_event(ConversationStateUpdateEvent(key=key, value=value))

        try:
            backend._armed.set()  # type: ignore[attr-defined]  # as run() does after POST /run
            update(FULL_STATE_KEY, {"execution_status": "idle"})  # sent before the run started
            assert backend._terminal.empty()  # type: ignore[attr-defined]
            update("execution_status", "running")  # the run moved
            values: list[Any] = [{"execution_status": [1]}, {"execution_status": {"a": 1}}]
            values += [[1], "finished", {"execution_status": "nonsense"}, {}]
            for value in values:
                update(FULL_STATE_KEY, value)
            assert backend._terminal.empty()  # type: ignore[attr-defined]
            update(FULL_STATE_KEY, {"execution_status": "finished"})
            assert backend._terminal.get_nowait() == "finished"  # type: ignore[attr-defined]
            backend._run_moved.clear()  # type: ignore[attr-defined]  # as the next run() does
            update(FULL_STATE_KEY, {"execution_status": "idle"})
            assert backend._terminal.empty()  # type: ignore[attr-defined]
            events.add_event(PauseEvent())  # a new event: the run moved
            update(FULL_STATE_KEY, {"execution_status": "paused"})
            assert backend._terminal.get_nowait() == "paused"  # type: ignore[attr-defined]
        finally:
            backend._armed.clear()  # type: ignore[attr-defined]
            conversation.close()

    def test_received_events_are_for_openhands_servers_only(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        """On cowconv's server the history is the server's: add_event says what to use."""
        conversation = Conversation(agent=agent, workspace=_workspace(server, tmp_path))
        try:
            event = MessageEvent(source="user", role="user", content="m")
            with pytest.raises(InvalidTypeError, match="append_event"):
                conversation.state.events.add_event(event)
        finally:
            conversation.close()

    def test_an_existing_id_is_attached_without_a_create(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        first, _ = _anonymous(agent, server, tmp_path)
        sent = first.send_message("kept")
        again, transport = _anonymous(agent, server, tmp_path, conversation_id=first.id)
        try:
            assert again.id == first.id
            assert not transport.sent("POST", "/api/conversations")
            assert [r.method for r in transport.requests][0] == "GET"
            assert again.state.events[-1].id == sent.id
        finally:
            again.close()
            first.close()

    def test_a_new_id_is_created_with_it(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        chosen = uuid.uuid4()
        conversation, transport = _anonymous(agent, server, tmp_path, conversation_id=chosen)
        try:
            assert conversation.id == chosen
            (create,) = transport.sent("POST", "/api/conversations")
            assert json.loads(create.read())["conversation_id"] == str(chosen)
        finally:
            conversation.close()

    def test_another_agent_is_refused(self, server: BackgroundServer, agent: Agent, tmp_path):
        first, _ = _anonymous(agent, server, tmp_path)
        other = Agent(llm=LLM(model="openai/other", api_key="sk"))
        try:
            with pytest.raises(RemoteError, match="another agent") as caught:
                _anonymous(other, server, tmp_path, conversation_id=first.id)
            assert caught.value.status_code == 409
        finally:
            first.close()

    def test_workspace_client_registrations_and_cost(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        workspace = _workspace(server, tmp_path)
        workspace._client = _client(server, Anonymous())  # as code written for OpenHands does
        conversation = Conversation(agent=agent, workspace=workspace, visualizer=None)
        conversation.send_message("hello")
        conversation.run()
        conversation.close()
        assert workspace.conversation_ids == (str(conversation.id),)
        assert workspace.accumulated_cost == 0.0  # the stub charges nothing; reported, not None
        assert workspace.client.get("/health").status_code == 200  # left open
        workspace.client.close()

    def test_run_non_blocking_then_blocking(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        conversation, transport = _anonymous(agent, server, tmp_path)
        try:
            conversation.send_message("hello")
            conversation.run(blocking=False)
            conversation.run(poll_interval=0.05)  # 409 or a new run: either way it ends
            assert conversation.state.execution_status == "finished"
            assert len(transport.sent("POST", "/run")) == 2
        finally:
            conversation.close()

    def test_run_timeout_and_lost_conversation(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        conversation, _ = _anonymous(agent, server, tmp_path)
        try:
            conversation.send_message("hello")
            with pytest.raises(ConversationRunError, match="timed out"):
                conversation.run(timeout=0.0)
            conversation.run()  # the run went on on the server: wait for it
            with _client(server) as client:
                client.delete(f"/api/conversations/{conversation.id}").raise_for_status()
            with pytest.raises(ConversationRunError) as caught:
                conversation.run()
            assert caught.value.status_code == 404
        finally:
            conversation.close()

    def test_socket_not_ready(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path, monkeypatch
    ):
        monkeypatch.setenv("OPENHANDS_REMOTE_WS_READY_TIMEOUT", "0")
        with pytest.raises(WebSocketConnectionError):
            _anonymous(agent, server, tmp_path)
        monkeypatch.setenv("OPENHANDS_REMOTE_WS_READY_REQUIRED", "false")
        conversation, _ = _anonymous(agent, server, tmp_path)
        conversation.send_message("still works over REST")
        assert conversation.state.events[-1].text == "still works over REST"
        conversation.close()

    def test_delete_on_close(self, server: BackgroundServer, agent: Agent, tmp_path: Path):
        conversation, transport = _anonymous(agent, server, tmp_path, delete_on_close=True)
        conversation.close()
        assert len(transport.sent("DELETE", str(conversation.id))) == 1
        with pytest.raises(ConversationNotFoundError):
            RemoteConversation.attach(server.url, str(conversation.id), api_key=KEY)

    def test_generate_title_reads_the_message_just_sent(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        conversation, _ = _anonymous(agent, server, tmp_path)
        try:
            conversation.send_message("Analyse the quarterly sales report for EMEA")
            title = conversation.generate_title(max_length=30)
            assert isinstance(title, str) and 0 < len(title) <= 30
            assert len(conversation.state.events) == 2  # nothing recorded
            unreachable = LLM(model="openai/x", base_url="http://127.0.0.1:9/v1", num_retries=0)
            fallback = conversation.generate_title(llm=unreachable, max_length=20)
            assert fallback == "Analyse the quart..."
        finally:
            conversation.close()

    def test_local_only_methods_say_so(
        self, server: BackgroundServer, agent: Agent, tmp_path: Path
    ):
        conversation, _ = _anonymous(agent, server, tmp_path)
        try:
            with pytest.raises(NotImplementedError, match="not yet supported"):
                conversation.execute_tool("terminal", None)
            with pytest.raises(NotImplementedError, match="stuck detection"):
                _ = conversation.stuck_detector
            with pytest.raises(InvalidValueError):
                conversation.send_message(
                    MessageEvent(source="agent", role="assistant", content="x").llm_message
                )
        finally:
            conversation.close()


# -- routes cowconv's server does not have yet, against OpenHands' agent server ----------------


class TestOpenHandsOnlyRoutes:
    @pytest.mark.slow
    def test_secrets_policy_analyzer_reject_ask(
        self,
        openhands_server: str,
        stub: StubLLMServer,
        tmp_path: Path,
    ):
        agent = Agent(
            llm=LLM(model="openai/stub", base_url=stub.base_url, api_key="sk-stub", num_retries=0)
        )
        conversation = Conversation(
            agent=agent,
            workspace=Workspace(host=openhands_server, working_dir=str(tmp_path)),
            visualizer=None,
            secrets={"FROM_CREATE": "one"},
        )
        try:
            conversation.update_secrets({"PLAIN": "two", "CALLED": lambda: "three"})
            conversation.set_confirmation_policy({"kind": "NeverConfirm"})
            conversation.set_security_analyzer(None)
            conversation.reject_pending_actions("nothing is pending")
            with httpx.Client(base_url=openhands_server, timeout=WAIT) as client:
                info = client.get(f"/api/conversations/{conversation.id}").json()
            assert info["confirmation_policy"]["kind"] == "NeverConfirm"
            assert isinstance(conversation.ask_agent("What is 2 + 2?"), str)
        finally:
            conversation.close()
