"""Event ids cannot break event streams; unknown ids leak nothing.

Real parts: a real uvicorn server on 127.0.0.1, httpx and httpx_sse over
TCP, the remote client's real run (the stub LLM behind litellm's HTTP path).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx_sse
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cowconv import (
    LLM,
    Agent,
    Conversation,
    CowconvError,
    MessageEvent,
    PauseEvent,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.core.events import timestamp_now
from cowconv.testing import StubLLMServer, StubReply
from tests.conftest import Backend

BREAKING_IDS = [
    *(" a", "a ", "a\nb", "a\rb", "a\r\nb", "a\x00b", "\n", "tab\there", "a\u2028b", "a\x85b", "")
]


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return create_app()


@pytest.fixture(scope="module")
def server(app: FastAPI) -> Iterator[BackgroundServer]:
    with BackgroundServer(app) as running:
        yield running


def _create(http: httpx.Client, directory: Path) -> str:
    body = {
        "agent": {"llm": {"model": "openai/gpt-4o"}},
        "workspace": {"working_dir": str(directory)},
    }
    created = http.post("/api/conversations", json=body)
    assert created.status_code == 201, created.text
    conversation_id: str = created.json()["id"]
    assert (
        http.post(f"/api/conversations/{conversation_id}/messages", json={"text": "hi"}).status_code
        == 201
    )
    return conversation_id


def _streamed_ids(http: httpx.Client, conversation_id: str) -> list[str]:
    """Every event id the stream delivers from the start, read by a standard SSE parser."""
    ids: list[str] = []
    with httpx_sse.connect_sse(
        http,
        "GET",
        f"/api/conversations/{conversation_id}/events/stream",
        params={"offset": 0, "until_idle": "true"},
        timeout=60,
    ) as source:
        assert source.response.status_code == 200
        for message in source.iter_sse():
            if message.event == "event":
                event = json.loads(message.data)
                assert message.id == event["id"]  # the id line is the whole id
                ids.append(event["id"])
            else:
                assert message.event == "status", message
    return ids


def _page_ids(http: httpx.Client, conversation_id: str) -> list[str]:
    page = http.get(f"/api/conversations/{conversation_id}/events", params={"limit": 1000})
    assert page.status_code == 200
    return [item["id"] for item in page.json()["items"]]


def _remote_run_works(server: BackgroundServer, stub: StubLLMServer, directory: Path) -> None:
    stub.script(StubReply.text("still answering"))
    agent = Agent(llm=LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0))
    with Conversation(agent, Workspace(host=server.url, working_dir=str(directory))) as remote:
        remote.send_message("go on")
        remote.run()
        last = remote.state.events[-1]
        assert isinstance(last, MessageEvent) and last.text == "still answering"


class TestEventIdsOverRest:
    @pytest.mark.parametrize("event_id", BREAKING_IDS)
    def test_breaking_id_is_refused_and_streams_keep_working(
        self, server: BackgroundServer, stub: StubLLMServer, tmp_path: Path, event_id: str
    ) -> None:
        """An event id with a line break, NUL or other control character: 422, nothing
        recorded, and the stream, the pages and a remote run all still work."""
        with httpx.Client(base_url=server.url, timeout=60) as http:
            conversation_id = _create(http, tmp_path)
            before = _page_ids(http, conversation_id)
            answer = http.post(
                f"/api/conversations/{conversation_id}/events/append",
                json={"kind": "PauseEvent", "source": "user", "id": event_id},
            )
            assert answer.status_code == 422, answer.text
            assert "event id" in answer.text
            assert _page_ids(http, conversation_id) == before
            assert _streamed_ids(http, conversation_id) == before
        _remote_run_works(server, stub, tmp_path)

    @given(event_id=st.text(max_size=12))
    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    def test_any_id_is_refused_or_streams_work(
        self, server: BackgroundServer, tmp_path: Path, event_id: str
    ) -> None:
        """Any id: refused with a 4xx that says why, or every stream delivers it intact."""
        with httpx.Client(base_url=server.url, timeout=60) as http:
            conversation_id = _create(http, tmp_path)
            try:
                body = json.dumps({"kind": "PauseEvent", "source": "user", "id": event_id})
            except UnicodeEncodeError:  # pragma: no cover - json.dumps escapes surrogates
                return
            answer = http.post(
                f"/api/conversations/{conversation_id}/events/append",
                content=body.encode(),
                headers={"Content-Type": "application/json"},
            )
            if answer.status_code != 201:
                assert 400 <= answer.status_code < 500, answer.text
                assert answer.json()["detail"]
                expected = _page_ids(http, conversation_id)
                assert event_id not in expected
            else:
                expected = _page_ids(http, conversation_id)
                assert expected[-1] == event_id
            assert _streamed_ids(http, conversation_id) == expected
            # Reconnecting after that event (the header a browser sends) works too.
            if answer.status_code == 201:
                with httpx_sse.connect_sse(
                    http,
                    "GET",
                    f"/api/conversations/{conversation_id}/events/stream",
                    params={"until_idle": "true"},
                    headers={"Last-Event-ID": event_id.encode()},  # UTF-8, as browsers send
                    timeout=60,
                ) as source:
                    assert source.response.status_code == 200
                    assert [m.event for m in source.iter_sse()] == ["status"]

    def test_remote_run_after_many_ids(
        self, server: BackgroundServer, stub: StubLLMServer, tmp_path: Path
    ) -> None:
        """After the property test's traffic the server still runs remote conversations."""
        _remote_run_works(server, stub, tmp_path)


def _construct_pause(event_id: str) -> PauseEvent:
    return PauseEvent.model_construct(id=event_id, source="user", timestamp=timestamp_now())


@given(event_id=st.text(max_size=10) | st.sampled_from(BREAKING_IDS))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_any_event_id_on_every_backend(backend: Backend, event_id: str) -> None:
    """Through the library on every backend: an id is refused (ValidationError from the
    constructor, a CowconvError from append_event for a model_construct-ed event) and
    nothing is recorded, or it is recorded and reloads unchanged."""
    conversation = backend.new(Agent(llm=_offline_llm()))
    conversation.send_message("hi")
    before = conversation.state
    try:
        event: PauseEvent = PauseEvent(id=event_id)
    except ValidationError:
        event = _construct_pause(event_id)
    try:
        conversation.append_event(event)
    except CowconvError as error:
        assert str(error)
        assert conversation.state.events == before.events
        assert [e.id for e in backend.reload(conversation).events] == [e.id for e in before.events]
        return
    reloaded = backend.reload(conversation)
    # Recorded as given (the history stamps its parent_id) and loaded back equal.
    recorded = conversation.state.events[-1]
    assert recorded.id == event_id and recorded.model_copy(update={"parent_id": None}) == event
    assert reloaded.events[-1] == recorded
    assert [e.id for e in reloaded.events] == [e.id for e in conversation.state.events]


def _offline_llm() -> LLM:
    return LLM(model="openai/gpt-4o")


class TestUnknownIds:
    def test_gets_of_unknown_ids_leave_the_registry_as_it_was(
        self, app: FastAPI, server: BackgroundServer, tmp_path: Path
    ) -> None:
        """GET, events, stream, delete and fork of 300 unknown ids: no hub is kept for any."""
        registry = app.state.registry
        with httpx.Client(base_url=server.url, timeout=60) as http:
            known = _create(http, tmp_path)
            size = len(registry._hubs)
            for number in range(60):
                unknown = f"nobody-{number}"
                base = f"/api/conversations/{unknown}"
                assert http.get(base).status_code == 404
                assert http.get(f"{base}/events").status_code == 404
                assert http.get(f"{base}/events/stream").status_code == 404
                assert http.delete(base).status_code == 404
                assert http.post(f"{base}/fork", json={}).status_code == 404
            # A fork that is refused (its id is taken) leaves no hub for that id either.
            assert (
                http.post(f"/api/conversations/{known}/fork", json={"id": known}).status_code == 409
            )
            assert len(registry._hubs) == size
