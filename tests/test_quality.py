"""The project's own quality gates, run as part of the test suite (and so in CI)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Slow gates (mypy alone takes minutes on a loaded machine): `-m "not quality"` skips them.
pytestmark = pytest.mark.quality


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)


class TestLint:
    def test_ruff_check(self):
        """ruff finds nothing to report."""
        result = run(sys.executable, "-m", "ruff", "check", ".")
        assert result.returncode == 0, result.stdout + result.stderr

    def test_ruff_format(self):
        """The code is formatted as ruff formats it."""
        result = run(sys.executable, "-m", "ruff", "format", "--check", ".")
        assert result.returncode == 0, result.stdout + result.stderr


# Both mypy runs share the checkout's .mypy_cache: one pytest-xdist worker runs them in turn.
@pytest.mark.xdist_group("mypy")
class TestTypes:
    @pytest.mark.slow
    def test_mypy_strict(self):
        """mypy --strict accepts the package."""
        result = run(sys.executable, "-m", "mypy", "cowconv")
        assert result.returncode == 0, result.stdout + result.stderr

    def test_conversation_overloads_type_the_backend(self):
        """``Conversation(...)`` is typed a ``RemoteConversation`` exactly when the workspace is
        a ``RemoteWorkspace``, and a fork has its source's type."""
        program = (
            "from cowconv import LLM, Agent, Conversation, RemoteWorkspace, Workspace\n"
            "agent = Agent(llm=LLM(model='openai/gpt-4o'))\n"
            "remote = Conversation(agent, RemoteWorkspace(host='http://h', working_dir='/w'))\n"
            "local = Conversation(agent, '/w')\n"
            "plain = Conversation(agent, Workspace(working_dir='/w'))\n"
            "reveal_type(remote)\n"
            "reveal_type(local)\n"
            "reveal_type(plain)\n"
            "reveal_type(remote.fork())\n"
        )
        result = run(sys.executable, "-m", "mypy", "--strict", "-c", program)
        notes = [line for line in result.stdout.splitlines() if "Revealed type" in line]
        revealed = [line.split("Revealed type is ", 1)[1].strip('"') for line in notes]
        assert revealed == [
            "cowconv.conversation.RemoteConversation",
            "cowconv.conversation.Conversation",
            "cowconv.conversation.Conversation",
            "cowconv.conversation.RemoteConversation",
        ], result.stdout
        assert result.returncode == 0, result.stdout


class TestDocs:
    def test_mkdocs_build_strict(self, tmp_path):
        """The documentation site builds with mkdocs --strict (no broken links or references)."""
        result = run(
            sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert (tmp_path / "site" / "index.html").exists()


class TestWheel:
    def test_wheel_builds_and_imports(self, tmp_path):
        """The wheel builds, carries py.typed, and cowconv imports from it."""
        result = run(
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        )
        assert result.returncode == 0, result.stdout + result.stderr
        (wheel,) = tmp_path.glob("cowconv-*.whl")
        unpacked = tmp_path / "unpacked"
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            archive.extractall(unpacked)
        assert "cowconv/py.typed" in names
        assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)
        # PYTHONPATH comes before the editable install, so this imports the wheel's copy.
        code = "import cowconv; print(cowconv.__file__, cowconv.__version__)"
        imported = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"},
            timeout=120,
        )
        assert imported.returncode == 0, imported.stderr
        location, version = imported.stdout.split()
        assert location.startswith(str(unpacked)) and version == "0.2.0"


class TestReadme:
    def test_fork_example_runs(self):
        """The README's fork example runs as written."""
        readme = (ROOT / "README.md").read_text()
        (example,) = [block.split("```", 1)[0] for block in readme.split("```python\n")[1:]]
        assert len(example.strip().splitlines()) <= 12
        result = subprocess.run(
            [sys.executable, "-c", example], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "Follow-up exploration True"

    def test_ci_runs_the_readme_test_command(self):
        """.ci/run ends with exactly the README's test command."""
        readme = (ROOT / "README.md").read_text()
        test_section = readme.split("## Test", 1)[1]
        command = test_section.split("```bash\n", 1)[1].split("\n", 1)[0]
        ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line]
        assert ci_lines[-1].endswith(command)
