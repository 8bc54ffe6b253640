"""``MCPClient``: live sessions with an agent's MCP servers, on the official ``mcp`` package.

Each server gets one session (a stdio subprocess, or an HTTP/SSE
connection), opened by :meth:`MCPClient.connect` and held by a task on the
client's own event loop, which runs in a background thread: the agent loop
calls tools synchronously, the sessions stay asynchronous. A server that
cannot be reached is logged and left out (its tools are missing, the
others work); a session that is closed (``close()``, an interrupted run)
or lost is opened again on its next call.

>>> from cowconv import MCPServer
>>> with MCPClient({"broken": MCPServer(command="/nonexistent/mcp-server")}) as client:
...     client.connect()
...     sorted(client.failures), len(client)
(['broken'], 0)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, TypeVar

import mcp
import mcp.types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from cowconv._exceptions import MCPError, MCPTimeoutError
from cowconv.core.mcp import MCPServer, enabled_mcp_servers
from cowconv.mcp.tool import MCPToolDefinition

__all__ = ["MCPClient", "create_mcp_tools", "runtime_mcp_tools"]

logger = logging.getLogger("cowconv.mcp")

T = TypeVar("T")

#: How long connecting to one server and listing its tools may take (OpenHands' SDK's figure).
DEFAULT_CONNECT_TIMEOUT = 30.0


def _describe(error: BaseException) -> str:
    """The innermost causes of ``error`` (anyio wraps them in exception groups), as text."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in error.exceptions)
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def _open_session(server: MCPServer, stack: contextlib.AsyncExitStack) -> mcp.Client:
    """An open ``mcp.Client`` for ``server`` on its transport, closed with ``stack``."""
    transport = server.effective_transport
    if transport == "stdio":
        assert server.command is not None  # MCPServer checks it
        env = {key: value.get_secret_value() for key, value in (server.env or {}).items()}
        parameters = mcp.StdioServerParameters(
            command=server.command, args=list(server.args or ()), env=env or None, cwd=server.cwd
        )
        return await stack.enter_async_context(
            mcp.Client(parameters, read_timeout_seconds=server.timeout)
        )
    assert server.url is not None  # MCPServer checks it
    headers = server.http_headers() or None
    if transport == "sse":
        sse = sse_client(
            server.url,
            headers=headers,
            timeout=server.timeout or 5.0,
            sse_read_timeout=server.sse_read_timeout or 300.0,
        )
        return await stack.enter_async_context(mcp.Client(sse, read_timeout_seconds=server.timeout))
    # A client given to the transport stays ours to close.
    http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
    return await stack.enter_async_context(
        mcp.Client(
            streamable_http_client(server.url, http_client=http),
            read_timeout_seconds=server.timeout,
        )
    )


class _Session:
    """One server's session: the task that holds it open and what it listed."""

    def __init__(self, name: str, server: MCPServer) -> None:
        self.name = name
        self.server = server
        self.client: mcp.Client | None = None
        self.task: asyncio.Task[None] | None = None
        self.stop: asyncio.Event | None = None
        self.tools: list[mcp.types.Tool] = []
        self.reopening: dict[int, asyncio.Lock] = {}

    @property
    def open(self) -> bool:
        return self.client is not None and self.task is not None and not self.task.done()

    async def hold(self, ready: asyncio.Future[list[mcp.types.Tool]]) -> None:
        """Open the session, list the tools, and keep it open until ``stop`` is set."""
        self.stop = asyncio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await _open_session(self.server, stack)
                tools: list[mcp.types.Tool] = []
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                self.client = client
                if not ready.done():
                    ready.set_result(tools)
                await self.stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as error:
            if not ready.done():
                ready.set_exception(MCPError(_describe(error)))
            else:
                logger.warning("MCP server %r: the session ended: %s", self.name, _describe(error))
        finally:
            self.client = None


class MCPClient:
    """Sessions with MCP servers (name -> :class:`~cowconv.MCPServer`) and the tools they offer.

    :meth:`connect` opens every enabled server's session and builds
    :attr:`tools` (:class:`~cowconv.mcp.MCPToolDefinition`); a server that
    fails is in :attr:`failures` with the reason, and logged. With more than
    one server, tool names are prefixed by the server's (``fetch_fetch``),
    as OpenHands' SDK names them. Use it as a context manager, or call
    :meth:`close`.

    >>> from cowconv import MCPServer
    >>> client = MCPClient({"off": MCPServer(command="x", enabled=False)})
    >>> client.connect(); client.tools
    []
    >>> client.close()
    """

    def __init__(
        self, config: Mapping[str, MCPServer], timeout: float = DEFAULT_CONNECT_TIMEOUT
    ) -> None:
        self.timeout = timeout
        self._sessions = {
            name: _Session(name, server) for name, server in enabled_mcp_servers(config).items()
        }
        self._tools: list[MCPToolDefinition] = []
        self.failures: dict[str, str] = {}
        self._errors: dict[str, Exception] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- the background loop -------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="cowconv-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._ensure_loop())
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise MCPTimeoutError(f"no answer within {timeout} seconds", timeout=timeout) from None
        except concurrent.futures.CancelledError:
            raise MCPError("the MCP sessions were closed during the call") from None

    async def _open(self, session: _Session) -> list[mcp.types.Tool]:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[list[mcp.types.Tool]] = loop.create_future()
        session.task = loop.create_task(session.hold(ready))
        try:
            async with asyncio.timeout(self.timeout):
                return await asyncio.shield(ready)
        except TimeoutError:
            session.task.cancel()
            with contextlib.suppress(BaseException):
                await session.task
            raise MCPTimeoutError(
                f"MCP server {session.name!r} did not answer within {self.timeout} seconds",
                timeout=self.timeout,
            ) from None

    async def _shut(self, session: _Session) -> None:
        task = session.task
        if task is None:
            return
        if session.stop is not None:
            session.stop.set()
        try:
            async with asyncio.timeout(10):
                await asyncio.shield(task)
        except BaseException:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        session.task = None

    # -- public --------------------------------------------------------------

    @property
    def tools(self) -> list[MCPToolDefinition]:
        """The tools of the servers that started (a copy)."""
        return list(self._tools)

    def connect(self) -> None:
        """Open every server's session and list its tools; a failure is logged and recorded."""
        prefix = len(self._sessions) > 1
        tools: list[MCPToolDefinition] = []

        async def open_all() -> list[list[mcp.types.Tool] | BaseException]:
            # At once: starting takes as long as the slowest server, not all of them in turn.
            sessions = self._sessions.values()
            return await asyncio.gather(*map(self._open, sessions), return_exceptions=True)

        outcomes = self._run(open_all(), self.timeout + 10) if self._sessions else []
        for (name, session), outcome in zip(self._sessions.items(), outcomes, strict=True):
            try:
                if isinstance(outcome, Exception):
                    raise outcome
                if isinstance(outcome, BaseException):  # cancelled: nothing was listed
                    raise MCPError(_describe(outcome))
                listed = outcome
            except Exception as error:
                # hold() says what went wrong inside the session as an MCPError's text.
                reason = str(error) if isinstance(error, MCPError) else _describe(error)
                self.failures[name] = reason
                self._errors[name] = error
                logger.warning(
                    "MCP server startup failed for %s; continuing without its tools: %s",
                    name,
                    reason,
                )
                continue
            session.tools = listed
            for tool in listed:
                exposed = f"{name}_{tool.name}" if prefix else tool.name
                tools.append(MCPToolDefinition.create(self, name, tool, exposed)[0])
        self._tools = tools
        logger.info("Created %d MCP tools", len(tools))

    def call_tool(
        self, server: str, name: str, arguments: Mapping[str, Any], timeout: float
    ) -> mcp.types.CallToolResult:
        """Call tool ``name`` of ``server``; a closed or lost session is opened again first.

        Raises :class:`~cowconv.MCPError` when the server cannot be reached
        and :class:`~cowconv.MCPTimeoutError` when it does not answer in time.
        """
        session = self._sessions.get(server)
        if session is None:
            raise MCPError(f"no MCP server named {server!r}")

        async def call() -> mcp.types.CallToolResult:
            # Calls may run on several threads (tool_concurrency_limit): one reopens, the others
            # wait for it. A lock belongs to one event loop, and close() ends the loop.
            loop_id = id(asyncio.get_running_loop())
            lock = session.reopening.setdefault(loop_id, asyncio.Lock())
            async with lock:
                if not session.open:
                    await self._shut(session)
                    logger.info("MCP server %r: opening its session again", server)
                    await self._open(session)
            assert session.client is not None
            return await session.client.call_tool(
                name, dict(arguments), read_timeout_seconds=timeout
            )

        return self._run(call(), timeout + self.timeout + 5)

    def close(self) -> None:
        """End every session (stopping stdio servers) and the background loop; idempotent.

        A later :meth:`call_tool` opens its server's session again.
        """
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def shut_all() -> None:
            for session in self._sessions.values():
                await self._shut(session)
            # A call still waiting on a closed session ends now, not when its timeout runs out.
            pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(shut_all(), loop).result(30)
        except Exception as error:
            logger.warning("MCP sessions did not close cleanly: %s", _describe(error))
        for session in self._sessions.values():
            session.reopening.clear()  # its locks belong to the loop that ends here
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        if not thread.is_alive():
            loop.close()

    def __enter__(self) -> MCPClient:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[MCPToolDefinition]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __getitem__(self, index: int) -> MCPToolDefinition:
        return self._tools[index]


def create_mcp_tools(
    config: Mapping[str, MCPServer], timeout: float = DEFAULT_CONNECT_TIMEOUT
) -> MCPClient:
    """A connected :class:`MCPClient` for ``config`` (OpenHands' SDK's function): use ``.tools``.

    Unlike a conversation, which goes on without a server that fails, this
    raises :class:`~cowconv.MCPError` (:class:`~cowconv.MCPTimeoutError`
    for a timeout) when any server cannot start, as OpenHands' SDK does,
    after closing what it opened.

    >>> from cowconv import MCPServer
    >>> create_mcp_tools({"broken": MCPServer(command="/nonexistent/mcp-server")})
    Traceback (most recent call last):
    ...
    cowconv._exceptions.MCPError: MCP server startup failed for broken: ...
    """
    client = MCPClient(config, timeout)
    try:
        client.connect()
    except BaseException:
        client.close()
        raise
    if client.failures:
        client.close()
        reasons = "; ".join(f"{name}: {reason}" for name, reason in client.failures.items())
        if all(isinstance(error, MCPTimeoutError) for error in client._errors.values()):
            raise MCPTimeoutError(f"MCP server startup timed out for {reasons}", timeout=timeout)
        raise MCPError(f"MCP server startup failed for {reasons}")
    return client


def runtime_mcp_tools(config: Mapping[str, MCPServer]) -> list[MCPToolDefinition]:
    """The tools of a conversation's MCP servers; a server that cannot start is left out.

    What the agent loop calls when a conversation first runs: each failure
    is logged as a warning (``MCP server startup failed for NAME; continuing
    without its tools: REASON``, OpenHands' SDK's words). The tools share one
    client; closing any of them ends its sessions.

    >>> from cowconv import MCPServer
    >>> runtime_mcp_tools({"broken": MCPServer(command="/nonexistent/mcp-server")})
    []
    """
    client = MCPClient(config)
    client.connect()
    if not client.tools:
        client.close()
    return client.tools
