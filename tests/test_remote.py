"""Tests for cowconv.backends.remote: RemoteConversation against an agent server.

The backend's logic runs against the server's app in this process (through
an :class:`~cowconv.agent_server.InProcessTransport`); ``TestOverRealHTTP``
runs one test per route family against uvicorn on loopback.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import cowconv
from cowconv import (
    Agent,
    Conversation,
    ConversationExistsError,
    ConversationRunError,
    Event,
    EventNotFoundError,
    ExecutionStatus,
    MessageEvent,
    RemoteConversation,
    RemoteError,
    RemoteEventsList,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, InProcessTransport, create_app
from cowconv.backends.wire import SERVER_HEADER
from cowconv.testing import StubLLMServer, StubReply
from tests.conftest import IN_PROCESS_HOST, message_texts

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Server:
    """Where the tests' agent server is: its URL and, in process, the transport to it."""

    url: str
    transport: InProcessTransport | None = None

    def options(self) -> dict[str, Any]:
        return {} if self.transport is None else {"transport": self.transport}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """The agent server's app in this process, data under tmp_path."""
    with InProcessTransport(create_app(data_dir=tmp_path / "data")) as transport:
        yield Server(IN_PROCESS_HOST, transport)


@pytest.fixture
def workspace(server: Server, tmp_path: Path) -> Workspace:
    return Workspace(host=server.url, working_dir=str(tmp_path))


@pytest.fixture
def remote(stub_agent: Agent, workspace: Workspace, server: Server) -> Iterator[RemoteConversation]:
    conversation = Conversation(agent=stub_agent, workspace=workspace, **server.options())
    assert isinstance(conversation, RemoteConversation)
    yield conversation
    conversation.close()


class TestFactory:
    def test_conversation_returns_remote(self, remote: RemoteConversation, workspace):
        """Conversation(workspace=Workspace(host=...)) creates the conversation on the server."""
        assert remote.workspace == workspace
        assert remote.state.execution_status is ExecutionStatus.IDLE

    def test_local_workspace_stays_local(self, stub_agent: Agent, tmp_path: Path):
        """Without host, Conversation is the local class."""
        assert type(Conversation(agent=stub_agent, workspace=tmp_path)) is Conversation

    def test_lazy_export(self):
        """cowconv.RemoteConversation resolves lazily; unknown names still fail."""
        assert cowconv.RemoteConversation is RemoteConversation
        with pytest.raises(AttributeError):
            cowconv.NoSuchThing  # noqa: B018

    def test_options_reach_the_server(self, stub_agent: Agent, workspace: Workspace, server):
        """conversation_id and tags are the server-side conversation's."""
        with Conversation(
            agent=stub_agent,
            workspace=workspace,
            conversation_id="named",
            tags={"k": "v"},
            **server.options(),
        ) as conversation:
            assert conversation.id == "named" and dict(conversation.state.tags) == {"k": "v"}

    def test_existing_id_attaches(self, remote: RemoteConversation, stub_agent, workspace, server):
        """An id the server has reopens that conversation, like a local resume."""
        remote.send_message("kept")
        with RemoteConversation(
            stub_agent, workspace, conversation_id=remote.id, **server.options()
        ) as again:
            assert message_texts(again.state.events) == ["kept"]

    def test_needs_host(self, stub_agent: Agent, tmp_path: Path):
        """A RemoteConversation without a server URL is a ValueError."""
        with pytest.raises(ValueError, match="host"):
            RemoteConversation(stub_agent, Workspace(working_dir=str(tmp_path)))


class TestAttach:
    def test_attach(self, remote: RemoteConversation, server: Server, stub_agent):
        """attach(host, id) reopens a conversation; its agent comes back with the key hidden."""
        remote.send_message("hello")
        with RemoteConversation.attach(server.url, remote.id, **server.options()) as attached:
            assert attached.id == remote.id and message_texts(attached.state.events) == ["hello"]
            assert attached.agent.llm.model == stub_agent.llm.model
            assert attached.agent.llm.api_key is not None
            assert attached.agent.llm.api_key.get_secret_value() == "**********"

    def test_attach_unknown(self, server: Server):
        """attach to an unknown id raises RemoteError 404 with the server's message."""
        with pytest.raises(RemoteError) as error:
            RemoteConversation.attach(server.url, "nope", **server.options())
        assert error.value.status_code == 404 and "nope" in error.value.message


class TestState:
    def test_events_paged(self, remote: RemoteConversation):
        """state.events reads every event through pages, indexable and sliceable."""
        sent = [remote.send_message(str(n)) for n in range(230)]
        events = remote.state.events
        assert len(events) == 231 and events[0].kind == "SystemPromptEvent"  # then the messages
        assert [e.id for e in events][1:] == [e.id for e in sent]
        assert events[-1] == sent[-1] and events[151].text == "150"
        assert message_texts(events[98:102]) == ["97", "98", "99", "100"]
        assert events.last == sent[-1]
        with pytest.raises(IndexError):
            events[231]

    def test_snapshot(self, remote: RemoteConversation):
        """A state read earlier keeps its length; reading state again shows news."""
        before = remote.state
        remote.send_message("later")
        assert len(before.events) == 0 and len(remote.state.events) == 2  # prompt, "later"

    def test_summary_fields(self, remote: RemoteConversation):
        """tags, title, stats and fork links come from the server's info."""
        fork = remote.fork(title="T", tags={"a": "b"}, reset_metrics=False)
        state = fork.state
        assert dict(state.tags) == {"a": "b", "title": "T"} and state.title == "T"
        assert state.forked_from_conversation_id == remote.id
        assert state.stats.accumulated_cost == 0.0
        assert state.created_at <= state.updated_at
        fork.close()


class TestSendMessage:
    def test_recorded_and_reported(self, stub_agent: Agent, workspace: Workspace, server):
        """send_message returns the event and hands it to the callbacks."""
        seen: list[Event] = []
        with RemoteConversation(
            stub_agent, workspace, callbacks=[seen.append], **server.options()
        ) as conversation:
            event = conversation.send_message("hi")
            assert isinstance(event, MessageEvent) and event.text == "hi"
            # The server recorded the system prompt first; the callbacks see both, in order.
            prompt = conversation.state.events[0]
            assert prompt.kind == "SystemPromptEvent"
            assert seen == [prompt, event] and list(conversation.state.events) == [prompt, event]
            second = conversation.send_message("again")
            assert seen == [prompt, event, second]

    def test_rejects_non_str(self, remote: RemoteConversation):
        """send_message takes text."""
        with pytest.raises(TypeError):
            remote.send_message(3)  # type: ignore[arg-type]


class TestRun:
    def test_blocks_until_done(self, stub_agent: Agent, workspace: Workspace, server):
        """run() returns when the run has ended, every new event seen by the callbacks."""
        seen: list[Event] = []
        with RemoteConversation(
            stub_agent, workspace, callbacks=[seen.append], **server.options()
        ) as conversation:
            conversation.send_message("Run `echo remote-run`.")
            conversation.run()
            state = conversation.state
            assert state.execution_status is ExecutionStatus.FINISHED
            assert [e.id for e in seen] == [e.id for e in state.events]
            assert any("remote-run" in getattr(e, "output", "") for e in state.events)

    def test_errors_are_recorded(self, remote: RemoteConversation, stub: StubLLMServer):
        """An LLM failure ends the run with status error and an AgentErrorEvent; run() raises
        ConversationRunError saying why, as a local conversation's does."""
        stub.script(*[StubReply.error(400, "bad request")] * 5)
        remote.send_message("hi")
        with pytest.raises(ConversationRunError, match="ended in error: .*bad request"):
            remote.run()
        state = remote.state
        assert state.execution_status is ExecutionStatus.ERROR
        assert state.events[-1].kind == "AgentErrorEvent"

    def test_joins_a_running_run(self, remote: RemoteConversation, stub: StubLLMServer):
        """run() while another client's run is going waits for that run."""
        stub.script(StubReply.text("slow", delay=0.5))
        remote.send_message("hi")
        other = threading.Thread(target=remote.run)
        other.start()
        time.sleep(0.1)
        remote.run()
        assert remote.state.execution_status is ExecutionStatus.FINISHED
        other.join()


class TestPause:
    def test_pause_from_another_thread(self, remote: RemoteConversation, stub: StubLLMServer):
        """pause() stops a run after its step; run() then returns with status paused."""
        stub.script(
            StubReply.tool_call("terminal", command="echo 1", delay=0.5), StubReply.text("no")
        )
        remote.send_message("go")
        runner = threading.Thread(target=remote.run)
        runner.start()
        time.sleep(0.2)
        remote.pause()
        runner.join(10)
        assert not runner.is_alive()
        assert remote.state.execution_status is ExecutionStatus.PAUSED


class TestFork:
    def test_fork_is_independent(self, remote: RemoteConversation):
        """The fork has the source's events; later messages stay on their side."""
        remote.send_message("shared")
        fork = remote.fork(conversation_id="f1")
        assert isinstance(fork, RemoteConversation) and fork.id == "f1"
        fork.send_message("fork only")
        remote.send_message("source only")
        assert message_texts(fork.state.events) == ["shared", "fork only"]
        assert message_texts(remote.state.events) == ["shared", "source only"]
        fork.close()

    def test_from_event(self, remote: RemoteConversation):
        """from_event_id forks the history up to that event."""
        first = remote.send_message("one")
        remote.send_message("two")
        with remote.fork(from_event_id=first.id) as fork:
            assert message_texts(fork.state.events) == ["one"]

    def test_fork_runs_with_credentials(self, remote: RemoteConversation, stub: StubLLMServer):
        """A remote fork runs on the server with the source agent's api key."""
        remote.send_message("Run `echo forked`.")
        with remote.fork() as fork:
            fork.run()
            state = fork.state
        assert state.execution_status is ExecutionStatus.FINISHED
        assert {r.headers.get("authorization") for r in stub.requests} == {"Bearer stub-key"}

    def test_agent_not_supported(self, remote: RemoteConversation, stub_agent: Agent):
        """fork(agent=...) is refused as in OpenHands' SDK, naming what does it."""
        with pytest.raises(NotImplementedError, match="not supported") as refused:
            remote.fork(agent=stub_agent)
        assert "run_branches" in str(refused.value) and "local Conversation" in str(refused.value)

    def test_errors(self, remote: RemoteConversation):
        """Taken ids and unknown events are RemoteErrors 409 and 404, and the local errors."""
        other = remote.fork()
        with pytest.raises(ConversationExistsError) as taken:
            remote.fork(conversation_id=other.id)
        with pytest.raises(EventNotFoundError) as unknown:
            remote.fork(from_event_id="nope")
        assert isinstance(taken.value, RemoteError) and isinstance(unknown.value, RemoteError)
        assert (taken.value.status_code, unknown.value.status_code) == (409, 404)
        assert "nope" in unknown.value.message
        other.close()


DEEP_ANSWER = "[" * 100_000 + "]" * 100_000
"""JSON nested far past the interpreter's recursion limit (``json.loads`` recurses per level)."""


class Answering(httpx.BaseTransport):
    """The agent server's app through ``inner``; while ``body`` is set, every JSON answer it
    gives carries ``body`` instead (its status kept): a server whose answers are not sane."""

    def __init__(self, inner: httpx.BaseTransport, openhands: bool = False) -> None:
        self.inner = inner
        self.body: str | None = None
        self.openhands = openhands  # answer without the cowconv header, as OpenHands' server

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if self.openhands:
            del response.headers[SERVER_HEADER]
        if self.body is None or "json" not in response.headers.get("content-type", ""):
            return response
        response.read()
        response.close()
        headers = {"content-type": "application/json"}
        return httpx.Response(response.status_code, text=self.body, headers=headers)


def events_list(host: str, transport: httpx.BaseTransport, conversation_id: str) -> object:
    """OpenHands' events list of ``conversation_id``, read through ``transport`` (left open)."""
    with httpx.Client(base_url=host, transport=transport) as client:
        return RemoteEventsList(client, conversation_id)


class TestAnswersNestedTooDeep:
    """Every answer of the server is decoded by ``decode_json``: one nested deeper than 512
    levels is a RemoteError naming why, never the RecursionError ``json.loads`` hits."""

    def check(self, raised: pytest.ExceptionInfo[RemoteError]) -> None:
        assert raised.value.message == "not JSON (JSON nested deeper than 512 levels)"

    def test_create_and_attach(self, server: Server, stub_agent: Agent, workspace: Workspace):
        assert server.transport is not None
        answering = Answering(server.transport)
        answering.body = DEEP_ANSWER
        with pytest.raises(RemoteError) as created:
            Conversation(agent=stub_agent, workspace=workspace, transport=answering)
        self.check(created)
        answering.body = None
        with Conversation(agent=stub_agent, workspace=workspace, transport=answering) as made:
            made.send_message("kept")
        answering.body = DEEP_ANSWER
        with pytest.raises(RemoteError) as attached:
            RemoteConversation.attach(server.url, made.id, transport=answering)
        self.check(attached)
        answering.body = None
        with RemoteConversation.attach(server.url, made.id, transport=answering) as again:
            assert message_texts(again.state.events) == ["kept"]

    def test_an_error_answer_shows_its_start(self, server: Server):
        """An error status whose body is too deep to decode: the error names the status and
        shows the body's first 1,000 characters."""
        assert server.transport is not None
        answering = Answering(server.transport)
        answering.body = DEEP_ANSWER
        with pytest.raises(RemoteError) as unknown:
            RemoteConversation.attach(server.url, "nope", transport=answering)
        assert unknown.value.status_code == 404
        assert unknown.value.message == "[" * 1_000 + "... (199,000 more characters)"

    def test_each_call_of_an_open_conversation(
        self, server: Server, stub_agent: Agent, workspace: Workspace
    ):
        """send_message, fork, run and OpenHands' events list each refuse a
        deep answer; afterwards the same conversation goes on with a sane server."""
        assert server.transport is not None
        answering = Answering(server.transport)
        with Conversation(agent=stub_agent, workspace=workspace, transport=answering) as remote:
            assert isinstance(remote, RemoteConversation)
            remote.send_message("before")
            answering.body = DEEP_ANSWER
            calls = {
                "send_message": lambda: remote.send_message("during"),
                "fork": remote.fork,
                "run": remote.run,
                "events": lambda: events_list(server.url, answering, str(remote.id)),
            }
            for name, call in calls.items():
                with pytest.raises(RemoteError) as raised:
                    call()
                assert raised.value.message.startswith("not JSON ("), (name, raised.value)
            answering.body = None
            remote.run()  # the run the refused call started (or a new one) ends first
            remote.send_message("after")
            texts = message_texts(remote.state.events)
        assert texts[0] == "before" and texts[-1] == "after"


PROTOCOL_KEYS = [
    "id", "conversation_id", "items", "next_page_id", "event", "state", "event_count",
    "running", "response", "execution_status", "kind", "detail", "error",
]  # fmt: skip


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Named, not a lambda: see tests/strategies.py (json_containers).
    return st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(PROTOCOL_KEYS) | st.text(max_size=3), inner, max_size=4
    )


json_answers = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    _containers,
    max_leaves=12,
)
"""Any JSON, its object keys mostly the protocol's, so answers get past the first checks."""


@pytest.mark.slow
class TestAnswersOfAnyShape:
    """A server answering any JSON with a success status: each call of a remote conversation
    succeeds or raises a cowconv error (a RemoteError), and the conversation goes on after."""

    @given(
        answer=json_answers,
        call=st.sampled_from(["send_message", "fork", "run", "events", "attach", "create"]),
    )
    @example(answer={"items": [], "next_page_id": "p"}, call="events")  # the same page again
    @settings(
        max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    def test_a_cowconv_error_or_nothing(
        self,
        in_process_server: InProcessTransport,
        stub_agent: Agent,
        tmp_path: Path,
        answer: Any,
        call: str,
    ):
        # An answer read as OpenHands' makes the client open OpenHands' events socket, which
        # no in-process transport carries: it waits its ready timeout (30 s unless told) and
        # raises. Two seconds exercise the same path.
        with mock.patch.dict(os.environ, {"OPENHANDS_REMOTE_WS_READY_TIMEOUT": "2"}):
            self.check(
                Answering(in_process_server), IN_PROCESS_HOST, stub_agent, tmp_path, answer, call
            )

    @given(
        answer=json_answers,
        call=st.sampled_from(["send_message", "fork", "run", "events", "attach", "create"]),
    )
    @settings(
        max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @pytest.mark.waits  # OpenHands' events socket: its ready timeout, 2 s, in some examples
    def test_as_a_client_of_openhands_server(
        self,
        agent_server: BackgroundServer,
        stub_agent: Agent,
        tmp_path: Path,
        answer: Any,
        call: str,
    ):
        """The same, the server's answers without cowconv's header: the client speaks OpenHands'
        protocol (its info, events search and socket) over real HTTP."""
        answering = Answering(httpx.HTTPTransport(), openhands=True)
        self.check(answering, agent_server.url, stub_agent, tmp_path, answer, call)

    @staticmethod
    def check(
        answering: Answering, host: str, stub_agent: Agent, tmp_path: Path, answer: Any, call: str
    ) -> None:
        workspace = Workspace(host=host, working_dir=str(tmp_path))
        with Conversation(agent=stub_agent, workspace=workspace, transport=answering) as remote:
            assert isinstance(remote, RemoteConversation)
            assert remote.backend.speaks_cowconv is not answering.openhands
            remote.send_message("before")
            calls = {
                "send_message": lambda: remote.send_message("during"),
                "fork": remote.fork,
                "run": remote.run,
                "events": lambda: events_list(host, answering, str(remote.id)),
                "attach": lambda: RemoteConversation.attach(host, remote.id, transport=answering),
                "create": lambda: Conversation(
                    agent=stub_agent, workspace=workspace, transport=answering
                ),
            }
            answering.body = json.dumps(answer)
            try:
                made = calls[call]()
            except cowconv.CowconvError:
                pass
            else:
                if isinstance(made, Conversation):
                    made.close()
            answering.body = None
            remote.send_message("after")  # (a run the call started may still answer after it)
            assert "after" in message_texts(remote.state.events)


class Streaming(httpx.BaseTransport):
    """The agent server's app through ``inner``, but the event stream a run is followed on
    carries ``stream`` (server-sent events) instead of what the server sends."""

    def __init__(self, inner: httpx.BaseTransport, stream: str) -> None:
        self.inner = inner
        self.stream = stream

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events/stream"):
            headers = {"content-type": "text/event-stream"}
            return httpx.Response(200, content=self.stream.encode(), headers=headers)
        return self.inner.handle_request(request)


class Polled(httpx.BaseTransport):
    """OpenHands' agent server through ``inner`` (cowconv's header taken off), except that a
    run is never started (``POST .../run`` answers 200 and does nothing) and the
    conversation's info answers ``info`` once ``polled`` is set."""

    def __init__(self, inner: httpx.BaseTransport, info: str) -> None:
        self.inner = inner
        self.info = info
        self.polled = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST" and path.endswith("/run"):
            return httpx.Response(200, json={"success": True})
        if self.polled and request.method == "GET" and path.count("/") == 3:
            return httpx.Response(200, text=self.info, headers={"content-type": "application/json"})
        response = self.inner.handle_request(request)
        del response.headers[SERVER_HEADER]
        return response


class TestAnswersOutOfShapeWhileRunning:
    """A run followed on a stream whose event or status is not in the protocol's shape, and
    an OpenHands run whose polled status is not, end in a cowconv error at once (the stream
    raised pydantic's ValidationError or an AttributeError; the polling went on to the
    run's timeout); the conversation goes on after."""

    @pytest.mark.parametrize(
        "stream",
        [
            'event: event\ndata: {"kind": "NoSuchEvent"}\n\n',
            "event: event\ndata: not json\n\n",
            "event: status\ndata: [true]\n\n",
            'event: status\ndata: "idle"\n\n',
        ],
        ids=["unknown-event", "event-not-json", "status-a-list", "status-text"],
    )
    def test_stream(self, server: Server, stub_agent: Agent, workspace: Workspace, stream: str):
        assert server.transport is not None
        streaming = Streaming(server.transport, stream)
        with Conversation(agent=stub_agent, workspace=workspace, transport=streaming) as remote:
            remote.send_message("before")
            with pytest.raises(RemoteError) as raised:
                remote.run()
            assert raised.value.status_code == 200
            assert "not in the protocol's shape" in raised.value.message
            remote.send_message("after")
            assert "after" in message_texts(remote.state.events)

    @pytest.mark.parametrize(
        "page",
        ['{"items": 5}', '{"items": [{"kind": "NoSuchEvent"}]}', "{}", "[]"],
        ids=["items-a-number", "unknown-event", "no-items", "a-list"],
    )
    def test_events_page(self, server: Server, stub_agent: Agent, workspace: Workspace, page: str):
        """The history of a state is read in pages when first read: a page out of shape."""
        assert server.transport is not None
        answering = Answering(server.transport)
        with Conversation(agent=stub_agent, workspace=workspace, transport=answering) as remote:
            remote.send_message("before")
            events = remote.state.events
            answering.body = page
            with pytest.raises(RemoteError) as raised:
                list(events)
            assert raised.value.status_code == 200
            assert "not in the protocol's shape" in raised.value.message
            answering.body = None
            assert message_texts(events) == ["before"]

    @pytest.mark.parametrize(
        "info",
        ['{"execution_status": 5}', '{"id": "x"}', "[]", '"running"'],
        ids=["status-a-number", "no-status", "a-list", "text"],
    )
    def test_polled_status(
        self, agent_server: BackgroundServer, stub_agent: Agent, tmp_path: Path, info: str
    ):
        polled = Polled(httpx.HTTPTransport(), info)
        workspace = Workspace(host=agent_server.url, working_dir=str(tmp_path))
        with Conversation(agent=stub_agent, workspace=workspace, transport=polled) as remote:
            assert isinstance(remote, RemoteConversation) and not remote.backend.speaks_cowconv
            # Nothing recorded yet: the socket (which this transport does not carry) sends no
            # state update that could end the run before the status is polled.
            polled.polled = True
            with pytest.raises(ConversationRunError) as raised:
                remote.run(poll_interval=0.05, timeout=120)
            assert raised.value.status_code == 200
            assert "not in the protocol's shape" in raised.value.message
            polled.polled = False
            remote.send_message("after")
            assert "after" in message_texts(remote.state.events)


class TestSessionKey:
    def test_key_sent(self, stub_agent: Agent, tmp_path: Path):
        """Workspace.api_key is sent as the session key; without it the server says 401."""
        with BackgroundServer(create_app(session_api_key="k1")) as keyed:
            good = Workspace(host=keyed.url, working_dir=str(tmp_path), api_key="k1")
            with Conversation(agent=stub_agent, workspace=good) as conversation:
                conversation.send_message("hi")
            with pytest.raises(RemoteError) as error:
                Conversation(agent=stub_agent, workspace=good.model_copy(update={"api_key": None}))
            assert error.value.status_code == 401


class TestClose:
    def test_close_keeps_the_conversation(self, remote: RemoteConversation, server):
        """close() ends the connection; the conversation stays on the server."""
        remote.send_message("stay")
        remote.close()
        with RemoteConversation.attach(server.url, remote.id, **server.options()) as again:
            assert message_texts(again.state.events) == ["stay"]


class TestOverRealHTTP:
    """One test per route family against uvicorn on loopback: what a transport in process
    cannot show (HTTP framing, the streamed events arriving live, reconnects)."""

    @pytest.fixture
    def http(self, tmp_path: Path) -> Iterator[BackgroundServer]:
        with BackgroundServer(create_app(data_dir=tmp_path / "data")) as background:
            yield background

    def test_conversations_and_changes(self, http: BackgroundServer, stub_agent, tmp_path):
        """Create, every named change, fork at an event, attach: over HTTP."""
        workspace = Workspace(host=http.url, working_dir=str(tmp_path))
        with Conversation(agent=stub_agent, workspace=workspace, tags={"k": "v"}) as source:
            first = source.send_message("one")
            source.append_event(MessageEvent(source="user", role="user", content="two"))
            source.set_tag("owner", "ci")
            source.update_agent_state({"step": 1})
            source.activate_skill("sql")
            source.navigate_to(first.id)
            state = source.state
            assert message_texts(state.branch) == ["one"] and len(state.other_branches) == 1
            assert message_texts(state.events) == ["one", "two"]  # the branch left is kept
            assert dict(state.tags) == {"k": "v", "owner": "ci"}
            assert state.agent_state["step"] == 1 and state.activated_knowledge_skills == ("sql",)
            with source.fork(from_event_id=first.id, title="F") as fork:
                assert message_texts(fork.state.events) == ["one"]
            with RemoteConversation.attach(http.url, source.id) as attached:
                assert message_texts(attached.state.branch) == ["one"]

    def test_run_streams_events_live(self, http: BackgroundServer, stub_agent, tmp_path):
        """run() follows the server's event stream; pause and interrupt reach the server."""
        workspace = Workspace(host=http.url, working_dir=str(tmp_path))
        seen: list[Event] = []
        with Conversation(
            agent=stub_agent, workspace=workspace, callbacks=[seen.append]
        ) as conversation:
            conversation.send_message("Say hi.")
            conversation.run()
            conversation.pause()
            conversation.interrupt()
            assert conversation.state.execution_status is ExecutionStatus.FINISHED
            assert [e.id for e in seen] == [e.id for e in conversation.state.events]
