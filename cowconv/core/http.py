"""The HTTP client every request to an agent server goes through.

:func:`server_client` makes it; its transport (:class:`ServerTransport`) turns every failure
to reach the server into a :class:`~cowconv.RemoteError` with status 0, and keeps the pooled
connections from meeting the server's own idle limit:

- uvicorn (under cowconv's and OpenHands' agent servers) closes a connection that has been
  idle for 5 s, and httpx keeps one for 5 s too. A request sent on a pooled connection at
  that moment meets "Server disconnected without sending a response". The pool here drops a
  connection after :data:`KEEPALIVE_EXPIRY` seconds, well before the server does.
- A request that reads (``GET``, ``HEAD``, ``OPTIONS``) and still meets a connection closed
  under it (a proxy with a shorter limit) is sent once more on a new connection, as urllib3
  does. A request that changes something is never sent twice: its failure is the error.

This module loads httpx; the modules that merely describe a server (``Workspace``) import it
only when they make a request.

>>> from cowconv import RemoteError
>>> try:
...     with server_client("http://127.0.0.1:9", timeout=5.0) as client:  # nobody listens
...         client.get("/alive")
... except RemoteError as error:
...     print(error.status_code, str(error).split(": ")[1])
0 cannot reach the agent server at http://127.0.0.1:9
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import httpx

from cowconv._exceptions import RemoteError

__all__ = ["KEEPALIVE_EXPIRY", "ServerTransport", "server_client"]

KEEPALIVE_EXPIRY: Final = 2.0
"""Seconds a pooled connection may stay idle: below uvicorn's 5 s, so the server never closes
one as the client sends on it."""

_READS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


class ServerTransport(httpx.BaseTransport):
    """The transport under an agent server's client (see the module).

    Over ``inner`` when one is given (an in-process transport, ``httpx.MockTransport``),
    which stays the caller's to close and is used as it is; else over a connection pool of
    its own.

    >>> transport = ServerTransport("http://server", httpx.MockTransport(
    ...     lambda request: httpx.Response(200, json={"path": request.url.path})))
    >>> httpx.Client(transport=transport).get("http://server/alive").json()
    {'path': '/alive'}
    """

    def __init__(self, host: str, inner: httpx.BaseTransport | None = None) -> None:
        self._host = host
        self._owned = inner is None
        self._inner = (
            httpx.HTTPTransport(limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY))
            if inner is None
            else inner
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            try:
                return self._inner.handle_request(request)
            except httpx.RemoteProtocolError:
                # A connection closed under a read: reading once more changes nothing.
                if not (self._owned and request.method in _READS):
                    raise
                return self._inner.handle_request(request)
        except httpx.TransportError as error:
            raise RemoteError(
                0, f"cannot reach the agent server at {self._host}: {error}"
            ) from error

    def close(self) -> None:
        if self._owned:
            self._inner.close()


def server_client(
    host: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float | httpx.Timeout = 60.0,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """An ``httpx.Client`` for the agent server at ``host``, over a :class:`ServerTransport`
    (``transport``, when given, is what that transport sends through).
    :meth:`cowconv.Workspace.new_client` makes one with the workspace's session key.

    >>> client = server_client("http://127.0.0.1:8000/", headers={"X-Session-API-Key": "k"})
    >>> str(client.base_url), client.headers["X-Session-API-Key"]
    ('http://127.0.0.1:8000', 'k')
    >>> client.close()
    """
    return httpx.Client(
        base_url=host.rstrip("/"),
        headers=dict(headers or {}),
        timeout=timeout,
        transport=ServerTransport(host, transport),
    )
