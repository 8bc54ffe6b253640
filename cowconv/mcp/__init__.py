"""MCP (Model Context Protocol): an agent's MCP servers and their tools (OpenHands' ``sdk.mcp``).

Give an agent servers (``Agent(mcp_config={"fetch": MCPServer(command="uvx",
args=["mcp-server-fetch"])})``, or the ``{"mcpServers": {...}}`` form) and
each conversation opens one session per server when it first runs, turns the
servers' tools into the agent's tools, and closes the sessions when it is
closed; a fork opens its own. A server that cannot start is logged and left
out. The configuration classes load light; the client and the tools need
the ``mcp`` extra (``pip install 'cowconv[mcp]'``).

>>> from cowconv.mcp import MCPServer
>>> MCPServer(command="uvx", args=["mcp-server-fetch"]).effective_transport
'stdio'
"""

from typing import TYPE_CHECKING

import cowconv._lazy as _lazy

if TYPE_CHECKING:
    from cowconv._exceptions import MCPError, MCPTimeoutError
    from cowconv.core.mcp import (
        MCPApiKeyAuthCredential,
        MCPAuthCredential,
        MCPBasicAuthCredential,
        MCPBearerAuthCredential,
        MCPHeaderAuthCredential,
        MCPNoneAuthCredential,
        MCPOAuthAuthCredential,
        MCPOAuthAuthentication,
        MCPServer,
        MCPToolAction,
        MCPToolObservation,
        coerce_mcp_config,
    )
    from cowconv.mcp.client import MCPClient, create_mcp_tools
    from cowconv.mcp.tool import MCPToolDefinition, MCPToolExecutor

_LAZY = {
    "MCPApiKeyAuthCredential": "cowconv.core.mcp",
    "MCPAuthCredential": "cowconv.core.mcp",
    "MCPBasicAuthCredential": "cowconv.core.mcp",
    "MCPBearerAuthCredential": "cowconv.core.mcp",
    "MCPClient": "cowconv.mcp.client",
    "MCPError": "cowconv._exceptions",
    "MCPHeaderAuthCredential": "cowconv.core.mcp",
    "MCPNoneAuthCredential": "cowconv.core.mcp",
    "MCPOAuthAuthCredential": "cowconv.core.mcp",
    "MCPOAuthAuthentication": "cowconv.core.mcp",
    "MCPServer": "cowconv.core.mcp",
    "MCPTimeoutError": "cowconv._exceptions",
    "MCPToolAction": "cowconv.core.mcp",
    "MCPToolDefinition": "cowconv.mcp.tool",
    "MCPToolExecutor": "cowconv.mcp.tool",
    "MCPToolObservation": "cowconv.core.mcp",
    "coerce_mcp_config": "cowconv.core.mcp",
    "create_mcp_tools": "cowconv.mcp.client",
}

__getattr__, __dir__ = _lazy.lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "MCPApiKeyAuthCredential",
    "MCPAuthCredential",
    "MCPBasicAuthCredential",
    "MCPBearerAuthCredential",
    "MCPClient",
    "MCPError",
    "MCPHeaderAuthCredential",
    "MCPNoneAuthCredential",
    "MCPOAuthAuthCredential",
    "MCPOAuthAuthentication",
    "MCPServer",
    "MCPTimeoutError",
    "MCPToolAction",
    "MCPToolDefinition",
    "MCPToolExecutor",
    "MCPToolObservation",
    "coerce_mcp_config",
    "create_mcp_tools",
]
