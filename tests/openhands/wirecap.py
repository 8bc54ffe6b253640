"""Record the HTTP and WebSocket traffic between a client and an agent server.

A TCP relay on loopback: point a client at ``http://127.0.0.1:<listen>`` and it
forwards every byte to the server at ``127.0.0.1:<target>``, writing what each
side sent to a JSON-lines file: one line per HTTP exchange (method, path, query,
request headers and JSON body, status, response headers and JSON body) and one
line per WebSocket message (direction, JSON payload, close codes).

It is how ``/work/notes/openhands-rest.md`` was written: OpenHands' own
``RemoteConversation`` against ``python -m openhands.agent_server``, recorded on
the wire. Standard library only::

    python tests/openhands/wirecap.py --listen 8790 --target 8791 --out wire.jsonl

The parsers are plain functions, so they can be checked without sockets:

>>> raw = b"GET /health HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
>>> message, rest = parse_http_message(raw, is_request=True)
>>> message["start"], message["headers"]["host"], rest
('GET /health HTTP/1.1', 'x', b'')
>>> parse_ws_frames(bytes([0x81, 0x02]) + b"hi")
([(1, b'hi', True, False)], b'')
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["WireRecorder", "main", "parse_http_message", "parse_ws_frames"]


def _decode_chunked(body: bytes) -> tuple[bytes, bytes] | None:
    """The body of a chunked message and what follows it, or None while incomplete."""
    out = bytearray()
    pos = 0
    while True:
        end = body.find(b"\r\n", pos)
        if end < 0:
            return None
        size = int(body[pos:end].split(b";")[0], 16)
        pos = end + 2
        if size == 0:
            trailer_end = body.find(b"\r\n", pos)
            if trailer_end < 0:
                return None
            return bytes(out), body[trailer_end + 2 :]
        if len(body) < pos + size + 2:
            return None
        out += body[pos : pos + size]
        pos += size + 2


def parse_http_message(
    data: bytes, *, is_request: bool, request_method: str = "GET"
) -> tuple[dict[str, Any] | None, bytes]:
    """One complete HTTP/1.1 message at the start of ``data`` and the bytes after it.

    Returns ``(None, data)`` while the message is incomplete.
    """
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return None, data
    lines = data[:head_end].decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    rest = data[head_end + 4 :]
    status = None if is_request else int(lines[0].split()[1])
    no_body = (not is_request and (request_method == "HEAD" or status in (101, 204, 304))) or (
        is_request
        and "content-length" not in headers
        and "chunked" not in headers.get("transfer-encoding", "")
    )
    if no_body:
        body = b""
    elif "chunked" in headers.get("transfer-encoding", ""):
        decoded = _decode_chunked(rest)
        if decoded is None:
            return None, data
        body, rest = decoded
    elif "content-length" in headers:
        length = int(headers["content-length"])
        if len(rest) < length:
            return None, data
        body, rest = rest[:length], rest[length:]
    else:  # a response delimited by the connection's close
        return None, data
    return {"start": lines[0], "headers": headers, "body": body}, rest


def parse_ws_frames(data: bytes) -> tuple[list[tuple[int, bytes, bool, bool]], bytes]:
    """The complete WebSocket frames at the start of ``data`` (opcode, unmasked
    payload, FIN, RSV1 = compressed) and the bytes after them."""
    frames: list[tuple[int, bytes, bool, bool]] = []
    while len(data) >= 2:
        opcode = data[0] & 0x0F
        fin = bool(data[0] & 0x80)
        rsv1 = bool(data[0] & 0x40)
        masked = data[1] & 0x80
        length = data[1] & 0x7F
        pos = 2
        if length == 126:
            if len(data) < 4:
                break
            length = int.from_bytes(data[2:4], "big")
            pos = 4
        elif length == 127:
            if len(data) < 10:
                break
            length = int.from_bytes(data[2:10], "big")
            pos = 10
        mask = b""
        if masked:
            if len(data) < pos + 4:
                break
            mask = data[pos : pos + 4]
            pos += 4
        if len(data) < pos + length:
            break
        payload = data[pos : pos + length]
        if masked:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        frames.append((opcode, payload, fin, rsv1))
        data = data[pos + length :]
    return frames, data


def _json_or_text(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")


class _Connection:
    """The parsing state of one relayed TCP connection."""

    def __init__(self, recorder: WireRecorder, number: int) -> None:
        self.recorder = recorder
        self.number = number
        self.up = b""  # client -> server bytes not parsed yet
        self.down = b""
        self.pending: list[dict[str, Any]] = []  # requests waiting for their response
        self.websocket_path: str | None = None
        # permessage-deflate state per direction (True = client -> server)
        self.deflate = False
        self.no_takeover = {True: False, False: False}
        self.inflaters: dict[bool, Any] = {}
        self.fragments: dict[bool, tuple[int, bool, bytes] | None] = {True: None, False: None}

    def feed(self, upstream: bool, data: bytes) -> None:
        if upstream:
            self.up += data
        else:
            self.down += data
        if self.websocket_path is not None:
            self._ws(upstream)
            return
        if upstream:
            while True:
                message, self.up = parse_http_message(self.up, is_request=True)
                if message is None:
                    break
                method, target, _ = message["start"].split(" ", 2)
                split = urlsplit(target)
                self.pending.append(
                    {
                        "method": method,
                        "path": split.path,
                        "query": {
                            k: v if len(v) > 1 else v[0] for k, v in parse_qs(split.query).items()
                        },
                        "request_headers": message["headers"],
                        "request": _json_or_text(message["body"]),
                        "t": time.time(),
                    }
                )
        else:
            while self.pending:
                method = self.pending[0]["method"]
                message, self.down = parse_http_message(
                    self.down, is_request=False, request_method=method
                )
                if message is None:
                    break
                exchange = self.pending.pop(0)
                exchange["status"] = int(message["start"].split()[1])
                exchange["response_headers"] = message["headers"]
                exchange["response"] = _json_or_text(message["body"])
                exchange["ms"] = round((time.time() - exchange.pop("t")) * 1000, 1)
                if exchange["status"] == 101:
                    self.websocket_path = exchange["path"]
                    extensions = message["headers"].get("sec-websocket-extensions", "")
                    self.deflate = "permessage-deflate" in extensions
                    self.no_takeover = {
                        True: "client_no_context_takeover" in extensions,
                        False: "server_no_context_takeover" in extensions,
                    }
                    exchange["kind"] = "ws-open"
                    self.recorder.write({"conn": self.number, **exchange})
                    self._ws(True)
                    self._ws(False)
                    return
                self.recorder.write({"conn": self.number, "kind": "http", **exchange})

    def _ws(self, upstream: bool) -> None:
        buffer = self.up if upstream else self.down
        frames, rest = parse_ws_frames(buffer)
        if upstream:
            self.up = rest
        else:
            self.down = rest
        for opcode, payload, fin, rsv1 in frames:
            if opcode == 0:  # continuation of a fragmented message
                first = self.fragments[upstream]
                if first is None:
                    continue
                opcode, rsv1, payload = first[0], first[1], first[2] + payload
            if not fin and opcode in (0, 1, 2):
                self.fragments[upstream] = (opcode, rsv1, payload)
                continue
            self.fragments[upstream] = None
            if rsv1 and self.deflate and opcode in (1, 2):
                if upstream not in self.inflaters or self.no_takeover[upstream]:
                    self.inflaters[upstream] = zlib.decompressobj(-15)
                payload = self.inflaters[upstream].decompress(payload + b"\x00\x00\xff\xff")
            entry: dict[str, Any] = {
                "conn": self.number,
                "kind": "ws",
                "path": self.websocket_path,
                "dir": "client->server" if upstream else "server->client",
            }
            if opcode == 8:
                entry["close_code"] = int.from_bytes(payload[:2], "big") if payload else None
                entry["close_reason"] = payload[2:].decode("utf-8", "replace")
            elif opcode in (9, 10):
                continue  # ping / pong
            else:
                entry["opcode"] = opcode
                entry["message"] = _json_or_text(payload)
            self.recorder.write(entry)


class WireRecorder:
    """A loopback TCP relay that writes the traffic it carries as JSON lines.

    Run it in a thread with :meth:`start` (returns once it listens) and stop it
    with :meth:`stop`; or as a script (:func:`main`).
    """

    def __init__(
        self, listen_port: int, target_port: int, out_path: str, host: str = "127.0.0.1"
    ) -> None:
        self.listen_port = listen_port
        self.target_port = target_port
        self.out_path = out_path
        self.host = host
        self._lock = threading.Lock()
        self._count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def write(self, entry: dict[str, Any]) -> None:
        with self._lock, open(self.out_path, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry, default=str) + "\n")

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: _Connection,
        upstream: bool,
    ) -> None:
        try:
            while data := await reader.read(65536):
                try:
                    connection.feed(upstream, data)
                except Exception as exc:  # a parse error must not break the relay
                    self.write(
                        {"conn": connection.number, "kind": "parse-error", "error": repr(exc)}
                    )
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def _handle(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        with self._lock:
            self._count += 1
            connection = _Connection(self, self._count)
        server_reader, server_writer = await asyncio.open_connection(self.host, self.target_port)
        await asyncio.gather(
            self._pipe(client_reader, server_writer, connection, True),
            self._pipe(server_reader, client_writer, connection, False),
        )

    async def serve(self) -> None:
        server = await asyncio.start_server(self._handle, self.host, self.listen_port)
        self._ready.set()
        async with server:
            await server.serve_forever()

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self.serve())
        except asyncio.CancelledError:
            pass
        finally:
            self._loop.close()

    def start(self) -> WireRecorder:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            for task in asyncio.all_tasks(self._loop):
                self._loop.call_soon_threadsafe(task.cancel)
        if self._thread is not None:
            self._thread.join(5)


def read_entries(path: str) -> Iterator[dict[str, Any]]:
    """The entries a recorder wrote, in order."""
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            yield json.loads(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--target", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    print(
        f"relaying 127.0.0.1:{args.listen} -> 127.0.0.1:{args.target}, writing {args.out}",
        flush=True,
    )
    try:
        asyncio.run(WireRecorder(args.listen, args.target, args.out).serve())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
