"""Tests for cowconv._cli: the cowconv command line."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from cowconv import LLM, Agent, Conversation

ROOT = Path(__file__).resolve().parent.parent
AGENT = Agent(llm=LLM(model="openai/stub-model"))


def cowconv(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cowconv", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def make_store(directory: Path) -> tuple[Conversation, Conversation, Conversation]:
    root = Conversation(
        agent=AGENT,
        workspace=".",
        persistence_dir=directory,
        conversation_id="root",
        tags={"title": "CI run 42"},
    )
    for i in range(5):
        root.send_message(f"m{i}")
    debug = root.fork(title="Debug", conversation_id="debug")
    debug.send_message("why?")
    deeper = debug.fork(title="Deeper", conversation_id="deeper")
    variant = root.fork(
        from_event_id=root.state.events[1].id, title="Variant B", conversation_id="variant"
    )
    other = Conversation(
        agent=AGENT,
        workspace=".",
        persistence_dir=directory,
        conversation_id="other",
        tags={"title": "Unrelated"},
    )
    return deeper, variant, other


class TestTree:
    def test_prints_the_fork_tree(self, tmp_path):
        """tree draws every conversation under its source, with titles, sizes and fork points."""
        make_store(tmp_path)
        result = cowconv("tree", str(tmp_path))
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert "5 conversations" in lines[0]

        def line_of(text: str) -> str:
            (line,) = [line for line in lines if text in line]
            return line

        def depth(text: str) -> int:
            line = line_of(text)
            return len(line) - len(line.lstrip(" │├└─"))

        assert depth("CI run 42") < depth("Debug") < depth("Deeper")
        assert depth("Variant B") == depth("Debug")
        assert depth("Unrelated") == depth("CI run 42")
        assert "6 events" in line_of("Debug") and "forked after 5 events" in line_of("Debug")
        assert "forked after 2 events" in line_of("Variant B")

    def test_one_tree_by_id(self, tmp_path):
        """tree STORE ID shows only the tree that holds ID, from its root."""
        make_store(tmp_path)
        result = cowconv("tree", str(tmp_path / "cowconv.db"), "deeper")
        assert result.returncode == 0, result.stderr
        assert "CI run 42" in result.stdout and "Deeper" in result.stdout
        assert "Unrelated" not in result.stdout

    def test_unknown_id(self, tmp_path):
        """An id the store does not have is a clear error, exit status 2."""
        make_store(tmp_path)
        result = cowconv("tree", str(tmp_path), "nope")
        assert result.returncode == 2 and "nope" in result.stdout

    def test_missing_store(self, tmp_path):
        """A path with no store is a clear error and creates nothing."""
        result = cowconv("tree", str(tmp_path / "absent"))
        assert result.returncode == 2 and "no cowconv store" in result.stdout
        assert not (tmp_path / "absent").exists()

    def test_not_a_store(self, tmp_path):
        """A file that is not a cowconv store is reported, and left as it was."""
        bogus = tmp_path / "notes.db"
        bogus.write_bytes(b"just some notes, not SQLite at all" * 100)
        before = bogus.read_bytes()
        result = cowconv("tree", str(bogus))
        assert result.returncode == 2 and "cannot read" in result.stdout
        assert bogus.read_bytes() == before


class TestServe:
    def test_serve_starts_the_agent_server(self, tmp_path):
        """cowconv serve runs the agent server, which answers /health."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cowconv",
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        assert r.status == 200
                        break
                except OSError:
                    assert server.poll() is None, "server exited"
                    assert time.monotonic() < deadline, "server did not start"
                    time.sleep(0.2)
        finally:
            server.terminate()
            server.wait(timeout=30)


class TestBench:
    def test_bench_help(self):
        """cowconv bench hands its arguments to the benchmark suite."""
        result = cowconv("bench", "--help")
        assert result.returncode == 0 and "--quick" in result.stdout
