"""MCP tools as cowconv tools: the server's input schema is the spec, its answer the observation.

Each tool an MCP server lists becomes an :class:`MCPToolDefinition`: the
model sees the tool's name (prefixed by its server's when the agent has
several servers), its description and its JSON Schema as given; a call's
arguments are checked against that schema, sent to the server, and its
result (text and images) recorded as an :class:`MCPToolObservation`. A
server-side error, a lost session or a timeout is an error observation the
model reads, never a crash of the run.

>>> action = MCPToolAction(data={"url": "https://example.com"})
>>> action.to_mcp_arguments()
{'url': 'https://example.com'}
>>> observation = MCPToolObservation.from_text("boom", is_error=True, tool_name="fetch")
>>> observation.is_error, observation.tool_name
(True, 'fetch')
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jsonschema
import mcp.types

from cowconv._exceptions import MCPTimeoutError, ToolArgumentError
from cowconv.agent.tools import ToolDefinition, ToolExecutor
from cowconv.core.frozen import thaw
from cowconv.core.mcp import MCPToolAction, MCPToolObservation

if TYPE_CHECKING:
    from cowconv.mcp.client import MCPClient

__all__ = [
    "MCP_TOOL_TIMEOUT_SECONDS",
    "MCPToolAction",
    "MCPToolDefinition",
    "MCPToolExecutor",
    "MCPToolObservation",
]  # MCPToolAction and MCPToolObservation are recorded data: defined in cowconv.core.mcp

logger = logging.getLogger("cowconv.mcp")

#: How long one MCP tool call may take (OpenHands' SDK's figure).
MCP_TOOL_TIMEOUT_SECONDS = 300.0

# What OpenHands' SDK adds to every MCP tool's spec; a model used to it may send them.
_OPENHANDS_FIELDS = ("summary", "security_risk")


class MCPToolExecutor(ToolExecutor[MCPToolAction, MCPToolObservation]):
    """Calls one tool of one server through the conversation's :class:`~cowconv.MCPClient`.

    >>> from cowconv import MCPClient, MCPServer
    >>> client = MCPClient({"gone": MCPServer(command="/nonexistent/server")})
    >>> executor = MCPToolExecutor("lookup", client, server="gone", timeout=5)
    >>> observation = executor(MCPToolAction(data={}))
    >>> observation.is_error, observation.text.startswith("Error calling MCP tool lookup:")
    (True, True)
    >>> client.close()
    """

    def __init__(
        self,
        tool_name: str,
        client: MCPClient,
        timeout: float = MCP_TOOL_TIMEOUT_SECONDS,
        *,
        server: str,
        remote_name: str | None = None,
    ) -> None:
        self.tool_name = tool_name
        self.client = client
        self.timeout = timeout
        self.server = server
        self.remote_name = remote_name if remote_name is not None else tool_name

    def __call__(self, action: MCPToolAction, conversation: Any = None) -> MCPToolObservation:
        """Call the tool; an unreachable server, an error or a timeout is an error observation."""
        try:
            result = self.client.call_tool(
                self.server, self.remote_name, action.to_mcp_arguments(), self.timeout
            )
        except MCPTimeoutError:
            return MCPToolObservation.from_text(
                f"MCP tool '{self.tool_name}' timed out after {self.timeout} seconds. "
                "The tool server may be unresponsive or the operation is taking too long. "
                "Consider retrying or using an alternative approach.",
                is_error=True,
                tool_name=self.tool_name,
            )
        except Exception as error:
            logger.warning("Error calling MCP tool %s: %s", self.tool_name, error)
            return MCPToolObservation.from_text(
                f"Error calling MCP tool {self.tool_name}: {error}",
                is_error=True,
                tool_name=self.tool_name,
            )
        return MCPToolObservation.from_call_tool_result(self.tool_name, result)

    def close(self) -> None:
        """End the client's sessions (the next call opens its server's again)."""
        self.client.close()


class MCPToolDefinition(ToolDefinition[MCPToolAction, MCPToolObservation]):
    """One tool of an MCP server, as the agent's tool: its schema as the spec.

    Made by :meth:`MCPClient.connect <cowconv.MCPClient.connect>`; the
    arguments the model sends are checked against the server's
    ``inputSchema`` (a mismatch is an invalid-arguments observation).

    >>> from cowconv import MCPClient, MCPServer
    >>> listed = mcp.types.Tool(name="add", description="Add two numbers.", input_schema={
    ...     "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    >>> client = MCPClient({"math": MCPServer(command="math-server")})
    >>> [tool] = MCPToolDefinition.create(client, "math", listed)
    >>> tool.name, tool.to_openai_tool()["function"]["parameters"]["required"]
    ('add', ['a'])
    >>> tool.validate_arguments({"a": 1}).data["a"]
    1
    >>> tool.validate_arguments({"a": "one"})
    Traceback (most recent call last):
    ...
    cowconv._exceptions.ToolArgumentError: invalid arguments for MCP tool 'add': a: 'one' is not ...
    """

    name = "mcp_tool"

    def __init__(self, mcp_tool: mcp.types.Tool, executor: MCPToolExecutor) -> None:
        super().__init__(
            description=mcp_tool.description or "No description provided",
            action_type=MCPToolAction,
            observation_type=MCPToolObservation,
            executor=executor,
            annotations=mcp_tool.annotations,
            meta=mcp_tool.meta,
        )
        self.mcp_tool = mcp_tool
        self.name = executor.tool_name  # type: ignore[misc]  # each instance is its own tool
        self._validator = jsonschema.validators.validator_for(mcp_tool.input_schema)(
            mcp_tool.input_schema
        )

    @classmethod
    def create(  # type: ignore[override]
        cls,
        client: MCPClient,
        server: str,
        mcp_tool: mcp.types.Tool,
        name: str | None = None,
        timeout: float = MCP_TOOL_TIMEOUT_SECONDS,
    ) -> Sequence[MCPToolDefinition]:
        """The tool ``mcp_tool`` of ``server``, called through ``client``, exposed as ``name``."""
        exposed = name if name is not None else mcp_tool.name
        executor = MCPToolExecutor(
            exposed, client, timeout, server=server, remote_name=mcp_tool.name
        )
        return [cls(mcp_tool, executor)]

    def to_openai_tool(self) -> dict[str, Any]:
        """The spec the model sees: the server's name, description and input schema as given."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.mcp_tool.input_schema),
            },
        }

    def validate_arguments(self, arguments: Mapping[str, Any]) -> MCPToolAction:
        """The arguments checked against the tool's input schema (``None`` values dropped)."""
        data = {key: value for key, value in thaw(arguments).items() if value is not None}
        declared = self.mcp_tool.input_schema.get("properties", {})
        for field in _OPENHANDS_FIELDS:
            if field not in declared:
                data.pop(field, None)
        problems = sorted(self._validator.iter_errors(data), key=lambda error: list(error.path))
        if problems:
            text = "; ".join(
                f"{'.'.join(str(part) for part in problem.path) or '(arguments)'}: "
                f"{problem.message}"
                if problem.path
                else problem.message
                for problem in problems
            )
            raise ToolArgumentError(f"invalid arguments for MCP tool {self.name!r}: {text}")
        return MCPToolAction(data=data)
