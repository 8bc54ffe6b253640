"""OpenHands' service shapes on cowconv's agent server: ``StoredConversation``, the live map of
``EventService``\\ s, ``meta.json``, the inactive service.

Real parts only: a ``ConversationService`` over a SQLite directory (or in
memory), real ``EventService``\\ s over real registries, the files on disk.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from cowconv import (
    LLM,
    Agent,
    AlwaysConfirm,
    ConversationConflictError,
    ConversationExistsError,
    ConversationState,
    InactiveServiceError,
    LocalWorkspace,
    NeverConfirm,
    Workspace,
)
from cowconv.agent_server import ConversationService, EventService
from cowconv.agent_server.event_service import conversation_dir, stored_conversation
from cowconv.agent_server.models import (
    ConversationSortOrder,
    StartConversationRequest,
    StoredConversation,
    UpdateConversationRequest,
)
from cowconv.agent_server.registry import ConversationRegistry
from cowconv.core.message import Message, TextContent

AGENT = {"llm": {"model": "openai/gpt-4o", "api_key": "sk-service"}}


def request(tmp_path: Path, **extra: Any) -> StartConversationRequest:
    body = {"agent": AGENT, "workspace": {"working_dir": str(tmp_path)}, **extra}
    return StartConversationRequest.model_validate(body)


def meta(directory: Path, conversation_id: Any) -> dict[str, Any]:
    path = conversation_dir(directory, conversation_id)
    assert path is not None
    loaded: dict[str, Any] = json.loads((path / "meta.json").read_text())
    return loaded


class TestStoredConversation:
    def test_takes_a_start_requests_json(self, tmp_path: Path) -> None:
        """A start request's JSON (OpenHands' names) makes a StoredConversation; the fields
        cowconv does not act on are kept as sent."""
        start = request(tmp_path, max_iterations=7, stuck_detection=False, tags={"a": "b"})
        dumped = start.model_dump(mode="json")
        assert "conversation_id" in dumped and "id" not in dumped
        stored = StoredConversation(id=uuid.uuid4(), **dumped)
        assert stored.max_iterations == 7 and stored.tags == {"a": "b"}
        assert stored.kept["stuck_detection"] is False
        assert stored.workspace.working_dir == str(tmp_path)

    def test_refuses_what_cowconv_cannot_honour(self) -> None:
        """Secrets are refused, not stored and ignored."""
        with pytest.raises(ValidationError):
            StoredConversation(id="c1", workspace=Workspace(working_dir="."), secrets={"T": "x"})

    def test_keeps_a_confirming_policy(self) -> None:
        """A policy that asks for confirmation is taken: cowconv's loop acts on it."""
        stored = StoredConversation(
            id="c1", workspace=Workspace(working_dir="."), confirmation_policy=AlwaysConfirm()
        )
        assert isinstance(stored.confirmation_policy, AlwaysConfirm)

    @given(st.text(min_size=1).filter(lambda text: text.strip() and "\x00" not in text))
    def test_conversation_dir_is_one_component(self, text: str) -> None:
        """Whatever the id, its meta.json directory is one path component under the directory."""
        try:
            directory = conversation_dir("/data", text)
        except ValueError:
            return  # an id cowconv refuses anyway
        assert directory is not None and directory.parent == Path("/data")
        assert directory.name not in {".", ".."} and "/" not in directory.name


class TestConversationStatePolicy:
    def test_takes_any_policy(self) -> None:
        """A state holds OpenHands' confirmation_policy field, NeverConfirm by default."""
        fields: dict[str, Any] = {
            "id": "c1",
            "agent": Agent(llm=LLM(model="m")),
            "workspace": Workspace(working_dir="."),
        }
        assert isinstance(ConversationState(**fields).confirmation_policy, NeverConfirm)
        state = ConversationState(**fields, confirmation_policy=AlwaysConfirm())
        assert isinstance(state.confirmation_policy, AlwaysConfirm)
        dumped = state.model_dump(mode="json")
        assert ConversationState.model_validate(dumped).confirmation_policy == AlwaysConfirm()


class TestInactiveService:
    def test_closed_service_raises_inactive_service(self, tmp_path: Path) -> None:
        """Once closed, every method raises InactiveServiceError, a ValueError and a conflict."""

        async def scenario() -> None:
            service = ConversationService()
            await service.close()
            assert service._event_services is None
            for call in (
                service.search_conversations(),
                service.count_conversations(),
                service.get_conversation("c1"),
                service.delete_conversation("c1"),
                service.start_conversation(request(tmp_path)),
            ):
                with pytest.raises(InactiveServiceError, match="inactive_service") as raised:
                    await call
                assert isinstance(raised.value, ValueError)
                assert isinstance(raised.value, ConversationConflictError)

        asyncio.run(scenario())

    def test_event_service_before_start(self) -> None:
        """An EventService serves nothing before start()."""
        stored = StoredConversation(id="c1", workspace=Workspace(working_dir="."))
        service = EventService(stored)
        with pytest.raises(InactiveServiceError):
            asyncio.run(service.get_state())
        assert service._conversation is None


class TestMetaJson:
    def test_start_update_restart_fork_delete(self, tmp_path: Path) -> None:
        """meta.json follows the conversation: written at start, rewritten on update, left
        alone by a refused fork, written for a fork, removed with the conversation."""
        directory = tmp_path / "conversations"

        async def first_life() -> uuid.UUID:
            async with ConversationService(conversations_dir=directory) as service:
                info, _ = await service.start_conversation(request(tmp_path, stuck_detection=False))
                assert isinstance(info.id, uuid.UUID)
                assert info.id in (service._event_services or {})
                written = meta(directory, info.id)
                assert "agent" not in written and written["stuck_detection"] is False
                assert "sk-service" not in json.dumps(written)
                update = UpdateConversationRequest(title="Report")
                assert await service.update_conversation(info.id, update)
                assert meta(directory, info.id)["title"] == "Report"
                return info.id

        source = asyncio.run(first_life())

        async def second_life() -> None:
            async with ConversationService(conversations_dir=directory) as service:
                assert service._event_services == {}
                target, _ = await service.start_conversation(request(tmp_path))
            async with ConversationService(conversations_dir=directory) as service:
                before = meta(directory, target.id)
                with pytest.raises(ConversationExistsError, match="already exists"):
                    await service.fork_conversation(source, fork_id=target.id)
                assert meta(directory, target.id) == before
                fork = await service.fork_conversation(source, title="B")
                assert fork is not None
                assert meta(directory, fork.id)["forked_from_conversation_id"] == str(source)
                assert await service.delete_conversation(fork.id)
                assert not (conversation_dir(directory, fork.id) or directory).exists()
                assert fork.id not in (service._event_services or {})
                assert not await service.delete_conversation(fork.id)
                assert await service.count_conversations() == 2

        asyncio.run(second_life())


class TestLiveMap:
    def test_search_and_count_include_conversations_the_store_does_not_list(
        self, tmp_path: Path
    ) -> None:
        """A conversation served from the live map but held by another registry is searched,
        counted, sorted and read with get_conversation."""

        async def scenario() -> None:
            async with ConversationService() as service:
                listed, _ = await service.start_conversation(request(tmp_path))
                elsewhere = ConversationRegistry()
                stored = StoredConversation(
                    id=uuid.uuid4(), workspace=LocalWorkspace(working_dir=str(tmp_path))
                )
                outside = EventService(
                    stored, agent=Agent(llm=LLM(model="openai/gpt-4o")), registry=elsewhere
                )
                await outside.start()
                assert service._event_services is not None
                service._event_services[stored.id] = outside
                assert await service.count_conversations() == 2
                page = await service.search_conversations(
                    sort_order=ConversationSortOrder.CREATED_AT
                )
                assert [item.id for item in page.items] == [listed.id, stored.id]
                page = await service.search_conversations(limit=1)  # newest first
                assert [item.id for item in page.items] == [stored.id]
                assert page.next_page_id is not None
                found = await service.get_conversation(stored.id)
                assert found is not None and found.id == stored.id
                events = await service.get_event_service(stored.id)
                assert events is outside
                await events.send_message(Message(role="user", content=[TextContent(text="hi")]))
                assert await events.count_events(kind="MessageEvent") == 1

        asyncio.run(scenario())

    def test_served_conversation_joins_the_map(self, tmp_path: Path) -> None:
        """A stored conversation gets its EventService in the map when first served, with the
        stored metadata read off its snapshot."""

        async def scenario() -> None:
            registry = ConversationRegistry()
            conversation = registry.create(
                Agent(llm=LLM(model="openai/gpt-4o")), str(tmp_path), tags={"team": "emea"}
            )
            async with ConversationService(registry) as service:
                assert service._event_services == {}
                events = await service.get_event_service(conversation.id)
                assert events is not None and service._event_services == {conversation.id: events}
                assert events.stored == stored_conversation(conversation)
                assert events.stored.tags == {"team": "emea"}
                assert events._conversation is registry.get(conversation.id)

        asyncio.run(scenario())


class TestAssignedConversation:
    def test_serves_an_assigned_conversation(self, tmp_path: Path) -> None:
        """A conversation assigned to ``_conversation`` (OpenHands' attribute) is served
        without start(): its events are searched and counted."""

        async def scenario() -> None:
            registry = ConversationRegistry()
            conversation = registry.create(Agent(llm=LLM(model="openai/gpt-4o")), str(tmp_path))
            conversation.send_message("Hello world")
            conversation.send_message("something else")
            service = EventService(stored_conversation(conversation))
            service._conversation = conversation
            assert service.get_conversation() is conversation
            page = await service.search_events(body="hello")
            assert [item["id"] for item in page.items] == [conversation.state.branch[1].id]
            assert await service.count_events(source="user") == 2

        asyncio.run(scenario())
