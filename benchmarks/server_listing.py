"""``GET /api/conversations?limit=20`` of a real server over a store of N conversations.

``python -m benchmarks.server_listing 100000 [sqlite] [postgres]`` fills a
SQLite file and a PostgreSQL database (a throwaway server) with N
conversations through the row interface (one transaction), starts
``cowconv serve --store`` on each (a real uvicorn process) and prints the
median time of listing requests over HTTP: the first page (twice, the second
with the server warm), pages read from cursors all over the listing, and an
``offset`` page near the end (what cursors avoid). The target is a
p50 of at most 50 ms at 100,000 conversations on both stores.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from cowconv import LLM, Agent, ConversationState, Workspace
from cowconv.core.state import dump_state_json
from cowconv.ports import Row
from cowconv.stores import TreeStore, open_store
from cowconv.testing import PostgresServer

REPO = Path(__file__).resolve().parent.parent
REQUESTS = 40


def fill(store: TreeStore, count: int) -> None:
    """``count`` conversations c0 .. c{count-1}, one second apart, in one transaction."""
    agent = Agent(llm=LLM(model="openai/gpt-4o"))
    state = ConversationState(id="template", agent=agent, workspace=Workspace(working_dir="."))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with store.rows.transaction(write=True) as rows:
        for n in range(count):
            created = start + timedelta(seconds=n, microseconds=1)
            stored = state._replace(id=f"c{n}", created_at=created)
            rows.insert(Row(0, f"c{n}", None, 0, 0, dump_state_json(stored), n, 0))


def serve(location: str) -> tuple[subprocess.Popen[bytes], str]:
    """``cowconv serve --store location`` on a free port, once it answers."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "cowconv", "serve", "--port", str(port), "--store", location,
         "--log-level", "warning"],
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


def timed(http: httpx.Client, params: dict[str, str | int]) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    answer = http.get("/api/conversations", params=params)
    elapsed = time.perf_counter() - started
    answer.raise_for_status()
    page: dict[str, object] = answer.json()
    return elapsed, page


def measure(name: str, location: str, store: TreeStore, count: int) -> str:
    started = time.perf_counter()
    fill(store, count)
    filled = time.perf_counter() - started
    started = time.perf_counter()
    store.unreadable()  # what every listing cost before (every row's versions, every state)
    scan = time.perf_counter() - started
    server, url = serve(location)
    try:
        with httpx.Client(base_url=url, timeout=120) as http:
            cold, first = timed(http, {"limit": 20})
            assert len(first["items"]) == 20  # type: ignore[arg-type]
            firsts = [timed(http, {"limit": 20})[0] for _ in range(REQUESTS)]
            # Cursors all over the listing: each the next_cursor a page there would give.
            deep = []
            for n in range(REQUESTS):
                place = (n * 7919) % (count - 40)
                elapsed, page = timed(http, {"limit": 20, "cursor": _cursor_at(place)})
                items = page["items"]
                assert isinstance(items, list) and len(items) == 20
                assert items[0]["id"] == f"c{place}", (place, items[0]["id"])
                deep.append(elapsed)
            offsets = [
                timed(http, {"limit": 20, "offset": count - 40})[0] for _ in range(REQUESTS // 4)
            ]
    finally:
        server.terminate()
        server.wait(timeout=60)
    ms = 1e3
    return (
        f"{name}: {count} conversations (filled in {filled:.1f} s); GET /api/conversations"
        f"?limit=20 p50: first page {statistics.median(firsts) * ms:.1f} ms (first request "
        f"{cold * ms:.0f} ms), from cursors across the listing "
        f"{statistics.median(deep) * ms:.1f} ms, offset={count - 40} "
        f"{statistics.median(offsets) * ms:.1f} ms; a full unreadable() scan (what every "
        f"listing did before) {scan:.2f} s"
    )


def _cursor_at(position: int) -> str:
    """The cursor of the page that starts at c{position} (what the page before gives)."""
    if position == 0:
        return ""
    # c{n} was created n seconds and 1 µs after the start: its place in the order.
    created = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=position - 1, microseconds=1)
    return f"{created.isoformat().replace('+00:00', 'Z')} c{position - 1}"


def main(arguments: list[str]) -> None:
    count = int(arguments[0]) if arguments else 10_000
    kinds = arguments[1:] or ["sqlite", "postgres"]
    if "sqlite" in kinds:
        path = os.path.join(tempfile.mkdtemp(), "cowconv.db")
        with open_store(path) as store:
            assert isinstance(store, TreeStore)
            print(measure("SQLiteStore", path, store, count), flush=True)
    if "postgres" in kinds:
        with PostgresServer() as server:
            dsn = server.create_database("listing")
            with open_store(dsn) as store:
                assert isinstance(store, TreeStore)
                print(measure("PostgresStore", dsn, store, count), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
