"""OpenHands' file-per-event log (cowconv.event_store) over the file stores of cowconv.io."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowconv import ROOT_PARENT_ID, EventLog, MessageEvent, PauseEvent
from cowconv.event_store import FileEventLog
from cowconv.io import InMemoryFileStore, LocalFileStore


def message(event_id: str, parent_id: str | None = None) -> MessageEvent:
    return MessageEvent(id=event_id, parent_id=parent_id, role="user", content=event_id)


# A random tree, as OpenHands' SDK writes one: each event names a parent stored before it,
# or none (the first event, or a pre-tree event: the child of the one before), or the root marker.
trees = st.lists(st.integers(min_value=-2, max_value=50), min_size=1, max_size=30)


def build(choices: list[int]) -> list[MessageEvent]:
    events: list[MessageEvent] = []
    for position, choice in enumerate(choices):
        if position == 0 or choice == -1:
            parent = None
        elif choice == -2:
            parent = ROOT_PARENT_ID
        else:
            parent = events[choice % position].id
        events.append(message(f"e{position}", parent))
    return events


def reference_path(events: list[MessageEvent], leaf: int) -> list[str]:
    """The path to the root by OpenHands' rules, walked over a plain list."""
    by_id = {event.id: position for position, event in enumerate(events)}
    path, position = [], leaf
    while position is not None:
        event = events[position]
        path.append(event.id)
        if event.parent_id == ROOT_PARENT_ID:
            position = None
        elif event.parent_id is not None:
            position = by_id[event.parent_id]
        else:
            position = None if position == 0 else position - 1
    return path[::-1]


@given(trees)
def test_path_to_root_follows_openhands_rules(choices):
    events = build(choices)
    log = FileEventLog(InMemoryFileStore())
    for event in events:
        log.append(event)
    for leaf in range(len(events)):
        assert [e.id for e in log.path_to_root(events[leaf].id)] == reference_path(events, leaf)
    assert list(log) == events and len(log) == len(events)


def test_a_directory_written_is_read_back_by_another_log(tmp_path):
    """The files are OpenHands' layout; a new log (another process) reads them in order."""
    log = FileEventLog(LocalFileStore(tmp_path))
    first, second = message("a"), message("b", "a")
    assert (log.append(first), log.append(second)) == (0, 1)
    names = sorted(path.name for path in (tmp_path / "events").iterdir())
    assert names == ["event-00000-a.json", "event-00001-b.json"]
    assert "parent_id" not in json.loads((tmp_path / "events" / names[0]).read_text())
    again = FileEventLog(LocalFileStore(tmp_path))
    assert list(again) == [first, second] and again.get_index("b") == 1
    # Into a cowconv history: the path to the leaf is the active branch.
    assert list(EventLog(again.path_to_root("b"))) == [first, second]


def test_bad_appends_change_nothing():
    log = FileEventLog(InMemoryFileStore())
    log.append(message("a"))
    with pytest.raises(ValueError, match="Parent event 'x' does not exist"):
        log.append(message("b", "x"))
    with pytest.raises(ValueError, match="already in this log"):
        log.append(message("a"))
    with pytest.raises(TypeError):
        log.append("not an event")  # type: ignore[arg-type]
    assert [e.id for e in log] == ["a"] and len(log.file_store.list("events")) == 1


def test_lookups():
    log = FileEventLog(InMemoryFileStore())
    pause = PauseEvent(id="p")
    log.append(pause)
    assert "p" in log and pause in log and "q" not in log and 3 not in log
    assert log[-1] == pause and log[0:1] == [pause] and log.get_id(0) == "p"
    assert log.path_to_root(None) == []
    with pytest.raises(KeyError):
        log.path_to_root("q")
    with pytest.raises(IndexError):
        log[1]


def test_a_gap_in_the_files_is_refused():
    store = InMemoryFileStore({"events/event-00001-b.json": message("b").model_dump_json()})
    with pytest.raises(ValueError, match="skip positions"):
        FileEventLog(store)


@pytest.mark.parametrize("make", [InMemoryFileStore, "local"])
def test_file_stores_agree(make, tmp_path):
    store = LocalFileStore(tmp_path) if make == "local" else make()
    store.write("d/a.txt", "A")
    store.write("d/sub/b.txt", b"B")
    assert store.read("d/a.txt") == "A" and store.read("d/sub/b.txt") == "B"
    assert store.list("d") == ["d/a.txt", "d/sub/"]
    assert store.exists("d/sub") and not store.exists("d/c.txt")
    with store.lock("d/.lock"), store.lock("d/.lock"):  # re-entrant in one thread
        store.write("d/a.txt", "A2")
    assert store.read("d/a.txt") == "A2"
    store.delete("d/sub")
    assert store.list("d") == ["d/a.txt"]
    with pytest.raises(FileNotFoundError):
        store.read("d/sub/b.txt")
    with pytest.raises(ValueError, match=r"\.\."):
        store.read("../outside")
