"""``MCPServer`` and its credentials: an agent's MCP servers, as configuration (OpenHands' form).

An :class:`~cowconv.Agent`'s ``mcp_config`` maps a server name to an
:class:`MCPServer`: a local process spoken to over stdio (``command``,
``args``, ``env``) or a remote server (``url``, over Streamable HTTP or SSE).
It is plain data that serialises with the agent (stores, the agent server,
forks); :mod:`cowconv.mcp` connects to the servers when a conversation runs.

Secrets (``env`` and ``headers`` values, credentials) are ``SecretStr``:
masked in reprs and default dumps, written out only under
``context={"expose_secrets": True}``, as ``LLM.api_key`` is.

>>> config = coerce_mcp_config(
...     {"mcpServers": {"fetch": {"command": "uvx", "args": ["mcp-server-fetch"]}}})
>>> config["fetch"].command, config["fetch"].args
('uvx', ('mcp-server-fetch',))
>>> MCPServer(url="https://mcp.example.com/mcp", headers={"X-Key": "k"}).model_dump(
...     mode="json", exclude_none=True)
{'url': 'https://mcp.example.com/mcp', 'headers': {'X-Key': '**********'}, 'enabled': True}
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SecretStr,
    SerializationInfo,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pyrsistent import PMap, pmap

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.core.frozen import CheckedModel, FrozenJSONMap, thaw
from cowconv.core.kinds import LazyJsonSchema, inlined_json_schema
from cowconv.core.llm import dump_secret
from cowconv.core.message import ImageContent, TextContent
from cowconv.core.schema import Action, Observation

__all__ = [
    "MCPApiKeyAuthCredential",
    "MCPAuthCredential",
    "MCPBasicAuthCredential",
    "MCPBearerAuthCredential",
    "MCPConfig",
    "MCPHeaderAuthCredential",
    "MCPNoneAuthCredential",
    "MCPOAuthAuthCredential",
    "MCPOAuthAuthentication",
    "MCPServer",
    "MCPToolAction",
    "MCPToolObservation",
    "MCPTransport",
    "coerce_mcp_config",
    "enabled_mcp_servers",
]

logger = logging.getLogger("cowconv.mcp")

MCPTransport: TypeAlias = Literal["stdio", "http", "streamable-http", "sse"]
"""How cowconv speaks to a server: a local process's stdio, Streamable HTTP, or SSE."""

_CONFIG = ConfigDict(frozen=True, extra="forbid", defer_build=True)


def _secret_map(value: Any) -> PMap[str, SecretStr] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidTypeError(f"expected a mapping of str to str, got {type(value).__name__}")
    secrets = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str | SecretStr):
            raise InvalidTypeError(f"expected str keys and str values, got {key!r}: {item!r}")
        secrets[key] = item if isinstance(item, SecretStr) else SecretStr(item)
    return pmap(secrets)


_Secret: TypeAlias = Annotated[SecretStr, PlainSerializer(dump_secret)]
"""A secret field of the credentials: masked in JSON unless the serializer's context says
``expose_secrets`` (:func:`~cowconv.core.llm.dump_secret`), one serializer for them all."""


def _dump_secret_map(value: Mapping[str, SecretStr] | None, info: SerializationInfo) -> Any:
    if value is None:
        return None
    return {key: dump_secret(value[key], info) for key in sorted(value)}


class MCPNoneAuthCredential(CheckedModel):
    """No credentials: the server is open.

    >>> MCPNoneAuthCredential(strategy="none").to_http_headers()
    {}
    """

    model_config = _CONFIG

    strategy: Literal["none"]

    def to_http_headers(self) -> dict[str, str] | None:
        """The HTTP headers these credentials add to each request (none)."""
        return {}


class MCPApiKeyAuthCredential(CheckedModel):
    """An API key: in ``header_name``, or as a bearer token when no header is named.

    >>> key = MCPApiKeyAuthCredential(strategy="api_key", value="k", header_name="X-Key")
    >>> key.to_http_headers()
    {'X-Key': 'k'}
    """

    model_config = _CONFIG

    strategy: Literal["api_key"]
    value: _Secret | None = None
    header_name: str | None = None

    def to_http_headers(self) -> dict[str, str] | None:
        """The HTTP headers these credentials add to each request."""
        if self.value is None:
            return {}
        if self.header_name:
            return {self.header_name: self.value.get_secret_value()}
        return {"Authorization": f"Bearer {self.value.get_secret_value()}"}


class MCPBearerAuthCredential(CheckedModel):
    """A bearer token, sent as ``Authorization: Bearer ...``.

    >>> MCPBearerAuthCredential(strategy="bearer", value="t").to_http_headers()
    {'Authorization': 'Bearer t'}
    """

    model_config = _CONFIG

    strategy: Literal["bearer"]
    value: _Secret | None = None

    def to_http_headers(self) -> dict[str, str] | None:
        """The HTTP headers these credentials add to each request."""
        if self.value is None:
            return {}
        return {"Authorization": f"Bearer {self.value.get_secret_value()}"}


class MCPBasicAuthCredential(CheckedModel):
    """HTTP basic authentication: a user name and a password.

    >>> MCPBasicAuthCredential(strategy="basic", username="u", password="p").to_http_headers()
    {'Authorization': 'Basic dTpw'}
    """

    model_config = _CONFIG

    strategy: Literal["basic"]
    username: str
    password: _Secret | None = None

    def to_http_headers(self) -> dict[str, str] | None:
        """The HTTP headers these credentials add to each request."""
        if self.password is None:
            return {}
        token = f"{self.username}:{self.password.get_secret_value()}".encode()
        return {"Authorization": f"Basic {base64.b64encode(token).decode('ascii')}"}


class MCPHeaderAuthCredential(CheckedModel):
    """Headers of its own (secret values) sent with each request.

    >>> MCPHeaderAuthCredential(strategy="header", headers={"X-Token": "t"}).to_http_headers()
    {'X-Token': 't'}
    """

    model_config = _CONFIG

    strategy: Literal["header"]
    headers: PMap[str, SecretStr] = Field(default_factory=pmap)

    @field_validator("headers", mode="plain")
    @classmethod
    def _check_headers(cls, value: Any) -> PMap[str, SecretStr]:
        return _secret_map(value) or pmap()

    @field_serializer("headers")
    def _dump_headers(self, value: Mapping[str, SecretStr], info: SerializationInfo) -> Any:
        return _dump_secret_map(value, info)

    def to_http_headers(self) -> dict[str, str] | None:
        """The HTTP headers these credentials add to each request."""
        return {name: value.get_secret_value() for name, value in sorted(self.headers.items())}


class MCPOAuthAuthentication(CheckedModel):
    """How to register with an OAuth 2.1 server (OpenHands' settings, kept with the agent).

    >>> MCPOAuthAuthentication(type="oauth", scopes=["read"]).scopes
    ('read',)
    """

    model_config = _CONFIG

    type: Literal["oauth"]
    client_auth_method: (
        Literal["none", "client_secret_post", "client_secret_basic", "private_key_jwt"] | None
    ) = None
    scopes: str | tuple[str, ...] | None = None
    client_name: str | None = None
    client_metadata_url: str | None = None
    client_id: str | None = None
    client_secret: _Secret | None = None
    additional_client_metadata: FrozenJSONMap | None = None


class MCPOAuthAuthCredential(CheckedModel):
    """OAuth 2.1 for a remote server (OpenHands' ``strategy="oauth2"``).

    cowconv keeps the setting with the agent but does not run OAuth's
    browser login: a server that demands it fails to start, which is
    logged, and the conversation runs without its tools (see
    ``docs/migration.md``).

    >>> MCPOAuthAuthCredential(strategy="oauth2").to_http_headers() is None
    True
    """

    model_config = _CONFIG

    strategy: Literal["oauth2"]
    authentication: MCPOAuthAuthentication | None = None

    def to_http_headers(self) -> dict[str, str] | None:
        """``None``: OAuth's headers come from a login, not from the configuration."""
        return None


MCPAuthCredential: TypeAlias = Annotated[
    MCPNoneAuthCredential
    | MCPApiKeyAuthCredential
    | MCPBearerAuthCredential
    | MCPBasicAuthCredential
    | MCPHeaderAuthCredential
    | MCPOAuthAuthCredential,
    Field(discriminator="strategy"),
]
"""One of the credential kinds, told apart by ``strategy``."""


class MCPServer(CheckedModel):
    """One MCP server: a local process (``command``) or a remote one (``url``).

    As in OpenHands' SDK, ``transport`` defaults to stdio for a ``command``
    and to Streamable HTTP for a ``url``; ``enabled=False`` keeps a server
    configured but unused.

    >>> MCPServer(command="uvx", args=["mcp-server-fetch"]).effective_transport
    'stdio'
    >>> MCPServer(url="http://127.0.0.1:8000/sse", transport="sse").effective_transport
    'sse'
    >>> MCPServer(args=["x"])
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for MCPServer
      Value error, an MCP server needs 'command' (a local process spoken to over stdio) ...
    ...
    """

    model_config = _CONFIG

    url: str | None = Field(default=None, min_length=1)
    transport: MCPTransport | None = None
    command: str | None = Field(default=None, min_length=1)
    args: tuple[str, ...] | None = None
    env: PMap[str, SecretStr] | None = None
    cwd: str | None = None
    description: str | None = None
    icon: str | None = None
    timeout: float | None = Field(default=None, gt=0)
    sse_read_timeout: float | None = Field(default=None, gt=0)
    keep_alive: bool | None = None
    headers: PMap[str, SecretStr] | None = None
    auth: MCPAuthCredential | None = None
    enabled: bool = True

    @field_validator("env", "headers", mode="plain")
    @classmethod
    def _check_secret_map(cls, value: Any) -> PMap[str, SecretStr] | None:
        return _secret_map(value)

    @field_serializer("env", "headers")
    def _dump_secret_map(
        self, value: Mapping[str, SecretStr] | None, info: SerializationInfo
    ) -> Any:
        return _dump_secret_map(value, info)

    @model_validator(mode="after")
    def _check_server(self) -> MCPServer:
        if self.command is None and self.url is None:
            raise InvalidValueError(
                "an MCP server needs 'command' (a local process spoken to over stdio) "
                "or 'url' (a remote server)"
            )
        transport = self.transport
        if transport == "stdio" and not self.command:
            raise InvalidValueError("stdio MCP servers require 'command'")
        if transport in {"http", "streamable-http", "sse"} and not self.url:
            raise InvalidValueError("remote MCP servers require 'url'")
        if self.auth is not None and any(
            key.lower() == "authorization" for key in self.headers or ()
        ):
            raise InvalidValueError(
                "'auth' cannot be combined with an explicit top-level 'Authorization' "
                "header; use auth.strategy='header' instead."
            )
        return self

    @property
    def effective_transport(self) -> MCPTransport:
        """The transport used: ``transport``, else stdio for a command, HTTP for a URL."""
        if self.transport is not None:
            return self.transport
        return "stdio" if self.command else "http"

    def http_headers(self) -> dict[str, str]:
        """The headers sent to a remote server: ``headers``, then the credentials' own.

        >>> MCPServer(url="http://h/mcp", auth={"strategy": "bearer", "value": "t"}).http_headers()
        {'Authorization': 'Bearer t'}
        """
        headers = {key: value.get_secret_value() for key, value in (self.headers or {}).items()}
        if self.auth is not None:
            headers.update(self.auth.to_http_headers() or {})
        return headers


class MCPToolAction(Action):
    """The arguments of an MCP tool call, as the JSON object the server receives.

    >>> MCPToolAction(data={"a": 1}).model_dump()
    {'data': {'a': 1}, 'kind': 'MCPToolAction'}
    """

    data: FrozenJSONMap = Field(
        default=pmap(), description="Dynamic data fields from the tool call"
    )

    def to_mcp_arguments(self) -> dict[str, Any]:
        """The arguments as a plain dict, for the server.

        >>> MCPToolAction(data={"q": "fork"}).to_mcp_arguments()
        {'q': 'fork'}
        """
        arguments: dict[str, Any] = thaw(self.data)
        return arguments


class MCPToolObservation(Observation):
    """What an MCP tool answered: ``[Tool 'name' executed.]``, then its text and images.

    >>> from types import SimpleNamespace as Block
    >>> result = Block(content=[Block(type="text", text="42")], is_error=False)
    >>> MCPToolObservation.from_call_tool_result("answer", result).text
    "[Tool 'answer' executed.]42"
    """

    tool_name: str = Field(description="Name of the tool that was called")

    @classmethod
    def from_call_tool_result(cls, tool_name: str, result: Any) -> MCPToolObservation:
        """The observation of a server's ``tools/call`` result (OpenHands' layout).

        ``result`` is the ``mcp`` package's ``CallToolResult``. Text and
        image blocks are kept; other blocks (audio, resources) are left out
        with a warning, as OpenHands' SDK does.
        """
        content: list[TextContent | ImageContent] = [
            TextContent(text=f"[Tool '{tool_name}' executed.]")
        ]
        for block in result.content:
            kind = getattr(block, "type", None)
            if kind == "text":
                content.append(TextContent(text=block.text))
            elif kind == "image":
                url = f"data:{block.mime_type};base64,{block.data}"
                content.append(ImageContent(image_urls=(url,)))
            else:
                logger.warning("Unsupported MCP content block type: %s. Ignoring.", type(block))
        return cls(content=tuple(content), is_error=bool(result.is_error), tool_name=tool_name)


def _server_mapping(value: object) -> object:
    """The server map inside ``value``: ``{"mcpServers": {...}}`` or the map itself."""
    if value is None:
        return {}
    if isinstance(value, Mapping) and "mcpServers" in value:
        servers = value["mcpServers"]
        return {} if servers is None else servers
    return value


def _server(name: str, server: object) -> MCPServer:
    if isinstance(server, MCPServer):
        return server
    if not isinstance(server, Mapping):
        raise InvalidTypeError(
            f"MCP server {name!r} must be an MCPServer or a JSON object, "
            f"got {type(server).__name__}"
        )
    fields = dict(server)
    # Claude Desktop / FastMCP files say "type"; "shttp" is their Streamable HTTP.
    kind = fields.pop("type", None)
    if "transport" not in fields and kind is not None:
        fields["transport"] = kind
    if fields.get("transport") == "shttp":
        fields["transport"] = "http"
    # As OpenHands' SDK does, fields another tool's config carries are dropped, not refused.
    known = {key: item for key, item in fields.items() if key in MCPServer.model_fields}
    try:
        return MCPServer.model_validate(known)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or '(server)'}: {problem['msg']}"
            for problem in error.errors()
        )
        raise InvalidValueError(f"invalid MCP server {name!r}: {problems}") from None


def coerce_mcp_config(value: object) -> PMap[str, MCPServer]:
    """An agent's ``mcp_config`` from any form OpenHands accepts, as a frozen name -> server map.

    Accepted: ``{"mcpServers": {name: server}}`` (Claude Desktop's and
    FastMCP's file format) or ``{name: server}``, each server an
    :class:`MCPServer` or its JSON. Anything else is an
    :class:`~cowconv.InvalidValueError` (or :class:`~cowconv.InvalidTypeError`)
    naming the server and the field.

    >>> sorted(coerce_mcp_config({"a": {"url": "http://h/mcp", "type": "shttp"}})["a"]
    ...        .model_dump(exclude_none=True).items())
    [('enabled', True), ('transport', 'http'), ('url', 'http://h/mcp')]
    >>> coerce_mcp_config({"a": {"url": "http://h/mcp", "transport": "pigeon"}})
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: invalid MCP server 'a': transport: Input should be ...
    """
    servers = _server_mapping(value)
    if not isinstance(servers, Mapping):
        raise InvalidTypeError(
            f"mcp_config must map server names to servers, got {type(servers).__name__}"
        )
    checked = {}
    for name, server in servers.items():
        if not isinstance(name, str) or not name:
            raise InvalidValueError(f"an MCP server's name must be a non-empty str, got {name!r}")
        checked[name] = _server(name, server)
    return pmap(checked)


def _dump_mcp_config(config: Mapping[str, MCPServer], info: SerializationInfo) -> Any:
    # As OpenHands' SDK writes it: each server without its unset fields.
    return {
        name: config[name].model_dump(mode=info.mode, context=info.context, exclude_none=True)
        for name in sorted(config)
    }


_REMOTE = ("http", "streamable-http", "sse", "shttp")


def mcp_config_json_schema() -> dict[str, Any]:
    """The published JSON schema of an ``mcp_config``: what :func:`coerce_mcp_config` takes.

    A name -> server map, or the same inside ``{"mcpServers": ...}``. A server names a
    ``command`` or a ``url`` (the one its transport needs); ``type`` stands for
    ``transport`` when that is absent; fields of other tools' files are allowed (dropped);
    ``auth`` and an ``Authorization`` header do not go together.

    >>> schema = mcp_config_json_schema()
    >>> sorted(schema["anyOf"][1]["additionalProperties"]["properties"])[:3]
    ['args', 'auth', 'command']
    """
    server = inlined_json_schema(MCPServer)
    fields = server["properties"]
    secrets = {
        "anyOf": [{"type": "object", "additionalProperties": {"type": "string"}}, {"type": "null"}]
    }
    fields["env"] = fields["headers"] = secrets
    transport = {"anyOf": [{"enum": ["stdio", *_REMOTE], "type": "string"}, {"type": "null"}]}
    fields["transport"] = transport
    server["additionalProperties"] = True  # dropped, as OpenHands' SDK drops them

    def needs(key: str, kinds: list[str], field: str, alone: bool) -> dict[str, Any]:
        condition: dict[str, Any] = {"properties": {key: {"enum": kinds}}, "required": [key]}
        if alone:  # "type" counts only without "transport"
            condition["not"] = {"required": ["transport"]}
        return {
            "if": condition,
            "then": {"properties": {field: {"type": "string"}}, "required": [field]},
        }

    authorization = {"pattern": "^[Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn]$"}
    server["allOf"] = [
        {
            "anyOf": [
                {"properties": {"command": {"type": "string"}}, "required": ["command"]},
                {"properties": {"url": {"type": "string"}}, "required": ["url"]},
            ]
        },
        needs("transport", ["stdio"], "command", False),
        needs("transport", list(_REMOTE), "url", False),
        {"if": {"not": {"required": ["transport"]}}, "then": {"properties": {"type": transport}}},
        needs("type", ["stdio"], "command", True),
        needs("type", list(_REMOTE), "url", True),
        {
            "not": {
                "properties": {
                    "auth": {"type": "object"},
                    "headers": {"type": "object", "not": {"propertyNames": {"not": authorization}}},
                },
                "required": ["auth", "headers"],
            }
        },
    ]
    names = {"minLength": 1, "not": {"const": "mcpServers"}}
    servers = {"type": "object", "propertyNames": names, "additionalProperties": server}
    wrapped = {
        "type": "object",
        "properties": {"mcpServers": {"anyOf": [servers, {"type": "null"}]}},
        "required": ["mcpServers"],
    }
    return {"anyOf": [wrapped, servers]}


MCPConfig: TypeAlias = Annotated[
    PMap[str, MCPServer],
    PlainValidator(coerce_mcp_config),
    PlainSerializer(_dump_mcp_config),
    LazyJsonSchema(mcp_config_json_schema),
]
"""An agent's ``mcp_config``: server name -> :class:`MCPServer`, in any form OpenHands accepts."""


def enabled_mcp_servers(config: Mapping[str, MCPServer]) -> dict[str, MCPServer]:
    """The servers of ``config`` that are not switched off (``enabled=False``), by name.

    >>> config = coerce_mcp_config({"a": {"command": "x"}, "b": {"command": "y", "enabled": False}})
    >>> list(enabled_mcp_servers(config))
    ['a']
    """
    return {name: config[name] for name in sorted(config) if config[name].enabled}
