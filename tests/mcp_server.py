"""A small MCP server that tests/test_mcp.py starts as a real process, over stdio or HTTP.

Written with the official ``mcp`` package's server class (``FastMCP`` before
version 2, ``MCPServer`` since). Run: ``python tests/mcp_server.py`` (stdio),
``python tests/mcp_server.py http PORT`` (Streamable HTTP on 127.0.0.1, path ``/mcp``), or
``python tests/mcp_server.py sse PORT`` (SSE, path ``/sse``).
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("cowconv-test")
_calls = 0


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def env_value(name: str) -> str:
    """The value of an environment variable of the server process ('' when unset)."""
    return os.environ.get(name, "")


@server.tool()
def fail(message: str) -> str:
    """Always fail, with this message."""
    raise ToolError(message)


@server.tool()
def wait(seconds: float, marker: str = "") -> str:
    """Sleep for this many seconds, then say so; create the file ``marker`` first (if given)."""
    if marker:
        with open(marker, "w"):
            pass
    time.sleep(seconds)
    return f"waited {seconds} s"


@server.tool()
def session_calls() -> str:
    """How many times this tool was called in this server process, this call included."""
    global _calls
    _calls += 1
    return f"call {_calls} in process {os.getpid()}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif sys.argv[1:2] == ["sse"]:
        server.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
