"""Workspaces run commands and move files: locally in real subprocesses, remotely over real
HTTP (uvicorn on 127.0.0.1) through the agent server's bash and file routes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import (
    CommandResult,
    FileOperationResult,
    InvalidValueError,
    LocalWorkspace,
    RemoteWorkspace,
    Workspace,
)
from cowconv.agent_server import create_app
from cowconv.agent_server.background import BackgroundServer

KEY = "workspace-key"


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[BackgroundServer]:
    """An agent server that wants a session key, on 127.0.0.1."""
    with BackgroundServer(create_app(session_api_key=KEY)) as server:
        yield server


def _workspaces(tmp_path: Path, server: BackgroundServer) -> list[Workspace]:
    return [
        LocalWorkspace(working_dir=tmp_path),
        Workspace(working_dir=str(tmp_path)),
        Workspace(host=server.url, working_dir=str(tmp_path), api_key=KEY),
        RemoteWorkspace(host=server.url, working_dir=str(tmp_path), api_key=KEY),
    ]


def _gone(pid: int, within: float = 60.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_commands_run_in_the_working_dir_with_their_output_and_exit_code(
    tmp_path: Path, keyed_server: BackgroundServer
) -> None:
    for workspace in _workspaces(tmp_path, keyed_server):
        result = workspace.execute_command("pwd; echo oops >&2; exit 7")
        assert isinstance(result, CommandResult)
        assert result.command == "pwd; echo oops >&2; exit 7"
        assert Path(result.stdout.strip()).resolve() == tmp_path.resolve()
        assert (result.exit_code, result.stderr, result.timeout_occurred) == (7, "oops\n", False)


def test_cwd_chooses_another_directory(tmp_path: Path, keyed_server: BackgroundServer) -> None:
    other = tmp_path / "other"
    other.mkdir()
    for workspace in _workspaces(tmp_path, keyed_server):
        result = workspace.execute_command("pwd", cwd=other)
        assert Path(result.stdout.strip()).resolve() == other.resolve()
        assert result.exit_code == 0


def test_a_timeout_stops_the_command_and_its_children(
    tmp_path: Path, keyed_server: BackgroundServer
) -> None:
    for number, workspace in enumerate(_workspaces(tmp_path, keyed_server)):
        pid_file = tmp_path / f"child{number}.pid"
        result = workspace.execute_command(
            f"echo started; sleep 300 & echo $! > {pid_file}; wait", timeout=1
        )
        assert result.timeout_occurred
        assert result.exit_code == -1
        assert result.stdout == "started\n"
        assert "timed out after" in result.stderr
        assert _gone(int(pid_file.read_text()))


def test_bad_local_input_is_refused_clearly(tmp_path: Path) -> None:
    workspace = LocalWorkspace(working_dir=tmp_path)
    with pytest.raises(InvalidValueError, match="positive number"):
        workspace.execute_command("true", timeout=0)
    with pytest.raises(InvalidValueError, match="not an existing directory"):
        workspace.execute_command("true", cwd=tmp_path / "missing")
    with pytest.raises(InvalidValueError, match="NUL"):
        workspace.execute_command("echo \x00")


def test_remote_refusals_come_back_in_the_result(
    tmp_path: Path, keyed_server: BackgroundServer
) -> None:
    missing = Workspace(host=keyed_server.url, working_dir=str(tmp_path / "missing"), api_key=KEY)
    result = missing.execute_command("true")
    assert result.exit_code == -1 and not result.timeout_occurred
    assert "422" in result.stderr and "not an existing directory" in result.stderr
    keyless = Workspace(host=keyed_server.url, working_dir=str(tmp_path))
    denied = keyless.execute_command("touch should-not-exist")
    assert denied.exit_code == -1 and "401" in denied.stderr
    assert not (tmp_path / "should-not-exist").exists()
    assert not keyless.file_upload(__file__, "copy.py").success
    assert not (tmp_path / "copy.py").exists()


def test_the_route_is_behind_the_session_key(keyed_server: BackgroundServer) -> None:
    answer = httpx.post(
        keyed_server.url + "/api/bash/execute_bash_command",
        json={"command": "true"},
        timeout=60,
    )
    assert answer.status_code == 401


def test_files_go_up_and_come_back(tmp_path: Path, keyed_server: BackgroundServer) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(b"\x00binary\xffdata")
    for number, workspace in enumerate(_workspaces(tmp_path, keyed_server)):
        inside = tmp_path / f"in{number}" / "deep" / "file.bin"
        uploaded = workspace.file_upload(source, inside)
        assert isinstance(uploaded, FileOperationResult)
        assert (uploaded.success, uploaded.file_size, uploaded.error) == (True, 12, None)
        assert inside.read_bytes() == source.read_bytes()
        back = tmp_path / f"back{number}.bin"
        downloaded = workspace.file_download(inside, back)
        assert (downloaded.success, downloaded.file_size) == (True, 12)
        assert back.read_bytes() == source.read_bytes()


def test_a_remote_relative_path_is_in_the_working_dir(
    tmp_path: Path, keyed_server: BackgroundServer
) -> None:
    source = tmp_path / "source.txt"
    source.write_text("hello")
    workspace = RemoteWorkspace(host=keyed_server.url, working_dir=str(tmp_path), api_key=KEY)
    assert workspace.file_upload(source, "sub/relative.txt").success
    assert (tmp_path / "sub" / "relative.txt").read_text() == "hello"
    assert workspace.file_download("sub/relative.txt", tmp_path / "again.txt").success
    assert (tmp_path / "again.txt").read_text() == "hello"


def test_failed_file_operations_say_why_and_write_nothing(
    tmp_path: Path, keyed_server: BackgroundServer
) -> None:
    for number, workspace in enumerate(_workspaces(tmp_path, keyed_server)):
        target = tmp_path / f"never{number}.txt"
        up = workspace.file_upload(tmp_path / "missing.txt", target)
        down = workspace.file_download(tmp_path / "missing.txt", target)
        for result in (up, down):
            assert not result.success and result.error
        assert not target.exists()
        assert not [path for path in tmp_path.iterdir() if path.name.endswith(".partial")]


def test_the_file_routes_refuse_relative_paths(keyed_server: BackgroundServer) -> None:
    headers = {"X-Session-API-Key": KEY}
    answer = httpx.get(
        keyed_server.url + "/api/file/download",
        params={"path": "relative.txt"},
        headers=headers,
        timeout=60,
    )
    assert answer.status_code == 422
    assert answer.json() == {"detail": "Path must be absolute", "error": "InvalidValueError"}


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=st.binary(max_size=4096))
def test_any_bytes_round_trip_through_the_server(
    tmp_path: Path, keyed_server: BackgroundServer, content: bytes
) -> None:
    workspace = Workspace(host=keyed_server.url, working_dir=str(tmp_path), api_key=KEY)
    source, back = tmp_path / "any.bin", tmp_path / "any-back.bin"
    source.write_bytes(content)
    assert workspace.file_upload(source, tmp_path / "remote" / "any.bin").success
    assert workspace.file_download(tmp_path / "remote" / "any.bin", back).success
    assert back.read_bytes() == content


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")))
def test_output_comes_back_as_written(tmp_path: Path, text: str) -> None:
    (tmp_path / "text.txt").write_text(text, encoding="utf-8", newline="")
    result = LocalWorkspace(working_dir=tmp_path).execute_command("cat text.txt")
    assert (result.exit_code, result.stdout) == (0, text)


def test_a_command_that_is_not_valid_unicode_is_refused():
    """A lone surrogate in a command or its directory is a 422 naming the field, not a 500."""
    from fastapi.testclient import TestClient

    app = create_app(allowed_hosts=["testserver"], allow_unauthenticated=True)
    with TestClient(app) as client:
        for body in (b'{"command": "echo \\ud800"}', b'{"command": "ls", "cwd": "\\udfff"}'):
            answer = client.post(
                "/api/bash/execute_bash_command",
                content=body,
                headers={"Content-Type": "application/json"},
            )
            assert answer.status_code == 422, answer.text
            assert "not valid Unicode" in answer.text
