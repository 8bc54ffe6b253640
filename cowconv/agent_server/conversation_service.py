"""The conversations of an agent server as the routes reach them (OpenHands' ConversationService).

A :class:`ConversationService` is the one place the routes of
:mod:`~cowconv.agent_server.conversation_router` and
:mod:`~cowconv.agent_server.event_router` reach conversations: it is backed
by a :class:`~cowconv.agent_server.ConversationRegistry` (and so by a
cowconv store), its methods are async, and it keeps OpenHands' contract: a
method about one conversation answers ``None`` (or ``False``) when there is
no such conversation, and the routes turn that into a 404.

>>> import asyncio
>>> from cowconv.agent_server.models import StartConversationRequest
>>> service = ConversationService()
>>> request = StartConversationRequest.model_validate(
...     {"agent": {"llm": {"model": "openai/gpt-4o"}}, "workspace": {"working_dir": "."}})
>>> info, created = asyncio.run(service.start_conversation(request))
>>> created, asyncio.run(service.count_conversations())
(True, 1)
>>> fork = asyncio.run(service.fork_conversation(info.id, title="B"))
>>> fork.title, asyncio.run(service.get_conversation("no-such-id")) is None
('B', True)
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from cowconv._exceptions import ConversationConflictError, ConversationNotFoundError
from cowconv.agent_server.event_service import OPENHANDS_KEY, EventService, conversation_info
from cowconv.agent_server.models import (
    ConversationInfo,
    ConversationListPage,
    ConversationPage,
    ConversationSortOrder,
    StartConversationRequest,
    UpdateConversationRequest,
)
from cowconv.agent_server.registry import ConversationRegistry
from cowconv.backends.wire import mask_secrets, unsupported
from cowconv.core.ids import ConversationID, id_text
from cowconv.core.state import ConversationInfo as ConversationSummary
from cowconv.core.state import ExecutionStatus
from cowconv.stores import SQLiteStore, Store

__all__ = ["ConversationService"]

_T = TypeVar("_T")
_LIST_PAGE = 1000


class ConversationService:
    """The conversations of ``registry`` (a new one over ``conversations_dir``, a SQLite store
    there, or in memory when neither is given), for the routes.

    Use it as an async context manager, or call :meth:`close`, to close what
    it opened. ``conversation_worktree_root`` is OpenHands' argument, taken
    and unused (cowconv runs no git worktrees).

    >>> import asyncio
    >>> asyncio.run(ConversationService().search_conversations()).items
    []
    """

    def __init__(
        self,
        registry: ConversationRegistry | None = None,
        *,
        conversations_dir: str | os.PathLike[str] | None = None,
        conversation_worktree_root: str | os.PathLike[str] | None = None,
    ) -> None:
        self._store: Store | None = None
        self._owns_registry = registry is None
        if registry is None:
            if conversations_dir is not None:
                directory = Path(conversations_dir).expanduser()
                directory.mkdir(parents=True, exist_ok=True)
                self._store = SQLiteStore(directory)
            registry = ConversationRegistry(self._store)
        self._registry = registry
        self.conversation_worktree_root = conversation_worktree_root
        self._closed = False

    @property
    def registry(self) -> ConversationRegistry:
        """The registry the conversations live in."""
        return self._registry

    async def __aenter__(self) -> ConversationService:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Pause running conversations and close what this service opened; afterwards every
        method raises :class:`~cowconv.ConversationConflictError` (``inactive_service``)."""
        self._closed = True
        if self._owns_registry:
            await asyncio.to_thread(self._registry.close)
        if self._store is not None:
            self._store.close()

    async def _call(self, work: Callable[[], _T]) -> _T:
        if self._closed:
            raise ConversationConflictError("inactive_service: the conversation service is closed")
        return await asyncio.to_thread(work)

    def _find(self, conversation_id: ConversationID) -> Any:
        try:
            return self._registry.get(conversation_id)
        except ConversationNotFoundError:
            return None

    # -- one conversation --------------------------------------------------------

    async def get_event_service(self, conversation_id: ConversationID) -> EventService | None:
        """The :class:`EventService` of a conversation, or ``None`` if there is none."""
        if await self._call(lambda: self._find(conversation_id)) is None:
            return None
        # An EventService holds no state of its own (the registry does): one per call.
        return EventService(self._registry, conversation_id)

    async def get_conversation(self, conversation_id: ConversationID) -> ConversationInfo | None:
        """The conversation, or ``None``."""

        def read() -> ConversationInfo | None:
            conversation = self._find(conversation_id)
            return None if conversation is None else conversation_info(conversation)

        return await self._call(read)

    async def batch_get_conversations(
        self, ids: Sequence[ConversationID]
    ) -> list[ConversationInfo | None]:
        """Those conversations in that order, ``None`` for an unknown one."""
        return [await self.get_conversation(conversation_id) for conversation_id in ids]

    # -- many conversations ------------------------------------------------------

    def _summaries(self, status: ExecutionStatus | None) -> list[ConversationSummary]:
        found: list[ConversationSummary] = []
        offset = 0
        while True:
            page = self._registry.list(limit=_LIST_PAGE, offset=offset)
            found.extend(info for info in page if status is None or info.execution_status == status)
            if len(page) < _LIST_PAGE:
                return found
            offset += _LIST_PAGE

    async def search_conversations(
        self,
        page_id: str | None = None,
        limit: int = 100,
        execution_status: ExecutionStatus | None = None,
        sort_order: ConversationSortOrder = ConversationSortOrder.CREATED_AT_DESC,
    ) -> ConversationPage:
        """A page of conversations (``page_id``: the last page's ``next_page_id``; another value
        starts from the beginning, as OpenHands' server does)."""

        def search() -> ConversationPage:
            matching = self._summaries(execution_status)
            order = ConversationSortOrder(sort_order)
            matching.sort(key=lambda info: getattr(info, order.field), reverse=order.descending)
            start = _page_start(page_id)
            page = matching[start : start + limit]
            found = [self._find(info.id) for info in page]
            return ConversationPage(
                items=[conversation_info(c) for c in found if c is not None],
                next_page_id=str(start + limit) if start + limit < len(matching) else None,
            )

        return await self._call(search)

    async def count_conversations(self, execution_status: ExecutionStatus | None = None) -> int:
        """How many conversations there are (in ``execution_status``, if given)."""
        return len(await self._call(lambda: self._summaries(execution_status)))

    async def list_conversations(
        self,
        tags: Mapping[str, str] | None = None,
        limit: int = 100,
        offset: int = 0,
        cursor: str | None = None,
    ) -> ConversationListPage:
        """cowconv's listing: summaries, oldest first, of those with all ``tags``; a page
        read off the store's index (from ``cursor``, where the last page ended, or
        ``offset``), with the unreadable rows that fall inside it."""

        def listing() -> ConversationListPage:
            page = self._registry.page(tags=tags, limit=limit, offset=offset, cursor=cursor)
            return ConversationListPage(**page._asdict())

        return await self._call(listing)

    # -- changing ----------------------------------------------------------------

    async def start_conversation(
        self, request: StartConversationRequest
    ) -> tuple[ConversationInfo, bool]:
        """Create a conversation; ``(info, True)``, or ``(info, False)`` with the existing one,
        unchanged, when the request's id is taken (OpenHands' idempotent start)."""
        message = request.initial_message
        if message is not None and message.role != "user":  # refused before anything is stored
            raise unsupported("initial_message.role", "only user messages can be sent")
        if request.id is not None:
            existing = await self.get_conversation(request.id)
            if existing is not None:
                return existing, False
        kept: dict[str, Any] = {}
        if request.openhands_agent is not None:
            kept["agent"] = request.openhands_agent
        if request.kept:
            kept["request"] = mask_secrets(request.kept)

        def create() -> ConversationInfo:
            # The kept JSON is part of the first snapshot: what cannot be stored refuses it.
            conversation = self._registry.create(
                request.agent,
                request.workspace,
                conversation_id=request.id,
                tags=request.tags,
                max_iteration_per_run=request.max_iteration_per_run,
                agent_state={OPENHANDS_KEY: kept} if kept else None,
            )
            if message is not None:
                conversation.send_message(message.message_text(), message.sender)
                if message.run:
                    self._registry.run(id_text(conversation.id))
            return conversation_info(conversation)

        return await self._call(create), True

    async def update_conversation(
        self, conversation_id: ConversationID, request: UpdateConversationRequest
    ) -> bool:
        """Set the title and tags (a ``None`` tag value removes the tag); ``False`` if there is
        no such conversation."""

        def update() -> bool:
            conversation = self._find(conversation_id)
            if conversation is None:
                return False
            if request.title is not None:
                conversation.set_tag("title", request.title.strip() or request.title)
            for key, value in (request.tags or {}).items():
                conversation.set_tag(key, value)
            return True

        return await self._call(update)

    async def delete_conversation(self, conversation_id: ConversationID) -> bool:
        """Delete a conversation (:class:`~cowconv.ConversationConflictError` while it runs);
        ``False`` if there is none. Its forks stay."""

        def delete() -> bool:
            try:
                self._registry.delete(id_text(conversation_id))
            except ConversationNotFoundError:
                return False
            return True

        return await self._call(delete)

    async def pause_conversation(self, conversation_id: ConversationID) -> bool:
        """Ask a running conversation to pause; ``False`` if there is none."""
        service = await self.get_event_service(conversation_id)
        if service is None:
            return False
        await service.pause()
        return True

    async def interrupt_conversation(self, conversation_id: ConversationID) -> bool:
        """End a run now; ``False`` if there is no such conversation."""
        service = await self.get_event_service(conversation_id)
        if service is None:
            return False
        await service.interrupt()
        return True

    async def fork_conversation(
        self,
        conversation_id: ConversationID,
        *,
        fork_id: ConversationID | None = None,
        title: str | None = None,
        tags: Mapping[str, str] | None = None,
        reset_metrics: bool = True,
        from_event_id: str | None = None,
    ) -> ConversationInfo | None:
        """Fork in O(1): same history and agent (credentials included), new id, idle.

        ``None`` for an unknown source;
        :class:`~cowconv.ConversationExistsError` (a ``ValueError``: "already
        exists") for a taken ``fork_id``; :class:`~cowconv.EventNotFoundError`
        (a ``ValueError``) for an unknown ``from_event_id``.
        """

        def fork() -> ConversationInfo | None:
            if self._find(conversation_id) is None:
                return None
            forked = self._registry.fork(
                id_text(conversation_id),
                fork_id=None if fork_id is None else id_text(fork_id),
                title=title,
                tags=tags,
                reset_metrics=reset_metrics,
                from_event_id=from_event_id,
            )
            return conversation_info(forked)

        return await self._call(fork)

    async def navigate_conversation(
        self, conversation_id: ConversationID, *, event_id: str | None
    ) -> ConversationInfo | None:
        """Move the active branch to end at ``event_id``; ``None`` for an unknown conversation,
        :class:`~cowconv.EventNotFoundError` (a ``ValueError``) for an unknown event."""

        def navigate() -> ConversationInfo | None:
            if self._find(conversation_id) is None:
                return None
            self._registry.navigate(id_text(conversation_id), event_id)
            return conversation_info(self._registry.get(conversation_id))

        return await self._call(navigate)


def _page_start(page_id: str | None) -> int:
    if page_id is None or not page_id.isascii() or not page_id.isdigit() or len(page_id) > 15:
        return 0
    return int(page_id)
