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
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from cowconv._exceptions import ConversationNotFoundError, InactiveServiceError
from cowconv.agent_server.event_service import (
    EventService,
    compose_conversation_info,
    conversation_dir,
    conversation_info,
    stored_conversation,
)
from cowconv.agent_server.models import (
    SERVER_FIELDS,
    ConversationInfo,
    ConversationListPage,
    ConversationPage,
    ConversationSortOrder,
    StartConversationRequest,
    StoredConversation,
    UpdateConversationRequest,
)
from cowconv.agent_server.registry import ConversationRegistry
from cowconv.agent_server.utils import safe_rmtree, utc_now
from cowconv.backends.wire import mask_secrets, unsupported
from cowconv.conversation import Conversation, check_conversation_id
from cowconv.core.agent import Agent
from cowconv.core.ids import ConversationID, id_text, public_id
from cowconv.core.state import (
    DEFAULT_MAX_ITERATION_PER_RUN,
    ConversationState,
    ExecutionStatus,
)
from cowconv.core.state import ConversationInfo as ConversationSummary
from cowconv.stores import SQLiteStore, Store
from cowconv.workspaces.recording import copy_workspace

__all__ = ["ConversationService"]

_T = TypeVar("_T")
_LIST_PAGE = 1000


@dataclass(frozen=True)
class _Record:
    """One conversation a search sorts and filters: from the store's index, or (``live``) from
    an event service whose conversation the store does not list."""

    id: ConversationID
    created_at: datetime
    updated_at: datetime
    execution_status: ExecutionStatus
    live: tuple[StoredConversation, ConversationState] | None = None


class ConversationService:
    """The conversations of ``registry`` (a new one over ``conversations_dir``, a SQLite store
    there, or in memory when neither is given), for the routes.

    ``_event_services`` is OpenHands' live map: the :class:`EventService` of
    every conversation this service has started, forked or served (``None``
    once closed: then every method raises
    :class:`~cowconv.InactiveServiceError`, a ``ValueError``). Searches and
    counts read the store's index, and the map for a conversation the store
    does not list. With ``conversations_dir`` each conversation's
    :class:`~cowconv.agent_server.models.StoredConversation` is written to
    ``<dir>/<id hex>/meta.json`` too, as OpenHands' server does.

    Use it as an async context manager, or call :meth:`close`, to close what
    it opened. A conversation started with ``worktree=True`` (OpenHands'
    field) works in its own copy of the workspace's files, made from a
    snapshot (:mod:`cowconv.workspaces`) under
    ``<conversation_worktree_root>/<id>/<directory name>`` (OpenHands' place,
    ``/tmp/conversation-worktrees`` by default); the user's repository and
    branches are not touched.

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
        self._conversations_dir: Path | None = None
        if conversations_dir is not None:
            self._conversations_dir = Path(conversations_dir).expanduser()
        if registry is None:
            if self._conversations_dir is not None:
                self._conversations_dir.mkdir(parents=True, exist_ok=True)
                self._store = SQLiteStore(self._conversations_dir)
            registry = ConversationRegistry(self._store)
        self._registry = registry
        self.conversation_worktree_root = Path(
            "/tmp/conversation-worktrees"
            if conversation_worktree_root is None
            else conversation_worktree_root
        )
        self._event_services: dict[ConversationID, EventService] | None = {}

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
        method raises :class:`~cowconv.InactiveServiceError` (``inactive_service``)."""
        services = self._event_services
        self._event_services = None
        for service in (services or {}).values():
            await service.close()
        if self._owns_registry:
            await asyncio.to_thread(self._registry.close)
        if self._store is not None:
            self._store.close()

    def _services(self) -> dict[ConversationID, EventService]:
        services = self._event_services
        if services is None:
            raise InactiveServiceError()
        return services

    async def _call(self, work: Callable[[], _T]) -> _T:
        self._services()
        return await asyncio.to_thread(work)

    def _find(self, conversation_id: ConversationID) -> Conversation | None:
        try:
            return self._registry.get(conversation_id)
        except ConversationNotFoundError:
            return None

    async def _serve(self, conversation: Conversation) -> EventService:
        """The event service of a conversation the registry holds: the map's, or a new one."""
        services = self._services()
        key = _key(conversation.id)
        service = services.get(key)
        if service is None:
            service = EventService(
                await self._call(lambda: stored_conversation(conversation)),
                self._conversations_dir,
                registry=self._registry,
            )
            await service.start()
            service = services.setdefault(key, service)
        return service

    # -- one conversation --------------------------------------------------------

    async def get_event_service(self, conversation_id: ConversationID) -> EventService | None:
        """The :class:`EventService` of a conversation, or ``None`` if there is none."""
        service = self._services().get(_key(conversation_id))
        if service is not None:
            return service
        conversation = await self._call(lambda: self._find(conversation_id))
        return None if conversation is None else await self._serve(conversation)

    async def _live_info(self, service: EventService) -> ConversationInfo | None:
        try:
            state = await service.get_state()
        except ConversationNotFoundError:
            return None
        # A started service reads its stored metadata off the registry: a worker thread's work.
        stored = await self._call(functools.partial(_stored_of, service))
        return compose_conversation_info(stored, state)

    async def get_conversation(self, conversation_id: ConversationID) -> ConversationInfo | None:
        """The conversation, or ``None``."""
        service = self._services().get(_key(conversation_id))
        if service is not None:
            return await self._live_info(service)

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

    def _summaries(self) -> list[ConversationSummary]:
        found: list[ConversationSummary] = []
        offset = 0
        while True:
            page = self._registry.list(limit=_LIST_PAGE, offset=offset)
            found.extend(page)
            if len(page) < _LIST_PAGE:
                return found
            offset += _LIST_PAGE

    async def _records(self, status: ExecutionStatus | None) -> list[_Record]:
        services = self._services()
        records = {
            _key(info.id): _Record(info.id, info.created_at, info.updated_at, info.execution_status)
            for info in await self._call(self._summaries)
        }
        for key, service in list(services.items()):
            if key in records:
                continue
            try:
                state = await service.get_state()
            except ConversationNotFoundError:  # deleted meanwhile (by another server)
                services.pop(key, None)
                continue
            stored = await self._call(functools.partial(_stored_of, service))
            records[key] = _Record(
                key, stored.created_at, stored.updated_at, state.execution_status, (stored, state)
            )
        return [r for r in records.values() if status is None or r.execution_status == status]

    async def _info(self, record: _Record) -> ConversationInfo | None:
        if record.live is not None:
            return compose_conversation_info(*record.live)
        return await self.get_conversation(record.id)

    async def search_conversations(
        self,
        page_id: str | None = None,
        limit: int = 100,
        execution_status: ExecutionStatus | None = None,
        sort_order: ConversationSortOrder = ConversationSortOrder.CREATED_AT_DESC,
    ) -> ConversationPage:
        """A page of conversations (``page_id``: the last page's ``next_page_id``; another value
        starts from the beginning, as OpenHands' server does)."""
        matching = await self._records(execution_status)
        order = ConversationSortOrder(sort_order)
        matching.sort(key=lambda record: getattr(record, order.field), reverse=order.descending)
        start = _page_start(page_id)
        found = [await self._info(record) for record in matching[start : start + limit]]
        return ConversationPage(
            items=[info for info in found if info is not None],
            next_page_id=str(start + limit) if start + limit < len(matching) else None,
        )

    async def count_conversations(self, execution_status: ExecutionStatus | None = None) -> int:
        """How many conversations there are (in ``execution_status``, if given)."""
        return len(await self._records(execution_status))

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
        unchanged, when the request's id is taken (OpenHands' idempotent start).

        The request becomes a :class:`~cowconv.agent_server.models.StoredConversation`
        (its fields cowconv does not act on kept, secrets masked) and an
        :class:`EventService` that creates the conversation with the agent.
        """
        services = self._services()
        message = request.initial_message
        if message is not None and message.role != "user":  # refused before anything is stored
            raise unsupported("initial_message.role", "only user messages can be sent")
        if request.id is not None:
            existing = await self.get_conversation(request.id)
            if existing is not None:
                return existing, False
        kept = mask_secrets(request.kept)
        chosen = check_conversation_id(request.id)
        workspace = request.workspace
        if kept.get("worktree") is True:
            # As OpenHands' server: <root>/<id>/<the workspace's directory name>.
            target = self.conversation_worktree_root / id_text(chosen)
            target = target / (Path(workspace.working_dir).resolve().name or "workspace")
            workspace = await asyncio.to_thread(copy_workspace, workspace, None, target)
        stored = StoredConversation.model_validate(
            {
                **{key: value for key, value in kept.items() if key not in SERVER_FIELDS},
                "id": chosen,
                "workspace": workspace,
                "initial_message": message,
                "max_iterations": request.max_iteration_per_run or DEFAULT_MAX_ITERATION_PER_RUN,
                "tags": request.tags or {},
            }
        )
        service = EventService(
            stored=stored,
            conversations_dir=self._conversations_dir,
            agent=request.agent,
            registry=self._registry,
            openhands_agent=request.openhands_agent,
        )
        await service.start()
        services[_key(stored.id)] = service
        state = await service.get_state()
        return compose_conversation_info(service.stored, state), True

    async def update_conversation(
        self, conversation_id: ConversationID, request: UpdateConversationRequest
    ) -> bool:
        """Set the title and tags (a ``None`` tag value removes the tag) through the
        conversation's event service, and write its ``meta.json``; ``False`` if there is no
        such conversation."""
        service = await self.get_event_service(conversation_id)
        if service is None:
            return False
        changes: dict[str, str | None] = dict(request.tags or {})
        if request.title is not None:
            changes["title"] = request.title.strip() or request.title
        if changes:
            await service.set_tags(changes)  # the conversation's own record of them
        stored = await self._call(functools.partial(_stored_of, service))
        tags = {**stored.tags, **changes}
        service.stored = stored.model_copy(
            update={
                "title": tags.get("title", stored.title),
                "tags": {key: value for key, value in tags.items() if value is not None},
                "updated_at": utc_now(),
            }
        )
        await service.save_meta()
        return True

    async def delete_conversation(self, conversation_id: ConversationID) -> bool:
        """Delete a conversation and its ``meta.json`` directory
        (:class:`~cowconv.ConversationConflictError` while it runs); ``False`` if there is
        none. Its forks stay."""
        services = self._services()
        key = _key(conversation_id)

        def delete() -> bool:
            try:
                self._registry.delete(id_text(conversation_id))
            except ConversationNotFoundError:
                return False
            return True

        deleted = await self._call(delete)
        service = services.pop(key, None)
        if service is None and not deleted:
            return False
        directory = (
            conversation_dir(self._conversations_dir, conversation_id)
            if service is None
            else service.conversation_dir
        )
        if service is not None:
            await service.close()
        await asyncio.to_thread(
            safe_rmtree, directory, "conversation directory for " + str(conversation_id)
        )
        return True

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
        workspace: str = "shared",
        agent: Agent | None = None,
    ) -> ConversationInfo | None:
        """Fork in O(1): same history and agent (credentials included), new id, idle.

        ``agent`` (with its credentials) replaces the fork's agent.

        ``workspace="copy"``: the fork works in its own copy of the files (at the
        fork point), whose directory its info's ``workspace`` names.

        ``None`` for an unknown source;
        :class:`~cowconv.ConversationExistsError` (a ``ValueError``: "already
        exists") for a taken ``fork_id``, even when that conversation is only
        in the store (nothing of it is written); :class:`~cowconv.EventNotFoundError`
        (a ``ValueError``) for an unknown ``from_event_id``. The fork's
        ``meta.json`` is written, and it is served from the live map.
        """

        def fork() -> Conversation | None:
            if self._find(conversation_id) is None:
                return None
            return self._registry.fork(
                id_text(conversation_id),
                fork_id=None if fork_id is None else id_text(fork_id),
                title=title,
                tags=tags,
                reset_metrics=reset_metrics,
                from_event_id=from_event_id,
                workspace=workspace,
                agent=agent,
            )

        forked = await self._call(fork)
        if forked is None:
            return None
        service = await self._serve(forked)
        return await self._live_info(service)

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


def _stored_of(service: EventService) -> StoredConversation:
    return service.stored


def _key(conversation_id: ConversationID) -> ConversationID:
    """The key of a conversation in the live map: a UUID for a UUID's text too."""
    return public_id(id_text(conversation_id))


def _page_start(page_id: str | None) -> int:
    if page_id is None or not page_id.isascii() or not page_id.isdigit() or len(page_id) > 15:
        return 0
    return int(page_id)
