"""The routes' dependencies (OpenHands' ``openhands.agent_server.dependencies`` names).

:func:`get_conversation_service` is the app's
:class:`~cowconv.agent_server.conversation_service.ConversationService`
(``app.state.conversation_service``); :func:`get_event_service` is the
:class:`~cowconv.agent_server.event_service.EventService` of the
conversation in the path, or a 404. Tests override them with FastAPI's
``app.dependency_overrides``.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.exceptions import RequestValidationError

from cowconv._exceptions import ConversationNotFoundError
from cowconv.agent_server.config import Config
from cowconv.agent_server.conversation_service import ConversationService
from cowconv.agent_server.event_service import EventService
from cowconv.core.ids import ConversationID, id_text, public_id

__all__ = [
    "ApiError",
    "ConversationIdPath",
    "check_conversation_ids",
    "check_id",
    "conversation_id_of",
    "get_conversation_service",
    "get_event_service",
    "not_found",
]


class ApiError(HTTPException):
    """An HTTP error that names the cowconv error behind it (the body's ``error``), so a cowconv
    client raises that class again.

    >>> ApiError(404, ConversationNotFoundError("c1")).error
    'ConversationNotFoundError'
    """

    def __init__(self, status_code: int, error: Exception) -> None:
        super().__init__(status_code=status_code, detail=str(error))
        self.error = type(error).__name__


def not_found(conversation_id: ConversationID) -> ApiError:
    """The 404 for a conversation the service does not have."""
    return ApiError(404, ConversationNotFoundError(id_text(conversation_id)))


ConversationIdPath = Annotated[str, Path(description="the conversation's id (a UUID or any text)")]


def conversation_id_of(text: str) -> ConversationID:
    """The id in a path: a ``uuid.UUID`` for a UUID's text, else the text (a blank one is an
    :class:`~cowconv.InvalidValueError`, a 422).

    >>> conversation_id_of("my-fork")
    'my-fork'
    """
    return public_id(id_text(text))


async def check_conversation_ids(request: Request) -> None:
    """The routers' dependency: a 422 for an id that is not a UUID, in the path or in
    ``ids``, when the app takes UUIDs only (see :func:`check_id`)."""
    path_id = request.path_params.get("conversation_id")
    found: list[tuple[tuple[str | int, ...], object]] = []
    if path_id is not None:
        found.append((("path", "conversation_id"), path_id))
    for position, text in enumerate(request.query_params.getlist("ids")):
        found.append((("query", "ids", position), text))
    check_id(request, *found)


def check_id(request: Request, *found: tuple[tuple[str | int, ...], object]) -> None:
    """A 422 naming each ``(loc, id)`` that is not a UUID's text, unless the app's
    :class:`~cowconv.agent_server.config.Config` takes any text (``named_conversations``).

    OpenHands' agent server takes UUIDs only, and so does a ``Config()`` (an app
    without one too); :func:`~cowconv.agent_server.create_app` takes names.
    """
    config = getattr(request.app.state, "config", None)
    if isinstance(config, Config) and config.named_conversations:
        return
    errors = [
        {
            "type": "uuid_parsing",
            "loc": loc,
            "msg": "Input should be a valid UUID (this server takes UUIDs as conversation ids)",
            "input": text,
        }
        for loc, text in found
        if text is not None and not _is_uuid(text)
    ]
    if errors:
        raise RequestValidationError(errors)


def _is_uuid(text: object) -> bool:
    # Any form uuid.UUID reads, as pydantic's UUID check (and so OpenHands' server) takes.
    if isinstance(text, uuid.UUID):
        return True
    try:
        uuid.UUID(str(text))
    except ValueError:
        return False
    return True


def get_conversation_service(request: Request) -> ConversationService:
    """The app's conversation service."""
    service = getattr(request.app.state, "conversation_service", None)
    if not isinstance(service, ConversationService):
        raise HTTPException(status_code=503, detail="the server has no conversation service")
    return service


async def get_event_service(
    conversation_id: ConversationIdPath,
    conversation_service: Annotated[ConversationService, Depends(get_conversation_service)],
) -> EventService:
    """The event service of the conversation in the path (404 if there is none)."""
    identifier = conversation_id_of(conversation_id)
    service = await conversation_service.get_event_service(identifier)
    if service is None:
        raise not_found(identifier)
    return service
