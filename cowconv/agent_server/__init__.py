"""The agent server: conversations over a JSON REST API, with O(1) forks.

Start it with ``python -m cowconv.agent_server --port 8000`` (needs the
``cowconv[server]`` extra), or mount :func:`create_app` in any ASGI server.
A client is ``Conversation(agent=..., workspace=Workspace(host=url,
working_dir=...))`` (a :class:`cowconv.RemoteConversation`). See
``docs/server.md`` for every endpoint.

>>> from fastapi.testclient import TestClient
>>> client = TestClient(create_app(), base_url="http://localhost")
>>> body = {"agent": {"llm": {"model": "openai/gpt-4o", "api_key": "sk-1"}},
...         "workspace": {"working_dir": "."}, "id": "c1"}
>>> client.post("/api/conversations", json=body).json()["event_count"]
0
>>> client.post("/api/conversations/c1/fork", json={"title": "B"}).json()["title"]
'B'
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError(
        "the agent server needs FastAPI and uvicorn: pip install 'cowconv[server]'"
    ) from error

from cowconv._exceptions import (
    ConversationConflictError,
    EventNotFoundError,
    InactiveServiceError,
    UnsafeExposureError,
)
from cowconv.agent_server.app import create_app
from cowconv.agent_server.background import BackgroundServer
from cowconv.agent_server.conversation_service import ConversationService
from cowconv.agent_server.event_service import EventService
from cowconv.agent_server.models import (
    ActivateSkillRequest,
    AppendEventRequest,
    ConversationInfo,
    ConversationListPage,
    ConversationPage,
    CreateConversationRequest,
    ErrorResponse,
    EventPage,
    ForkRequest,
    HealthResponse,
    SendMessageRequest,
    StateResponse,
    StoredConversation,
    StreamStatus,
)
from cowconv.agent_server.registry import ConversationRegistry
from cowconv.agent_server.security import DEFAULT_MAX_BODY_SIZE
from cowconv.agent_server.transport import InProcessTransport
from cowconv.backends.wire import SESSION_API_KEY_HEADER
from cowconv.stores import STORE_FILE_NAME

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "SESSION_API_KEY_HEADER",
    "STORE_FILE_NAME",
    "ActivateSkillRequest",
    "AppendEventRequest",
    "BackgroundServer",
    "ConversationConflictError",
    "ConversationInfo",
    "ConversationListPage",
    "ConversationPage",
    "ConversationRegistry",
    "ConversationService",
    "CreateConversationRequest",
    "ErrorResponse",
    "EventNotFoundError",
    "EventPage",
    "EventService",
    "ForkRequest",
    "HealthResponse",
    "InProcessTransport",
    "InactiveServiceError",
    "SendMessageRequest",
    "StateResponse",
    "StoredConversation",
    "StreamStatus",
    "UnsafeExposureError",
    "create_app",
]
