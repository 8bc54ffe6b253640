"""Nothing is saved that cannot be loaded: values are checked where they enter (#10 parts 2, 4).

NaN and infinity, JSON nested deeper than MAX_DEPTH and lone surrogates are
refused by every model that is stored and by every ``Conversation`` method
that records text, before anything is recorded; the agent server answers
them with 422. Values that are accepted survive a save and a load in a fresh
process unchanged.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    MAX_DEPTH,
    ActionEvent,
    Agent,
    Conversation,
    InvalidValueError,
    MessageEvent,
    ObservationEvent,
    SQLiteStore,
    TextContent,
    Tool,
    Usage,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, create_app
from tests.strategies import json_objects, str_maps, texts

REPO = Path(__file__).resolve().parent.parent
AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-v"))

NON_FINITE = [float("inf"), float("-inf"), float("nan")]
SURROGATES = ["\ud800", "a\udfffb", "\udc80"]


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


# Values that must never be stored, wherever they appear.
poison = st.sampled_from(NON_FINITE) | st.sampled_from(SURROGATES) | st.just(nested(MAX_DEPTH + 1))


class TestLibraryRefuses:
    @pytest.mark.parametrize(
        "field", ["retry_max_wait", "retry_min_wait", "timeout", "temperature"]
    )
    @pytest.mark.parametrize("number", NON_FINITE)
    def test_llm_settings(self, field: str, number: float):
        """LLM settings refuse NaN and infinity."""
        with pytest.raises(ValueError):
            LLM(model="openai/gpt-4o", **{field: number})

    @pytest.mark.parametrize(
        "make",
        [
            lambda bad: Tool(name="terminal", params={"timeout": bad}),
            lambda bad: Agent(llm=LLM(model="m"), system_prompt=bad),
            lambda bad: LLM(model=bad),
            lambda bad: LLM(model="m", api_key=bad),
            lambda bad: Workspace(working_dir=bad),
            lambda bad: MessageEvent(source="user", role="user", content=[TextContent(text=bad)]),
            lambda bad: ActionEvent(tool_name="t", tool_call_id="c", arguments={"x": bad}),
            lambda bad: ObservationEvent(tool_name="t", tool_call_id="c", output=bad),
            lambda bad: ObservationEvent(tool_name="t", tool_call_id="c", output="", extra=bad),
            lambda bad: Usage(accumulated_cost=bad),
        ],
    )
    @given(bad=poison)
    @settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
    def test_models(self, make: Callable[[Any], object], bad: Any):
        """Every stored model refuses a value it could not save and load back (ValueError)."""
        try:
            made = make(bad)
        except TypeError:
            return  # a number where text belongs, or text where a number does: refused too
        except ValueError:
            return
        pytest.fail(f"{made!r} was accepted")

    @pytest.mark.parametrize(
        "change",
        [
            lambda c, bad: c.update_agent_state({"d": bad}),
            lambda c, bad: c.set_tag("k", bad),
            lambda c, bad: c.set_tag(bad, "v"),
            lambda c, bad: c.send_message(bad),
            lambda c, bad: c.fork(title=bad),
            lambda c, bad: c.fork(tags={"k": bad}),
            lambda c, bad: c.fork(conversation_id=bad),
        ],
    )
    @given(bad=poison)
    @settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
    def test_conversation_changes_record_nothing(
        self, change: Callable[[Conversation, Any], object], bad: Any, tmp_path: Path
    ):
        """A refused change raises a ValueError, and the conversation and store are unchanged."""
        with SQLiteStore(tmp_path / f"{abs(hash(repr(bad)))}.db") as store:
            conversation = Conversation(AGENT, tmp_path, store=store, conversation_id="c")
            before = conversation.state
            with pytest.raises((ValueError, TypeError)):
                change(conversation, bad)
            assert conversation.state is before
            assert [info.id for info in store.list()] == ["c"]
            assert store.load("c").model_dump() == before.model_dump()

    def test_errors_are_cowconv_errors(self, tmp_path: Path):
        """What Conversation refuses is an InvalidValueError, a CowconvError and a ValueError."""
        conversation = Conversation(AGENT, tmp_path)
        with pytest.raises(InvalidValueError, match="not valid Unicode"):
            conversation.send_message("\ud800")
        with pytest.raises(InvalidValueError, match="deeper than"):
            conversation.update_agent_state({"d": nested(200)})
        with pytest.raises(InvalidValueError, match="NaN or infinity"):
            conversation.update_agent_state({"d": float("inf")})


# -- the agent server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    """A keyless agent server with a SQLite store, on 127.0.0.1."""
    data = tmp_path_factory.mktemp("data")
    with BackgroundServer(create_app(data_dir=data)) as running:
        yield running


def create(server: BackgroundServer, **fields: Any) -> httpx.Response:
    body = {
        "agent": {"llm": {"model": "openai/gpt-4o", "api_key": "sk-1"}},
        "workspace": {"working_dir": "."},
        **fields,
    }
    return raw_post(server, "/api/conversations", body)


def raw_post(server: BackgroundServer, path: str, body: Any) -> httpx.Response:
    # json.dumps writes Infinity/NaN and \ud800 escapes, as a hostile client can.
    return httpx.post(
        server.url + path,
        content=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )


class TestServerRefuses:
    @pytest.mark.parametrize(
        "fields",
        [
            {"agent": {"llm": {"model": "m", "retry_max_wait": float("inf")}}},
            {"agent": {"llm": {"model": "m", "temperature": float("nan")}}},
            {"agent": {"llm": {"model": "m"}, "tools": [{"name": "t", "params": nested(200)}]}},
            {
                "agent": {
                    "llm": {"model": "m"},
                    "tools": [{"name": "t", "params": {"x": nested(65)}}],
                }
            },
            {"agent": {"llm": {"model": "m\ud800"}}},
            {"agent": {"llm": {"model": "m"}, "system_prompt": "\udfff"}},
            {"tags": {"k": "\ud800"}},
            {"tags": {"\ud800": "v"}},
            {"workspace": {"working_dir": "\ud800"}},
            {"id": "c\ud800"},
        ],
    )
    def test_create(self, server: BackgroundServer, fields: dict[str, Any]):
        """A create body with an unstorable value is 422 and stores nothing."""
        before = httpx.get(f"{server.url}/api/conversations").json()["items"]
        assert create(server, **fields).status_code == 422
        after = httpx.get(f"{server.url}/api/conversations")
        assert after.status_code == 200
        assert after.json()["items"] == before

    @pytest.mark.parametrize(
        ("path", "body"),
        [
            ("/messages", {"text": "hi \ud800"}),
            ("/fork", {"title": "\udc00"}),
            ("/fork", {"tags": {"a": "\ud800"}}),
            ("/fork", {"from_event_id": "\ud800"}),
        ],
    )
    def test_changes(self, server: BackgroundServer, path: str, body: dict[str, Any]):
        """Messages, fork titles and tags with lone surrogates are 422; nothing is recorded."""
        conversation_id = create(server).json()["id"]
        url = f"{server.url}/api/conversations/{conversation_id}"
        count = len(httpx.get(f"{server.url}/api/conversations").json()["items"])
        assert (
            raw_post(server, f"/api/conversations/{conversation_id}{path}", body).status_code == 422
        )
        assert httpx.get(f"{url}/events").json()["total"] == 0
        listed = httpx.get(f"{server.url}/api/conversations")
        assert len(listed.json()["items"]) == count
        with httpx.stream(
            "GET", f"{url}/events/stream", params={"offset": 0, "until_idle": True}
        ) as s:
            assert s.status_code == 200
            assert "event: status" in s.read().decode()


# -- accepted values come back unchanged, in a fresh process ----------------------------

LOADER = """
import json, sys
from cowconv import SQLiteStore
store = SQLiteStore(sys.argv[1])
out = {}
for info in store.list():
    state = store.load(info.id)
    out[info.id] = {
        "state": state.model_dump(mode="json", context={"expose_secrets": True}),
        "events": [event.model_dump(mode="json") for event in state.events],
    }
print(json.dumps(out))
"""


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Named, not a lambda: see tests/strategies.py (json_containers).
    return st.lists(children, max_size=3) | st.dictionaries(
        st.text(max_size=5), children, max_size=3
    )


anything = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(SURROGATES),
    _containers,
    max_leaves=10,
) | st.sampled_from([nested(MAX_DEPTH - 1), nested(MAX_DEPTH), nested(MAX_DEPTH + 1)])


def dump(conversation: Conversation) -> dict[str, Any]:
    state = conversation.state
    return {
        "state": state.model_dump(mode="json", context={"expose_secrets": True}),
        "events": [event.model_dump(mode="json") for event in state.events],
    }


def test_accepted_values_load_unchanged_in_a_fresh_process(tmp_path: Path):
    """Whatever the library accepts (agent state, tags, messages, tool params, LLM
    settings, forks) a new process loads back exactly; what it refuses left no trace."""
    path = tmp_path / "store.db"
    store = SQLiteStore(path)
    expected: dict[str, dict[str, Any]] = {}
    counter = iter(range(10**6))

    @given(
        agent_state=anything,
        tag=st.text(max_size=5) | st.sampled_from(SURROGATES),
        message=st.text(max_size=20) | st.sampled_from(SURROGATES),
        params=anything,
        wait=st.floats(min_value=0),
        tags=str_maps,
        arguments=json_objects,
        thought=texts,
    )
    @settings(max_examples=60, deadline=None)
    def record(agent_state, tag, message, params, wait, tags, arguments, thought):
        number = next(counter)
        try:
            agent = Agent(
                llm=LLM(model="openai/gpt-4o", api_key="sk", retry_max_wait=wait),
                tools=[
                    Tool(
                        name="terminal",
                        params=params if isinstance(params, dict) else {"p": params},
                    )
                ],
            )
        except ValueError:
            agent = AGENT
        conversation = Conversation(
            agent, tmp_path, store=store, conversation_id=f"c{number}", tags=tags
        )
        for change in (
            lambda: conversation.update_agent_state({"value": agent_state}),
            lambda: conversation.set_tag("t", tag),
            lambda: conversation.send_message(message),
            lambda: conversation.append_event(
                ActionEvent(
                    tool_name="terminal", tool_call_id="c", arguments=arguments, thought=thought
                )
            ),
        ):
            try:
                change()
            except ValueError:
                pass
        fork = conversation.fork(conversation_id=f"f{number}", title=tag if tag.isascii() else None)
        expected[conversation.id] = dump(conversation)
        expected[fork.id] = dump(fork)

    record()
    store.close()
    loaded = subprocess.run(
        [sys.executable, "-c", LOADER, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=300,
    )
    assert json.loads(loaded.stdout) == json.loads(json.dumps(expected))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_what_the_server_accepts_a_restarted_server_serves_unchanged(tmp_path: Path):
    """Bodies with any JSON values (NaN, infinity, surrogates, deep nesting among them):
    what the server answers 2xx to, a new server process on the same data serves the same."""
    data = tmp_path / "data"
    accepted: list[str] = []
    counter = iter(range(10**6))

    with BackgroundServer(create_app(data_dir=data)) as server:

        @given(
            params=anything,
            agent_state_like=anything,
            tags=st.dictionaries(
                st.text(max_size=4) | st.sampled_from(SURROGATES),
                st.text(max_size=4) | st.sampled_from(SURROGATES),
                max_size=2,
            ),
            wait=st.floats(),
            text=st.text(max_size=10) | st.sampled_from(SURROGATES),
            title=st.none() | st.text(max_size=5) | st.sampled_from(SURROGATES),
        )
        @settings(max_examples=40, deadline=None)
        def exchange(params, agent_state_like, tags, wait, text, title):
            conversation_id = f"c{next(counter)}"
            created = raw_post(
                server,
                "/api/conversations",
                {
                    "id": conversation_id,
                    "agent": {
                        "llm": {"model": "openai/gpt-4o", "api_key": "sk", "retry_max_wait": wait},
                        "tools": [
                            {"name": "terminal", "params": {"p": params, "q": agent_state_like}}
                        ],
                    },
                    "workspace": {"working_dir": "."},
                    "tags": tags,
                },
            )
            assert created.status_code in (201, 422), created.text
            if created.status_code != 201:
                return
            accepted.append(conversation_id)
            sent = raw_post(
                server, f"/api/conversations/{conversation_id}/messages", {"text": text}
            )
            assert sent.status_code in (201, 422)
            forked = raw_post(
                server,
                f"/api/conversations/{conversation_id}/fork",
                {"id": f"{conversation_id}-fork", "title": title},
            )
            assert forked.status_code in (201, 422)
            if forked.status_code == 201:
                accepted.append(f"{conversation_id}-fork")

        exchange()
        before = {name: served(server.url, name) for name in accepted}

    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cowconv.agent_server",
                "--data-dir",
                str(data),
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the restarted server did not come up"
            time.sleep(0.1)
        after = {name: served(url, name) for name in accepted}
        listed = httpx.get(f"{url}/api/conversations", params={"limit": 1000})
        assert listed.status_code == 200
    finally:
        process.terminate()
        process.wait(30)
    assert accepted, "the strategies never produced an acceptable body"
    assert after == before
    assert sorted(item["id"] for item in listed.json()["items"]) == sorted(accepted)


def served(url: str, conversation_id: str) -> dict[str, Any]:
    """What the server shows of a conversation: summary, agent and every event."""
    base = f"{url}/api/conversations/{conversation_id}"
    answers = {
        "info": httpx.get(base),
        "agent": httpx.get(f"{base}/agent"),
        "events": httpx.get(f"{base}/events", params={"limit": 1000}),
    }
    for name, answer in answers.items():
        assert answer.status_code == 200, (name, answer.text)
    return {name: answer.json() for name, answer in answers.items()}
