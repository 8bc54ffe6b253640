"""What keeps a web page, a stranger or a huge body from driving the agent server.

The threat model is in ``docs/server.md``. Three ASGI layers wrap the app,
outermost first:

1. :class:`HostGuard` (Starlette's ``TrustedHostMiddleware``) refuses a
   ``Host`` that is not the bound address, a loopback name, or a name the
   operator allowed (DNS rebinding: a page whose name now resolves to
   127.0.0.1 still sends its own name); an in-process ``TestClient``
   (:func:`is_in_process_test`) passes.
2. :class:`BodySizeLimit` answers 413 to a body larger than the limit,
   before the app reads any of it into a model.
3. :class:`OriginGuard` refuses a browser's cross-origin request on every
   state-changing method and every WebSocket handshake (a plain cross-site
   ``POST`` needs no CORS preflight, a WebSocket none at all; browsers
   always send ``Origin`` with both).

>>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost"), is_loopback("0.0.0.0")
(True, True, True, False)
>>> trusted_hosts("127.0.0.1", ["cowconv.internal"])
['127.0.0.1', 'localhost', '[::1]', 'cowconv.internal']
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cowconv._exceptions import InvalidValueError, UnsafeExposureError

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "TEST_HOST",
    "BodySizeLimit",
    "HostGuard",
    "OriginGuard",
    "add_security",
    "check_exposure",
    "is_in_process_test",
    "is_loopback",
    "trusted_hosts",
]

DEFAULT_MAX_BODY_SIZE = 8 * 1024 * 1024
"""Bodies above this many bytes (8 MiB) are answered 413, unless the operator sets a limit."""

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``, brackets allowed) is this machine only.

    >>> is_loopback("[::1]"), is_loopback("10.0.0.7")
    (True, False)
    """
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_pattern(host: str) -> str:
    # A Host header carries IPv6 addresses in brackets; TrustedHostMiddleware compares that.
    name = host.strip().lower()
    if ":" in name and not name.startswith("["):
        return f"[{name}]"
    return name


def trusted_hosts(bound_host: str, allowed_hosts: Iterable[str] = ()) -> list[str]:
    """The ``Host`` names the server answers: loopback names, the bound address, ``allowed_hosts``.

    ``"*"`` among ``allowed_hosts`` allows any name (behind a proxy that checks it).

    >>> trusted_hosts("::1")
    ['127.0.0.1', 'localhost', '[::1]']
    >>> trusted_hosts("10.0.0.7", ["*.corp.example"])
    ['127.0.0.1', 'localhost', '[::1]', '10.0.0.7', '*.corp.example']
    """
    hosts = list(_LOOPBACK_NAMES)
    for host in (bound_host, *allowed_hosts):
        if not isinstance(host, str) or not host.strip():
            raise InvalidValueError(f"an allowed host must be a non-empty name, got {host!r}")
        pattern = _host_pattern(host)
        # Binding every interface names no host a client would send.
        if pattern not in hosts and pattern not in ("0.0.0.0", "[::]"):
            hosts.append(pattern)
    return hosts


def check_exposure(
    bound_host: str,
    *,
    session_api_key: str | None,
    allowed_hosts: Sequence[str] = (),
    allow_unauthenticated: bool = False,
) -> None:
    """Refuse to serve other machines without a session key, unless explicitly allowed.

    Without a key anyone who reaches the port can run commands as the
    server's user, so a non-loopback address (or a non-loopback allowed host)
    needs ``session_api_key`` or ``allow_unauthenticated=True``.

    >>> check_exposure("127.0.0.1", session_api_key=None)
    >>> check_exposure("0.0.0.0", session_api_key="k")
    >>> check_exposure("0.0.0.0", session_api_key=None, allow_unauthenticated=True)
    """
    if session_api_key is not None or allow_unauthenticated:
        return
    exposed = [host for host in (bound_host, *allowed_hosts) if not is_loopback(host)]
    if exposed:
        raise UnsafeExposureError(
            f"refusing to serve {', '.join(map(repr, exposed))} without a session API key: anyone "
            "who reaches it could run commands as this user. Set COWCONV_SESSION_API_KEY (or "
            "--session-api-key), or pass --allow-unauthenticated if a proxy in front does the "
            "authentication"
        )


async def _send_error(send: Send, status_code: int, detail: str) -> None:
    response = JSONResponse(status_code=status_code, content={"detail": detail})
    await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:  # pragma: no cover - a JSON answer reads nothing
    return {"type": "http.disconnect"}


def _checked_size(max_body_size: int) -> int:
    if isinstance(max_body_size, bool) or not isinstance(max_body_size, int) or max_body_size <= 0:
        raise InvalidValueError(f"max_body_size must be a positive int, got {max_body_size!r}")
    return max_body_size


class BodySizeLimit:
    """Answer 413 to a request body over ``max_body_size`` bytes; the app never sees it.

    The body is read (up to the limit) before the app runs and handed on
    whole: every route parses its JSON body whole anyway.

    >>> BodySizeLimit(app=None, max_body_size=0)
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: max_body_size must be a positive int, got 0
    """

    def __init__(self, app: ASGIApp, *, max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        self.app = app
        self.max_body_size = _checked_size(max_body_size)

    def _too_large(self) -> str:
        return f"request body too large: the limit is {self.max_body_size} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_size:
            await _send_error(send, 413, self._too_large())
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_size:
                await _send_error(send, 413, self._too_large())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as ASGI says

        await self.app(scope, replay, send)


class OriginGuard:
    """Refuse (403) a state-changing request that a browser sent from another origin.

    A request without ``Origin`` (curl, the Python client) passes; so does
    one from the server's own origin (the ``/docs`` page) or from one of
    ``allowed_origins`` (exact ``scheme://host[:port]``).

    >>> OriginGuard(app=None, allowed_origins=["https://ui.example/"]).allowed_origins
    frozenset({'https://ui.example'})
    """

    def __init__(self, app: ASGIApp, *, allowed_origins: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed_origins = frozenset(origin.rstrip("/").lower() for origin in allowed_origins)

    def _allowed(self, origin: str, headers: Headers, scope: Scope) -> bool:
        if origin.lower() in self.allowed_origins:
            return True
        parts = urlsplit(origin)
        # Same origin: the page was served by this server under the Host it sent.
        scheme = scope.get("scheme", "http")
        return parts.scheme == scheme and parts.netloc.lower() == headers.get("host", "").lower()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Every WebSocket handshake is checked: a browser opens one from any page without
        # CORS, and the events socket accepts messages that start runs.
        websocket = scope["type"] == "websocket"
        if websocket or (scope["type"] == "http" and scope["method"] not in _SAFE_METHODS):
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not self._allowed(origin, headers, scope):
                if websocket:  # closing before accepting: the server answers 403
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await _send_error(
                    send, 403, f"cross-origin request from {origin!r} refused (see docs/server.md)"
                )
                return
        await self.app(scope, receive, send)


TEST_HOST = "testserver"
"""The ``Host`` of Starlette's ``TestClient`` (and its ASGI ``server``), allowed in process only."""


def is_in_process_test(scope: Scope) -> bool:
    """Whether a request comes from an in-process test client, not from a network.

    Starlette's ``TestClient`` names ``testserver`` as both the ``Host``
    header and the ASGI ``server``; a network server (uvicorn) sets
    ``server`` to the address of the socket it accepted on, which a client
    cannot choose, so no request over the network passes this test.

    >>> is_in_process_test({"server": ("testserver", 80), "headers": [(b"host", b"testserver")]})
    True
    >>> is_in_process_test({"server": ("127.0.0.1", 8000), "headers": [(b"host", b"testserver")]})
    False
    """
    server = scope.get("server")
    if not server or server[0] != TEST_HOST:
        return False
    host = Headers(scope=scope).get("host", "")
    return host.split(":")[0].lower() == TEST_HOST


class HostGuard(TrustedHostMiddleware):
    """Starlette's ``Host`` check, letting an in-process ``TestClient`` through.

    See :func:`is_in_process_test`: requests over a network are checked
    exactly as by :class:`~starlette.middleware.trustedhost.TrustedHostMiddleware`.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and is_in_process_test(scope):
            await self.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def add_security(
    app: Starlette,
    *,
    bound_host: str,
    allowed_hosts: Sequence[str],
    allowed_origins: Sequence[str],
    max_body_size: int,
) -> None:
    """Wrap ``app`` in the three layers, ``Host`` check outermost."""
    # add_middleware puts each new layer outside the ones added before.
    app.add_middleware(OriginGuard, allowed_origins=allowed_origins)
    app.add_middleware(BodySizeLimit, max_body_size=_checked_size(max_body_size))
    app.add_middleware(
        HostGuard,
        allowed_hosts=trusted_hosts(bound_host, allowed_hosts),
        www_redirect=False,
    )
