"""Tests for cowconv.core.history: the persistent, structurally shared EventLog."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, rule
from pydantic import BaseModel, ConfigDict

from cowconv import EventLog, MessageEvent, PauseEvent
from cowconv.core import history as _history
from tests.test_messages import steps


def msg(text: str) -> MessageEvent:
    return MessageEvent(source="user", role="user", content=text)


def log_of(n: int) -> tuple[EventLog, list[MessageEvent]]:
    events = [msg(str(i)) for i in range(n)]
    return EventLog(events), events


class EventLogVersusList(RuleBasedStateMachine):
    """Every EventLog ever made keeps behaving like the list it was made from.

    Appends, takes and up_to's are applied to EventLogs and to plain lists
    (copied on every change); all versions stay alive, so any structure the
    logs share must never leak a change from one version to another.
    """

    logs = Bundle("logs")

    @rule(target=logs)
    def empty(self):
        return EventLog(), []

    @rule(target=logs, pair=logs)
    def append(self, pair):
        log, model = pair
        event = PauseEvent()
        return log.append(event), [*model, event]

    # Up to 40 at once so prefixes longer than the copy limit (32) make multi-chunk logs.
    @rule(target=logs, pair=logs, count=st.integers(0, 40))
    def extend(self, pair, count):
        log, model = pair
        new = [msg(str(i)) for i in range(count)]
        return log.extend(new), model + new

    @rule(target=logs, pair=logs, data=st.data())
    def take(self, pair, data):
        log, model = pair
        k = data.draw(st.integers(0, len(model) + 2))
        return log.take(k), model[:k]

    @rule(target=logs, pair=logs, data=st.data())
    def up_to(self, pair, data):
        log, model = pair
        if not model:
            return log, model
        i = data.draw(st.integers(0, len(model) - 1))
        return log.up_to(model[i].id), model[: i + 1]

    @rule(pair=logs, data=st.data())
    def check(self, pair, data):
        log, model = pair
        assert len(log) == len(model)
        assert list(log) == model
        assert list(reversed(log)) == model[::-1]
        if model:
            i = data.draw(st.integers(-len(model), len(model) - 1))
            assert log[i] is model[i]
            j = data.draw(st.integers(0, len(model) - 1))
            assert log.index_of(model[j].id) == j
            assert model[j] in log
        assert log == EventLog(model)
        assert list(log[1:]) == model[1:]
        assert list(log[::2]) == model[::2]


TestEventLogVersusList = EventLogVersusList.TestCase
TestEventLogVersusList.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


class SmallChunksVersusList(EventLogVersusList):
    """The same check with chunks capped at 3 events, so appends keep crossing the cap."""

    def __init__(self):
        super().__init__()
        self._limit = _history._CHUNK_LIMIT
        _history._CHUNK_LIMIT = 3

    def teardown(self):
        _history._CHUNK_LIMIT = self._limit


TestSmallChunksVersusList = SmallChunksVersusList.TestCase
TestSmallChunksVersusList.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)


class TestAppend:
    def test_old_log_unchanged(self):
        """append returns a new log and leaves the old one as it was."""
        log, events = log_of(3)
        longer = log.append(msg("x"))
        assert len(log) == 3 and list(log) == events
        assert len(longer) == 4 and longer[-1].text == "x"

    def test_duplicate_id_rejected(self):
        """An event id can appear only once in a log."""
        log, events = log_of(2)
        with pytest.raises(ValueError, match=events[0].id):
            log.append(events[0])

    def test_same_event_may_follow_a_prefix(self):
        """After take(k), an event beyond k may be appended again."""
        log, events = log_of(3)
        again = log.take(1).append(events[2])
        assert list(again) == [events[0], events[2]]
        assert again.index_of(events[2].id) == 1

    def test_chunks_stop_growing_at_the_limit(self, monkeypatch):
        """An append never makes a vector of more than _CHUNK_LIMIT events.

        The garbage collector walks every event of each new vector (it cannot see
        that vectors share their trie), so a new vector the size of the whole
        history would make young collections cost O(n).
        """
        monkeypatch.setattr(_history, "_CHUNK_LIMIT", 8)
        log, events = log_of(100)
        added = [msg(f"new {i}") for i in range(20)]
        grown = log.extend(added)
        assert list(grown) == events + added
        assert grown._chunks[0] is log._chunks[0]
        # Each new vector holds only its own events (len of a PVector is all it holds, used or not).
        assert [len(chunk) for chunk in grown._chunks[1:]] == [8, 8, 4]
        fresh = EventLog().extend(added)
        assert list(fresh) == added and [len(c) for c in fresh._chunks] == [8, 8, 4]
        assert [fresh.index_of(e.id) for e in added] == list(range(20))

    def test_non_event_rejected(self):
        """Only events go in a log."""
        with pytest.raises(TypeError):
            EventLog().append("not an event")  # type: ignore[arg-type]


class TestTake:
    def test_shares_events(self):
        """take(k) holds the very same event objects, not copies."""
        log, events = log_of(100)
        assert all(a is b for a, b in zip(log.take(40), events[:40], strict=True))

    def test_long_prefix_then_append_makes_a_new_chunk(self):
        """Appending to a long prefix shares it rather than copying it."""
        log, events = log_of(100)
        branch = log.take(60).append(msg("new"))
        assert branch._chunks[0] is log._chunks[0]
        assert list(branch) == [*events[:60], branch[-1]]
        assert branch[59] is events[59] and branch[60].text == "new"

    def test_branches_after_take_are_isolated(self):
        """Appending to two prefixes of one log keeps them apart."""
        log, events = log_of(100)
        left = log.take(50).append(msg("left"))
        right = log.take(50).append(msg("right"))
        assert [e.text for e in left[49:]] == ["49", "left"]
        assert [e.text for e in right[49:]] == ["49", "right"]
        assert list(log) == events

    def test_index_of_ignores_events_beyond_prefix(self):
        """An id of an event cut off by take is not found in the prefix."""
        log, events = log_of(10)
        prefix = log.take(5).append(msg("new"))
        with pytest.raises(KeyError, match=events[5].id):
            prefix.index_of(events[5].id)
        assert prefix.get(events[5].id) is None
        assert events[5] not in prefix

    def test_negative_count_rejected(self):
        """take(-1) is a ValueError."""
        with pytest.raises(ValueError):
            EventLog().take(-1)

    def test_count_past_end_is_whole_log(self):
        """take(k) with k >= len is the log itself."""
        log, _ = log_of(3)
        assert log.take(10) is log


class TestIndexing:
    def test_out_of_range(self):
        """Indexing past either end is an IndexError."""
        log, _ = log_of(3)
        with pytest.raises(IndexError):
            log[3]
        with pytest.raises(IndexError):
            log[-4]

    def test_last(self):
        """last is the newest event or None."""
        log, events = log_of(3)
        assert log.last is events[-1]
        assert EventLog().last is None


class TestValueSemantics:
    def test_copy_and_deepcopy_return_self(self):
        """Copying an immutable log is free: it returns the same object."""
        log, _ = log_of(3)
        assert copy.copy(log) is log
        assert copy.deepcopy(log) is log

    def test_pickle_round_trip(self):
        """A pickled log comes back equal."""
        log, _ = log_of(5)
        assert pickle.loads(pickle.dumps(log)) == log

    @given(st.integers(0, 30), st.integers(0, 30), st.integers(0, 5))
    def test_pickle_keeps_the_chunk_layout(self, n, k, more):
        """Unpickling gives back the chunks (only the used part of a view) and appends work."""
        limit = _history._CHUNK_LIMIT
        _history._CHUNK_LIMIT = 8
        try:
            _, events = log_of(n)
            log = EventLog().extend(events)
            view = log.take(min(k, n))
            for original in (log, view):
                loaded = pickle.loads(pickle.dumps(original))
                assert loaded == original
                used = [len(list(chunk)) for chunk in original._used_chunks()]
                assert [len(c) for c in loaded._chunks] == used
                assert loaded._starts == original._starts
                assert [loaded.index_of(e.id) for e in original] == list(range(len(original)))
                grown = loaded.extend(
                    MessageEvent(source="user", role="user", content=f"new {i}")
                    for i in range(more)
                )
                assert list(grown)[: len(original)] == list(original)
                assert max((len(c) for c in grown._chunks), default=0) <= 8
                assert loaded == original  # appending did not change the unpickled log
        finally:
            _history._CHUNK_LIMIT = limit

    def test_equality_and_hash(self):
        """Logs with equal events are equal and hash alike; lists are not logs."""
        log, events = log_of(5)
        assert log == EventLog(events) and hash(log) == hash(EventLog(events))
        assert log != log.take(4)
        assert log != events

    @given(st.integers(0, 40))
    def test_pydantic_field_round_trip(self, n):
        """An EventLog field dumps to a list of events and validates back."""

        class Holder(BaseModel):
            model_config = ConfigDict(arbitrary_types_allowed=True)
            events: EventLog

        holder = Holder(events=log_of(n)[0])
        assert Holder.model_validate_json(holder.model_dump_json()) == holder
        assert Holder.model_validate(holder.model_dump()).events == holder.events


class TestStartsWith:
    @settings(max_examples=300, deadline=None)
    @given(steps)
    def test_agrees_with_lists_on_every_pair_of_a_random_tree(self, plan):
        """starts_with and common_prefix_length agree with lists, for forks, prefixes and unpickled
        copies."""
        from tests.test_messages import grown

        logs = [EventLog(), *grown(plan, "s")]
        logs += [pickle.loads(pickle.dumps(log)) for log in logs[-3:]]
        as_lists = [list(log) for log in logs]
        for log, events in zip(logs, as_lists, strict=True):
            for prefix, prefix_events in zip(logs, as_lists, strict=True):
                expected = events[: len(prefix_events)] == prefix_events
                assert log.starts_with(prefix) is expected
                assert prefix.is_prefix_of(log) is expected
                shared = 0
                for mine, theirs in zip(events, prefix_events, strict=False):
                    if mine != theirs:
                        break
                    shared += 1
                assert log.common_prefix_length(prefix) == shared

    def test_a_fork_of_a_long_log_is_recognised_without_reading_events(self, monkeypatch):
        """Forks of a source (and forks of a prefix of it) extend it: decided by lineage, O(1)."""
        source, _ = log_of(300)
        forks = [source.append(msg(f"fork {n}")) for n in range(3)]
        earlier = source.take(100).append(msg("from event 100"))
        assert not forks[0].starts_with(forks[1])  # siblings differ after the fork point

        def no_reading(self, other):
            raise AssertionError("events were compared")

        monkeypatch.setattr(EventLog, "__eq__", no_reading)
        assert all(fork.starts_with(source) for fork in forks)
        assert earlier.starts_with(source.take(100))
        assert not earlier.starts_with(source)  # shorter: no event needs reading either


class TestVectorImplementation:
    def test_vector_implementation_is_the_one_in_use(self):
        """VECTOR_IMPLEMENTATION names the vector type pyrsistent hands out in this interpreter."""
        try:
            import pvectorc  # noqa: F401
        except ImportError:
            assert _history.VECTOR_IMPLEMENTATION == "pure Python"
        else:
            assert _history.VECTOR_IMPLEMENTATION == "C extension"


class TestOpenHandsTreeHelpers:
    """OpenHands' EventLog names: ``id in log``, ``get_index``, ``get_id``, ``path_to_root``."""

    @settings(max_examples=50, deadline=None)
    @given(n=st.integers(1, 40), data=st.data())
    def test_path_to_root_is_the_log_up_to_the_event(self, n, data):
        log, events = log_of(n)
        at = data.draw(st.integers(0, n - 1), label="at")
        limit = data.draw(st.none() | st.integers(0, n + 2), label="limit")
        expected = events[: at + 1] if limit is None else events[: at + 1][-limit:] if limit else []
        assert log.path_to_root(events[at].id, limit=limit) == expected
        assert log.get_index(events[at].id) == at and log.get_id(at) == events[at].id
        assert events[at].id in log and events[at] in log

    def test_edges(self):
        log, events = log_of(3)
        assert log.path_to_root(None) == [] and "nope" not in log and 3 not in log
        with pytest.raises(ValueError, match="nope"):
            log.path_to_root("nope")
        with pytest.raises(ValueError):
            log.path_to_root(events[0].id, limit=-1)
        with pytest.raises(TypeError):
            log.path_to_root(events[0].id, limit="2")
        assert events[2].id not in log.take(2)  # a prefix view does not hold what follows it
