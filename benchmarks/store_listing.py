"""A page of the listing, and ``unreadable()``, on a store of N conversations.

``python -m benchmarks.store_listing 100000 [sqlite] [postgres]`` fills a
SQLite file and a PostgreSQL database (a throwaway server) with N
conversations through the row interface (one transaction), then prints the
median of 30 ``store.list(limit=20)`` calls at offsets up to 1,000 and the
time of ``store.unreadable()`` on a store just opened and again.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

from cowconv import LLM, Agent, ConversationState, Workspace
from cowconv.core.state import dump_state_json
from cowconv.ports import Row
from cowconv.stores import TreeStore, open_store
from cowconv.testing import PostgresServer


def fill(store: TreeStore, count: int) -> None:
    agent = Agent(llm=LLM(model="openai/gpt-4o"))
    state = ConversationState(id="template", agent=agent, workspace=Workspace(working_dir="."))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with store.rows.transaction(write=True) as rows:
        for n in range(count):
            stored = state._replace(id=f"c{n}", created_at=start + timedelta(seconds=n))
            rows.insert(Row(0, f"c{n}", None, 0, 0, dump_state_json(stored), n, 0))


def measure(name: str, store: TreeStore, count: int) -> str:
    started = time.perf_counter()
    fill(store, count)
    filled = time.perf_counter() - started
    pages = []
    for call in range(30):
        started = time.perf_counter()
        page = store.list(limit=20, offset=(call * 997) % 1000)
        pages.append(time.perf_counter() - started)
        assert len(page) == 20
    started = time.perf_counter()
    store.unreadable()
    first = time.perf_counter() - started
    started = time.perf_counter()
    store.unreadable()
    again = time.perf_counter() - started
    return (
        f"{name}: {count} conversations (filled in {filled:.1f} s): list(limit=20) p50 "
        f"{statistics.median(pages) * 1e3:.1f} ms; unreadable() {first:.2f} s, again {again:.2f} s"
    )


def main(arguments: list[str]) -> None:
    count = int(arguments[0]) if arguments else 10_000
    kinds = arguments[1:] or ["sqlite", "postgres"]
    if "sqlite" in kinds:
        path = os.path.join(tempfile.mkdtemp(), "cowconv.db")
        with open_store(path) as store:
            assert isinstance(store, TreeStore)
            print(measure("SQLiteStore", store, count), flush=True)
    if "postgres" in kinds:
        with PostgresServer() as server, open_store(server.create_database("listing")) as store:
            assert isinstance(store, TreeStore)
            print(measure("PostgresStore", store, count), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
