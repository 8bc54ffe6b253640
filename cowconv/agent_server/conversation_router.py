"""The conversation routes (OpenHands' ``conversation_router``, plus cowconv's additions).

``conversation_router`` is an :class:`fastapi.APIRouter` with the prefix
``/conversations``; :func:`~cowconv.agent_server.create_app` mounts it under
``/api``. Every route reaches conversations through the
:class:`~cowconv.agent_server.conversation_service.ConversationService`
that :func:`~cowconv.agent_server.dependencies.get_conversation_service`
gives. OpenHands' routes keep OpenHands' meaning; cowconv's additions
(``GET ""`` without ``ids``, ``/state``, ``/agent``, ``/interrupt``,
``/tags``, ``/agent_state``, ``/skills``, the answers' extra fields) add to
them. See ``docs/server.md``.

>>> from fastapi import FastAPI
>>> from fastapi.testclient import TestClient
>>> from cowconv.agent_server.conversation_service import ConversationService
>>> app = FastAPI()
>>> app.include_router(conversation_router, prefix="/api")
>>> app.state.conversation_service = ConversationService()
>>> TestClient(app).get("/api/conversations/count").json()
0
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import StringConstraints

from cowconv._exceptions import (
    ConversationConflictError,
    ConversationNotFoundError,
    EventNotFoundError,
    InvalidValueError,
)
from cowconv.agent_server.conversation_service import ConversationService
from cowconv.agent_server.decoding import DecodingRoute
from cowconv.agent_server.dependencies import (
    ApiError,
    ConversationIdPath,
    check_conversation_ids,
    check_id,
    conversation_id_of,
    get_conversation_service,
    get_event_service,
    not_found,
)
from cowconv.agent_server.event_service import EventService, active_branch
from cowconv.agent_server.models import (
    ID_WHITESPACE,
    ActivateSkillRequest,
    ConversationInfo,
    ConversationListPage,
    ConversationPage,
    ConversationSortOrder,
    ErrorResponse,
    ForkConversationRequest,
    NavigateConversationRequest,
    RunStarted,
    SetConfirmationPolicyRequest,
    SetSecurityAnalyzerRequest,
    StartConversationRequest,
    StateResponse,
    Success,
    UpdateConversationRequest,
    UpdateSecretsRequest,
)
from cowconv.backends.wire import CHANGE_ROUTES
from cowconv.core.agent import Agent
from cowconv.core.changes import ActivateSkill, NavigateTo, SetTag, UpdateAgentState
from cowconv.core.state import ConversationInfo as ConversationSummary
from cowconv.core.state import ConversationState, ExecutionStatus

__all__ = ["MAX_OFFSET", "MAX_PAGE", "conversation_router", "errors"]

MAX_PAGE = 1000
"""The largest page of cowconv's listings."""
MAX_OFFSET = 2**53
"""Past any real history, and inside SQLite's 64-bit integers even with a page added."""


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The documented error answers of a route."""
    return {code: {"model": ErrorResponse} for code in codes}


conversation_router = APIRouter(
    prefix="/conversations",
    route_class=DecodingRoute,  # bodies decoded without recursing
    tags=["conversations"],
    responses=errors(422),
    # Ids in paths and in ids: UUIDs only, unless the app takes names (Config).
    dependencies=[Depends(check_conversation_ids)],
)

Service = Annotated[ConversationService, Depends(get_conversation_service)]
Events = Annotated[EventService, Depends(get_event_service)]

# The schema says what the server takes: a non-empty key, "=", any value.
_TagFilter = Annotated[str, StringConstraints(pattern=r"^[^=]+=")]
# An id: not blank (the server refuses a blank one).
_IdText = Annotated[str, StringConstraints(pattern=f"[^{ID_WHITESPACE}]")]


def _tag_filter(tag: list[str]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for item in tag:
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise RequestValidationError(
                [
                    {
                        "type": "value_error",
                        "loc": ("query", "tag"),
                        "msg": f"a tag filter is key=value, got {item!r}",
                    }
                ]
            )
        tags[key] = value
    return tags


# -- reading -----------------------------------------------------------------------


@conversation_router.get("/search", response_model=ConversationPage)
async def search_conversations(
    service: Service,
    page_id: Annotated[str | None, Query(description="next_page_id of the last page")] = None,
    limit: Annotated[int, Query(gt=0, le=100)] = 100,
    status: Annotated[ExecutionStatus | None, Query()] = None,
    sort_order: Annotated[ConversationSortOrder, Query()] = ConversationSortOrder.CREATED_AT_DESC,
) -> ConversationPage:
    """OpenHands' conversation search: pages of conversations (``page_id`` from the last)."""
    return await service.search_conversations(page_id, limit, status, sort_order)


@conversation_router.get("/count", response_model=int)
async def count_conversations(
    service: Service, status: Annotated[ExecutionStatus | None, Query()] = None
) -> int:
    """OpenHands' count of conversations (with ``status``, of those in that status)."""
    return await service.count_conversations(status)


@conversation_router.get(
    "",
    response_model=ConversationListPage | list[ConversationInfo | None],
    responses=errors(404),
)
async def list_conversations(
    service: Service,
    tag: Annotated[
        list[_TagFilter], Query(description="key=value; repeat to require several tags")
    ] = [],  # noqa: B006 (FastAPI copies query defaults)
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    ids: Annotated[
        list[_IdText] | None,
        Query(max_length=99, description="OpenHands' batch get: these conversations"),
    ] = None,
    cursor: Annotated[
        str | None,
        Query(
            max_length=4096,
            pattern=r"^[^\x00]*$",
            description="where the last page ended (its next_cursor): the page after it",
        ),
    ] = None,
) -> ConversationListPage | list[ConversationInfo | None]:
    """With ``ids`` (OpenHands' batch get): those conversations in that order, ``null`` for
    an unknown one. Without: cowconv's listing, summaries oldest first, optionally only those
    with all given tags."""
    if ids is not None:
        return await service.batch_get_conversations([conversation_id_of(i) for i in ids])
    return await service.list_conversations(_tag_filter(tag), limit, offset, cursor)


@conversation_router.get(
    "/{conversation_id}", response_model=ConversationInfo, responses=errors(404)
)
async def get_conversation(
    conversation_id: ConversationIdPath, service: Service
) -> ConversationInfo:
    """The conversation: OpenHands' ``ConversationInfo`` and cowconv's summary fields."""
    identifier = conversation_id_of(conversation_id)
    info = await service.get_conversation(identifier)
    if info is None:
        raise not_found(identifier)
    return info


@conversation_router.get(
    "/{conversation_id}/state", response_model=StateResponse, responses=errors(404)
)
async def get_state(
    events: Events,
    known: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    last: Annotated[str | None, Query(description="id of the last event known")] = None,
) -> StateResponse:
    """The whole snapshot but its events (api keys redacted), and the ids of new events.

    ``known`` is how many events the client already has, ``last`` the id
    of the last of them; if that is not this history's event there, all
    ids are sent (``ids_from`` 0). A cowconv addition.
    """
    return await events.get_state_response(known, last)


@conversation_router.get("/{conversation_id}/agent", response_model=Agent, responses=errors(404))
async def get_agent(events: Events) -> Agent:
    """The conversation's agent as cowconv runs it; the LLM api key is shown redacted."""
    return await events.get_agent()


# -- creating and changing ---------------------------------------------------------


@conversation_router.post(
    "",
    status_code=201,
    response_model=ConversationInfo,
    responses={200: {"description": "A conversation with that id exists: unchanged"}},
)
async def start_conversation(
    request: StartConversationRequest, response: Response, service: Service, http: Request
) -> ConversationInfo:
    """Create a conversation (OpenHands' ``StartConversationRequest``).

    201 with the new conversation; 200 with the existing one, unchanged,
    if ``conversation_id`` (or ``id``) is taken (OpenHands' idempotent start).
    """
    check_id(http, (("body", "conversation_id"), request.id))
    info, created = await service.start_conversation(request)
    response.status_code = 201 if created else 200
    return info


@conversation_router.patch("/{conversation_id}", response_model=Success, responses=errors(404))
async def update_conversation(
    conversation_id: ConversationIdPath, request: UpdateConversationRequest, service: Service
) -> Success:
    """OpenHands' update: set the title and tags (a ``null`` tag value removes the tag)."""
    identifier = conversation_id_of(conversation_id)
    if not await service.update_conversation(identifier, request):
        raise not_found(identifier)
    return Success()


@conversation_router.delete(
    "/{conversation_id}", response_model=Success, responses=errors(404, 409)
)
async def delete_conversation(conversation_id: ConversationIdPath, service: Service) -> Success:
    """Delete a conversation (409 while it runs). Its forks stay."""
    identifier = conversation_id_of(conversation_id)
    if not await service.delete_conversation(identifier):
        raise not_found(identifier)
    return Success()


@conversation_router.post(
    "/{conversation_id}/secrets", response_model=Success, responses=errors(404)
)
async def update_conversation_secrets(
    conversation_id: ConversationIdPath, request: UpdateSecretsRequest, service: Service
) -> Success:
    """OpenHands' secrets: cowconv does not inject secrets, so it answers 422 (naming
    ``secrets``) for a conversation it has."""
    identifier = conversation_id_of(conversation_id)
    events = await service.get_event_service(identifier)
    if events is None:
        raise not_found(identifier)
    await events.update_secrets(request.secrets)
    return Success()


@conversation_router.post(
    "/{conversation_id}/confirmation_policy", response_model=Success, responses=errors(404)
)
async def set_conversation_confirmation_policy(
    conversation_id: ConversationIdPath, request: SetConfirmationPolicyRequest, service: Service
) -> Success:
    """Set the conversation's confirmation policy (OpenHands' route; a policy's JSON by its
    ``kind``: ``AlwaysConfirm``, ``NeverConfirm``, ``ConfirmRisky``; another kind is a 422)."""
    identifier = conversation_id_of(conversation_id)
    events = await service.get_event_service(identifier)
    if events is None:
        raise not_found(identifier)
    await events.set_confirmation_policy(request.policy)
    return Success()


@conversation_router.post(
    "/{conversation_id}/security_analyzer", response_model=Success, responses=errors(404)
)
async def set_conversation_security_analyzer(
    conversation_id: ConversationIdPath, request: SetSecurityAnalyzerRequest, service: Service
) -> Success:
    """Set (``null``: remove) the conversation's security analyzer (OpenHands' route)."""
    identifier = conversation_id_of(conversation_id)
    events = await service.get_event_service(identifier)
    if events is None:
        raise not_found(identifier)
    await events.set_security_analyzer(request.security_analyzer)
    return Success()


def _change_path(change: type) -> tuple[str, list[str]]:
    """The path and method of a named change, from the shared wire mapping
    (:data:`cowconv.backends.wire.CHANGE_ROUTES`) the remote backend sends to."""
    route = CHANGE_ROUTES[change]
    return "/{conversation_id}" + route.path, [route.method]


_path, _methods = _change_path(SetTag)


@conversation_router.api_route(
    _path, methods=_methods, response_model=ConversationSummary, responses=errors(404)
)
async def set_tags(events: Events, tags: dict[str, str | None]) -> ConversationSummary:
    """Set tags; a ``null`` value removes the tag (JSON merge patch)."""
    return await events.set_tags(tags)


_path, _methods = _change_path(UpdateAgentState)


@conversation_router.api_route(
    _path, methods=_methods, response_model=ConversationSummary, responses=errors(404)
)
async def update_agent_state(events: Events, changes: dict[str, Any]) -> ConversationSummary:
    """Merge the given keys into the agent state."""
    return await events.update_agent_state(changes)


_path, _methods = _change_path(ActivateSkill)


@conversation_router.api_route(
    _path, methods=_methods, response_model=ConversationSummary, responses=errors(404)
)
async def activate_skill(events: Events, request: ActivateSkillRequest) -> ConversationSummary:
    """Activate a knowledge skill (once)."""
    return await events.activate_skill(request.name)


# -- running -----------------------------------------------------------------------


@conversation_router.post(
    "/{conversation_id}/run", response_model=RunStarted | Success, responses=errors(404, 409)
)
async def run_conversation(conversation_id: ConversationIdPath, service: Service) -> Success:
    """Start a run in the background and answer at once (409 if one is going).

    OpenHands' ``{"success": true}``, plus ``event_count``: how many events
    the run starts from. Follow the run on the WebSocket or on the event
    stream (``until_idle=true`` ends the stream with the run).
    """
    identifier = conversation_id_of(conversation_id)
    events = await service.get_event_service(identifier)
    if events is None:
        raise not_found(identifier)
    try:
        started = await events.run()
    except ConversationConflictError as error:
        raise ApiError(409, error) from None
    except ValueError as error:  # an OpenHands-style service says why in a ValueError
        if str(error) == "conversation_already_running":
            raise ApiError(
                409,
                ConversationConflictError(
                    "Conversation already running. Wait for completion or pause first."
                ),
            ) from None
        raise ApiError(400, error) from None
    if isinstance(started, ConversationState):
        return RunStarted(event_count=len(active_branch(started)))
    return Success()


@conversation_router.post("/{conversation_id}/pause", response_model=Success, responses=errors(404))
async def pause_conversation(conversation_id: ConversationIdPath, service: Service) -> Success:
    """Ask a running conversation to pause after its current step."""
    identifier = conversation_id_of(conversation_id)
    if not await service.pause_conversation(identifier):
        raise not_found(identifier)
    return Success()


@conversation_router.post(
    "/{conversation_id}/interrupt", response_model=Success, responses=errors(404)
)
async def interrupt_conversation(conversation_id: ConversationIdPath, service: Service) -> Success:
    """End a run now: kill its running command, run no further tool call, end paused.

    Answers at once; follow the end on the event stream. Idle: does nothing.
    """
    identifier = conversation_id_of(conversation_id)
    if not await service.interrupt_conversation(identifier):
        raise not_found(identifier)
    return Success()


@conversation_router.post(
    "/{conversation_id}/fork",
    status_code=201,
    response_model=ConversationInfo,
    responses=errors(404, 409),
)
async def fork_conversation(
    conversation_id: ConversationIdPath,
    service: Service,
    http: Request,
    request: Annotated[ForkConversationRequest | None, Body()] = None,
) -> ConversationInfo:
    """Fork in O(1): same history, new id, idle; the same agent (credentials included) unless
    ``agent`` gives the fork another one.

    404 for an unknown conversation or ``from_event_id``, 409 if ``id`` is taken.
    """
    identifier = conversation_id_of(conversation_id)
    request = request or ForkConversationRequest()
    check_id(http, (("body", "id"), request.id))
    try:
        info = await service.fork_conversation(
            identifier,
            fork_id=request.id,
            title=request.title,
            tags=request.tags,
            reset_metrics=request.reset_metrics,
            from_event_id=request.from_event_id,
            workspace=request.workspace or "shared",
            agent=request.agent,
        )
    except (ConversationConflictError, EventNotFoundError, ConversationNotFoundError) as error:
        raise _api_error(error) from None
    except InvalidValueError as error:  # e.g. a copy from an event no snapshot covers
        raise ApiError(422, error) from None
    except ValueError as error:  # an OpenHands-style service says why in a ValueError
        if "already exists" in str(error):
            raise ApiError(409, error) from None
        if "from_event_id" in str(error):
            raise ApiError(404, error) from None
        raise
    if info is None:
        raise not_found(identifier)
    return info


_path, _methods = _change_path(NavigateTo)


@conversation_router.api_route(
    _path, methods=_methods, response_model=ConversationInfo, responses=errors(404, 409)
)
async def navigate_conversation(
    conversation_id: ConversationIdPath,
    request: Annotated[NavigateConversationRequest, Body()],
    service: Service,
) -> ConversationInfo:
    """Move the active branch to end at ``event_id`` (OpenHands' route and body).

    The next message starts a new branch from there; the branch left
    behind is kept. 404 for an unknown conversation or event, 409 while a
    run is going.
    """
    identifier = conversation_id_of(conversation_id)
    try:
        info = await service.navigate_conversation(identifier, event_id=request.event_id)
    except (ConversationConflictError, EventNotFoundError, ConversationNotFoundError) as error:
        raise _api_error(error) from None
    except ValueError as error:  # an OpenHands-style service says why in a ValueError
        if "event_id" in str(error):
            raise ApiError(404, error) from None
        raise
    if info is None:
        raise not_found(identifier)
    return info


def _api_error(error: Exception) -> ApiError:
    """The answer to one of cowconv's errors about a conversation (409 or 404)."""
    return ApiError(409 if isinstance(error, ConversationConflictError) else 404, error)
