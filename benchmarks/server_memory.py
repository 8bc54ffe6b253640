"""A real server's resident memory while it serves N forks (its memory must stay bounded).

``python -m benchmarks.server_memory 10000 [bound ...]`` starts
``cowconv serve --data-dir`` (a SQLite file) once per ``bound`` given to
``--max-live-conversations`` (default: the server's default, and 1,000,000,
which keeps every conversation in memory as before eviction existed), creates
one conversation with a message, forks it N times over HTTP (4 client
threads) and prints the server's RSS (psutil) after 100 forks and after N.
The target: RSS after 10,000 forks at most 1.5 times RSS after 100.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil

from cowconv.agent_server.registry import DEFAULT_MAX_LIVE

REPO = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024


def _serve(data_dir: str, bound: int) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "cowconv", "serve", "--port", str(port), "--data-dir", data_dir,
         "--log-level", "warning", "--max-live-conversations", str(bound)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return server, url
        except httpx.TransportError:
            time.sleep(0.2)
    server.kill()
    raise RuntimeError("the server did not start")


def _fork_many(url: str, start: int, stop: int) -> None:
    def fork(n: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            answer = http.post("/api/conversations/src/fork", json={"id": f"f{n}"})
            assert answer.status_code == 201, answer.text

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(fork, range(start, stop)))


def measure(count: int, bound: int) -> str:
    data_dir = tempfile.mkdtemp()
    server, url = _serve(data_dir, bound)
    try:
        process = psutil.Process(server.pid)
        body = {
            "id": "src",
            "agent": {"llm": {"model": "openai/gpt-4o", "api_key": "sk-memory"}},
            "workspace": {"working_dir": data_dir},
        }
        httpx.post(f"{url}/api/conversations", json=body, timeout=120).raise_for_status()
        message = {"text": "Analyse the sales report."}
        httpx.post(f"{url}/api/conversations/src/messages", json=message, timeout=120)
        started = time.perf_counter()
        _fork_many(url, 0, 100)
        after_100 = process.memory_info().rss
        _fork_many(url, 100, count)
        elapsed = time.perf_counter() - started
        after_all = process.memory_info().rss
    finally:
        server.terminate()
        server.wait(timeout=60)
    return (
        f"--max-live-conversations {bound}: RSS after 100 forks {after_100 / MIB:.0f} MiB, "
        f"after {count} {after_all / MIB:.0f} MiB ({after_all / after_100:.2f}x); "
        f"{count} forks in {elapsed:.0f} s"
    )


def main(arguments: list[str]) -> None:
    count = int(arguments[0]) if arguments else 10_000
    bounds = [int(bound) for bound in arguments[1:]] or [DEFAULT_MAX_LIVE, 1_000_000]
    for bound in bounds:
        print(measure(count, bound), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
