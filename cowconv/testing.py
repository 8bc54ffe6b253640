"""An offline, OpenAI-compatible LLM server for tests and examples.

:class:`StubLLMServer` serves ``POST /v1/chat/completions`` on 127.0.0.1 with
the standard library only. Point an :class:`~cowconv.LLM` at it and every
call goes through litellm's real HTTP path:

>>> import json, urllib.request
>>> with StubLLMServer() as stub:
...     stub.script(StubReply.text("Hello from the stub."))
...     request = urllib.request.Request(
...         stub.base_url + "/chat/completions",
...         data=json.dumps({"model": "stub-model", "messages": []}).encode(),
...         headers={"Content-Type": "application/json"},
...     )
...     reply = json.load(urllib.request.urlopen(request))
>>> reply["choices"][0]["message"]["content"]
'Hello from the stub.'
>>> len(stub.requests)
1

Scripted replies (:meth:`StubLLMServer.script`) are served first, in order;
then the default *brain* answers: it calls the ``terminal`` tool once per
command written in backticks in the last user message, and answers in text
once the results are in. That is enough to run the examples offline.

Run it on its own with ``python -m cowconv.testing --port 8765`` (it prints
the environment variables to set), or let it run one command with those
variables set: ``python -m cowconv.testing -- python examples/....py``.

:class:`PostgresServer` is a throwaway PostgreSQL server for tests of code
that keeps conversations in PostgreSQL: private, on a free port, gone on exit.

:class:`TestLLM` (OpenHands' SDK's ``openhands.sdk.testing.TestLLM``) needs
no server at all: an :class:`~cowconv.LLM` that answers from a script of
:class:`~cowconv.Message` values, in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import PrivateAttr

from cowconv._exceptions import InvalidTypeError, InvalidValueError, LLMError, ServiceError
from cowconv._postgres_server import PostgresServer
from cowconv.core.llm import LLM, LLMResponse, LLMToolCall
from cowconv.core.message import Message

__all__ = [
    "PostgresServer",
    "ScriptedResponse",
    "StubLLMServer",
    "StubReply",
    "StubRequest",
    "TestLLM",
    "TestLLMExhaustedError",
    "default_brain",
]

STUB_MODEL = "openai/stub-model"
STUB_API_KEY = "stub-key"

_COMMAND = re.compile(r"`([^`\n]+)`")


@dataclass(frozen=True)
class StubReply:
    """One scripted answer of the stub: text, tool calls, or an HTTP error.

    >>> StubReply.text("Done.").content
    'Done.'
    >>> StubReply.tool_call("terminal", command="ls").tool_calls
    (('terminal', '{"command": "ls"}'),)
    >>> StubReply.error(429).status
    429
    """

    content: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()
    status: int = 200
    error_message: str = ""
    delay: float = 0.0
    reasoning: str | None = None
    """The model's reasoning, sent as ``reasoning_content`` (as reasoning models' APIs do)."""

    @classmethod
    def text(cls, content: str, *, delay: float = 0.0, reasoning: str | None = None) -> StubReply:
        """An assistant message without tool calls (with ``reasoning``, if given).

        >>> StubReply.text("42.", reasoning="Six times seven.").reasoning
        'Six times seven.'
        """
        return cls(content=content, delay=delay, reasoning=reasoning)

    @classmethod
    def tool_call(
        cls, name: str, *, content: str | None = None, delay: float = 0.0, **arguments: Any
    ) -> StubReply:
        """One call of tool ``name`` with keyword ``arguments``."""
        return cls.tool_calls_of([(name, arguments)], content=content, delay=delay)

    @classmethod
    def tool_calls_of(
        cls,
        calls: Iterable[tuple[str, Mapping[str, Any] | str]],
        *,
        content: str | None = None,
        delay: float = 0.0,
    ) -> StubReply:
        """Several tool calls in one answer; a ``str`` argument is sent verbatim (bad JSON too).

        >>> StubReply.tool_calls_of([("terminal", "{not json")]).tool_calls
        (('terminal', '{not json'),)
        """
        encoded = tuple(
            (name, args if isinstance(args, str) else json.dumps(dict(args)))
            for name, args in calls
        )
        return cls(content=content, tool_calls=encoded, delay=delay)

    @classmethod
    def error(cls, status: int, message: str = "", *, delay: float = 0.0) -> StubReply:
        """An HTTP error answer (429, 500, 401, ...) with an OpenAI-style error body."""
        if not 400 <= status <= 599:
            raise InvalidValueError(f"an error reply needs a 4xx or 5xx status, got {status}")
        return cls(status=status, error_message=message or f"stub error {status}", delay=delay)


Brain = Callable[[Mapping[str, Any]], StubReply]
"""Answers a chat-completions request body (a decoded JSON object)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _offers(request: Mapping[str, Any], tool_name: str) -> bool:
    for tool in request.get("tools") or ():
        if isinstance(tool, dict) and (tool.get("function") or {}).get("name") == tool_name:
            return True
    return False


def default_brain(request: Mapping[str, Any]) -> StubReply:
    """The stub's built-in behaviour, deterministic in the request.

    After a user message, it runs each command in backticks with the
    ``terminal`` tool (if offered); after tool results, it reports them; a
    question without commands is answered with the commands run so far.

    >>> ask = {"messages": [{"role": "user", "content": "Run `echo hi` now."}],
    ...        "tools": [{"type": "function", "function": {"name": "terminal"}}]}
    >>> default_brain(ask).tool_calls
    (('terminal', '{"command": "echo hi"}'),)
    >>> default_brain({"messages": [{"role": "user", "content": "Hi there"}]}).content
    'You said: Hi there'
    """
    messages = [m for m in request.get("messages") or () if isinstance(m, dict)]
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        results = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            results.append(_text(message.get("content")).strip())
        return StubReply.text("The terminal printed:\n" + "\n".join(reversed(results)))
    # The latest user message (a message sent while the model was thinking may be followed
    # by the answer to the one before).
    said = next(
        (_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), ""
    )
    commands = _COMMAND.findall(said)
    if commands and _offers(request, "terminal"):
        return StubReply.tool_calls_of([("terminal", {"command": c}) for c in commands])
    ran = [
        json.loads(call["function"]["arguments"]).get("command", "")
        for message in messages
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or ()
        if call.get("function", {}).get("name") == "terminal"
    ]
    if ran and not commands:
        return StubReply.text("Earlier I ran: " + ", ".join(f"`{c}`" for c in ran))
    return StubReply.text(f"You said: {said}" if said else "Hello! What should I do?")


def _tokens(text: str) -> int:
    # A deterministic stand-in for a tokenizer: about four characters a token.
    return max(1, len(text) // 4)


def _completion(
    request: Mapping[str, Any], reply: StubReply, cached_messages: int = 0
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            for name, arguments in reply.tool_calls
        ]
    messages = list(request.get("messages") or [])
    prompt = json.dumps(messages)
    answer = (reply.content or "") + "".join(a for _, a in reply.tool_calls)
    prompt_tokens, completion_tokens = _tokens(prompt), _tokens(answer)
    cached = min(_tokens(json.dumps(messages[:cached_messages])), prompt_tokens)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_messages:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(request.get("model") or "stub-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": usage,
    }


def _pieces(text: str) -> list[str]:
    """``text`` cut after each space, as a model streams it a few characters at a time."""
    return re.findall(r"\S*\s*", text)[:-1] or [text]


def _stream_chunks(completion: Mapping[str, Any], with_usage: bool) -> list[dict[str, Any]]:
    """A chat completion as the chunks of a streamed answer (OpenAI's ``chat.completion.chunk``).

    The role first, the content a word at a time, each tool call's name then
    its arguments in pieces, the finish reason, and the usage last when asked.

    >>> done = {"id": "c1", "created": 0, "model": "m", "usage": {"prompt_tokens": 1},
    ...         "choices": [{"message": {"role": "assistant", "content": "Hi there"},
    ...                      "finish_reason": "stop"}]}
    >>> [c["choices"][0]["delta"].get("content") for c in _stream_chunks(done, False)]
    ['', 'Hi ', 'there', None]
    """
    choice = completion["choices"][0]
    message = choice["message"]
    head = {"id": completion["id"], "object": "chat.completion.chunk"}
    head |= {"created": completion["created"], "model": completion["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    reasoning = message.get("reasoning_content") or ""
    chunks.extend(chunk({"reasoning_content": piece}) for piece in _pieces(reasoning) if piece)
    chunks.extend(chunk({"content": piece}) for piece in _pieces(message.get("content") or ""))
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        named = {"name": function["name"], "arguments": ""}
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": index, "id": call["id"], "type": "function", "function": named}
                    ]
                }
            )
        )
        arguments = function["arguments"]
        for start in range(0, len(arguments), 8):
            piece = {"index": index, "function": {"arguments": arguments[start : start + 8]}}
            chunks.append(chunk({"tool_calls": [piece]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if with_usage:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return [c for c in chunks if c["choices"] == [] or c["choices"][0]["delta"] != {"content": ""}]


def _text_blocks(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content or () if isinstance(block, dict))


def _marked(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("cache_control") for block in content
    )


def _from_anthropic(request: Mapping[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """An Anthropic Messages request as a chat-completions request, and its cache marks.

    Each mark is the number of leading chat messages a ``cache_control``
    breakpoint closes (the system prompt is the first message).
    """
    messages: list[dict[str, Any]] = []
    marks: list[int] = []
    system = request.get("system")
    if system:
        messages.append({"role": "system", "content": _text_blocks(system)})
        if _marked(system):
            marks.append(len(messages))
    for message in request.get("messages") or ():
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        kinds = [(b.get("type"), b) for b in blocks if isinstance(b, dict)]
        calls = [b for kind, b in kinds if kind == "tool_use"]
        results = [b for kind, b in kinds if kind == "tool_result"]
        for result in results:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": result.get("tool_use_id"),
                    "content": _text_blocks(result.get("content")),
                }
            )
        text = "".join(b.get("text", "") for kind, b in kinds if kind == "text")
        if text or calls or not results:
            chat: dict[str, Any] = {"role": message.get("role"), "content": text}
            if calls:
                chat["tool_calls"] = [
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {
                            "name": call.get("name"),
                            "arguments": json.dumps(call.get("input")),
                        },
                    }
                    for call in calls
                ]
            messages.append(chat)
        if _marked(content) or message.get("cache_control"):
            marks.append(len(messages))
    tools = [
        {"type": "function", "function": {"name": tool.get("name")}}
        for tool in request.get("tools") or ()
        if isinstance(tool, dict)
    ]
    return {"model": request.get("model"), "messages": messages, "tools": tools}, marks


def _anthropic_message(
    chat: Mapping[str, Any], reply: StubReply, cached: int, written: int
) -> dict[str, Any]:
    """An Anthropic Messages answer; cache reads and writes counted as Anthropic does."""
    messages = list(chat.get("messages") or [])
    total = _tokens(json.dumps(messages))
    read = min(_tokens(json.dumps(messages[:cached])), total) if cached else 0
    created = 0
    if written > cached:
        created = max(min(_tokens(json.dumps(messages[:written])), total) - read, 0)
    content: list[dict[str, Any]] = []
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    for name, arguments in reply.tool_calls:
        try:
            decoded = json.loads(arguments)
        except ValueError:
            decoded = {}
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:24]}",
                "name": name,
                "input": decoded if isinstance(decoded, dict) else {},
            }
        )
    answer = (reply.content or "") + "".join(a for _, a in reply.tool_calls)
    return {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": str(chat.get("model") or "stub-model"),
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": max(total - read - created, 0),
            "output_tokens": _tokens(answer),
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        },
    }


def _prefix_keys(request: Mapping[str, Any]) -> list[bytes]:
    """One key per message: a digest of the model, the tools and the messages up to it."""
    digest = hashlib.blake2b(digest_size=16)
    head = {"model": request.get("model"), "tools": request.get("tools")}
    digest.update(json.dumps(head, sort_keys=True).encode())
    keys = []
    for message in request.get("messages") or ():
        digest.update(json.dumps(message, sort_keys=True).encode())
        keys.append(digest.copy().digest())
    return keys


_ERROR_TYPES = {401: "invalid_request_error", 429: "rate_limit_exceeded"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    # An idle keep-alive connection gives up its thread after this long.
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the stub must not clutter test or example output."""

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, open_=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, open_=False)

    def _send(self, status: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        path = self.path.rstrip("/")
        anthropic = path.endswith("/messages")
        if not (anthropic or path.endswith("/chat/completions")):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            request = json.loads(raw)
            if not isinstance(request, dict):
                raise InvalidValueError("the body must be a JSON object")
        except ValueError as error:
            self._send(400, {"error": {"message": f"bad JSON body: {error}", "type": "invalid"}})
            return
        if anthropic:
            self._answer_anthropic(request)
            return
        reply, cached_messages, _ = self.server.stub._answer(request, dict(self.headers))
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status != 200:
            error_type = _ERROR_TYPES.get(reply.status, "server_error")
            body = {"error": {"message": reply.error_message, "type": error_type, "code": None}}
            self._send(reply.status, body)
            return
        completion = _completion(request, reply, cached_messages)
        if request.get("stream") is True:
            self._send_stream(completion, request)
            return
        self._send(200, completion)

    def _send_stream(self, completion: Mapping[str, Any], request: Mapping[str, Any]) -> None:
        """The answer as OpenAI's server-sent events: ``data: {chunk}`` lines, then ``[DONE]``."""
        options = request.get("stream_options")
        with_usage = isinstance(options, dict) and options.get("include_usage") is True
        lines = [
            f"data: {json.dumps(chunk)}\n\n" for chunk in _stream_chunks(completion, with_usage)
        ]
        data = ("".join(lines) + "data: [DONE]\n\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer_anthropic(self, request: dict[str, Any]) -> None:
        """Anthropic's Messages API, enough for litellm's ``anthropic/`` models."""
        chat, marks = _from_anthropic(request)
        reply, cached, written = self.server.stub._answer(
            request, dict(self.headers), chat=chat, marks=marks
        )
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status != 200:
            error = {"type": "api_error", "message": reply.error_message}
            self._send(reply.status, {"type": "error", "error": error})
            return
        self._send(200, _anthropic_message(chat, reply, cached, written))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], stub: StubLLMServer) -> None:
        self.stub = stub
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (its timeout) closed the socket: nothing to report.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def track(self, connection: socket.socket, *, open_: bool) -> None:
        with self._connections_lock:
            if open_:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                # Wakes handler threads blocked on idle keep-alive connections.
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@dataclass(frozen=True)
class StubRequest:
    """A request the stub received: its JSON body and headers (names lower-cased).

    >>> StubRequest(body={"messages": []}, headers={}).messages
    []
    """

    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages sent."""
        return list(self.body.get("messages") or [])


class StubLLMServer:
    """An OpenAI-compatible chat-completions server on 127.0.0.1, for tests and offline runs.

    Use it as a context manager; ``base_url`` (ending in ``/v1``) goes into
    ``LLM(model="openai/stub-model", base_url=stub.base_url, api_key="stub-key")``.
    ``requests`` holds every request received, in order. ``brain`` answers
    when no scripted reply is left (default: :func:`default_brain`).

    With ``prompt_cache=True`` the stub acts like a provider's prompt cache:
    it remembers every prefix of messages it was sent (with the same model
    and tools) and reports the tokens of the longest one seen before as
    ``usage.prompt_tokens_details.cached_tokens``, so prompt caching is
    tested offline. Tokens are counted as about four characters of the JSON
    messages.

    It also answers Anthropic's Messages API (``POST .../messages``), so
    ``LLM(model="anthropic/...", base_url=stub.base_url)`` goes through
    litellm's Anthropic path; there, as at Anthropic, only prefixes that end
    at a ``cache_control`` mark are written to the cache
    (``cache_creation_input_tokens``) and read from it later
    (``cache_read_input_tokens``).

    >>> with StubLLMServer() as stub:
    ...     stub.base_url.startswith("http://127.0.0.1:") and stub.base_url.endswith("/v1")
    True
    """

    def __init__(
        self, *, port: int = 0, brain: Brain | None = None, prompt_cache: bool = False
    ) -> None:
        self.port = port
        self.brain: Brain = brain if brain is not None else default_brain
        self.prompt_cache = prompt_cache
        self._seen_prefixes: set[bytes] = set()
        self._script: collections.deque[StubReply] = collections.deque()
        self._requests: list[StubRequest] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ``http://127.0.0.1:PORT/v1``."""
        if self._server is None:
            raise ServiceError("the stub server is not running; use it in a with block")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def requests(self) -> list[StubRequest]:
        """A copy of the requests received so far."""
        with self._lock:
            return list(self._requests)

    def llm_settings(self) -> dict[str, str]:
        """Keyword arguments for :class:`~cowconv.LLM` that reach this stub.

        >>> with StubLLMServer() as stub:
        ...     sorted(stub.llm_settings())
        ['api_key', 'base_url', 'model']
        """
        return {"model": STUB_MODEL, "base_url": self.base_url, "api_key": STUB_API_KEY}

    def environment(self) -> dict[str, str]:
        """The ``LLM_*`` variables the examples read, pointing at this stub."""
        return {"LLM_MODEL": STUB_MODEL, "LLM_BASE_URL": self.base_url, "LLM_API_KEY": STUB_API_KEY}

    def script(self, *replies: StubReply) -> None:
        """Queue replies, served in order before the brain answers again."""
        for reply in replies:
            if not isinstance(reply, StubReply):
                raise InvalidTypeError(
                    f"script() takes StubReply values, got {type(reply).__name__}"
                )
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """How many scripted replies are still queued."""
        with self._lock:
            return len(self._script)

    def _answer(
        self,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        *,
        chat: Mapping[str, Any] | None = None,
        marks: Sequence[int] | None = None,
    ) -> tuple[StubReply, int, int]:
        """The reply, how many leading messages the cache held, and up to where it now does.

        ``chat`` is the request in chat-completions form (default: ``body``);
        ``marks`` the prefixes a provider that caches only marked prefixes
        writes (default: every prefix, as OpenAI does).
        """
        chat = body if chat is None else chat
        keys = _prefix_keys(chat) if self.prompt_cache else []
        written = keys if marks is None else [keys[m - 1] for m in marks if 0 < m <= len(keys)]
        upto = len(keys) if marks is None else max(marks, default=0)
        with self._lock:
            self._requests.append(
                StubRequest(body=body, headers={k.lower(): v for k, v in headers.items()})
            )
            cached = 0
            for count, key in enumerate(keys, 1):
                # Anthropic reads only up to the request's last breakpoint.
                if key in self._seen_prefixes and count <= upto:
                    cached = count
            self._seen_prefixes.update(written)
            if self._script:
                return self._script.popleft(), cached, upto
        try:
            return self.brain(chat), cached, upto
        except Exception as error:  # a broken custom brain answers 500 instead of hanging
            return StubReply.error(500, f"stub brain failed: {error!r}"), cached, upto

    def start(self) -> StubLLMServer:
        """Bind 127.0.0.1 and serve in a daemon thread."""
        if self._server is not None:
            raise ServiceError("the stub server is already running")
        self._server = _Server(("127.0.0.1", self.port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="cowconv-stub-llm",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> StubLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class TestLLMExhaustedError(LLMError):
    """A :class:`TestLLM` was asked once more than its script answers.

    An :class:`~cowconv.LLMError`: a run records it as an
    :class:`~cowconv.AgentErrorEvent` and ends ``error``, as a failed LLM call.

    >>> issubclass(TestLLMExhaustedError, LLMError)
    True
    """

    __test__ = False  # pytest: not a test class


@dataclass(frozen=True)
class ScriptedResponse(LLMResponse):
    """What :meth:`TestLLM.completion` returns: an answer, and the scripted message it came from.

    >>> from cowconv import Message
    >>> llm = TestLLM.from_messages([Message(role="assistant", content="Hi!")])
    >>> response = llm.completion([{"role": "user", "content": "Hello"}])
    >>> response.content, response.message.text
    ('Hi!', 'Hi!')
    """

    scripted: Message | None = None

    @property
    def message(self) -> Message:
        """The scripted message this answer came from (the very object given to TestLLM)."""
        return self.scripted if self.scripted is not None else super().message


class _Script:
    """A TestLLM's scripted answers and calls, shared by its copies (``with_metrics``)."""

    __slots__ = ("answers", "calls", "lock")

    def __init__(self, answers: Iterable[Message | BaseException]) -> None:
        self.answers: collections.deque[Message | BaseException] = collections.deque(answers)
        self.calls = 0
        self.lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (a branch worker) or deep-copied: an independent script where this one stands.
        return (_Script._restored, (list(self.answers), self.calls))

    @staticmethod
    def _restored(answers: list[Message | BaseException], calls: int) -> _Script:
        script = _Script(answers)
        script.calls = calls
        return script


class TestLLM(LLM):
    """An LLM that answers from a script, offline: OpenHands' SDK's ``TestLLM``.

    Each call of :meth:`completion` (or :meth:`responses`, :meth:`acompletion`)
    takes the next scripted item: a :class:`~cowconv.Message` is the answer
    (its text, its ``tool_calls``), an exception is raised (as
    ``unittest.mock``'s ``side_effect``). Once the script is used up a call
    raises :class:`TestLLMExhaustedError`. Answers cost nothing and count no
    tokens. Give it to an :class:`~cowconv.Agent` like any LLM: a run then
    takes its steps from the script.

    >>> from cowconv import Agent, Conversation, Message
    >>> llm = TestLLM.from_messages([Message(role="assistant", content="Done.")])
    >>> conversation = Conversation(agent=Agent(llm=llm), workspace=".")
    >>> _ = conversation.send_message("Say done.")
    >>> conversation.run()
    >>> state = conversation.state
    >>> state.execution_status.value, state.events[-1].text, llm.call_count, llm.remaining_responses
    ('finished', 'Done.', 1, 0)

    The script is not a setting: a stored agent's LLM (its JSON) is a plain
    :class:`~cowconv.LLM` of the same settings, and a TestLLM equals such an
    LLM. Copies made by ``model_copy`` share the script.
    """

    __test__ = False  # pytest: not a test class

    model: str = "test-model"
    _script: _Script = PrivateAttr(default_factory=lambda: _Script(()))

    def __init__(
        self, *, scripted_responses: Iterable[Message | BaseException] = (), **settings: Any
    ) -> None:
        super().__init__(**settings)
        answers = list(scripted_responses)
        for answer in answers:
            if not isinstance(answer, Message | BaseException):
                raise InvalidTypeError(
                    f"a TestLLM script holds Messages and exceptions, got {type(answer).__name__}"
                )
        self._script = _Script(answers)

    def __eq__(self, other: object) -> bool:
        # Equal to an LLM of the same settings: what a store keeps of it (the script is no
        # setting), so a conversation whose agent runs a TestLLM can be stored.
        if not isinstance(other, LLM):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = LLM.__hash__

    @classmethod
    def from_messages(
        cls,
        messages: Iterable[Message | BaseException],
        *,
        model: str = "test-model",
        usage_id: str = "test-llm",
        **settings: Any,
    ) -> TestLLM:
        """A TestLLM answering ``messages`` in order (an exception in them is raised).

        >>> from cowconv import Message
        >>> llm = TestLLM.from_messages([Message(role="assistant", content="One"), KeyError("x")])
        >>> llm.completion([]).content, llm.usage_id
        ('One', 'test-llm')
        >>> llm.completion([])
        Traceback (most recent call last):
        ...
        KeyError: 'x'
        """
        return cls(model=model, usage_id=usage_id, scripted_responses=messages, **settings)

    def completion(
        self,
        messages: Sequence[Any],
        tools: Sequence[Any] | None = (),
        *args: Any,
        **kwargs: Any,
    ) -> ScriptedResponse:
        """The next scripted answer; ``messages``, ``tools`` and the rest are ignored.

        >>> from cowconv import Message
        >>> llm = TestLLM.from_messages([])
        >>> llm.completion([])
        Traceback (most recent call last):
        ...
        cowconv.testing.TestLLMExhaustedError: TestLLM: no more ... (exhausted after 0 calls)
        """
        script = self._script
        with script.lock:
            if not script.answers:
                raise TestLLMExhaustedError(
                    f"TestLLM: no more scripted responses (exhausted after {script.calls} calls)"
                )
            answer = script.answers.popleft()
            script.calls += 1
            call = script.calls
        if isinstance(answer, BaseException):
            raise answer
        self.metrics.add(cost=0.0, prompt_tokens=0, completion_tokens=0, latency=0.0)
        return ScriptedResponse(
            id=f"test-response-{call}",
            content=answer.text,
            tool_calls=tuple(
                LLMToolCall(id=call.id, name=call.name, arguments=call.arguments)
                for call in answer.tool_calls or ()
            ),
            cost=0.0,
            prompt_tokens=0,
            completion_tokens=0,
            latency=0.0,
            scripted=answer,
        )

    async def acompletion(
        self, messages: Sequence[Any], tools: Sequence[Any] | None = (), **kwargs: Any
    ) -> ScriptedResponse:
        """:meth:`completion`, from a coroutine (run in the loop's executor).

        >>> import asyncio
        >>> from cowconv import Message
        >>> llm = TestLLM.from_messages([Message(role="assistant", content="Async")])
        >>> asyncio.run(llm.acompletion([])).content
        'Async'
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: self.completion(messages, tools))

    def responses(
        self, messages: Sequence[Any], tools: Sequence[Any] | None = (), **kwargs: Any
    ) -> ScriptedResponse:
        """The same script as :meth:`completion` (OpenHands' Responses API call).

        >>> from cowconv import Message
        >>> TestLLM.from_messages([Message(role="assistant", content="R")]).responses([]).content
        'R'
        """
        return self.completion(messages, tools)

    def uses_responses_api(self) -> bool:
        """Always ``False``: a TestLLM answers through :meth:`completion`.

        >>> TestLLM().uses_responses_api()
        False
        """
        return False

    @property
    def remaining_responses(self) -> int:
        """How many scripted items are left."""
        return len(self._script.answers)

    @property
    def call_count(self) -> int:
        """How many calls took an item of the script (raised ones included)."""
        return self._script.calls


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the stub until interrupted, or run one command against it."""
    parser = argparse.ArgumentParser(
        prog="python -m cowconv.testing",
        description="Serve an offline OpenAI-compatible LLM stub on 127.0.0.1.",
        epilog="With a command after --, run it with LLM_MODEL, LLM_BASE_URL and "
        "LLM_API_KEY pointing at the stub, then stop and exit with its code.",
    )
    parser.add_argument("--port", type=int, default=0, help="port to bind (0 = any free port)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    options = parser.parse_args(argv)
    command = list(options.command)
    if command[:1] == ["--"]:
        command = command[1:]
    with StubLLMServer(port=options.port) as stub:
        if command:
            return subprocess.call(command, env={**os.environ, **stub.environment()})
        for name, value in stub.environment().items():
            print(f"export {name}={value}")
        print("# stub LLM server running; press Ctrl-C to stop", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
