"""Every example runs offline, in a subprocess, against the stub LLM server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").rglob("*.py"))


def example_environment(stub) -> dict[str, str]:
    """The caller's environment, as in an activated virtualenv, with LLM_* set to the stub."""
    # Examples start helpers as plain `python`, which must be this interpreter.
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    return {**os.environ, "PATH": path, **stub.environment()}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_example_runs_offline(example, stub, tmp_path):
    """The example exits 0 with LLM_* pointing at the stub, run from an empty directory."""
    out = subprocess.run(
        [sys.executable, str(example)],
        cwd=tmp_path,
        env=example_environment(stub),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert stub.requests, "the example never called the model"


class TestForkExample:
    def test_seed_asserts_and_output(self, stub, tmp_path):
        """The ported seed example holds its asserts and shows the fork's title and the cost."""
        example = (
            Path(__file__).parent.parent / "examples/01_standalone_sdk/48_conversation_fork.py"
        )
        out = subprocess.run(
            [sys.executable, str(example)],
            cwd=tmp_path,
            env=example_environment(stub),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Fork title             : Follow-up fork" in out.stdout
        tags_line = next(line for line in out.stdout.splitlines() if line.startswith("Fork tags"))
        assert (
            "'purpose': 'a/b-test'" in tags_line
            and "'title': 'Tool-change experiment'" in tags_line
        )
        assert "EXAMPLE_COST: 0.0" in out.stdout
        commands = [
            call["function"]["arguments"]
            for request in stub.requests
            for message in request.messages
            for call in message.get("tool_calls") or ()
        ]
        assert '{"command": "echo hello-from-fork"}' in commands
        final_question = stub.requests[-1].messages[-1]["content"]
        assert final_question == "What command did you run earlier? Just tell me, no tools."
