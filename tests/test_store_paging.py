"""The listing paged by an index: order, cursors, no duplicates or misses.

Runs on memory, SQLite and PostgreSQL alike (the ``store_database`` fixture).
A page is read off the listing index from a cursor; these tests state what
paging guarantees, not how fast it is (``benchmarks/server_listing.py``
measures that).
"""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import LLM, Agent, ConversationState, InvalidValueError, Workspace
from cowconv.stores import TreeStore
from tests.conftest import StoreDatabase

AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-paging"))
START = datetime(2026, 1, 1, tzinfo=UTC)
_RUNS = itertools.count()


def stored(store: TreeStore, conversation_id: str, second: float, **tags: str) -> None:
    """A conversation created ``second`` seconds after START, with ``tags``."""
    state = ConversationState(
        id=conversation_id,
        agent=AGENT,
        workspace=Workspace(working_dir="/tmp"),
        # Never a whole second: pydantic writes those without a fraction, which sorts after
        # the same second with one ("...:03Z" > "...:03.5Z") where the listing compares text.
        created_at=START + timedelta(seconds=second, microseconds=1),
        tags=tags,
    )
    store.save(None, state)


def all_pages(store: TreeStore, limit: int, **options: Any) -> tuple[list[str], list[str], int]:
    """(ids listed, ids reported unreadable, pages read) paging by cursor to the end."""
    listed: list[str] = []
    unreadable: list[str] = []
    cursor, pages = None, 0
    while True:
        page = store.page(limit=limit, cursor=cursor, **options)
        pages += 1
        assert len(page.items) + len(page.unreadable) <= limit
        listed += [str(info.id) for info in page.items]
        unreadable += page.unreadable
        if page.next_cursor is None:
            return listed, unreadable, pages
        cursor = page.next_cursor


def order(store: TreeStore, ids: list[str]) -> list[str]:
    """``ids`` in the listing's order: created_at (as stored), then id by code point."""
    return sorted(ids, key=lambda name: (store.info(name).created_at, name))


class TestOrderAndCursor:
    def test_cursor_pages_list_everything_once_in_order(self, store_database: StoreDatabase):
        """Pages of 3 from cursors: the whole listing, in order, each id once, then None."""
        store = store_database.open()
        names = [f"c{n}" for n in range(10)]
        for n, name in enumerate(reversed(names)):  # created in the reverse of id order
            stored(store, name, n // 3)  # ties on created_at: id decides
        listed, unreadable, pages = all_pages(store, 3)
        assert listed == order(store, names) == [info.id for info in store.list()]
        assert unreadable == [] and pages == 4

    def test_offset_and_cursor_agree(self, store_database: StoreDatabase):
        """An offset page and the cursor pages cover the same rows; next_cursor continues."""
        store = store_database.open()
        for n in range(7):
            stored(store, f"c{n}", n)
        first = store.page(limit=4)
        second = store.page(limit=4, cursor=first.next_cursor)
        assert [i.id for i in first.items + second.items] == [f"c{n}" for n in range(7)]
        assert [i.id for i in store.page(limit=4, offset=4).items] == ["c4", "c5", "c6"]
        assert second.next_cursor is None

    @settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        places=st.lists(
            st.tuples(st.integers(0, 4), st.text("ab \u00e9\U0001f600", min_size=1, max_size=4)),
            unique_by=lambda place: place[1],
            max_size=12,
        ),
        limit=st.integers(1, 5),
    )
    def test_any_ids_and_ties_page_in_one_order(
        self, store_database: StoreDatabase, places: list[tuple[int, str]], limit: int
    ):
        """Whatever the ids (spaces, accents, astral characters) and created_at ties, the
        cursor pages are the listing's order, each id once, on every database."""
        store = store_database.open()
        run = str(next(_RUNS))
        ids = []
        for second, name in places:
            conversation_id = f"{run}/{name}"
            if conversation_id.strip() != conversation_id:
                continue  # ids with edge whitespace are refused by the id check
            stored(store, conversation_id, second, run=run)
            ids.append(conversation_id)
        listed, _, _ = all_pages(store, limit, tags={"run": run})
        assert listed == order(store, ids)

    def test_a_bad_cursor_or_limit_is_refused(self, store_database: StoreDatabase):
        """A cursor is text without NUL; any such text is a place in the order."""
        store = store_database.open()
        stored(store, "a", 1)
        with pytest.raises(InvalidValueError, match="cursor"):
            store.page(cursor="a\x00b")
        with pytest.raises(InvalidValueError, match="limit"):
            store.page(limit=0)
        assert [i.id for i in store.page(cursor="not a cursor at all").items] == []
        assert [i.id for i in store.page(cursor="").items] == ["a"]


class TestUnreadableOnPages:
    def test_each_unreadable_row_is_reported_once_on_its_page(self, store_database: StoreDatabase):
        """A damaged row is named by the page that covers it, never by another page."""
        store = store_database.open()
        for n in range(9):
            stored(store, f"c{n}", n)
        for name in ("c1", "c5", "c6"):
            store_database.damage(name)
        store = store_database.open()
        pages = []
        cursor = None
        while True:
            page = store.page(limit=3, cursor=cursor)
            pages.append(([str(i.id) for i in page.items], page.unreadable))
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert pages == [
            (["c0", "c2"], ["c1"]),
            (["c3", "c4"], ["c5"]),
            (["c7", "c8"], ["c6"]),
        ]


class TestConcurrentCreates:
    def test_paging_while_creating_misses_and_repeats_nothing(self, store_database: StoreDatabase):
        """Conversations created (and some deleted) between pages, by another writer: every
        conversation stored before paging began and never deleted is listed exactly once,
        in order; no id is listed twice."""
        store = store_database.open()
        writer = store_database.open()  # another connection: another server
        before = [f"b{n:03}" for n in range(60)]
        for n, name in enumerate(before):
            stored(store, name, n)
        doomed = set(before[10:60:7])
        stop = threading.Event()
        created: list[str] = []
        failures: list[BaseException] = []

        def create() -> None:
            try:
                for n in itertools.count():
                    if stop.is_set():
                        return
                    # New ones land before, among and after the pager's position.
                    name = f"n{n:04}"
                    stored(writer, name, (n * 7) % 70 + 0.5)
                    created.append(name)
                    if n % 3 == 0 and doomed:
                        writer.delete(doomed.pop())
            except BaseException as error:  # reported by the test thread
                failures.append(error)

        thread = threading.Thread(target=create)
        thread.start()
        try:
            listed, _, _ = all_pages(store, 4)
        finally:
            stop.set()
            thread.join(timeout=120)
        assert not failures
        assert len(listed) == len(set(listed))  # no duplicates
        deleted = set(before[10:60:7]) - doomed
        kept = [name for name in before if name not in deleted]
        listed_before = [name for name in listed if name.startswith("b")]
        assert listed_before == sorted(listed_before)  # in order
        assert set(kept) <= set(listed)  # no misses
        assert set(listed) <= set(before) | set(created)
        assert created  # the writer did run meanwhile
