"""Every example runs offline, in a subprocess, against the stub LLM server.

Each example runs once, when a test first asks for it (a module fixture keeps the
run); the tests below read what it printed and what the stub received.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cowconv.testing import StubLLMServer, StubRequest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").rglob("*.py"))

# The agent-server example serves on a fixed port (8002, as OpenHands' own example does): the
# examples run on one pytest-xdist worker, one at a time, each once.
pytestmark = pytest.mark.xdist_group("examples")

FIXED_PORTS = {"11_conversation_fork.py": 8002}
"""The port each example's own server takes. The example waits for ``/health`` there before its
server has started, so a server of someone else's on that port would answer it instead."""


def wait_until_free(port: int, timeout: float = 120.0) -> None:
    """Return once nothing listens on 127.0.0.1:``port``; fail saying so after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return
        if time.monotonic() > deadline:
            pytest.fail(f"port {port} is taken by another server: its example would talk to it")
        time.sleep(1)


@dataclass
class ExampleRun:
    result: subprocess.CompletedProcess[str]
    requests: list[StubRequest]
    directory: Path

    @property
    def commands(self) -> list[str]:
        """The arguments of every tool call the model was shown."""
        return [
            call["function"]["arguments"]
            for request in self.requests
            for message in request.messages
            for call in message.get("tool_calls") or ()
        ]


class ExampleRuns(dict[str, ExampleRun]):
    """The runs of the examples by file name, each example run when first asked for.

    Each test runs only the examples it reads: under pytest-xdist a worker never runs the
    examples of tests that other workers run.
    """

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self._tmp_path_factory = tmp_path_factory

    def __missing__(self, name: str) -> ExampleRun:
        (example,) = [path for path in EXAMPLES if path.name == name]
        directory = self._tmp_path_factory.mktemp(example.stem)
        if name in FIXED_PORTS:
            wait_until_free(FIXED_PORTS[name])
        with StubLLMServer() as stub:
            environment = {
                **os.environ,
                **stub.environment(),
                "COWCONV_DATA_DIR": str(directory / "data"),
                # Examples start helpers as plain `python`, which must be this interpreter.
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            }
            result = subprocess.run(
                [sys.executable, str(example)],
                cwd=directory,
                env=environment,
                capture_output=True,
                text=True,
                timeout=240,
            )
            self[name] = run = ExampleRun(result, list(stub.requests), directory)
        return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ExampleRuns:
    return ExampleRuns(tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_example_runs_offline(example: Path, runs: dict[str, ExampleRun]):
    """The example exits 0 with LLM_* pointing at the stub, run from an empty directory."""
    run = runs[example.name]
    assert run.result.returncode == 0, run.result.stdout + run.result.stderr
    assert run.requests, "the example never called the model"


class TestForkExample:
    def test_openhands_example_asserts_and_output(self, runs: dict[str, ExampleRun]):
        """The ported example of OpenHands' SDK holds its asserts, shows the fork's title, cost."""
        run = runs["48_conversation_fork.py"]
        out = run.result.stdout
        assert run.result.returncode == 0, out + run.result.stderr
        assert "Fork title             : Follow-up fork" in out
        tags_line = next(line for line in out.splitlines() if line.startswith("Fork tags"))
        assert (
            "'purpose': 'a/b-test'" in tags_line
            and "'title': 'Tool-change experiment'" in tags_line
        )
        assert "EXAMPLE_COST: 0.0" in out
        assert '{"command": "echo hello-from-fork"}' in run.commands
        final_question = run.requests[-1].messages[-1]["content"]
        assert final_question == "What command did you run earlier? Just tell me, no tools."


class TestAgentServerExample:
    def test_remote_forks_run_with_the_servers_credentials(self, runs: dict[str, ExampleRun]):
        """The agent-server example runs its remote forks, every LLM call carrying the key."""
        run = runs["11_conversation_fork.py"]
        assert run.result.returncode == 0, run.result.stdout + run.result.stderr
        assert "All done" in run.result.stdout and "EXAMPLE_COST" in run.result.stdout
        # A fork that lost the key would stop at its first call: the fork's own command
        # reaching the model proves it ran.
        assert {r.headers.get("authorization") for r in run.requests} == {"Bearer stub-key"}
        assert '{"command": "echo hello-from-fork"}' in run.commands
        assert (run.directory / "data" / "cowconv.db").exists()
