"""OpenHands users' tests drive cowconv's remote client with test doubles, and must keep working.

OpenHands' SDK's own tests (and user tests written like them) replace the HTTP
client of a ``RemoteWorkspace`` with a ``unittest.mock.Mock`` whose responses
are ``Mock()`` objects: ``status_code`` set, ``raise_for_status()`` doing
nothing, and the body given by ``response.json.return_value``; nothing else
(no ``.text``, no ``.content``). A hardening of how cowconv decodes answers once
read ``.text`` only and broke every such test; these tests build the doubles
exactly that way, so CI sees such a change without OpenHands' sources.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from unittest.mock import Mock, patch

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cowconv.backends.remote as remote_module
from cowconv import (
    LLM,
    Agent,
    ExecutionStatus,
    MessageEvent,
    RemoteConversation,
    RemoteError,
    RemoteWorkspace,
)
from cowconv.backends.remote import answer_json


def _response(body: Any, status: int = 200) -> Mock:
    """A response as OpenHands' test helpers make it: a Mock with ``.json()`` and a status."""
    response = Mock()
    response.status_code = status
    response.raise_for_status.return_value = None
    response.json.return_value = body
    return response


def _message_event(text: str, event_id: str) -> dict[str, Any]:
    return {
        "kind": "MessageEvent",
        "id": event_id,
        "timestamp": "2026-01-01T00:00:00",
        "source": "user",
        "llm_message": {"role": "user", "content": [{"type": "text", "text": text}]},
    }


class _Server:
    """The answers of an agent server, given through ``RemoteWorkspace._client`` doubles."""

    def __init__(self, events: list[dict[str, Any]] | None = None) -> None:
        self.conversation_id = str(uuid.uuid4())
        self.fork_id = str(uuid.uuid4())
        self.events = list(events or [])
        self.status = "idle"
        self.client = Mock()
        self.client.request.side_effect = self.answer

    def calls(self, method: str, suffix: str) -> list[Any]:
        return [
            call
            for call in self.client.request.call_args_list
            if call.args[0] == method and str(call.args[1]).endswith(suffix)
        ]

    def answer(self, method: str, url: str, **kwargs: Any) -> Mock:
        info = {"id": self.conversation_id, "execution_status": self.status}
        if method == "POST" and url == "/api/conversations":
            return _response(info)
        if method == "POST" and url.endswith("/fork"):
            return _response({"id": self.fork_id, "tags": {"title": "fork"}}, 201)
        if method == "GET" and url.endswith("/events/search"):
            return _response({"items": self.events, "next_page_id": None})
        if method == "GET" and url.endswith("/events/count"):
            return _response(len(self.events))
        if method == "POST" and url.endswith("/run"):
            self.status = "running"
            return _response({})
        if method == "GET" and url.startswith("/api/conversations/"):
            # A run is seen running once, then finished, as a server's polled status goes.
            self.status = "finished" if self.status == "running" else self.status
            return _response(info)
        return _response({})


@pytest.fixture
def no_socket() -> Iterator[Mock]:
    """The events socket, replaced as OpenHands' tests replace it (they patch its class)."""
    with patch("cowconv.backends.remote.WebSocketCallbackClient") as socket_class:
        socket_class.return_value = Mock()
        yield socket_class


def _remote(server: _Server) -> RemoteConversation:
    workspace = RemoteWorkspace(host="http://localhost:8000", working_dir="/tmp")
    workspace._client = server.client
    agent = Agent(llm=LLM(model="gpt-4o-mini", api_key="test-key"), tools=[])
    return RemoteConversation(agent=agent, workspace=workspace)


class TestClientDoubles:
    def test_create_reads_the_id_from_json(self, no_socket: Mock):
        """A conversation is created from the double's ``.json()`` answer."""
        server = _Server()
        conversation = _remote(server)
        assert conversation.id == uuid.UUID(server.conversation_id)
        assert len(server.calls("POST", "/api/conversations")) == 1

    def test_the_events_come_from_the_search_page(self, no_socket: Mock):
        """The history is the events the double's search page holds, in order."""
        server = _Server([_message_event("one", "e1"), _message_event("two", "e2")])
        conversation = _remote(server)
        events = list(conversation.state.events)
        assert [event.id for event in events] == ["e1", "e2"]
        assert isinstance(events[1], MessageEvent)
        assert events[1].llm_message.content[0].text == "two"

    def test_send_message_posts_the_text(self, no_socket: Mock):
        """``send_message`` posts the user's text to the events route."""
        server = _Server()
        conversation = _remote(server)
        conversation.send_message("hello there")
        [call] = server.calls("POST", "/events")
        assert "hello there" in json.dumps(call.kwargs.get("json"))

    def test_fork_is_made_from_the_answer(self, no_socket: Mock):
        """``fork()`` posts the title once and the fork takes the id the double answered."""
        server = _Server()
        conversation = _remote(server)
        fork = conversation.fork(title="fork")
        assert fork.id == uuid.UUID(server.fork_id)
        [call] = server.calls("POST", "/fork")
        assert call.kwargs["json"]["title"] == "fork"

    def test_run_polls_until_finished(self, no_socket: Mock, monkeypatch: pytest.MonkeyPatch):
        """A blocking ``run()`` polls the info until it says the run, seen running, finished."""
        # With no socket, REST's "finished" is trusted once it has held this long (30 s).
        monkeypatch.setattr(remote_module, "_REST_ENDED_AFTER", 0.2)
        server = _Server()
        conversation = _remote(server)
        conversation.run(timeout=60, poll_interval=0.01)
        assert len(server.calls("POST", "/run")) == 1
        assert conversation.state.execution_status == ExecutionStatus.FINISHED

    def test_spec_mocks_of_httpx_response_are_read_through_json(self, no_socket: Mock):
        """``Mock(spec=httpx.Response)`` passes ``isinstance`` but has no bytes: ``.json()``."""
        server = _Server()
        plain = server.answer

        def answer(method: str, url: str, **kwargs: Any) -> Mock:
            given = plain(method, url, **kwargs)
            response = Mock(spec=httpx.Response)
            response.status_code = given.status_code
            response.is_success = True
            response.json.return_value = given.json.return_value
            return response

        server.client.request.side_effect = answer
        conversation = _remote(server)
        assert conversation.id == uuid.UUID(server.conversation_id)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Named, not a lambda: see tests/strategies.py (json_containers).
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    _containers,
    max_leaves=20,
)


class TestAnswerJson:
    @settings(max_examples=200, deadline=None)
    @given(_json)
    def test_a_double_and_a_real_response_read_alike(self, value: Any):
        """Any JSON body reads the same from a ``.json()`` double and from a real response."""
        assert answer_json(_response(value)) == value
        real = httpx.Response(200, content=json.dumps(value).encode())
        assert answer_json(real) == value

    def test_a_double_whose_json_fails_is_a_remote_error(self):
        """A double whose ``.json()`` raises ``ValueError`` is a ``RemoteError``, not a crash."""
        response = Mock()
        response.status_code = 502
        response.json.side_effect = ValueError("Expecting value")
        with pytest.raises(RemoteError, match="502.*not JSON"):
            answer_json(response)

    def test_an_object_without_json_is_a_remote_error(self):
        """Something that is no response at all is refused, saying what it was."""
        with pytest.raises(RemoteError, match="int has no json"):
            answer_json(5)

    def test_real_bytes_keep_the_depth_limit(self):
        """A real response's bytes are decoded with the depth limit, never ``json.loads``."""
        deep = httpx.Response(200, content=b"[" * 5000 + b"]" * 5000)
        with pytest.raises(RemoteError, match="nested deeper than 512"):
            answer_json(deep)
