"""The terminal survives any directory name; any LLM answer is recorded.

Real parts: the terminal's real bash session (a subprocess on a pseudo-terminal)
in real directories whose names are arbitrary bytes (``os.fsencode``), the
stub LLM server behind litellm's real HTTP path, and every backend (memory,
a SQLite file read back by another process, an agent server).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cowconv import (
    Agent,
    Conversation,
    CowconvError,
    Event,
    MessageEvent,
    ObservationEvent,
    Workspace,
)
from cowconv.testing import StubLLMServer, StubReply
from cowconv.tools.terminal import TerminalParams, TerminalTool
from tests.conftest import Backend

NOT_UTF8 = b"repo-\xff\xfe-\xc3(-dir"


def check_storable_event(event: Event) -> None:
    """What a store needs of an event: its JSON loads back as the same event."""
    assert Event.model_validate_json(event.model_dump_json()) == event


def _observations(events: object) -> list[ObservationEvent]:
    return [event for event in events if isinstance(event, ObservationEvent)]  # type: ignore[attr-defined]


class TestDirectoryNames:
    def test_commands_keep_working_after_cd_into_a_non_utf8_directory(
        self, backend: Backend, stub: StubLLMServer, stub_agent: Agent, tmp_path: Path
    ) -> None:
        """cd into a directory whose name is not UTF-8: every later command runs, output is
        recorded with U+FFFD, run() ends normally, the history reloads, a fork starts there."""
        os.mkdir(os.path.join(os.fsencode(tmp_path), NOT_UTF8))
        (
            Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), NOT_UTF8))) / "inside.txt"
        ).write_text("found me")
        stub.script(
            StubReply.tool_call("terminal", command="cd repo-*"),
            StubReply.tool_call("terminal", command="pwd; cat inside.txt"),
            StubReply.tool_call("terminal", command="echo still-working"),
            StubReply.text("done"),
        )
        conversation = backend.new(stub_agent)
        conversation.send_message("go")
        conversation.run()
        observations = _observations(conversation.state.events)
        assert [o.exit_code for o in observations] == [0, 0, 0]
        shown = os.fsencode(tmp_path / "x").decode()[:-1] + NOT_UTF8.decode("utf-8", "replace")
        assert observations[1].output == f"{shown}\nfound me"
        assert observations[2].output.strip() == "still-working"
        assert observations[2].extra["cwd"] == shown
        last = conversation.state.events[-1]
        assert isinstance(last, MessageEvent) and last.text == "done"
        reloaded = backend.reload(conversation)
        assert reloaded.events == conversation.state.events
        # A fork's session starts in that very directory (its bytes are recorded).
        fork = conversation.fork()
        backend.opened.append(fork)
        stub.script(StubReply.tool_call("terminal", command="cat inside.txt"), StubReply.text("ok"))
        fork.send_message("again")
        fork.run()
        assert _observations(fork.state.events)[-1].output == "found me"

    @given(
        name=st.binary(min_size=1, max_size=24).filter(
            lambda name: b"/" not in name and b"\x00" not in name and name not in (b".", b"..")
        )
    )
    @example(name=b".\x01")  # a hidden directory (found in CI)
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    def test_any_directory_name(self, name: bytes) -> None:
        """Any directory name: the terminal cds there and goes on; what it reports can be
        recorded and stored, and a new session restored from it starts in that directory."""
        with tempfile.TemporaryDirectory() as workspace:
            target = os.path.join(os.fsencode(workspace), name)
            os.mkdir(target)
            terminal = TerminalTool.create(Workspace(working_dir=workspace))
            try:
                # dotglob: the glob also matches a name that starts with a dot (b".\x01").
                moved = terminal.execute(
                    TerminalParams(command="shopt -s dotglob && cd ./*/ && printf moved")
                )
                assert (moved.exit_code, moved.output) == (0, "moved"), moved.output
                after = terminal.execute(TerminalParams(command="printf '%s' ok; ls -a >/dev/null"))
                assert (after.exit_code, after.output) == (0, "ok")
                event = ObservationEvent(
                    tool_name="terminal",
                    tool_call_id="c1",
                    output=after.output,
                    exit_code=after.exit_code,
                    extra=dict(after.extra or {}),
                )
                check_storable_event(event)  # a store takes it as it is
            finally:
                terminal.close()
            restored = TerminalTool.create(Workspace(working_dir=workspace))
            try:
                restored.restore([event])
                where = restored.execute(TerminalParams(command="pwd"))
                real = os.path.realpath(target).decode("utf-8", "replace")
                assert where.output == real + "\n"
                assert where.extra is not None and where.extra["cwd"] == event.extra["cwd"]
                assert where.extra.get("cwd_bytes") == event.extra.get("cwd_bytes")
            finally:
                restored.close()


class TestLLMAnswers:
    @given(
        text=st.text(max_size=20) | st.sampled_from(["\ud800", "a\udfffb", "\udc80x"]),
        tool=st.text(max_size=12) | st.sampled_from(["term\ud800inal", "\udcff"]),
        command=st.text(max_size=12) | st.sampled_from(["echo \ud800", "printf '\udcff'"]),
    )
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    def test_any_answer_is_recorded_and_run_raises_only_cowconv_errors(
        self,
        backend: Backend,
        stub: StubLLMServer,
        stub_agent: Agent,
        text: str,
        tool: str,
        command: str,
    ) -> None:
        """Whatever the model answers (lone surrogates in its text, its tool names, its
        arguments): run() ends or raises a CowconvError, and the history reloads unchanged."""
        stub.script(
            StubReply.tool_call(tool, content=text, command=command),
            StubReply.tool_call("terminal", command=command),
            StubReply.text(text),
        )
        conversation = backend.new(stub_agent)
        conversation.send_message("go")
        try:
            conversation.run()
        except CowconvError:
            pass
        events = conversation.state.events
        for event in events:
            check_storable_event(event)
        assert backend.reload(conversation).events == events


@pytest.mark.parametrize("answer", ["bad \ud800 text", "\udcff", "ok \ud83d\ude00"])
def test_a_lone_surrogate_in_the_answer_is_replaced(
    stub: StubLLMServer, stub_agent: Agent, tmp_path: Path, answer: str
) -> None:
    """The model's text is data: recorded with U+FFFD where UTF-8 cannot hold it."""
    stub.script(StubReply.text(answer))
    conversation = Conversation(stub_agent, tmp_path)
    conversation.send_message("go")
    conversation.run()
    last = conversation.state.events[-1]
    assert isinstance(last, MessageEvent)
    assert last.text == answer.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
