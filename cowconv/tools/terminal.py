"""``TerminalTool``: run shell commands in the workspace.

>>> import tempfile
>>> from cowconv import Workspace
>>> terminal = TerminalTool.create(Workspace(working_dir=tempfile.gettempdir()))
>>> result = terminal.execute(TerminalParams(command="echo hello; exit 3"))
>>> result.output, result.exit_code
('hello\\n', 3)
>>> TerminalTool.name
'terminal'

Each command runs in its own ``bash -c`` process (``/bin/sh`` where bash is
missing) in the workspace's working directory, with standard output and
error merged, so shell state such as ``cd`` does not carry over between
commands. A command that outlives its timeout is killed together with every
process it started (its whole process group). Background processes a command
leaves behind keep running; their later output is not collected.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import threading
import time

from pydantic import BaseModel, ConfigDict, Field

from cowconv._tools import ToolDefinition, ToolResult, register_tool
from cowconv._workspace import Workspace

__all__ = ["TerminalParams", "TerminalSettings", "TerminalTool"]

_READ_SIZE = 1 << 16
# Linux pipes hold at most 1 MiB (the default is 64 KiB).
_DRAIN_LIMIT = 1 << 20


class TerminalParams(BaseModel):
    """The arguments the model passes to the terminal tool.

    >>> TerminalParams(command="ls", timeout=5).timeout
    5.0
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(description="The shell command to run (bash syntax).")
    timeout: float | None = Field(
        default=None,
        gt=0,
        description="Seconds to wait before the command and its children are killed.",
    )


class TerminalSettings(BaseModel):
    """The terminal's configuration: ``Tool(name="terminal", params={...})``.

    >>> TerminalSettings(timeout=30).max_output_bytes
    30000
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout: float = Field(default=120.0, gt=0)
    max_output_bytes: int = Field(default=30_000, ge=64)


class _Capture:
    """Keeps the head and the tail of a stream within a byte budget."""

    def __init__(self, limit: int) -> None:
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            # Trim rarely, not on every chunk: amortised O(1) per byte.
            if len(self._tail) > 2 * self._tail_limit:
                del self._tail[: -self._tail_limit]

    def text(self) -> str:
        tail = self._tail[-self._tail_limit :] if self._tail_limit else bytearray()
        omitted = self.total - len(self._head) - len(tail)
        head = self._head.decode("utf-8", errors="replace")
        if omitted <= 0:
            return (self._head + self._tail).decode("utf-8", errors="replace")
        marker = f"\n[... {omitted} bytes of output truncated ...]\n"
        return head + marker + tail.decode("utf-8", errors="replace")


def _shell() -> list[str]:
    bash = shutil.which("bash")
    return [bash, "-c"] if bash else ["/bin/sh", "-c"]


class TerminalTool(ToolDefinition[TerminalParams]):
    """Run a shell command in the workspace and return its output and exit code.

    Standard output and standard error are merged. Very long output keeps
    its beginning and its end around a truncation marker. A command that
    runs past its timeout is killed with all its child processes.

    >>> from cowconv import Workspace
    >>> terminal = TerminalTool.create(Workspace(working_dir="."))
    >>> result = terminal.execute(TerminalParams(command="echo hello; exit 3"))
    >>> result.output.strip(), result.exit_code
    ('hello', 3)
    >>> "timed out" in terminal.execute(TerminalParams(command="sleep 5", timeout=0.2)).output
    True
    """

    name = "terminal"
    Params = TerminalParams
    Settings = TerminalSettings
    settings: TerminalSettings

    def __init__(self, workspace: Workspace, settings: BaseModel) -> None:
        super().__init__(workspace, settings)
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def execute(self, params: TerminalParams) -> ToolResult:
        """Run ``params.command``; a timeout kills its process group and says so."""
        working_dir = self.workspace.working_dir
        if not os.path.isdir(working_dir):
            raise FileNotFoundError(f"the workspace directory {working_dir!r} does not exist")
        timeout = params.timeout if params.timeout is not None else self.settings.timeout
        process = subprocess.Popen(
            [*_shell(), params.command],
            cwd=working_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Its own process group, so a timeout can kill everything it started.
            start_new_session=True,
        )
        with self._lock:
            self._running.add(process)
        try:
            capture = _Capture(self.settings.max_output_bytes)
            timed_out = self._collect(process, capture, timeout)
        finally:
            with self._lock:
                self._running.discard(process)
            if process.stdout is not None:
                process.stdout.close()
        output = capture.text()
        if timed_out:
            output += (
                f"\n[command timed out after {timeout:g} s; it was killed with its process group]"
            )
        return ToolResult(
            output=output,
            exit_code=process.returncode,
            extra={"timed_out": timed_out, "output_bytes": capture.total},
        )

    def _collect(self, process: subprocess.Popen[bytes], capture: _Capture, timeout: float) -> bool:
        """Read output until the shell exits (True if it had to be killed)."""
        assert process.stdout is not None
        fd = process.stdout.fileno()
        deadline = time.monotonic() + timeout
        timed_out = False
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    _kill_group(process)
                    break
                if selector.select(min(remaining, 0.05)):
                    data = os.read(fd, _READ_SIZE)
                    if not data:
                        break  # every writer closed the pipe
                    capture.add(data)
                if process.poll() is not None:
                    break
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                # Output closed but the shell lives on past its deadline.
                timed_out = True
                _kill_group(process)
                process.wait()
            # What the shell wrote before it exited is in the pipe now (at most the pipe's
            # capacity): take it without waiting for background processes holding the pipe.
            budget = _DRAIN_LIMIT
            while budget > 0 and selector.select(0):
                data = os.read(fd, _READ_SIZE)
                if not data:
                    break
                capture.add(data)
                budget -= len(data)
        return timed_out

    def close(self) -> None:
        """Kill every command still running (and its children)."""
        with self._lock:
            running = list(self._running)
        for process in running:
            _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone
    except PermissionError:
        process.kill()


register_tool(TerminalTool)
