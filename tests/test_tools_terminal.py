"""TerminalTool and the tool registry: real shell subprocesses in a temporary workspace."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowconv import (
    Conversation,
    ObservationEvent,
    ToolArgumentError,
    Workspace,
    registered_tools,
    resolve_tool,
)
from cowconv.tools.terminal import TerminalParams, TerminalSettings, TerminalTool, _Capture


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[TerminalTool]:
    tool = TerminalTool.create(Workspace(working_dir=str(tmp_path)))
    yield tool
    tool.close()


def run(terminal: TerminalTool, command: str, timeout: float | None = None):
    return terminal.execute(TerminalParams(command=command, timeout=timeout))


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


class TestExecute:
    def test_output_and_exit_code(self, terminal, tmp_path):
        """stdout and stderr come back merged, with the exit code and the directory."""
        result = run(terminal, "echo out; echo err >&2; (exit 7)")
        assert result.output == "out\nerr\n"
        assert result.exit_code == 7
        assert result.extra == {"timed_out": False, "output_bytes": 8, "cwd": str(tmp_path)}

    def test_runs_in_the_workspace(self, terminal, tmp_path):
        """Commands run in the workspace's working directory."""
        run(terminal, "echo data > made-here.txt")
        assert (tmp_path / "made-here.txt").read_text() == "data\n"
        assert run(terminal, "pwd").output.strip() == str(tmp_path)

    def test_shell_state_carries_over(self, terminal, tmp_path):
        """cd, exported and plain variables, functions and a sourced 'virtualenv' persist."""
        (tmp_path / "sub").mkdir()
        (tmp_path / "activate").write_text('export PATH="/opt/venv-bin:$PATH"; VIRTUAL_ENV=/v\n')
        run(terminal, "cd sub && export FOO=bar && plain=1")
        run(terminal, 'greet() { echo "hi $1"; }')
        run(terminal, "source ../activate")
        result = run(terminal, 'pwd; echo $FOO $plain $VIRTUAL_ENV; greet you; echo "${PATH%%:*}"')
        assert result.output == f"{tmp_path / 'sub'}\nbar 1 /v\nhi you\n/opt/venv-bin\n"
        assert result.extra is not None and result.extra["cwd"] == str(tmp_path / "sub")

    def test_any_text_is_one_command(self, terminal):
        """Several lines, quotes and heredocs are one command; a syntax error changes nothing."""
        result = run(terminal, "cat <<'EOF'\nline one\n'quoted' \"too\"\nEOF\necho after")
        assert result.output == "line one\n'quoted' \"too\"\nafter\n"
        run(terminal, "export KEPT=yes")
        broken = run(terminal, "echo never; if then")
        assert broken.exit_code == 2 and "syntax error" in broken.output
        assert "never\n" not in broken.output  # nothing of it ran
        assert run(terminal, "echo $KEPT").output == "yes\n"

    def test_exit_ends_the_session_and_the_next_command_starts_a_new_one(self, terminal, tmp_path):
        """exit N returns N; the next command runs in a fresh shell in the last directory."""
        (tmp_path / "sub").mkdir()
        run(terminal, "cd sub; export GONE=1")
        result = run(terminal, "echo bye; exit 7")
        assert result.exit_code == 7
        assert result.output.startswith("bye\n") and "the shell exited" in result.output
        again = run(terminal, "pwd; echo ${GONE:-unset}")
        assert again.output == f"{tmp_path / 'sub'}\nunset\n"

    def test_commands_do_not_read_the_terminal(self, terminal):
        """A command reading standard input gets end of file at once, as from /dev/null."""
        assert run(terminal, "cat; echo done", timeout=10).output == "done\n"

    def test_restore_starts_where_the_history_left_off(self, tmp_path):
        """A new terminal given a history starts in the directory of its last terminal command."""
        (tmp_path / "deep").mkdir()
        history = [
            ObservationEvent(
                tool_name="terminal", tool_call_id="c", output="", extra={"cwd": str(tmp_path)}
            ),
            ObservationEvent(
                tool_name="terminal",
                tool_call_id="d",
                output="",
                extra={"cwd": str(tmp_path / "deep")},
            ),
            ObservationEvent(tool_name="other", tool_call_id="e", output="", extra={"cwd": "/"}),
        ]
        tool = TerminalTool.create(Workspace(working_dir=str(tmp_path)))
        tool.restore(history)
        try:
            assert run(tool, "pwd").output == f"{tmp_path / 'deep'}\n"
        finally:
            tool.close()

    def test_background_process_does_not_block(self, terminal):
        """A command that leaves a background process behind still returns."""
        result = run(terminal, "sleep 30 & echo started", timeout=10)
        assert result.output == "started\n"
        assert result.extra is not None and result.extra["timed_out"] is False

    def test_environment_is_inherited(self, terminal, monkeypatch):
        """Commands see the caller's environment variables."""
        monkeypatch.setenv("COWCONV_TEST_VALUE", "visible")
        assert run(terminal, "echo $COWCONV_TEST_VALUE").output == "visible\n"
        assert os.environ["COWCONV_TEST_VALUE"] == "visible"

    def test_missing_workspace_is_a_clear_error(self, tmp_path):
        """A workspace directory that does not exist raises FileNotFoundError naming it."""
        missing = tmp_path / "gone"
        tool = TerminalTool.create(Workspace(working_dir=str(missing)))
        with pytest.raises(FileNotFoundError, match="gone"):
            run(tool, "true")


class TestTimeout:
    def test_timeout_kills_the_process_group(self, terminal, tmp_path):
        """On timeout the command and its children are killed, and the output says so."""
        (tmp_path / "sub").mkdir()
        run(terminal, "cd sub")
        result = run(terminal, "sleep 60 & echo $! > child.pid; echo waiting; sleep 60", 0.5)
        assert result.extra is not None and result.extra["timed_out"] is True
        assert result.exit_code == -9
        assert result.output.startswith("waiting\n")
        assert "timed out after 0.5 s" in result.output
        child = int((tmp_path / "sub" / "child.pid").read_text())
        for _ in range(100):  # the kernel may take a moment to reap the orphan
            if not alive(child):
                break
            time.sleep(0.05)
        assert not alive(child)
        # A new shell, in the directory the old one was in.
        assert run(terminal, "pwd").output == f"{tmp_path / 'sub'}\n"

    def test_settings_timeout_is_the_default(self, tmp_path):
        """Without a timeout argument, Tool(params={"timeout": ...}) applies."""
        tool = TerminalTool.create(Workspace(working_dir=str(tmp_path)), {"timeout": 0.3})
        result = run(tool, "sleep 30")
        assert result.extra is not None and result.extra["timed_out"] is True

    @pytest.mark.parametrize("asked", [1e9, 30.0, 0.31])
    def test_the_model_cannot_raise_the_operator_timeout(self, tmp_path, asked):
        """A timeout argument above the operator's setting is cut down to it."""
        tool = TerminalTool.create(Workspace(working_dir=str(tmp_path)), {"timeout": 0.3})
        result = run(tool, "sleep 30", timeout=asked)
        assert result.extra is not None and result.extra["timed_out"] is True
        assert "timed out after 0.3 s" in result.output

    def test_the_model_can_shorten_the_timeout(self, tmp_path):
        """A timeout argument below the operator's setting applies."""
        tool = TerminalTool.create(Workspace(working_dir=str(tmp_path)), {"timeout": 60})
        result = run(tool, "sleep 30", timeout=0.2)
        assert "timed out after 0.2 s" in result.output

    def test_close_kills_running_commands(self, terminal):
        """close() kills a command still running in another thread."""
        results = []
        worker = threading.Thread(target=lambda: results.append(run(terminal, "sleep 60", 120)))
        worker.start()
        while not terminal._running:
            time.sleep(0.01)
        terminal.close()
        worker.join()
        assert results[0].exit_code == -9
        assert results[0].extra["timed_out"] is False


class TestTruncation:
    def test_huge_output_keeps_head_and_tail(self, tmp_path):
        """Output past max_output_bytes keeps its start and end around a marker."""
        tool = TerminalTool.create(Workspace(working_dir=str(tmp_path)), {"max_output_bytes": 1000})
        result = run(tool, "seq 1 200000")
        total = len("".join(f"{n}\n" for n in range(1, 200001)))
        assert result.output.startswith("1\n2\n3\n")
        assert result.output.endswith("199999\n200000\n")
        assert f"[... {total - 1000} bytes of output truncated ...]" in result.output
        assert len(result.output) < 1100
        assert result.extra is not None and result.extra["output_bytes"] == total

    def test_many_megabytes_stay_bounded(self, terminal):
        """Tens of megabytes of output are streamed through, not kept."""
        result = run(terminal, "head -c 50000000 /dev/zero | tr '\\0' a; echo; echo END")
        assert result.exit_code == 0
        assert result.output.endswith("a\nEND\n")
        assert len(result.output) < 31_000

    @given(
        chunks=st.lists(st.binary(max_size=300), max_size=20),
        limit=st.integers(min_value=64, max_value=500),
    )
    def test_capture_keeps_exact_head_and_tail(self, chunks, limit):
        """The capture is the whole stream when it fits, else its head and tail exactly."""
        capture = _Capture(limit)
        for chunk in chunks:
            capture.add(chunk)
        data = b"".join(chunks)
        text = capture.text()
        assert capture.total == len(data)
        if len(data) <= limit:
            assert text == data.decode("utf-8", errors="replace")
        else:
            head, tail = data[: limit // 2], data[len(data) - (limit - limit // 2) :]
            marker = f"\n[... {len(data) - limit} bytes of output truncated ...]\n"
            assert text == (
                head.decode("utf-8", errors="replace")
                + marker
                + tail.decode("utf-8", errors="replace")
            )


class TestArguments:
    def test_spec_comes_from_the_params_model(self):
        """The OpenAI spec lists command (required) and timeout (optional)."""
        spec = TerminalTool.spec()
        function = spec["function"]
        assert spec["type"] == "function" and function["name"] == "terminal"
        assert function["parameters"]["required"] == ["command"]
        assert set(function["parameters"]["properties"]) == {"command", "timeout"}
        assert "shell command" in function["description"].lower()

    @pytest.mark.parametrize(
        ("arguments", "message"),
        [
            ("{not json", "not valid JSON"),
            ("[1, 2]", "must be a JSON object"),
            ('{"timeout": 3}', "command: Field required"),
            ('{"command": "ls", "timeout": -1}', "timeout: Input should be greater than 0"),
            ('{"command": "ls", "shell": "zsh"}', "shell: Extra inputs are not permitted"),
        ],
    )
    def test_bad_arguments_are_explained(self, terminal, arguments, message):
        """Bad JSON or arguments that do not validate raise ToolArgumentError saying why."""
        with pytest.raises(ToolArgumentError, match=message):
            terminal.parse_arguments(arguments)

    def test_good_arguments_parse(self, terminal):
        """Valid arguments become TerminalParams."""
        assert terminal.parse_arguments('{"command": "ls"}') == TerminalParams(command="ls")

    def test_bad_settings_are_refused(self, tmp_path):
        """Unknown or invalid settings raise ValueError naming the tool."""
        with pytest.raises(ValueError, match="invalid settings for tool 'terminal'"):
            TerminalTool.create(Workspace(working_dir=str(tmp_path)), {"colour": True})


class TestRegistry:
    def test_terminal_resolves_without_importing_it(self):
        """Tool(name="terminal") resolves in a process that never imported the module."""
        code = (
            "import sys\nfrom cowconv import resolve_tool\n"
            "assert 'cowconv.tools.terminal' not in sys.modules\n"
            "print(resolve_tool('terminal').__module__)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "cowconv.tools.terminal"

    def test_unknown_tool_lists_the_known_ones(self):
        """An unknown name is a ValueError that lists the registered tools."""
        with pytest.raises(ValueError, match="unknown tool 'nope'.*'terminal'"):
            resolve_tool("nope")
        assert "terminal" in registered_tools()

    def test_terminal_is_registered_as_itself(self):
        """resolve_tool("terminal") is TerminalTool, whose name is "terminal"."""
        assert resolve_tool(TerminalTool.name) is TerminalTool
        assert TerminalTool.name == "terminal"


class TestConversationShells:
    def test_a_fork_gets_its_own_shell_in_the_directory_at_the_fork_point(
        self, stub_agent, tmp_path
    ):
        """The fork starts in the source's last directory, without its variables; both go on."""
        (tmp_path / "sub").mkdir()
        with Conversation(agent=stub_agent, workspace=tmp_path) as source:
            source.send_message("Run `cd sub && export SECRET=source-only` please.")
            source.run()
            with source.fork() as fork:
                fork.send_message("Run `pwd; echo ${SECRET:-unset}` please.")
                fork.run()
                observed = [e for e in fork.state.events if isinstance(e, ObservationEvent)]
                assert observed[-1].output == f"{tmp_path / 'sub'}\nunset\n"
                fork.send_message("Run `cd .. && pwd` please.")
                fork.run()
            source.send_message("Run `pwd; echo $SECRET` please.")
            source.run()
            observed = [e for e in source.state.events if isinstance(e, ObservationEvent)]
            assert observed[-1].output == f"{tmp_path / 'sub'}\nsource-only\n"


class TestNoChangeTimeout:
    def test_a_silent_command_is_stopped_and_its_output_kept(self, tmp_path: Path):
        """OpenHands' no_change_timeout_seconds: a command silent that long is stopped, the
        output so far is returned, and the next command runs in a new shell."""
        terminal = TerminalTool.create(
            Workspace(working_dir=str(tmp_path)), {"no_change_timeout_seconds": 3}
        )
        try:
            result = terminal.execute(TerminalParams(command="echo started; sleep 60; echo never"))
            assert result.output.startswith("started")
            assert "no new output for 3 s" in result.output and "never" not in result.output
            assert result.extra["timed_out"] is True
            chatty = terminal.execute(
                TerminalParams(command="for i in 1 2 3 4; do echo $i; sleep 0.1; done")
            )
            assert chatty.output.split() == ["1", "2", "3", "4"] and chatty.exit_code == 0
        finally:
            terminal.close()

    def test_the_setting_must_be_positive(self):
        """A zero or negative quiet time is refused."""
        with pytest.raises(ValueError):
            TerminalSettings(no_change_timeout_seconds=0)
