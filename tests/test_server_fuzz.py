"""Fuzz the agent server's REST API from its own /openapi.json with schemathesis: no 5xx."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from cowconv import SQLiteStore
from cowconv.agent_server import create_app

# schemathesis calls the app as host "testserver" (a name only this process uses).
app = create_app(
    store=SQLiteStore(":memory:"), allowed_hosts=["testserver"], allow_unauthenticated=True
)


async def serve_without_lifespan(scope: Any, receive: Any, send: Any) -> None:
    # schemathesis runs the app's lifespan around every call; the app's shutdown would
    # refuse new conversations from then on, so one server serves all cases here.
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await app(scope, receive, send)


schema = schemathesis.openapi.from_asgi("/openapi.json", serve_without_lifespan)
# The stream stays open while a conversation lives, and a run would call whatever LLM a
# generated body names (possibly over the internet); tests/test_agent_server.py covers both.
schema = schema.exclude(path_regex=r"/events/stream$").exclude(path_regex=r"/run$")

KNOWN = "known-conversation"
_BODY = {
    "agent": {"llm": {"model": "openai/gpt-4o", "api_key": "sk-fuzz"}},
    "workspace": {"working_dir": "."},
    "id": KNOWN,
}


def _ensure_known(case: schemathesis.Case) -> None:
    # Random ids nearly always miss; aim a share of the cases at a conversation that exists.
    with app.state.registry._lock:
        exists = app.state.registry.find(KNOWN) is not None
    if not exists:
        from fastapi.testclient import TestClient

        TestClient(app).post("/api/conversations", json=_BODY)
    if case.path_parameters and hash(str(case.path_parameters)) % 2 == 0:
        case.path_parameters = {**case.path_parameters, "conversation_id": KNOWN}


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case) -> None:
    """Every generated request, valid or not, gets a documented non-5xx answer."""
    _ensure_known(case)
    case.call_and_validate(
        checks=[not_a_server_error, status_code_conformance, response_schema_conformance]
    )
