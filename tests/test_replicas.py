"""Agent-server replicas: two real ``cowconv serve`` processes on one store.

On a SQLite file and on a PostgreSQL database alike: a write by one server is
what the other serves next (a version conflict reloads, never poisons),
1,000 forks sent concurrently to both land exactly once, and a server keeps a
bounded number of conversations in memory, reloading evicted ones unchanged.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import LLM, Agent, InvalidValueError, StartError, StoreError, Workspace
from cowconv.agent_server import create_app
from cowconv.agent_server.registry import DEFAULT_MAX_LIVE, ConversationRegistry
from cowconv.agent_server.serve import ServerSettings
from cowconv.stores import TreeStore, open_store
from cowconv.testing import StubLLMServer, default_brain
from tests.conftest import message_texts

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-replicas"))
TIMEOUT = httpx.Timeout(120.0)
_EXAMPLES = itertools.count()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """``cowconv serve --store location`` in its own process, on a free port of 127.0.0.1."""

    def __init__(self, location: str, *options: str) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cowconv", "serve", "--port", str(port), "--store", location,
             "--log-level", "warning", *options],
            cwd=REPO, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                assert self.process.poll() is None, "the server exited"
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        self.http = httpx.Client(base_url=self.url, timeout=TIMEOUT)

    def stop(self) -> str:
        """Stop the server; what it wrote to stderr."""
        self.http.close()
        self.process.terminate()
        _, errors = self.process.communicate(timeout=60)
        return errors.decode(errors="replace")


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One store two servers share: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "cowconv.db")
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


@pytest.fixture
def servers(location: str) -> Iterator[tuple[Server, Server]]:
    one, two = Server(location), Server(location)
    errors = ""
    try:
        yield one, two
    finally:
        errors = one.stop() + two.stop()
    assert "Traceback" not in errors, errors  # no request crashed a server


def create_body(conversation_id: str, working_dir: Path | str) -> dict[str, Any]:
    return {
        "id": conversation_id,
        "agent": AGENT.model_dump(mode="json", context={"expose_secrets": True}),
        "workspace": {"working_dir": str(working_dir)},
    }


def texts(server: Server, conversation_id: str) -> list[str]:
    """The message texts of the conversation as ``server`` serves it."""
    answer = server.http.get(f"/api/conversations/{conversation_id}/events", params={"limit": 100})
    assert answer.status_code == 200, answer.text
    return [
        item["llm_message"]["content"][0]["text"]
        for item in answer.json()["items"]
        if item.get("kind") == "MessageEvent"
    ]


def send(server: Server, conversation_id: str, text: str) -> httpx.Response:
    return server.http.post(f"/api/conversations/{conversation_id}/messages", json={"text": text})


class TestConflictsReload:
    def test_a_write_on_one_server_is_what_the_other_serves(
        self, servers: tuple[Server, Server], location: str, tmp_path: Path
    ):
        """Writes alternate between the servers: every one succeeds, each server reads the
        other's writes, and a fork on either starts from the current head."""
        one, two = servers
        assert one.http.post("/api/conversations", json=create_body("c", tmp_path)).is_success
        expected: list[str] = []
        for turn in range(6):
            server = (one, two)[turn % 2]
            assert texts(server, "c") == expected  # it holds c live from the turn before
            answer = send(server, "c", f"turn {turn}")
            assert answer.status_code == 201, answer.text
            expected.append(f"turn {turn}")
        for server in (one, two):
            assert texts(server, "c") == expected
        forked = one.http.post("/api/conversations/c/fork", json={"id": "f"})
        assert forked.status_code == 201, forked.text
        assert texts(two, "f") == expected  # the fork has the head two wrote last
        assert send(two, "f", "on the fork").status_code == 201
        assert texts(one, "f") == [*expected, "on the fork"]
        with open_store(location) as store:
            assert message_texts(store.load("c").events) == expected

    def test_racing_writes_lose_with_409_at_worst_then_both_serve_the_store(
        self, servers: tuple[Server, Server], location: str, tmp_path: Path
    ):
        """Both servers write one conversation at once: a write may lose (409, nothing
        written), never a 500; afterwards both serve exactly what the store holds, and
        later writes, reads and forks on each succeed from the current head."""
        one, two = servers
        assert one.http.post("/api/conversations", json=create_body("c", tmp_path)).is_success
        statuses: Counter[int] = Counter()
        accepted: list[str] = []
        lock = threading.Lock()

        def write(server: Server, name: str) -> None:
            for n in range(15):
                text = f"{name} {n}"
                status = send(server, "c", text).status_code
                with lock:
                    statuses[status] += 1
                    if status == 201:
                        accepted.append(text)

        threads = [
            threading.Thread(target=write, args=pair) for pair in ((one, "one"), (two, "two"))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        assert set(statuses) <= {201, 409}, statuses
        with open_store(location) as store:
            stored = message_texts(store.load("c").events)
        assert sorted(stored) == sorted(accepted)  # every accepted write, none refused
        for server in (one, two):
            assert texts(server, "c") == stored  # reads are current on both
        for server, name in ((one, "after one"), (two, "after two")):
            assert send(server, "c", name).status_code == 201
            stored.append(name)
        assert texts(one, "c") == texts(two, "c") == stored
        fork = two.http.post("/api/conversations/c/fork", json={"id": "head"})
        assert fork.status_code == 201 and texts(one, "head") == stored


class TestConcurrentForks:
    @pytest.mark.slow
    def test_a_thousand_forks_over_two_servers_land_exactly_once(
        self, servers: tuple[Server, Server], location: str, tmp_path: Path
    ):
        """1,000 forks of one conversation, sent by 24 threads alternately to both servers:
        every fork is stored exactly once, as one row sharing the source's events, no 5xx."""
        one, two = servers
        assert one.http.post("/api/conversations", json=create_body("src", tmp_path)).is_success
        for n in range(5):
            assert send((one, two)[n % 2], "src", f"message {n}").status_code == 201
        source = texts(one, "src")
        statuses: Counter[int] = Counter()
        lock = threading.Lock()
        local = threading.local()

        def fork(n: int) -> None:
            server = (one, two)[n % 2]
            if not hasattr(local, "clients"):
                local.clients = {
                    s.url: httpx.Client(base_url=s.url, timeout=TIMEOUT) for s in servers
                }
            http = local.clients[server.url]
            for attempt in itertools.count():
                try:
                    answer = http.post("/api/conversations/src/fork", json={"id": f"f{n:04}"})
                except httpx.TransportError:
                    assert attempt < 5
                    continue  # the answer was lost: ask again, the id says whether it landed
                with lock:
                    statuses[answer.status_code] += 1
                if answer.status_code == 201 or (attempt and answer.status_code == 409):
                    return
                assert answer.status_code == 503 and attempt < 20, answer.text  # store busy

        with ThreadPoolExecutor(24) as pool:
            list(pool.map(fork, range(1000)))
        assert not any(status >= 500 and status != 503 for status in statuses), statuses
        with open_store(location) as store:
            assert isinstance(store, TreeStore)
            infos = list(store.list())
            assert Counter(str(info.id) for info in infos) == Counter(
                ["src", *(f"f{n:04}" for n in range(1000))]
            )
            for info in infos:
                if str(info.id) != "src":
                    assert info.forked_from_conversation_id == "src"
                    assert info.event_count == len(source) + 1  # the system prompt too
            for n in range(0, 1000, 97):
                assert message_texts(store.load(f"f{n:04}").events) == source
            # One row each, no event written again: every fork shares the source's events.
            with store.rows.transaction(write=False) as rows:
                src = rows.row("src")
                assert src is not None
                for n in range(0, 1000, 97):
                    row = rows.row(f"f{n:04}")
                    assert row is not None and row.parent == src.key
                    assert row.fork_len == row.event_count == src.event_count
        for server in (one, two):  # both list all of them, by cursor, once each
            listed: list[str] = []
            cursor = None
            while True:
                params: dict[str, Any] = {"limit": 100}
                if cursor is not None:
                    params["cursor"] = cursor
                page = server.http.get("/api/conversations", params=params).json()
                listed += [item["id"] for item in page["items"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert sorted(listed) == sorted(["src", *(f"f{n:04}" for n in range(1000))])


# -- bounded memory: eviction --------------------------------------------------------------


class TestEviction:
    def test_live_conversations_stay_bounded_and_reload_unchanged(self, tmp_path: Path):
        """With max_live=5, creating and forking 40 keeps at most 5 in memory; every evicted
        one comes back from the SQLite file exactly as it was."""
        with open_store(tmp_path / "cowconv.db") as store:
            registry = ConversationRegistry(store, max_live=5)
            workspace = Workspace(working_dir=str(tmp_path))
            snapshots = {}
            for n in range(20):
                conversation = registry.create(AGENT, workspace, conversation_id=f"c{n}")
                conversation.send_message(f"hello {n}")
                fork = registry.fork(f"c{n}", fork_id=f"f{n}", title=f"fork {n}")
                fork.send_message(f"in fork {n}")
                snapshots[f"c{n}"] = conversation.state.model_dump_json()
                snapshots[f"f{n}"] = fork.state.model_dump_json()
                assert registry.live_count <= 5
            for name, dumped in snapshots.items():
                assert registry.get(name).state.model_dump_json() == dumped
                assert registry.live_count <= 5
            registry.close()

    def test_followed_and_running_conversations_are_not_evicted(
        self, tmp_path: Path, stub: StubLLMServer
    ):
        """A conversation an event stream follows, or one that is running, stays live (the
        bound is exceeded meanwhile); once idle and unfollowed it is evicted like any."""
        release = threading.Event()

        def slow(request: Any) -> Any:
            release.wait(120)
            return default_brain(request)

        stub.brain = slow
        agent = Agent(llm=LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0))
        with open_store(tmp_path / "cowconv.db") as store:
            registry = ConversationRegistry(store, max_live=2)
            workspace = Workspace(working_dir=str(tmp_path))
            followed = registry.create(agent, workspace, conversation_id="followed")
            unsubscribe = registry.subscribe("followed", lambda: None)
            running = registry.create(agent, workspace, conversation_id="running")
            running.send_message("hi")
            registry.run("running")
            for n in range(6):
                registry.create(agent, workspace, conversation_id=f"other{n}")
            assert registry.get("followed") is followed
            assert registry.get("running") is running
            assert registry.live_count == 2  # the two held ones; every idle one was evicted
            release.set()
            deadline = time.monotonic() + 120
            while registry.is_running("running"):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            unsubscribe()
            for n in range(3):
                registry.get(f"other{n}")
            assert registry.live_count == 2
            assert registry.get("followed") is not followed  # evicted once idle, reloaded
            assert message_texts(registry.get("running").state.events)[0] == "hi"
            registry.close()

    def test_the_bound_is_a_setting(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        """--max-live-conversations / $COWCONV_MAX_LIVE_CONVERSATIONS reach the registry;
        the default is DEFAULT_MAX_LIVE and a bound below 1 is refused."""
        assert ServerSettings().max_live_conversations == DEFAULT_MAX_LIVE
        monkeypatch.setenv("COWCONV_MAX_LIVE_CONVERSATIONS", "7")
        assert ServerSettings().max_live_conversations == 7
        app = create_app(max_live_conversations=3)
        assert app.state.registry.max_live == 3
        with pytest.raises(StartError, match="--max-live-conversations: .* greater than or equal"):
            ServerSettings.from_options(max_live_conversations=0)
        with pytest.raises(InvalidValueError, match="max_live"):
            ConversationRegistry(max_live=0)

    def test_a_server_process_keeps_its_bound(self, tmp_path: Path):
        """A real server with --max-live-conversations 3 serves 12 conversations and their
        forks, each read back unchanged after its eviction."""
        location = str(tmp_path / "cowconv.db")
        server = Server(location, "--max-live-conversations", "3")
        try:
            for n in range(12):
                body = create_body(f"c{n}", tmp_path)
                assert server.http.post("/api/conversations", json=body).is_success
                assert send(server, f"c{n}", f"hello {n}").status_code == 201
            for n in range(12):
                assert texts(server, f"c{n}") == [f"hello {n}"]
        finally:
            errors = server.stop()
        assert "Traceback" not in errors, errors


def test_a_stale_write_is_refused_then_reloaded_in_process(tmp_path: Path):
    """The registry level of the reload: a conversation another store object wrote is
    replaced by the stored one when next asked for; the stale object's write is refused."""
    path = tmp_path / "cowconv.db"
    with open_store(path) as mine, open_store(path) as theirs:
        registry = ConversationRegistry(mine)
        held = registry.create(AGENT, Workspace(working_dir=str(tmp_path)), conversation_id="c")
        other = ConversationRegistry(theirs)
        other.get("c").send_message("theirs")
        with pytest.raises(StoreError, match="another writer"):
            held.send_message("stale")  # a request that had the object before the check
        fresh = registry.get("c")
        assert fresh is not held and message_texts(fresh.state.events) == ["theirs"]
        fresh.send_message("mine")
        assert message_texts(other.get("c").state.events) == ["theirs", "mine"]
        other.delete("c")
        with pytest.raises(Exception, match="'c'"):
            registry.get("c")  # deleted by the other: not served from memory
        registry.close()
        other.close()


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    max_live=st.integers(1, 4),
    steps=st.lists(
        st.tuples(st.sampled_from(["create", "fork", "send", "get"]), st.integers(0, 50)),
        max_size=30,
    ),
)
def test_eviction_never_changes_what_is_served(
    tmp_path: Path, max_live: int, steps: list[tuple[str, int]]
):
    """Whatever the sequence of creates, forks, messages and reads, and the bound: at most
    ``max_live`` conversations are live after each step, and each conversation served has
    exactly the messages sent to it (and, for a fork, to its source before the fork)."""
    with open_store(tmp_path / f"evict-{next(_EXAMPLES)}.db") as store:
        registry = ConversationRegistry(store, max_live=max_live)
        workspace = Workspace(working_dir=str(tmp_path))
        model: dict[str, list[str]] = {}
        for step, (action, number) in enumerate(steps):
            names = sorted(model)
            if action == "create" or not names:
                name = f"c{step}"
                registry.create(AGENT, workspace, conversation_id=name)
                model[name] = []
            elif action == "fork":
                source = names[number % len(names)]
                registry.fork(source, fork_id=f"f{step}")
                model[f"f{step}"] = list(model[source])
            elif action == "send":
                name = names[number % len(names)]
                registry.get(name).send_message(f"m{step}")
                model[name].append(f"m{step}")
            else:
                name = names[number % len(names)]
                assert message_texts(registry.get(name).state.events) == model[name]
            assert registry.live_count <= max_live
        for name, texts_sent in model.items():
            assert message_texts(registry.get(name).state.events) == texts_sent
        registry.close()


class TestBenchmarksRun:
    """The server benchmarks still run (small sizes; their figures are in docs)."""

    def test_server_listing(self, capsys: pytest.CaptureFixture[str]):
        from benchmarks import server_listing

        server_listing.main(["300", "sqlite"])
        assert "SQLiteStore: 300 conversations" in capsys.readouterr().out

    def test_server_memory(self, capsys: pytest.CaptureFixture[str]):
        from benchmarks import server_memory

        server_memory.main(["120", "5"])
        assert "--max-live-conversations 5: RSS after 100 forks" in capsys.readouterr().out
