"""Stopping a run, callback order, remote clients, store failures.

Real parts throughout: the stub LLM over litellm's HTTP path, real shell
commands, a real uvicorn server on 127.0.0.1, real SQLite files.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from cowconv import (
    LLM,
    Agent,
    Conversation,
    CowconvError,
    Event,
    ExecutionStatus,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    RemoteError,
    SQLiteStore,
    StoreError,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.testing import StubReply
from tests.conftest import message_texts


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def long_command(marker: Path) -> StubReply:
    """A tool call that says it started, then would take a minute."""
    return StubReply.tool_call("terminal", command=f"touch {marker}; sleep 60; echo never")


class TestInterrupt:
    def test_library_interrupt_ends_the_command_and_the_run(self, stub, stub_agent, tmp_path):
        """interrupt() kills the running command and ends the run paused, at once."""
        marker = tmp_path / "started"
        stub.script(long_command(marker), StubReply.text("not asked"))
        conversation = Conversation(stub_agent, tmp_path)
        conversation.send_message("go")
        runner = threading.Thread(target=conversation.run)
        runner.start()
        wait_for(marker.exists, "the command to start")
        conversation.interrupt()
        runner.join(30)
        assert not runner.is_alive(), "the run did not end"
        state = conversation.state
        assert state.execution_status is ExecutionStatus.PAUSED
        assert isinstance(state.events[-1], PauseEvent)
        observation = next(e for e in state.events if isinstance(e, ObservationEvent))
        assert "never" not in observation.output and observation.exit_code != 0
        assert stub.pending == 1  # no further LLM call
        conversation.interrupt()  # idle: nothing happens
        assert conversation.state is state

    def test_rest_interrupt(self, stub, stub_agent, tmp_path):
        """POST .../interrupt ends the command and the run; DELETE then works."""
        marker = tmp_path / "started"
        stub.script(long_command(marker), StubReply.text("not asked"))
        body = {
            "agent": stub_agent.model_dump(mode="json", context={"expose_secrets": True}),
            "workspace": {"working_dir": str(tmp_path)},
            "id": "r",
        }
        with (
            BackgroundServer(create_app(data_dir=tmp_path / "data")) as server,
            httpx.Client(base_url=server.url, timeout=60) as http,
        ):
            assert http.post("/api/conversations", json=body).status_code == 201
            http.post("/api/conversations/r/messages", json={"text": "go"})
            assert http.post("/api/conversations/r/run").status_code == 200  # OpenHands' code
            wait_for(marker.exists, "the command to start")
            assert http.delete("/api/conversations/r").status_code == 409
            answer = http.post("/api/conversations/r/interrupt")
            assert answer.status_code == 200
            wait_for(
                lambda: http.get("/api/conversations/r").json()["execution_status"] == "paused",
                "the run to end",
                timeout=30,
            )
            kinds = [e["kind"] for e in http.get("/api/conversations/r/events").json()["items"]]
            assert kinds[-1] == "PauseEvent"
            assert http.delete("/api/conversations/r").status_code == 200
        assert stub.pending == 1


class TestCallbackOrder:
    def test_a_callback_that_sends_a_message(self, tmp_path: Path):
        """Every callback sees events in history order, even when one of them records more."""
        seen: list[str] = []
        conversation: Conversation

        def answer(event: Event) -> None:
            if isinstance(event, MessageEvent) and event.text == "first":
                conversation.send_message("second")

        def record(event: Event) -> None:
            assert isinstance(event, MessageEvent)
            seen.append(event.text)

        conversation = Conversation(
            Agent(llm=LLM(model="openai/gpt-4o")), tmp_path, callbacks=[answer, record]
        )
        conversation.send_message("first")
        assert seen == ["first", "second"]
        assert message_texts(conversation.state.events) == seen


class TestRemote:
    def test_server_down_is_a_remote_error(self, tmp_path: Path):
        """A server that is not there is a RemoteError (a CowconvError), not an httpx error."""
        with BackgroundServer(create_app()) as server:
            url = server.url
        agent = Agent(llm=LLM(model="openai/gpt-4o"))
        with pytest.raises(RemoteError) as raised:
            Conversation(agent, Workspace(host=url, working_dir=str(tmp_path)))
        assert isinstance(raised.value, CowconvError)

    def test_attaching_with_another_agent_says_so(self, tmp_path: Path):
        """Attaching to an existing conversation with a different agent is refused by name."""
        server_agent = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-server"))
        other = Agent(llm=LLM(model="anthropic/claude-3-5-sonnet", api_key="sk-client"))
        with BackgroundServer(create_app()) as server:
            workspace = Workspace(host=server.url, working_dir=str(tmp_path))
            existing = Conversation(server_agent, workspace, conversation_id="x")
            with pytest.raises(RemoteError, match="runs another agent"):
                Conversation(other, workspace, conversation_id="x")
            same = Conversation(server_agent, workspace, conversation_id="x")
            assert same.agent.llm.model == existing.agent.llm.model


class TestStoreFailureMidRun:
    def test_status_does_not_stay_running(self, stub, stub_agent, tmp_path):
        """A store that refuses the run's writes leaves the conversation error, not running."""
        path = tmp_path / "s.db"
        stub.script(
            StubReply.tool_call("terminal", command="echo one", delay=0.5),
            StubReply.text("never recorded"),
        )
        with SQLiteStore(path) as store, SQLiteStore(path) as other:
            conversation = Conversation(stub_agent, tmp_path, store=store, conversation_id="x")
            conversation.send_message("go")
            raised: list[BaseException] = []

            def run() -> None:
                try:
                    conversation.run()
                except BaseException as error:
                    raised.append(error)

            runner = threading.Thread(target=run)
            runner.start()
            wait_for(
                lambda: conversation.state.execution_status is ExecutionStatus.RUNNING,
                "the run to start",
            )
            other.delete("x")  # every later write of this run is a stale write
            runner.join(60)
            assert not runner.is_alive()
            assert [type(error) for error in raised] == [StoreError]  # the caller is told
            assert conversation.state.execution_status is ExecutionStatus.ERROR


class TestUnreadableOverRest:
    def test_listing_survives_and_delete_removes_it(self, tmp_path: Path):
        """A damaged row: the list still answers, GET names it, DELETE removes it."""
        data = tmp_path / "data"
        body = {"agent": {"llm": {"model": "openai/gpt-4o"}}, "workspace": {"working_dir": "."}}
        with BackgroundServer(create_app(data_dir=data)) as server:
            for name in ("a", "b"):
                created = httpx.post(f"{server.url}/api/conversations", json={**body, "id": name})
                assert created.status_code == 201
        # What cowconv 0.1.0 stored for LLM(retry_max_wait=inf): null where a float goes.
        with contextlib.closing(sqlite3.connect(next(data.glob("*.db")))) as db:
            db.execute(
                "UPDATE conversations SET state = json_set(state, '$.agent.llm.retry_max_wait',"
                " json('null')) WHERE id = 'b'"
            )
            db.commit()
        with BackgroundServer(create_app(data_dir=data)) as server:
            listed = httpx.get(f"{server.url}/api/conversations")
            assert listed.status_code == 200
            assert [item["id"] for item in listed.json()["items"]] == ["a"]
            assert listed.json()["unreadable"] == ["b"]  # reported by id, not hidden
            broken = httpx.get(f"{server.url}/api/conversations/b")
            assert broken.status_code == 500 and "'b'" in broken.json()["detail"]
            assert httpx.get(f"{server.url}/api/conversations/a").status_code == 200
            assert httpx.delete(f"{server.url}/api/conversations/b").status_code == 200
            assert httpx.get(f"{server.url}/api/conversations/b").status_code == 404
            assert httpx.get(f"{server.url}/api/conversations").json()["unreadable"] == []
