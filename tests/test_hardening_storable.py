"""Whatever a door accepts loads again, whatever door it came through.

The property: an event or a state that any public door accepts (constructors,
``model_copy(update=...)``, ``model_construct``, ``append_event``,
``EventLog.append`` saved straight into a store, ``update_agent_state``,
branch outcomes from workers, REST) reloads unchanged in a fresh process
(another Python process opening the real SQLite file), or is refused with a
:class:`~cowconv.CowconvError` before anything is stored. It runs on every
backend: memory, a SQLite file read by another process, an agent server.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pyrsistent import pmap

from cowconv import (
    LLM,
    Agent,
    Conversation,
    CowconvError,
    ExecutionStatus,
    ObservationEvent,
    SQLiteStore,
    run_branches,
)
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.branches.wire import BranchOutcome
from cowconv.core.events import Event, timestamp_now
from cowconv.core.state import ConversationState
from cowconv.distributed import PicklingExecutor
from tests.conftest import Backend, StoreReader
from tests.strategies import json_values


def nested(depth: int) -> Any:
    """A JSON array nested ``depth`` deep (the top level is depth 1)."""
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


POISON = [
    float("nan"),
    float("inf"),
    float("-inf"),
    "\ud800",
    "text \udfff",
    {"\udc80": 1},
    nested(65),
    nested(70),
    nested(200),
    nested(300),
    10**400,
]

poison = st.sampled_from(POISON) | st.integers(65, 220).map(nested)
# Values a door may be handed: ordinary JSON, poison, and poison somewhere inside JSON.
values = st.one_of(
    json_values,
    poison,
    st.lists(json_values | poison, max_size=3),
    st.dictionaries(st.text(max_size=4), json_values | poison, max_size=3),
)
texts = st.text(max_size=12) | st.sampled_from(["\ud800", "a\udfffb", "\x00", "ok"])


def _observation(**fields: Any) -> ObservationEvent:
    return ObservationEvent(**{"tool_name": "t", "tool_call_id": "c1", "output": "o", **fields})


def _constructed(**fields: Any) -> ObservationEvent:
    base = {
        "id": f"constructed-{id(fields)}",
        "timestamp": timestamp_now(),
        "source": "environment",
        "tool_name": "t",
        "tool_call_id": "c1",
        "output": "o",
        "exit_code": None,
        "extra": None,
    }
    return ObservationEvent.model_construct(**{**base, **fields})


# Each door builds an event from a drawn value (a ValidationError: the constructor refused it,
# so nothing can reach a store).
EVENT_DOORS: dict[str, Callable[[Any, str], Event]] = {
    "constructor": lambda value, text: _observation(extra=value),
    "constructor text": lambda value, text: _observation(output=text, extra=None),
    "model_copy extra": lambda value, text: _observation().model_copy(update={"extra": value}),
    "model_copy output": lambda value, text: _observation().model_copy(update={"output": text}),
    "model_copy tool_name": lambda value, text: _observation().model_copy(
        update={"tool_name": text}
    ),
    "model_construct extra": lambda value, text: _constructed(extra=value),
    "model_construct output": lambda value, text: _constructed(output=text),
    "model_construct wrong type": lambda value, text: _constructed(exit_code=text),
}


def _reload(backend: Backend, conversation: Conversation, reader: StoreReader) -> ConversationState:
    """The conversation read back from where it is kept.

    A conversation without a store (``memory``) is saved into a SQLite file the way any
    store would be given it, and read back by another process; it must be refused there
    (with a CowconvError) or load back equal.
    """
    if backend.kind != "memory":
        return backend.reload(conversation)
    state = conversation.state
    assert backend.reader is None
    path = Path(backend.workspace.working_dir) / f"saved-{len(state.events)}.db"
    with SQLiteStore(path) as store:
        try:
            store.save(None, state)
        except CowconvError:
            return state._replace(events=state.events.take(0))  # refused at the store: marker
    return reader.load(path, str(state.id))  # the session's reader: it opens the file afresh


def _same_stored(reloaded: ConversationState, kept: ConversationState) -> None:
    assert [event.id for event in reloaded.events] == [event.id for event in kept.events]
    assert reloaded.events == kept.events
    assert reloaded.agent_state == kept.agent_state


@pytest.mark.parametrize("door", sorted(EVENT_DOORS))
@given(value=values, text=texts)
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_events_reload_unchanged_or_are_refused(
    backend: Backend, store_reader: StoreReader, door: str, value: Any, text: str
) -> None:
    """append_event on every backend: refused (CowconvError, nothing stored) or reloaded equal."""
    conversation = backend.new(Agent(llm=LLM(model="openai/gpt-4o")))
    conversation.send_message("hi")
    before = conversation.state
    try:
        event = EVENT_DOORS[door](value, text)
    except ValidationError:
        return  # the constructor refused it: no door further on ever sees it
    try:
        conversation.append_event(event)
    except CowconvError as error:
        assert str(error)
        assert conversation.state.events == before.events
        _same_stored(backend.reload(conversation), before)
        return
    reloaded = _reload(backend, conversation, store_reader)
    if backend.kind == "memory" and not reloaded.events:
        return  # kept in memory only; the store it went to refused it
    _same_stored(reloaded, conversation.state)


@given(value=values)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_agent_state_reloads_unchanged_or_is_refused(
    backend: Backend, store_reader: StoreReader, value: Any
) -> None:
    """update_agent_state on every backend: refused before anything is stored, or reloaded."""
    conversation = backend.new(Agent(llm=LLM(model="openai/gpt-4o")))
    conversation.send_message("hi")
    before = conversation.state
    try:
        conversation.update_agent_state({"key": value})
    except (CowconvError, ValueError) as error:
        # ValueError: json.dumps of the remote client refuses a lone surrogate key (no request)
        assert str(error)
        _same_stored(backend.reload(conversation), before)
        return
    reloaded = _reload(backend, conversation, store_reader)
    if backend.kind == "memory" and not reloaded.events:
        return  # kept in memory only; the store it went to refused it
    _same_stored(reloaded, conversation.state)


# -- the Store door: EventLog.append and model_copy of a state, saved straight in ------------


@pytest.fixture
def reader(store_reader: StoreReader) -> StoreReader:
    """One other Python process that opens a SQLite file afresh for each read (the session's)."""
    return store_reader


@given(value=values, text=texts, how=st.sampled_from(["events.append", "state model_copy"]))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_store_save_refuses_before_writing(
    tmp_path_factory: pytest.TempPathFactory, reader: StoreReader, value: Any, text: str, how: str
) -> None:
    """Store.save of a snapshot built past validation: refused with nothing written, or it
    loads back equal in another process."""
    directory = tmp_path_factory.mktemp("store")
    with SQLiteStore(directory) as store:
        conversation = Conversation(Agent(llm=LLM(model="openai/gpt-4o")), directory, store=store)
        conversation.send_message("hi")
        previous = store.load(conversation.id)
        if how == "events.append":
            event = _observation().model_copy(update={"extra": value, "output": text})
            current = previous._replace(events=previous.events.append(event))
        else:
            current = previous.model_copy(update={"agent_state": pmap({"key": value})})
        try:
            store.save(previous, current)
        except CowconvError:
            _same_stored(reader.load(store.path, str(conversation.id)), previous)
            return
        _same_stored(reader.load(store.path, str(conversation.id)), current)


# -- branch outcomes from workers ------------------------------------------------------------


class PoisoningExecutor(PicklingExecutor):
    """A custom executor whose workers send back agent state nested 70 deep."""

    def run_jobs(self, prefix: Any, jobs: Any) -> Iterator[tuple[int, bytes | BaseException]]:
        for index, result in super().run_jobs(prefix, jobs):
            if isinstance(result, bytes):
                outcome = BranchOutcome.loads(result)
                bad = outcome.model_copy(update={"agent_state": pmap({"deep": nested(70)})})
                result = bad.dumps()
            yield index, result


def test_a_poisoned_branch_outcome_is_refused_and_the_fork_stays_readable(
    stub_agent: Agent, tmp_path: Path
) -> None:
    """The fork a worker's unloadable outcome was meant for stays readable in a fresh
    process; the suite reports a CowconvError for it."""
    with SQLiteStore(tmp_path / "data") as store:
        source = Conversation(stub_agent, tmp_path, store=store)
        source.send_message("hi")
        with pytest.raises(Exception) as raised:
            run_branches(source, ["Say hello."], executor=PoisoningExecutor(max_workers=1))
        errors = list(getattr(raised.value, "exceptions", [raised.value]))
        assert errors and all(isinstance(error, CowconvError) for error in errors), errors
        (fork,) = raised.value.forks  # type: ignore[attr-defined]
        path, fork_id = store.path, str(fork.id)
    reader = StoreReader()
    try:
        reloaded = reader.load(path, fork_id)
    finally:
        reader.close()
    assert reloaded.agent_state.get("deep") is None
    assert reloaded.execution_status is not ExecutionStatus.RUNNING


# -- REST: the agent server's own store, read again by a fresh server process ----------------

_SERVE_AND_READ = """
import json, sys
from cowconv import SQLiteStore
with SQLiteStore(sys.argv[1]) as store:
    for info in store.list():
        state = store.load(info.id)
        print(json.dumps([info.id, len(state.events)]))
    print(json.dumps(store.unreadable()))
"""


def test_rest_bodies_that_json_allows_are_refused_or_reload(tmp_path: Path) -> None:
    """Bodies with NaN, infinity, deep nesting and surrogate escapes over real HTTP: each is
    refused (4xx) or stored so that another process reads every conversation back."""
    data = tmp_path / "data"
    body = {"agent": {"llm": {"model": "openai/gpt-4o"}}, "workspace": {"working_dir": "."}}
    with BackgroundServer(create_app(data_dir=data)) as server:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            assert http.post("/api/conversations", json={**body, "id": "c"}).status_code == 201
            for number, value in enumerate(POISON):
                event = {"kind": "ObservationEvent", "tool_name": "t", "tool_call_id": "c1"}
                event = {**event, "output": "o", "extra": value, "id": f"e{number}"}
                for path, payload in [
                    ("/api/conversations/c/events/append", event),
                    ("/api/conversations/c/agent_state", {"key": value}),
                ]:
                    content = json.dumps(payload).encode()  # NaN, Infinity, \\ud800 as JSON allows
                    answer = http.request(
                        "POST" if path.endswith("append") else "PATCH",
                        path,
                        content=content,
                        headers={"Content-Type": "application/json"},
                    )
                    assert answer.status_code < 500, (path, value, answer.text)
            assert http.get("/api/conversations/c/events").status_code == 200
    done = subprocess.run(
        [sys.executable, "-c", _SERVE_AND_READ, str(next(data.glob("*.db")))],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert json.loads(lines[-1]) == []  # nothing unreadable
    assert json.loads(lines[0])[0] == "c"


def test_nan_is_never_equal_so_the_check_cannot_pass_it() -> None:
    """A guard on the property itself: NaN is refused even where JSON null would load."""
    assert math.isnan(POISON[0])
    with pytest.raises(CowconvError):
        Conversation(
            Agent(llm=LLM(model="openai/gpt-4o")), ".", store=SQLiteStore(":memory:")
        ).append_event(_observation().model_copy(update={"extra": float("nan")}))
