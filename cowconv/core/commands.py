"""Running a shell command and copying a file on this machine, for a workspace.

:class:`CommandResult` and :class:`FileOperationResult` are OpenHands' SDK's
result shapes (``workspace.execute_command(...)``, ``file_upload``,
``file_download``); :func:`run_command` and :func:`copy_file` do the work
for a local workspace and for the agent server's bash route.

>>> run_command("echo hi", cwd=".").stdout
'hi\\n'
"""

import contextlib
import math
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from pydantic import ConfigDict

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.core.frozen import CheckedModel

__all__ = [
    "CommandResult",
    "FileOperationResult",
    "copy_file",
    "remote_command",
    "remote_download",
    "remote_upload",
    "run_command",
]

TIMEOUT_EXIT_CODE = -1
"""The exit code of a command stopped at its timeout (OpenHands' SDK's)."""


class CommandResult(CheckedModel):
    """What a command run in a workspace did (OpenHands' SDK's ``CommandResult``).

    >>> CommandResult(command="true", exit_code=0, stdout="", stderr="",
    ...               timeout_occurred=False).exit_code
    0
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    command: str
    exit_code: int
    stdout: str
    stderr: str
    timeout_occurred: bool


class FileOperationResult(CheckedModel):
    """What a file upload or download did (OpenHands' SDK's ``FileOperationResult``).

    >>> FileOperationResult(success=False, source_path="a", destination_path="b",
    ...                     error="no such file").error
    'no such file'
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    success: bool
    source_path: str
    destination_path: str
    file_size: int | None = None
    error: str | None = None


def run_command(command: str, cwd: str | os.PathLike[str], timeout: float = 30.0) -> CommandResult:
    """Run ``command`` with ``bash -c`` in ``cwd``, stopped (with its children) after ``timeout``.

    A command that runs out of time has exit code -1 and ``timeout_occurred``,
    with the output it wrote until then; a missing ``cwd`` or a timeout that
    is not a positive number is refused (:class:`~cowconv.InvalidValueError`).

    >>> result = run_command("echo out; echo err >&2; exit 3", cwd=".")
    >>> result.exit_code, result.stdout, result.stderr, result.timeout_occurred
    (3, 'out\\n', 'err\\n', False)
    >>> run_command("sleep 5", cwd=".", timeout=0.2).timeout_occurred
    True
    """
    if not isinstance(command, str):
        raise InvalidTypeError(f"command must be a str, got {type(command).__name__}")
    if "\x00" in command:
        raise InvalidValueError("command must not contain a NUL character")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise InvalidValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    directory = os.fspath(cwd)
    if not os.path.isdir(directory):
        raise InvalidValueError(f"command directory {directory!r} is not an existing directory")
    process = subprocess.Popen(
        ["bash", "-c", command],
        cwd=directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: a timeout stops its children too
    )
    try:
        stdout, stderr = process.communicate(timeout=float(timeout))
        timed_out = False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # already ended
            os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        timed_out = True
    text_out = stdout.decode("utf-8", errors="replace")
    text_err = stderr.decode("utf-8", errors="replace")
    if timed_out:
        text_err += f"Command timed out after {timeout} seconds\n"
    return CommandResult(
        command=command,
        exit_code=TIMEOUT_EXIT_CODE if timed_out else process.returncode,
        stdout=text_out,
        stderr=text_err,
        timeout_occurred=timed_out,
    )


def copy_file(
    source_path: str | os.PathLike[str], destination_path: str | os.PathLike[str]
) -> FileOperationResult:
    """Copy a file (with its metadata), making the destination's directories.

    As in OpenHands' SDK, a failure is reported in the result (``success`` is
    false and ``error`` says why), not raised; nothing is left half-written.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.txt").write_text("hello")
    >>> copy_file(folder / "a.txt", folder / "sub" / "b.txt").file_size
    5
    >>> copy_file(folder / "missing", folder / "c.txt").success
    False
    """
    source, destination = Path(source_path), Path(destination_path)
    if not source.is_file():
        return FileOperationResult(
            success=False,
            source_path=str(source),
            destination_path=str(destination),
            error=f"source {str(source)!r} is not an existing file",
        )
    partial = destination.with_name(f".{destination.name}.partial")
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, partial)
        os.replace(partial, destination)
        return FileOperationResult(
            success=True,
            source_path=str(source),
            destination_path=str(destination),
            file_size=destination.stat().st_size,
        )
    except OSError as error:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        return FileOperationResult(
            success=False,
            source_path=str(source),
            destination_path=str(destination),
            error=str(error),
        )


def remote_command(client: Any, command: str, cwd: str, timeout: float) -> CommandResult:
    """Run ``command`` on an agent server (its ``POST /api/bash/execute_bash_command``).

    ``client`` is an ``httpx.Client`` for the server. As OpenHands' SDK's
    remote workspace does, a failure to reach the server or a refusal is
    reported in the result (exit code -1, ``stderr`` says why), not raised.

    >>> import httpx
    >>> with httpx.Client(base_url="http://127.0.0.1:9") as nobody:  # nothing listens there
    ...     result = remote_command(nobody, "ls", cwd="/", timeout=5)
    >>> result.exit_code, result.stderr.startswith("Remote execution error")
    (-1, True)
    """
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise InvalidValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    seconds = max(1, math.ceil(timeout))  # the route takes whole seconds, as OpenHands' does
    try:
        response = client.post(
            "/api/bash/execute_bash_command",
            json={"command": command, "cwd": cwd, "timeout": seconds},
            timeout=seconds + 30.0,
        )
        response.raise_for_status()
        output = response.json()
        exit_code = output.get("exit_code")
        stdout, stderr = output.get("stdout") or "", output.get("stderr") or ""
        if not isinstance(exit_code, int):
            raise InvalidValueError(f"the server answered without an exit code: {output!r}")
    except Exception as error:  # noqa: BLE001 - reported in the result, as OpenHands' SDK does
        return CommandResult(
            command=command,
            exit_code=TIMEOUT_EXIT_CODE,
            stdout="",
            stderr=f"Remote execution error: {_describe(error)}",
            timeout_occurred=False,
        )
    return CommandResult(
        command=command,
        exit_code=exit_code,
        stdout=stdout,
        stderr=stderr,
        timeout_occurred=exit_code == TIMEOUT_EXIT_CODE and "timed out" in stderr,
    )


def remote_upload(
    client: Any, source_path: str | os.PathLike[str], destination_path: str | os.PathLike[str]
) -> FileOperationResult:
    """Send a local file to an agent server (its ``POST /api/file/upload?path=...``).

    >>> import httpx
    >>> with httpx.Client(base_url="http://127.0.0.1:9") as nobody:
    ...     remote_upload(nobody, "/no/such/file", "/tmp/copy").success
    False
    """
    source, destination = Path(source_path), os.fspath(destination_path)
    try:
        content = source.read_bytes()
        response = client.post(
            "/api/file/upload",
            params={"path": destination},
            files={"file": (source.name, content)},
        )
        response.raise_for_status()
        answer = response.json()
    except Exception as error:  # noqa: BLE001 - reported in the result, as OpenHands' SDK does
        return FileOperationResult(
            success=False,
            source_path=str(source),
            destination_path=destination,
            error=_describe(error),
        )
    return FileOperationResult(
        success=bool(answer.get("success", True)),
        source_path=str(source),
        destination_path=destination,
        file_size=answer.get("file_size"),
        error=answer.get("error"),
    )


def remote_download(
    client: Any, source_path: str | os.PathLike[str], destination_path: str | os.PathLike[str]
) -> FileOperationResult:
    """Fetch a file from an agent server (its ``GET /api/file/download?path=...``).

    >>> import httpx
    >>> with httpx.Client(base_url="http://127.0.0.1:9") as nobody:
    ...     remote_download(nobody, "/etc/hostname", "/no/such/dir/copy").success
    False
    """
    source, destination = os.fspath(source_path), Path(destination_path)
    try:
        response = client.get("/api/file/download", params={"path": source})
        response.raise_for_status()
        destination.parent.mkdir(parents=True, exist_ok=True)
        partial = destination.with_name(f".{destination.name}.partial")
        partial.write_bytes(response.content)
        os.replace(partial, destination)
    except Exception as error:  # noqa: BLE001 - reported in the result, as OpenHands' SDK does
        return FileOperationResult(
            success=False,
            source_path=source,
            destination_path=str(destination),
            error=_describe(error),
        )
    return FileOperationResult(
        success=True,
        source_path=source,
        destination_path=str(destination),
        file_size=destination.stat().st_size,
    )


def _describe(error: Exception) -> str:
    """An error's message, with the server's ``detail`` when it answered one."""
    response = getattr(error, "response", None)
    if response is not None:
        try:
            detail = response.json().get("detail")
        except Exception:  # noqa: BLE001 - not JSON: the status line says enough
            detail = None
        if detail is not None:
            return f"{error} ({detail})"
    return str(error) or type(error).__name__
