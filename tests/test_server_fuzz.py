"""Fuzz the agent server's REST API from its own /openapi.json with schemathesis: no 5xx."""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from schemathesis.checks import negative_data_rejection
from schemathesis.generation.meta import ParameterLocation

from cowconv import LLMSummarizingCondenser, SQLiteStore
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
# Strings are generated as UTF-8 can carry them: the schema's description says bodies are
# I-JSON (RFC 7493), so an unpaired surrogate ("\\ud800") is refused although its type is
# string, which no JSON Schema keyword can state. test_unstorable_values_in_bodies puts
# them (with NaN, infinity and deep nesting) anywhere in valid bodies and checks the 422.
schema.config.generation.update(codec="utf-8")
# The stream stays open while a conversation lives, and a run would call whatever LLM a
# generated body names (possibly over the internet); tests/test_agent_server.py covers both.
schema = schema.exclude(path_regex=r"/events/stream$").exclude(path_regex=r"/run$")
# The bash and file routes run whatever command and write whatever path a generated request
# names, on this machine; tests/test_workspace_commands.py covers them over real HTTP.
schema = schema.exclude(path_regex=r"^/api/(bash|file)/")

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
    # Only a valid id is replaced: replacing an invalid one would make the case valid.
    if _negative(case) & {ParameterLocation.PATH}:
        return
    # crc32, not hash(): the same case takes the same path in every run (hash() of a str
    # changes with PYTHONHASHSEED, so a failure found once might not come back).
    if case.path_parameters and zlib.crc32(str(case.path_parameters).encode()) % 2 == 0:
        case.path_parameters = {**case.path_parameters, "conversation_id": KNOWN}


def _no_runs(body: Any) -> None:
    """No generated body starts a run (``run: true`` on a message, also as a create body's
    ``initial_message``): like ``/run``, it would call the LLM the body names, from a thread
    that outlives the case (and imports litellm where warnings are errors)."""
    if isinstance(body, dict):
        if body.get("run") is True:
            body["run"] = False
        _no_runs(body.get("initial_message"))


def _within_condenser_rule(body: Any) -> None:
    """The one rule JSON Schema cannot state (it relates two fields): a condenser's
    ``keep_first`` must be below ``max_size // 2``. Generated bodies are made to keep it."""
    agent = body.get("agent") if isinstance(body, dict) else None
    condenser = agent.get("condenser") if isinstance(agent, dict) else None
    if isinstance(condenser, dict):
        keep_first = condenser.get("keep_first")
        default = LLMSummarizingCondenser.model_fields["max_size"].default
        max_size = condenser.get("max_size", default)
        # Only a body valid in both fields is adjusted: raising an invalid value into range
        # would turn a case schemathesis generated as invalid into a valid one.
        if _integer_at_least(keep_first, 0) and _integer_at_least(max_size, 4):
            condenser["max_size"] = max(int(max_size), 2 * int(keep_first) + 2)


def _no_policy_file(body: Any) -> None:
    """An agent's ``security_policy_filename`` names a file on the server's machine: whether
    it exists is the machine's state, which no schema can say (like an event's parent). A
    valid name is dropped (the default policy), so the rest of the body is what is tested;
    tests/test_context.py covers the error for a file that cannot be read."""
    agent = body.get("agent") if isinstance(body, dict) else None
    if isinstance(agent, dict) and isinstance(agent.get("security_policy_filename"), str):
        agent.pop("security_policy_filename")


def _integer_at_least(value: Any, minimum: int) -> bool:
    # JSON Schema's integer includes 2.0 (a number without a fraction).
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return float(value).is_integer() and value >= minimum


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case) -> None:
    """Every generated request, valid or not, gets a documented non-5xx answer."""
    _ensure_known(case)
    _within_condenser_rule(case.body)
    _no_policy_file(case.body)
    _no_runs(case.body)
    if case.path.endswith("/events/append") and isinstance(case.body, dict):
        # Where an event may go depends on the conversation's state (its parent must be the
        # active branch's leaf), which no schema can say: let the server stamp it.
        # Only a valid parent id goes: dropping an invalid one would make the case valid.
        if isinstance(case.body.get("parent_id"), str):
            case.body.pop("parent_id")
    # Every check schemathesis has, negative_data_rejection included: the server checks each
    # request against the schema it publishes (cowconv.agent_server.schema_check).
    if _only_text_ambiguity(case):
        case.call_and_validate(excluded_checks=[negative_data_rejection])
    else:
        case.call_and_validate()


def _negative(case: schemathesis.Case) -> set[ParameterLocation]:
    """The parts of the request schemathesis generated to break the schema."""
    meta = case._meta
    if meta is None:
        return set()
    return {
        location
        for location, info in meta.components.items()
        if info.mode == schemathesis.GenerationMode.NEGATIVE
    }


def _wire_text(value: Any) -> Any:
    if isinstance(value, list):
        return [_wire_text(item) for item in value]
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _only_text_ambiguity(case: schemathesis.Case) -> bool:
    """True for a case made invalid only by a query value of the wrong JSON type whose text,
    as the query string carries it, the schema accepts: ``ids=0.02`` (a number where the
    schema says string) reaches the server as the string "0.02", so no server can refuse it.
    Judged from the schema alone (jsonschema), not by the server's own check."""
    if _negative(case) != {ParameterLocation.QUERY} or not isinstance(case.query, dict):
        return False
    openapi = app.openapi()
    operation = openapi["paths"][case.path][case.method.lower()]
    schemas = {
        parameter["name"]: parameter["schema"]
        for parameter in operation.get("parameters", ())
        if parameter["in"] == "query"
    }
    if not set(case.query) <= set(schemas):
        return False  # an unknown parameter: the server must refuse it

    def parsed(text: Any) -> Any:
        try:
            return json.loads(text) if isinstance(text, str) else text
        except ValueError:
            return text

    def readings(text: Any) -> list[Any]:
        """What a query text can mean: itself, or the JSON value it spells ("3", "true")."""
        if isinstance(text, list):
            return [list(text), [parsed(item) for item in text]]
        return [text, parsed(text)]

    def accepted(name: str, value: Any) -> bool:
        validator = Draft202012Validator({**schemas[name], "components": openapi["components"]})
        candidates = readings(_wire_text(value))
        # A repeatable parameter (an array) given once is an array of one value.
        candidates += [[candidate] for candidate in candidates if not isinstance(candidate, list)]
        return any(validator.is_valid(candidate) for candidate in candidates)

    return all(accepted(name, value) for name, value in case.query.items())


# -- bodies JSON allows but nothing can store: NaN, infinity, lone surrogates, deep nesting --

POISON = [
    float("nan"),
    float("inf"),
    float("-inf"),
    "\ud800",
    "text \udfff",
    {"\udc80": 1},
    json.loads("[" * 70 + '"deep"' + "]" * 70),  # past MAX_DEPTH
]


def _poisoned(value: Any, data: st.DataObject) -> Any:
    """``value`` with one leaf (or a key) somewhere inside replaced by a poison value."""
    if isinstance(value, dict) and value:
        key = data.draw(st.sampled_from(sorted(value)))
        if data.draw(st.booleans()):
            return {**value, key: _poisoned(value[key], data)}
        return {**value, key + "\ud800": value[key]}
    if isinstance(value, list) and value:
        index = data.draw(st.integers(0, len(value) - 1))
        return [*value[:index], _poisoned(value[index], data), *value[index + 1 :]]
    return data.draw(st.sampled_from(POISON))


# Valid bodies (then poisoned): a body that is invalid anyway is refused for other reasons.
positive = schemathesis.openapi.from_asgi("/openapi.json", serve_without_lifespan)
positive.config.generation.update(modes=[schemathesis.GenerationMode.POSITIVE])
positive = positive.exclude(path_regex=r"/events/stream$").exclude(path_regex=r"/run$")
# Commands and files: tests/test_workspace_commands.py (a fuzzer must not run or write them).
positive = positive.exclude(path_regex=r"^/api/(bash|file)/")


def _mostly_valid(body: Any) -> Any:
    # The schema cannot say everything the server checks (a workspace names no host; ids
    # must be new): drop what would be refused anyway, so the poison is what is tested.
    if not isinstance(body, dict):
        return body
    body = {key: value for key, value in body.items() if key not in ("id", "from_event_id")}
    if "workspace" in body:
        body["workspace"] = {"working_dir": "."}
    return body


@positive.parametrize()
@positive.given(data=st.data())
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_unstorable_values_in_bodies(case: schemathesis.Case, data: st.DataObject) -> None:
    """Generated bodies with NaN, infinity, lone surrogates or deep nesting put anywhere
    are refused (4xx), never a 5xx, and the listing and events stay readable."""
    if not isinstance(case.body, dict | list):
        return
    _ensure_known(case)
    _no_runs(case.body)
    from fastapi.testclient import TestClient

    client = TestClient(app)
    path = case.formatted_path
    # json.dumps writes NaN/Infinity and \\ud800 escapes, as a hostile client can.
    content = json.dumps(_poisoned(_mostly_valid(case.body), data)).encode()
    response = client.request(
        case.method, path, content=content, headers={"Content-Type": "application/json"}
    )
    assert response.status_code < 500, (case.method, path, response.text)
    assert client.get("/api/conversations").status_code == 200
    assert client.get(f"/api/conversations/{KNOWN}/events").status_code == 200
