"""Requests checked against the server's own OpenAPI schema before any route runs.

pydantic validates in lax mode: ``true`` or ``"3"`` pass for an ``int``,
``1`` for a ``bool``, ``"0.5"`` for a ``datetime`` (a Unix time). The
schema the server publishes (``/openapi.json``) says ``integer``,
``boolean`` and an ISO 8601 ``date-time``, so a client generated from it, or
a fuzzer reading it, would see the server accept what its contract calls
invalid. :func:`check_request` makes the contract the door: a JSON body
(``POST``, ``PUT``, ``PATCH``) or a query parameter that the route's
published schema refuses, or does not name (a misspelt ``?limt=5`` would
otherwise be ignored), is answered 422 before pydantic sees it, whatever
model or route produced the schema. A body both refuse gets the route's
own (pydantic's) answer, whose messages say more. What the schema accepts
then goes through the route's own validation as before, which checks what
a schema cannot say (NaN, lone surrogates, nesting depth, rules across
fields).

>>> from fastapi import Depends, FastAPI
>>> from fastapi.testclient import TestClient
>>> from pydantic import BaseModel
>>> class Limit(BaseModel):
...     limit: int
>>> app = FastAPI(dependencies=[Depends(check_request)])
>>> @app.post("/limit")
... def set_limit(body: Limit, double: bool = False) -> int:
...     return body.limit * (2 if double else 1)
>>> client = TestClient(app)
>>> client.post("/limit?double=true", json={"limit": 3}).json()
6
>>> answer = client.post("/limit", json={"limit": True})
>>> answer.status_code, answer.json()["detail"][0]["loc"], answer.json()["detail"][0]["msg"]
(422, ['body', 'limit'], "must be of type 'integer'")
>>> client.post("/limit?double=yes", json={"limit": 3}).json()["detail"][0]["loc"]
['query', 'double']
>>> client.post("/limit?duoble=true", json={"limit": 3}).json()["detail"][0]["msg"]
'this route takes no such query parameter'
>>> client.post("/limit?double=true&double=false", json={"limit": 3}).json()["detail"][0]["msg"]
'given 2 times; this parameter takes one value'
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError, best_match
from starlette.requests import HTTPConnection, Request
from starlette.routing import BaseRoute

__all__ = ["check_request"]

_METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
_INTEGER = re.compile(r"[+-]?[0-9]+")
_MAX_ERRORS = 20
_cache_lock = threading.Lock()

#: ``date-time`` as the server parses it: ISO 8601 (``datetime.fromisoformat``),
#: with or without an offset; never a bare number.
_FORMATS = FormatChecker(formats=())


@_FORMATS.checks("date-time", raises=ValueError)
def _is_iso_datetime(value: object) -> bool:
    return not isinstance(value, str) or isinstance(datetime.fromisoformat(value), datetime)


@dataclass(frozen=True)
class _Query:
    """One query parameter of a route: its name, whether it repeats, its validator."""

    name: str
    repeated: bool
    types: frozenset[str]  # of the value, or of each item when repeated
    validator: Draft202012Validator


@dataclass(frozen=True)
class _Operation:
    """What the published schema says of one route and method."""

    described: bool  # False for a route the schema leaves out: nothing is checked
    body: Draft202012Validator | None
    query: tuple[_Query, ...]

    @property
    def names(self) -> frozenset[str]:
        """The query parameters the route takes."""
        return frozenset(parameter.name for parameter in self.query)


async def check_request(connection: HTTPConnection) -> None:
    """Refuse (422) a JSON body or query parameter that the route's published schema refuses.

    A FastAPI dependency (``APIRouter(dependencies=[Depends(check_request)])``):
    it runs before the route's own validation. WebSockets, bodies that are not
    JSON and parameters the schema does not name pass through untouched: the
    route answers those itself.
    """
    if not isinstance(connection, Request):  # a WebSocket: no body, its own checks
        return
    route = connection.scope.get("route")
    if not isinstance(route, BaseRoute):
        return
    method = connection.scope["method"]
    operation = _operation(connection, route, method)
    errors: list[dict[str, Any]] = [
        {
            "type": "schema_unknown_parameter",
            "loc": ["query", _printable(name)],
            "msg": "this route takes no such query parameter",
        }
        for name in dict.fromkeys(connection.query_params.keys())
        if operation.described and name not in operation.names
    ]
    for parameter in operation.query:
        values = connection.query_params.getlist(parameter.name)
        if not values:
            continue
        if len(values) > 1 and not parameter.repeated:
            # The schema says one value: taking the last and ignoring the others would
            # accept what the contract calls invalid.
            errors.append(
                {
                    "type": "schema_repeated_parameter",
                    "loc": ["query", parameter.name],
                    "msg": f"given {len(values)} times; this parameter takes one value",
                }
            )
            continue
        typed = _typed_values(values, parameter)
        errors += _details(parameter.validator.iter_errors(typed), ["query", parameter.name])
    if operation.body is not None and method in _METHODS_WITH_BODY:
        try:
            document = await connection.json()  # the route's decoding, cached
        except ValueError:
            document = _NOT_JSON  # the route's own parsing answers it
        if document is not _NOT_JSON:
            refused = _details(operation.body.iter_errors(document), ["body"])
            if refused and _route_refuses_body(route, document):
                return  # the route refuses it too, and its own messages say more
            errors += refused
    if errors:
        raise RequestValidationError(errors[:_MAX_ERRORS])


_NOT_JSON = object()
_UNDESCRIBED = _Operation(described=False, body=None, query=())


def _route_refuses_body(route: BaseRoute, document: Any) -> bool:
    """Whether the route's own (pydantic) validation refuses ``document`` as its body."""
    field = route.body_field if isinstance(route, APIRoute) else None
    if field is None:
        return False
    _value, errors = field.validate(document, {}, loc=("body",))
    return bool(errors)


def _operation(connection: HTTPConnection, route: BaseRoute, method: str) -> _Operation:
    """The compiled checks of the request's route and ``method`` (cached on the app).

    The route is found in the published schema by the request's path: a route
    object need not know the prefix it was included under.
    """
    state = connection.app.state
    checks: _Checks | None = getattr(state, "schema_checks", None)
    if checks is None:
        with _cache_lock:
            checks = getattr(state, "schema_checks", None)
            if checks is None:
                checks = _Checks(connection.app.openapi())
                state.schema_checks = checks
    root = connection.scope.get("root_path", "")
    path = connection.scope["path"]
    return checks.operation(path[len(root) :] if root and path.startswith(root) else path, method)


class _Checks:
    """The published schema's paths as patterns, and the checks compiled per route and method."""

    def __init__(self, openapi: dict[str, Any]) -> None:
        self.openapi = openapi
        self.paths = [
            (template, re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))))
            for template in openapi.get("paths", {})
        ]
        self.compiled: dict[tuple[str, str], _Operation] = {}

    def operation(self, path: str, method: str) -> _Operation:
        matches = [template for template, pattern in self.paths if pattern.fullmatch(path)]
        # A literal path (/search) is its own route, not an id of the templated one.
        template = min(matches, key=lambda t: t.count("{"), default=None)
        if template is None:
            return _UNDESCRIBED
        key = (template, method)
        found = self.compiled.get(key)
        if found is None:
            found = self.compiled[key] = _compile(self.openapi, template, method)
        return found


def _compile(openapi: dict[str, Any], path: str, method: str) -> _Operation:
    operation = openapi.get("paths", {}).get(path, {}).get(method.lower(), {})
    components = openapi.get("components", {})

    def validator(schema: dict[str, Any]) -> Draft202012Validator:
        # "#/components/schemas/X" references resolve against the root of the schema
        # validated, so the components ride along (an unknown keyword is ignored).
        return Draft202012Validator({**schema, "components": components}, format_checker=_FORMATS)

    content = operation.get("requestBody", {}).get("content", {})
    body = content.get("application/json", {}).get("schema")
    query = tuple(
        _query(parameter["name"], parameter["schema"], components, validator(parameter["schema"]))
        for parameter in operation.get("parameters", ())
        if parameter.get("in") == "query" and "schema" in parameter
    )
    return _Operation(
        described=bool(operation), body=None if body is None else validator(body), query=query
    )


def _query(
    name: str, schema: dict[str, Any], components: dict[str, Any], validator: Draft202012Validator
) -> _Query:
    if "array" not in _types(schema, components):
        return _Query(name, False, frozenset(_types(schema, components) or {"string"}), validator)
    arrays = [schema, *(choice for choice in schema.get("anyOf", ()) if isinstance(choice, dict))]
    items: dict[str, Any] = next((c["items"] for c in arrays if "items" in c), {})
    return _Query(name, True, frozenset(_types(items, components) or {"string"}), validator)


def _types(schema: dict[str, Any], components: dict[str, Any]) -> set[str]:
    """The JSON types a (sub)schema allows, through ``anyOf``/``oneOf`` and references."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        current = stack.pop()
        reference = current.get("$ref", "")
        if reference.startswith("#/components/schemas/"):
            stack.append(components.get("schemas", {}).get(reference.rsplit("/", 1)[1], {}))
        kind = current.get("type")
        found.update([kind] if isinstance(kind, str) else kind or ())
        for key in ("anyOf", "oneOf"):
            stack.extend(current.get(key, ()))
        if "enum" in current:
            found.update(_json_type(value) for value in current["enum"])
    return found


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "null" if value is None else "string"


def _typed_values(values: list[str], parameter: _Query) -> Any:
    """The query string's text as the JSON value the schema describes (query text is untyped).

    ``"3"`` is the integer 3 where the schema allows an integer, ``"true"``
    the boolean where it allows a boolean; anything else stays a string,
    which the schema then accepts or refuses.
    """
    if parameter.repeated:
        return [_typed(value, parameter.types) for value in values]
    return _typed(values[-1], parameter.types)


def _typed(text: str, allowed: frozenset[str]) -> Any:
    if "integer" in allowed and _INTEGER.fullmatch(text):
        return int(text)
    if "number" in allowed:
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            if math.isfinite(number) and text.strip() == text:
                return number
    if "boolean" in allowed and text in ("true", "false"):
        return text == "true"
    return text


def _details(errors: Iterator[ValidationError], prefix: list[Any]) -> list[dict[str, Any]]:
    """FastAPI's 422 items, without echoing the input (a body may hold an API key)."""
    # Where a value matched none of several shapes, the error of the shape it was closest to
    # (jsonschema's best_match: the branch of the value's own type) says what to change.
    found = [best_match([error]) if error.context else error for error in errors]
    ordered = sorted(found, key=lambda error: [str(part) for part in error.absolute_path])
    return [
        {
            "type": f"schema_{error.validator}",
            "loc": [*prefix, *(_printable(part) for part in error.absolute_path)],
            "msg": _printable(_message(error)),
        }
        for error in ordered[:_MAX_ERRORS]
    ]


def _message(error: ValidationError) -> str:
    """What the rule says, and why when the schema tells (its ``description``)."""
    text = _rule_message(error)
    schema = error.schema if isinstance(error.schema, dict) else {}
    # A property's own reason, not an object's (whose description is its model's docstring).
    why = (
        None
        if error.validator in ("required", "additionalProperties")
        else schema.get("description")
    )
    return f"{text}: {why}" if isinstance(why, str) and len(why) <= 200 else text


def _rule_message(error: ValidationError) -> str:
    rule, value = str(error.validator), error.validator_value
    if rule == "type":
        return f"must be of type {_short(value)}"
    if rule in ("required", "additionalProperties", "unevaluatedProperties"):
        return str(error.message)  # names properties, never values
    if rule == "enum":
        return f"must be one of {_short(value)}"
    if rule == "const":
        return f"must be {_short(value)}"
    if rule == "format":
        return f"must be a {value} (ISO 8601)" if value == "date-time" else f"must be a {value}"
    if rule in ("anyOf", "oneOf"):
        return (
            "matches none of the allowed shapes"
            if rule == "anyOf"
            else ("does not match exactly one of the allowed shapes")
        )
    return f"breaks the schema's {rule!r} rule ({_short(value)})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _printable(part: Any) -> Any:
    """``part`` with lone surrogates escaped: an answer must encode as UTF-8."""
    if isinstance(part, str):
        return part.encode("utf-8", "backslashreplace").decode("utf-8")
    return part
