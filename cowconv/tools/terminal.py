"""``TerminalTool``: a persistent shell session in the workspace.

>>> import tempfile
>>> from cowconv import Workspace
>>> terminal = TerminalTool.create(Workspace(working_dir=tempfile.gettempdir()))
>>> terminal.execute(TerminalParams(command="cd / && export GREETING=hello")).exit_code
0
>>> result = terminal.execute(TerminalParams(command="echo $GREETING from $PWD; false"))
>>> result.output, result.exit_code
('hello from /\\n', 1)
>>> terminal.close()

Each conversation gets one bash session (``/bin/sh`` where bash is missing)
on a pseudo-terminal, started in the workspace's working directory, so
``cd``, ``export``, an activated virtualenv and shell functions carry over
from one command to the next, as in OpenHands' SDK. Standard output and error
are merged; commands read standard input from ``/dev/null``. A command is
sourced from a file, so any text (quotes, heredocs, several lines) is one
command, and a syntax error is reported without touching the session.

A command that outlives its timeout is killed together with every process
the session started (its whole process group); the next command gets a new
session in the last working directory, without the variables and functions
of the old one (the output says so). ``exit`` ends the session the same
way. Background processes a command leaves behind keep running until then;
their later output is not collected.

The timeout a model passes is capped by the operator's
(``Tool(name="terminal", params={"timeout": N})``): the model can shorten
it, never lengthen it.

A fork of a conversation gets its own session. It starts in the working
directory the source's session had at the fork point (recorded as
``extra["cwd"]`` of every terminal observation); variables, functions and
background processes are not inherited.
"""

from __future__ import annotations

import os
import re
import secrets
import selectors
import shlex
import shutil
import signal
import subprocess
import tempfile
import termios
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from cowconv._exceptions import WorkspaceMissingError
from cowconv.agent.tools import ToolDefinition, ToolExecutor, ToolResult, register_tool
from cowconv.core.events import Event, ObservationEvent
from cowconv.core.framing import representable
from cowconv.core.logger import get_logger
from cowconv.core.schema import Action, Observation
from cowconv.core.workspace import Workspace

__all__ = [
    "TerminalAction",
    "TerminalExecutor",
    "TerminalObservation",
    "TerminalParams",
    "TerminalSettings",
    "TerminalTool",
]

logger = get_logger(__name__)

_READ_SIZE = 1 << 16
# A secret is exported only under a name the shell takes as a variable.
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Output after the command's own may be the end marker line: keep this much back.
_HOLD_BACK = 8192
# After the session exits, how long to wait for what it wrote before it did.
_EXIT_DRAIN_S = 0.2


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
        description="Seconds to wait before the command and its children are killed "
        "(at most the limit the operator set).",
    )


class TerminalSettings(BaseModel):
    """The terminal's configuration: ``Tool(name="terminal", params={...})``.

    ``timeout`` is the default and the ceiling of every command's timeout.

    >>> TerminalSettings(timeout=30).max_output_bytes
    30000
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout: float = Field(default=120.0, gt=0)
    max_output_bytes: int = Field(default=30_000, ge=64)
    no_change_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        description="OpenHands' setting: a command that writes nothing new for this many "
        "seconds is stopped and the model is given what it wrote (cowconv kills it).",
    )


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


def _shell() -> str:
    return shutil.which("bash") or "/bin/sh"


class _Session:
    """One shell process on a pseudo-terminal, and the marker that ends each command."""

    def __init__(self, cwd: str) -> None:
        self.marker = f"__cowconv_done_{secrets.token_hex(8)}__".encode()
        self.scratch = tempfile.mkdtemp(prefix="cowconv-terminal-")
        self.command_file = os.path.join(self.scratch, "command")
        master, slave = os.openpty()
        try:
            attributes = termios.tcgetattr(slave)
            attributes[1] &= ~termios.OPOST  # no \n -> \r\n
            attributes[3] &= ~termios.ECHO  # the command line is not echoed back
            termios.tcsetattr(slave, termios.TCSANOW, attributes)
            environment = {**os.environ, "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"}
            self.process = subprocess.Popen(
                [_shell(), "--noprofile", "--norc"] if _shell().endswith("bash") else [_shell()],
                stdin=slave,
                stdout=slave,
                # Not a terminal: the shell is not interactive (no prompts, no job control
                # messages, no history expansion); commands get 2>&1 instead.
                stderr=subprocess.DEVNULL,
                cwd=cwd,
                env=environment,
                # Its own process group, so a timeout can kill everything it started.
                start_new_session=True,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        self.fd = master
        # A session nobody closed (a conversation dropped without close()) still ends.
        self._finalizer = weakref.finalize(self, _end, self.process, master, self.scratch)

    def send(self, command: str) -> None:
        with open(self.command_file, "wb") as file:
            file.write(_command_bytes(command))
            if not command.endswith("\n"):
                file.write(b"\n")
        marker = self.marker.decode()
        line = (
            f". {shlex.quote(self.command_file)} </dev/null 2>&1; "
            # The directory is closed by the marker too: its name may hold a newline.
            f'printf \'\\n{marker} %s %s {marker}\\n\' "$?" "$PWD"\n'
        )
        os.write(self.fd, line.encode())

    def discard_pending(self) -> None:
        """Drop output written since the last command ended (background processes)."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while selector.select(0):
                try:
                    if not os.read(self.fd, _READ_SIZE):
                        return
                except OSError:
                    return

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already gone
        except PermissionError:
            self.process.kill()

    def close(self) -> None:
        self._finalizer()


def _command_bytes(command: str) -> bytes:
    """A command as the shell gets it: a path's undecodable bytes (surrogate escapes, as
    ``os.fsdecode`` writes them) go back as those bytes; other lone surrogates are U+FFFD."""
    try:
        return command.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return representable(command).encode("utf-8", "surrogateescape")


def _shown(path: str) -> str:
    """A path as text a history can hold: undecodable bytes as U+FFFD."""
    return os.fsencode(path).decode("utf-8", errors="replace")


def _end(process: subprocess.Popen[bytes], fd: int, scratch: str) -> None:
    """Kill a session's process group, reap its shell, release its terminal and files."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        process.kill()
    process.wait()
    try:
        os.close(fd)
    except OSError:
        pass
    shutil.rmtree(scratch, ignore_errors=True)


class _Reader:
    """Splits the session's output into the command's output and the end marker."""

    def __init__(self, marker: bytes, capture: _Capture) -> None:
        self._marker = b"\n" + marker + b" "
        self._end = b" " + marker + b"\n"
        self._capture = capture
        self._pending = bytearray()
        self.status: int | None = None
        self.cwd: str | None = None

    def add(self, data: bytes) -> bool:
        """Take output; True once the end marker (exit status and directory) has arrived."""
        self._pending += data
        found = self._pending.find(self._marker)
        if found >= 0:
            end = self._pending.find(self._end, found + len(self._marker))
            if end < 0:
                return False
            status, _, cwd = bytes(self._pending[found + len(self._marker) : end]).partition(b" ")
            self._capture.add(bytes(self._pending[:found]))
            self._pending.clear()
            self.status = int(status) if status.strip().lstrip(b"-").isdigit() else None
            # The real path (bytes that are not UTF-8 as surrogate escapes, so os functions
            # reach the directory); what is recorded is _shown(cwd).
            self.cwd = os.fsdecode(cwd)
            return True
        if len(self._pending) > 2 * _HOLD_BACK:
            self._capture.add(bytes(self._pending[:-_HOLD_BACK]))
            del self._pending[:-_HOLD_BACK]
        return False

    def flush(self) -> None:
        self._capture.add(bytes(self._pending))
        self._pending.clear()


class TerminalTool(ToolDefinition[TerminalParams]):
    """Run a command in a persistent bash session in the workspace; return output and exit code.

    Standard output and standard error are merged. Very long output keeps
    its beginning and its end around a truncation marker. ``cd``,
    ``export``, virtualenvs and shell functions carry over between
    commands. A command that runs past its timeout is killed with all its
    child processes, and the session starts over.

    >>> from cowconv import Workspace
    >>> terminal = TerminalTool.create(Workspace(working_dir="."))
    >>> result = terminal.execute(TerminalParams(command="echo hello; false"))
    >>> result.output.strip(), result.exit_code
    ('hello', 1)
    >>> "timed out" in terminal.execute(TerminalParams(command="sleep 5", timeout=0.2)).output
    True
    >>> terminal.close()
    """

    name = "terminal"
    description = (
        "Run a shell command in a persistent bash session in the workspace and return its "
        "output and exit code. cd, exported variables, activated virtualenvs and shell "
        "functions carry over between calls. Standard input is empty."
    )
    Params = TerminalParams
    Settings = TerminalSettings
    settings: TerminalSettings

    def __init__(self, workspace: Workspace, settings: BaseModel) -> None:
        super().__init__(workspace, settings)
        self._session: _Session | None = None
        self._cwd: str | None = None
        self._history: Sequence[Event] = ()
        self._running = False
        self._closed_while_running = False
        self._lock = threading.Lock()  # one command at a time
        self._state_lock = threading.Lock()
        self._secrets: dict[str, Callable[[], str | None]] = {}
        self._went_quiet = False

    def use_secrets(self, secrets: Mapping[str, Callable[[], str | None]]) -> None:
        """Export a secret to a command that names it (any case); hide its value in output.

        As OpenHands' SDK: the value is fetched when a command mentions the
        secret's name, exported into the shell before the command runs, and
        every occurrence of it in the output reads ``<secret-hidden>``.
        """
        self._secrets = dict(secrets)

    def _secret_exports(self, command: str) -> tuple[str, list[str]]:
        lowered = command.lower()
        exports: list[str] = []
        values: list[str] = []
        for name, get in self._secrets.items():
            if name.lower() not in lowered or not _VARIABLE_NAME.fullmatch(name):
                continue
            try:
                value = get()
            except Exception as error:  # a lookup that failed: the command runs without it
                logger.warning("could not get the secret %s: %s", name, error)
                continue
            if value:
                exports.append(f"export {name}={shlex.quote(value)}\n")
                values.append(value)
        return "".join(exports), values

    def restore(self, events: Sequence[Event]) -> None:
        """Start the session where the last terminal command of ``events`` left off."""
        self._history = events
        if isinstance(self.executor, TerminalExecutor):
            self.executor.tool.restore(events)

    def _start_directory(self) -> str:
        working_dir = self.workspace.working_dir
        if not os.path.isdir(working_dir):
            raise WorkspaceMissingError(f"the workspace directory {working_dir!r} does not exist")
        if self._cwd is None:
            last = _last_directory(self._history)
            # A fork with its own copy of the files goes on in the copy, not in the source's.
            self._cwd = working_dir if last is None else self.workspace.relocate(last)
            self._history = ()
        return self._cwd if os.path.isdir(self._cwd) else working_dir

    def execute(self, params: TerminalParams) -> ToolResult:
        """Run ``params.command`` in the session; a timeout kills its process group and says so.

        A terminal made with ``create(conv_state, executor=TerminalExecutor(...))``
        runs in the executor's session (shared with the other tools given it).
        """
        if isinstance(self.executor, TerminalExecutor) and self.executor.tool is not self:
            return self.executor.tool.execute(params)
        limit = self.settings.timeout
        timeout = min(params.timeout, limit) if params.timeout is not None else limit
        with self._lock:
            restarted = self._session is not None and self._session.process.poll() is not None
            if self._session is None or restarted:
                if self._session is not None:
                    self._session.close()
                self._session = _Session(self._start_directory())
            session = self._session
            session.discard_pending()
            capture = _Capture(self.settings.max_output_bytes)
            reader = _Reader(session.marker, capture)
            with self._state_lock:
                self._running = True
                self._closed_while_running = False
            exports, hidden = self._secret_exports(params.command)
            try:
                session.send(exports + params.command)
                timed_out = self._collect(session, reader, timeout)
            finally:
                with self._state_lock:
                    self._running = False
                    closed = self._closed_while_running
            ended = timed_out or closed or reader.status is None
            if ended:
                session.close()
                self._session = None
                exit_code: int | None = session.process.returncode
            else:
                exit_code = reader.status
            if reader.cwd is not None:
                self._cwd = reader.cwd
        output = capture.text()
        for value in sorted(hidden, key=len, reverse=True):
            output = output.replace(value, "<secret-hidden>")
        cwd = self._cwd
        shown = None if cwd is None else _shown(cwd)
        if timed_out and self._went_quiet:
            output += (
                f"\n[no new output for {self.settings.no_change_timeout_seconds:g} s; the "
                "command was killed with its process group. The next command starts a new "
                f"shell in {shown}: variables and functions set before are gone]"
            )
        elif timed_out:
            output += (
                f"\n[command timed out after {timeout:g} s; it was killed with its process "
                f"group. The next command starts a new shell in {shown}: variables and "
                "functions set before are gone]"
            )
        elif ended and not closed:
            output += f"\n[the shell exited; the next command starts a new one in {shown}]"
        extra: dict[str, object] = {
            "timed_out": timed_out,
            "output_bytes": capture.total,
            "cwd": shown,
        }
        if cwd is not None and shown != cwd:
            # A directory whose name is not UTF-8: its exact bytes, so a fork starts there too.
            extra["cwd_bytes"] = os.fsencode(cwd).hex()
        return ToolResult(output=output, exit_code=exit_code, extra=extra)

    def _collect(self, session: _Session, reader: _Reader, timeout: float) -> bool:
        """Read output until the end marker (True if the command had to be killed).

        With ``no_change_timeout_seconds``, a command silent that long is
        killed too (``self._went_quiet`` says so).
        """
        deadline = time.monotonic() + timeout
        quiet = self.settings.no_change_timeout_seconds
        last_output = time.monotonic()
        exited_at: float | None = None
        self._went_quiet = False
        with selectors.DefaultSelector() as selector:
            selector.register(session.fd, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if quiet is not None and exited_at is None and now - last_output >= quiet:
                    self._went_quiet = True
                    session.kill()
                    reader.flush()
                    return True
                if now >= deadline:
                    session.kill()
                    reader.flush()
                    return True
                if exited_at is None and session.process.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > _EXIT_DRAIN_S:
                    reader.flush()
                    return False
                if not selector.select(min(deadline - now, 0.05)):
                    continue
                try:
                    data = os.read(session.fd, _READ_SIZE)
                except OSError:  # EIO: every writer is gone (the shell exited)
                    data = b""
                if not data:
                    reader.flush()
                    session.process.wait()
                    return False
                last_output = time.monotonic()
                if reader.add(data):
                    return False

    def close(self) -> None:
        """End the session: kill the running command (if any) and everything it started."""
        if isinstance(self.executor, TerminalExecutor) and self.executor.tool is not self:
            self.executor.close()
        with self._state_lock:
            if self._running:
                self._closed_while_running = True
            session = self._session
        if session is not None:
            session.kill()
        if not self._lock.acquire(blocking=False):
            return  # the running command sees the kill, closes the session and returns
        try:
            if self._session is not None:
                self._session.close()
                self._session = None
        finally:
            self._lock.release()


class TerminalAction(Action):
    """OpenHands' terminal action: the command a :class:`TerminalExecutor` runs.

    >>> TerminalAction(command="ls").timeout is None
    True
    """

    command: str = Field(description="The shell command to run (bash syntax).")
    is_input: bool = Field(
        default=False,
        description="Whether the command is input for the running process (not supported).",
    )
    timeout: float | None = Field(default=None, gt=0, description="Seconds before it is killed.")
    reset: bool = Field(default=False, description="Start a new shell before the command.")


class TerminalObservation(Observation):
    """What a :class:`TerminalExecutor` answers: the output, the command and its exit code.

    >>> TerminalObservation.from_text("hi", command="echo hi", exit_code=0).exit_code
    0
    """

    command: str | None = None
    exit_code: int | None = None
    timeout: bool = False


class TerminalExecutor(ToolExecutor[TerminalAction, TerminalObservation]):
    """A terminal session to call directly, or to share between tools (OpenHands' class).

    It runs commands as :class:`TerminalTool` does (one persistent shell in
    ``working_dir``); ``TerminalTool.create(conv_state, executor=...)`` gives
    the conversation's terminal this session, so another tool built on the
    same executor sees the same shell.

    >>> import tempfile
    >>> executor = TerminalExecutor(working_dir=tempfile.gettempdir())
    >>> executor(TerminalAction(command="export N=7")).exit_code
    0
    >>> executor(TerminalAction(command="echo $N")).text
    '7\\n'
    >>> executor.close()

    OpenHands' other options (``username``, ``terminal_type``, ``shell_path``,
    ``no_change_timeout_seconds``, ``full_output_save_dir``) are accepted
    and not used: cowconv runs bash (``/bin/sh`` without it) as the current
    user, and a command runs until it ends or its ``timeout``.
    """

    def __init__(
        self,
        working_dir: str,
        username: str | None = None,
        no_change_timeout_seconds: int | None = None,
        terminal_type: str | None = None,
        shell_path: str | None = None,
        full_output_save_dir: str | None = None,
        *,
        timeout: float = 120.0,
        max_output_bytes: int = 30_000,
    ) -> None:
        settings = TerminalSettings(timeout=timeout, max_output_bytes=max_output_bytes)
        self.tool = TerminalTool(Workspace(working_dir=working_dir), settings)

    def __call__(self, action: TerminalAction, conversation: object = None) -> TerminalObservation:
        """Run ``action.command`` in the session (``reset`` starts a new shell first)."""
        if action.is_input:
            return TerminalObservation.from_text(
                "sending input to a running command is not supported: each command runs "
                "to its end (or its timeout) with standard input empty",
                is_error=True,
                command=action.command,
            )
        if action.reset:
            self.tool.close()
        result = self.tool.execute(TerminalParams(command=action.command, timeout=action.timeout))
        timed_out = bool(result.extra and result.extra.get("timed_out"))
        return TerminalObservation.from_text(
            result.output, command=action.command, exit_code=result.exit_code, timeout=timed_out
        )

    def close(self) -> None:
        """End the session and everything it started."""
        self.tool.close()

    def interrupt(self) -> None:
        """Kill the running command (the next one starts a new shell)."""
        self.tool.close()


def _last_directory(events: Sequence[Event]) -> str | None:
    """The working directory the last terminal command of ``events`` ended in."""
    for position in range(len(events) - 1, -1, -1):
        event = events[position]
        if isinstance(event, ObservationEvent) and event.tool_name == TerminalTool.name:
            extra = event.extra
            if not hasattr(extra, "get"):
                return None
            exact = extra.get("cwd_bytes")
            if isinstance(exact, str):
                try:
                    return os.fsdecode(bytes.fromhex(exact))
                except ValueError:
                    pass
            cwd = extra.get("cwd")
            return cwd if isinstance(cwd, str) else None
    return None


register_tool(TerminalTool)
