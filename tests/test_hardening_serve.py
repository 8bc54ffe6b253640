"""``cowconv serve --data-dir`` with odd paths, in real server processes.

Each case starts ``python -m cowconv serve`` as a user would, talks to it over
HTTP on 127.0.0.1, stops it and starts it again on the same directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.test_cli import ROOT, cowconv, free_port

BODY = {"agent": {"llm": {"model": "openai/gpt-4o"}}, "workspace": {"working_dir": "."}}


def _serve(data_dir: bytes | str, cwd: Path, home: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "cowconv", "serve", "--port", str(port), "--data-dir", data_dir],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            assert process.stderr is not None
            raise AssertionError(f"server exited: {process.stderr.read().decode(errors='replace')}")
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


ODD = {
    "spaces and unicode, not there yet": b"with space/\xc3\xbcn\xc3\xaf c\xc3\xb6de/data",
    "not UTF-8": b"data-\xff\xfe",
    "dot-dot": b"gone/../data",
    "home": b"~/data",
    "leading dash": b"-data",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ODD))
def test_odd_data_dirs_keep_conversations_across_restarts(tmp_path: Path, name: str) -> None:
    """The store is created where the path says (``~`` expanded, ``..`` resolved, bytes kept),
    nothing else is created, and a restarted server finds the conversation again."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    given = ODD[name]
    expected = (
        os.path.join(os.fsencode(home), b"data")
        if given.startswith(b"~/")
        else os.path.normpath(os.path.join(os.fsencode(work), given))
    )
    argument = ("./" if given.startswith(b"-") else "").encode() + given
    process, url = _serve(argument, work, home)
    try:
        created = httpx.post(f"{url}/api/conversations", json={**BODY, "id": "kept"}, timeout=60)
        assert created.status_code == 201, created.text
    finally:
        _stop(process)
    assert os.path.isdir(expected)
    assert any(entry.endswith(b".db") for entry in os.listdir(expected))
    if name == "dot-dot":
        assert not (work / "gone").exists()  # no directory left behind for the ".." step
    process, url = _serve(argument, work, home)
    try:
        found = httpx.get(f"{url}/api/conversations/kept", timeout=60)
        assert found.status_code == 200, found.text
    finally:
        _stop(process)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "error: --data-dir: value error, must not be empty"),
        ("   ", "error: --data-dir: value error, must not be empty"),
        ("a-file/sub", "error: cannot open the store in "),
        ("a-file", "error: data directory "),
    ],
)
def test_unusable_data_dirs_fail_in_one_line(tmp_path: Path, given: str, message: str) -> None:
    """Empty, under a file, or a file: exit 2 with one line on stderr; nothing is created."""
    (tmp_path / "a-file").write_text("notes")
    result = cowconv("serve", "--port", str(free_port()), "--data-dir", given, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(message), line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a-file"]
    assert (tmp_path / "a-file").read_text() == "notes"
