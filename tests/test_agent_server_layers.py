"""The agent server's layers: routers, services, dependencies, as OpenHands' server has them.

Real parts only: the routers mounted on a plain FastAPI app with a real
``ConversationService`` (in memory or over a SQLite directory), the full
``create_app()`` for the routes' HTTP contract, and the services called
directly (async).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from cowconv import ConversationConflictError, EventNotFoundError, LocalWorkspace, NeverConfirm
from cowconv.agent_server import ConversationService, EventService, create_app
from cowconv.agent_server.conversation_router import conversation_router
from cowconv.agent_server.dependencies import get_conversation_service, get_event_service
from cowconv.agent_server.event_router import event_router, normalize_datetime_to_server_timezone
from cowconv.agent_server.models import (
    ConversationInfo,
    ConversationSortOrder,
    StartConversationRequest,
    UpdateConversationRequest,
)
from cowconv.core.message import Message, TextContent

AGENT = {"llm": {"model": "openai/gpt-4o", "api_key": "sk-layers"}}


def start_body(tmp_path: Path | str, **extra: Any) -> dict[str, Any]:
    return {"agent": AGENT, "workspace": {"working_dir": str(tmp_path)}, **extra}


def routers_app(service: ConversationService) -> FastAPI:
    """The two routers on a plain FastAPI app, as OpenHands' router tests mount them."""
    app = FastAPI()
    app.include_router(conversation_router, prefix="/api")
    app.include_router(event_router, prefix="/api")
    app.state.conversation_service = service
    return app


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(data_dir=tmp_path / "data")) as test_client:
        yield test_client


def user_text(client: TestClient, conversation_id: str, text: str) -> dict[str, Any]:
    body = {"role": "user", "content": [{"type": "text", "text": text}]}
    response = client.post(f"/api/conversations/{conversation_id}/events", json=body)
    assert response.status_code == 200, response.text
    event: dict[str, Any] = response.json()["event"]
    return event


class TestRoutersOnTheirOwn:
    """conversation_router / event_router work on any FastAPI app that provides the service."""

    def test_create_search_fork_navigate(self, tmp_path: Path) -> None:
        with TestClient(routers_app(ConversationService())) as client:
            created = client.post("/api/conversations", json=start_body(tmp_path))
            assert created.status_code == 201
            conversation_id = created.json()["id"]
            first = user_text(client, conversation_id, "first")
            user_text(client, conversation_id, "second")
            assert client.get("/api/conversations/count").json() == 1
            page = client.get("/api/conversations/search").json()
            assert [item["id"] for item in page["items"]] == [conversation_id]
            fork = client.post(
                f"/api/conversations/{conversation_id}/fork",
                json={"title": "B", "from_event_id": first["id"]},
            )
            assert fork.status_code == 201
            assert fork.json()["leaf_event_id"] == first["id"]
            assert fork.json()["forked_from_conversation_id"] == conversation_id
            moved = client.post(
                f"/api/conversations/{conversation_id}/navigate", json={"event_id": first["id"]}
            )
            assert moved.status_code == 200 and moved.json()["leaf_event_id"] == first["id"]
            assert client.get("/api/conversations/count").json() == 2

    def test_unknown_conversation_is_a_404_naming_the_error_in_create_app(
        self, client: TestClient
    ) -> None:
        for method, path in [
            ("GET", "/api/conversations/nope"),
            ("POST", "/api/conversations/nope/run"),
            ("POST", "/api/conversations/nope/pause"),
            ("DELETE", "/api/conversations/nope"),
            ("GET", "/api/conversations/nope/events/search"),
        ]:
            response = client.request(method, path)
            assert response.status_code == 404, (method, path)
            assert response.json()["error"] == "ConversationNotFoundError"
            assert "nope" in response.json()["detail"]

    def test_dependency_override_replaces_the_service(self, tmp_path: Path) -> None:
        app = routers_app(ConversationService())
        other = ConversationService()
        info, _ = asyncio.run(
            other.start_conversation(StartConversationRequest.model_validate(start_body(tmp_path)))
        )
        with TestClient(app) as client:
            assert client.get("/api/conversations/count").json() == 0
            app.dependency_overrides[get_conversation_service] = lambda: other
            assert client.get("/api/conversations/count").json() == 1
            assert client.get(f"/api/conversations/{info.id}").json()["id"] == str(info.id)

    def test_event_service_override(self, tmp_path: Path) -> None:
        service = ConversationService()
        info, _ = asyncio.run(
            service.start_conversation(
                StartConversationRequest.model_validate(start_body(tmp_path))
            )
        )
        events = asyncio.run(service.get_event_service(info.id))
        assert isinstance(events, EventService)
        app = routers_app(ConversationService())  # knows no conversation
        app.dependency_overrides[get_event_service] = lambda: events
        any_id = str(uuid.uuid4())  # a router on an app without a Config takes UUIDs only
        with TestClient(app) as client:
            user_text(client, any_id, "through the override")
            counted = client.get(
                f"/api/conversations/{any_id}/events/count", params={"source": "user"}
            )
            assert counted.json() == 1


class TestConversationService:
    """The service itself, over a SQLite directory, as OpenHands' service tests drive it."""

    def test_start_fork_navigate_and_restart(self, tmp_path: Path) -> None:
        directory = tmp_path / "conversations"
        custom = uuid.uuid4()

        async def first_life() -> tuple[uuid.UUID, str, str]:
            async with ConversationService(conversations_dir=directory) as service:
                request = StartConversationRequest(
                    agent=AGENT,
                    workspace=LocalWorkspace(working_dir=str(tmp_path)),
                    confirmation_policy=NeverConfirm(),
                    conversation_id=custom,
                )
                info, created = await service.start_conversation(request)
                assert created and info.id == custom
                again, created = await service.start_conversation(request)
                assert not created and again.id == custom
                events = await service.get_event_service(custom)
                assert events is not None
                sent = [
                    await events.send_message(Message(role="user", content=[TextContent(text=t)]))
                    for t in ("first", "second")
                ]
                fork = await service.fork_conversation(custom, from_event_id=sent[0].event.id)
                assert fork is not None and fork.forked_from_event_id == sent[0].event.id
                with pytest.raises(ValueError, match="already exists"):
                    await service.fork_conversation(custom, fork_id=fork.id)
                with pytest.raises(EventNotFoundError):
                    await service.fork_conversation(custom, from_event_id="evt-missing")
                with pytest.raises(EventNotFoundError):
                    await service.navigate_conversation(custom, event_id="evt-missing")
                moved = await service.navigate_conversation(custom, event_id=sent[0].event.id)
                assert moved is not None and moved.leaf_event_id == sent[0].event.id
                assert await service.navigate_conversation(uuid.uuid4(), event_id=None) is None
                return fork.id, sent[0].event.id, str(fork.id)

        fork_id, leaf, _ = asyncio.run(first_life())

        async def second_life() -> None:
            async with ConversationService(conversations_dir=directory) as service:
                source = await service.get_conversation(custom)
                fork = await service.get_conversation(fork_id)
                assert source is not None and source.leaf_event_id == leaf
                assert fork is not None and fork.forked_from_conversation_id == custom
                assert await service.count_conversations() == 2

        asyncio.run(second_life())

    def test_update_delete_and_missing(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            async with ConversationService() as service:
                request = StartConversationRequest.model_validate(start_body(tmp_path))
                info, _ = await service.start_conversation(request)
                update = UpdateConversationRequest(title="  Report  ", tags={"team": "emea"})
                assert await service.update_conversation(info.id, update)
                found = await service.get_conversation(info.id)
                assert found is not None and found.title == "Report"
                assert found.tags["team"] == "emea"
                assert not await service.update_conversation(uuid.uuid4(), update)
                assert not await service.delete_conversation(uuid.uuid4())
                assert not await service.pause_conversation(uuid.uuid4())
                assert await service.batch_get_conversations([info.id, "nope"]) == [found, None]
                assert await service.delete_conversation(info.id)
                assert await service.get_conversation(info.id) is None

        asyncio.run(scenario())

    def test_a_closed_service_refuses(self) -> None:
        async def scenario() -> None:
            service = ConversationService()
            await service.close()
            with pytest.raises(ConversationConflictError, match="inactive_service"):
                await service.search_conversations()
            with pytest.raises(ConversationConflictError, match="inactive_service"):
                await service.count_conversations()

        asyncio.run(scenario())


@functools.cache
def searched_service() -> tuple[ConversationService, list[ConversationInfo]]:
    """Seven conversations with distinct creation times, some of them updated later."""

    async def build() -> tuple[ConversationService, list[ConversationInfo]]:
        service = ConversationService()
        infos = []
        for number in range(7):
            request = StartConversationRequest.model_validate(start_body(".", id=f"c{number}"))
            info, _ = await service.start_conversation(request)
            if number % 3 == 0:
                await service.update_conversation(info.id, UpdateConversationRequest(title="x"))
            found = await service.get_conversation(info.id)
            assert found is not None
            infos.append(found)
        return service, infos

    return asyncio.run(build())


class TestSearchPaging:
    @settings(max_examples=30, deadline=None)
    @given(limit=st.integers(1, 8), order=st.sampled_from(list(ConversationSortOrder)))
    def test_pages_cover_every_conversation_once_in_order(
        self, limit: int, order: ConversationSortOrder
    ) -> None:
        service, infos = searched_service()

        async def walk() -> list[ConversationInfo]:
            seen: list[ConversationInfo] = []
            page_id = None
            while True:
                page = await service.search_conversations(page_id, limit, None, order)
                assert len(page.items) <= limit
                seen.extend(page.items)
                if page.next_page_id is None:
                    return seen
                page_id = page.next_page_id

        seen = asyncio.run(walk())
        assert sorted(str(info.id) for info in seen) == sorted(str(info.id) for info in infos)
        keys = [getattr(info, order.field) for info in seen]
        assert keys == sorted(keys, reverse=order.descending)

    def test_an_unknown_page_id_starts_from_the_beginning(self) -> None:
        service, infos = searched_service()
        page = asyncio.run(service.search_conversations(uuid.uuid4().hex, 100))
        assert len(page.items) == len(infos) and page.next_page_id is None


class TestEventSearch:
    """OpenHands' event search and count over real events (create_app)."""

    def test_filters_sort_and_pages(self, client: TestClient, tmp_path: Path) -> None:
        conversation_id = client.post("/api/conversations", json=start_body(tmp_path)).json()["id"]
        for text in ("Hello world", "Python is great", "Say HELLO to everyone"):
            user_text(client, conversation_id, text)
        path = f"/api/conversations/{conversation_id}/events"
        everything = client.get(f"{path}/search").json()["items"]
        assert [event["kind"] for event in everything] == [
            "SystemPromptEvent",
            "MessageEvent",
            "MessageEvent",
            "MessageEvent",
        ]
        hello = client.get(f"{path}/search", params={"body": "hello"}).json()["items"]
        assert len(hello) == 2
        assert client.get(f"{path}/count", params={"body": "hello"}).json() == 2
        assert client.get(f"{path}/count", params={"source": "user"}).json() == 3
        assert client.get(f"{path}/count", params={"kind": "SystemPromptEvent"}).json() == 1
        newest_first = client.get(f"{path}/search", params={"sort_order": "TIMESTAMP_DESC"})
        assert [e["id"] for e in newest_first.json()["items"]] == [e["id"] for e in everything][
            ::-1
        ]
        first = client.get(f"{path}/search", params={"limit": 3}).json()
        rest = client.get(f"{path}/search", params={"page_id": first["next_page_id"]}).json()
        assert [e["id"] for e in first["items"] + rest["items"]] == [e["id"] for e in everything]
        assert rest["next_page_id"] is None

    def test_time_bounds_aware_and_naive_agree(self, client: TestClient, tmp_path: Path) -> None:
        conversation_id = client.post("/api/conversations", json=start_body(tmp_path)).json()["id"]
        user_text(client, conversation_id, "now")
        path = f"/api/conversations/{conversation_id}/events/count"
        past = datetime.now(UTC) - timedelta(hours=1)
        future = datetime.now(UTC) + timedelta(hours=1)
        naive_past = normalize_datetime_to_server_timezone(past).isoformat()
        for low in (past.isoformat(), naive_past):
            assert client.get(path, params={"timestamp__gte": low}).json() == 2
        assert client.get(path, params={"timestamp__gte": future.isoformat()}).json() == 0
        assert client.get(path, params={"timestamp__lt": past.isoformat()}).json() == 0


class TestOpenHandsSettingsRoutes:
    def test_secrets_and_confirmation_policy(self, client: TestClient, tmp_path: Path) -> None:
        conversation_id = client.post("/api/conversations", json=start_body(tmp_path)).json()["id"]
        path = f"/api/conversations/{conversation_id}"
        assert client.post(f"{path}/secrets", json={"secrets": {}}).json() == {"success": True}
        refused = client.post(f"{path}/secrets", json={"secrets": {"API_KEY": "x"}})
        assert refused.status_code == 422 and "secrets" in str(refused.json()["detail"])
        never = {"policy": {"kind": "NeverConfirm"}}
        assert client.post(f"{path}/confirmation_policy", json=never).status_code == 200
        always = {"policy": {"kind": "AlwaysConfirm"}}
        assert client.post(f"{path}/confirmation_policy", json=always).status_code == 200
        assert client.get(path).json()["confirmation_policy"] == {"kind": "AlwaysConfirm"}
        unknown = client.post(f"{path}/confirmation_policy", json={"policy": {"kind": "Maybe"}})
        assert unknown.status_code == 422 and "policy" in str(unknown.json()["detail"])
        missing = client.post("/api/conversations/nope/secrets", json={"secrets": {}})
        assert missing.status_code == 404

    def test_message_roles_and_shapes(self, client: TestClient, tmp_path: Path) -> None:
        conversation_id = client.post("/api/conversations", json=start_body(tmp_path)).json()["id"]
        path = f"/api/conversations/{conversation_id}/events"
        for role in ("assistant", "system", "tool"):
            body = {"role": role, "content": [{"type": "text", "text": "x"}]}
            answer = client.post(path, json=body)
            assert answer.status_code == 422 and "role" in str(answer.json()["detail"]), role
        assert client.post(path, json={"role": "nobody", "content": []}).status_code == 422
        assert client.post(path, json={"role": "user", "content": "bare"}).status_code == 422
        assert client.post(path, json={"text": "as text"}).status_code == 200
        assert client.get(f"{path}/count", params={"source": "user"}).json() == 1
        sent = client.post(path, json={"text": "signed", "sender": "ci-bot"}).json()["event"]
        assert sent["sender"] == "ci-bot"
        assistant = {"role": "assistant", "content": [{"type": "text", "text": "x"}]}
        refused = client.post(
            "/api/conversations", json=start_body(tmp_path, initial_message=assistant)
        )
        assert refused.status_code == 422 and "role" in str(refused.json()["detail"])
        assert client.get("/api/conversations/count").json() == 1  # nothing was stored
