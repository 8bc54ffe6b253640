"""Tests for cowconv._cli: the cowconv command line."""

from __future__ import annotations

import json
import platform
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from cowconv import LLM, Agent, Conversation, SQLiteStore
from cowconv import __version__ as cowconv_version
from cowconv.core.history import VECTOR_IMPLEMENTATION

ROOT = Path(__file__).resolve().parent.parent
AGENT = Agent(llm=LLM(model="openai/stub-model"))


def cowconv(
    *args: str,
    cwd: Path = ROOT,
    module: str = "cowconv",
    pythonpath: Path = ROOT,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the command as a user would: output piped, no COLUMNS, a generous timeout."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pythonpath), **(env or {})},
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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
        # Each history starts with the system prompt.
        assert "7 events" in line_of("Debug") and "forked after 6 events" in line_of("Debug")
        assert "forked after 2 events" in line_of("Variant B")

    def test_draws_the_branches_inside_a_conversation(self, tmp_path):
        """A conversation that navigated shows each branch with its leaf, and the active one."""
        conversation = Conversation(
            agent=AGENT, workspace=".", persistence_dir=tmp_path, conversation_id="tree"
        )
        root, a1 = conversation.send_message("root"), conversation.send_message("a1")
        conversation.navigate_to(root.id)
        b1 = conversation.send_message("b1")
        conversation.fork(title="Fork of b", conversation_id="fork-b")
        result = cowconv("tree", str(tmp_path))
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        # The whole fork carries the branches too (as OpenHands' SDK's fork does): two of each.
        old, _ = [line for line in lines if line.lstrip(" │├└─").startswith("branch ")]
        active, _ = [line for line in lines if "active branch" in line]
        assert "3 events" in old and a1.id in old  # the system prompt, root, a1
        assert "3 events" in active and b1.id in active
        (tree_line,) = [line for line in lines if "tree " in line and "events" in line]
        indent = len(tree_line) - len(tree_line.lstrip(" │├└─"))
        assert len(old) - len(old.lstrip(" │├└─")) > indent

    def test_one_tree_by_id(self, tmp_path):
        """tree STORE ID shows only the tree that holds ID, from its root."""
        make_store(tmp_path)
        result = cowconv("tree", str(tmp_path / "cowconv.db"), "deeper")
        assert result.returncode == 0, result.stderr
        assert "CI run 42" in result.stdout and "Deeper" in result.stdout
        assert "Unrelated" not in result.stdout

    def test_unknown_id(self, tmp_path):
        """An id the store does not have is a clear one-line error on stderr, exit status 2."""
        make_store(tmp_path)
        result = cowconv("tree", str(tmp_path), "nope")
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.startswith("error: ") and "'nope'" in result.stderr
        assert len(result.stderr.splitlines()) == 1

    def test_missing_store(self, tmp_path):
        """A path with no store is a clear error on stderr and creates nothing."""
        result = cowconv("tree", str(tmp_path / "absent"))
        assert result.returncode == 2 and "no cowconv store" in result.stderr
        assert result.stdout == ""
        assert not (tmp_path / "absent").exists()

    def test_lineage_cycle_terminates(self, tmp_path):
        """Reused ids can make lineage a cycle (delete a, fork b back as a): tree still ends.

        Every conversation is printed exactly once, with or without an ID.
        """
        a = Conversation(agent=AGENT, workspace=".", persistence_dir=tmp_path, conversation_id="a")
        a.send_message("hello")
        b = a.fork(title="Bee", conversation_id="b")
        with SQLiteStore(tmp_path / "cowconv.db") as store:
            store.delete("a")
        b.fork(title="Ay again", conversation_id="a")
        whole = cowconv("tree", str(tmp_path))
        assert whole.returncode == 0, whole.stderr
        assert whole.stdout.count("Bee") == 1 and whole.stdout.count("Ay again") == 1
        for start in ("a", "b"):
            one = cowconv("tree", str(tmp_path), start)
            assert one.returncode == 0, one.stderr
            assert "Bee" in one.stdout and "Ay again" in one.stdout

    def test_titles_are_text_not_markup(self, tmp_path):
        """A title with rich markup in it is printed as written, never interpreted."""
        title = "[/bold] closing tag [red]and a colour[/red] [link=x]"
        Conversation(
            agent=AGENT,
            workspace=".",
            persistence_dir=tmp_path,
            conversation_id="c1",
            tags={"title": title},
        )
        result = cowconv("tree", str(tmp_path))
        assert result.returncode == 0, result.stderr
        assert title in result.stdout

    def test_piped_output_is_not_wrapped(self, tmp_path):
        """Piped output keeps each conversation on one line, however long its title."""
        title = "A rather long title " * 10
        Conversation(
            agent=AGENT,
            workspace=".",
            persistence_dir=tmp_path,
            conversation_id="long",
            tags={"title": title.strip()},
        )
        result = cowconv("tree", str(tmp_path))
        assert result.returncode == 0, result.stderr
        (line,) = [line for line in result.stdout.splitlines() if "long" in line]
        assert title.strip() in line and "0 events" in line

    def test_not_a_store(self, tmp_path):
        """A file that is not a cowconv store is reported, and left as it was."""
        bogus = tmp_path / "notes.db"
        bogus.write_bytes(b"just some notes, not SQLite at all" * 100)
        before = bogus.read_bytes()
        result = cowconv("tree", str(bogus))
        assert result.returncode == 2 and "cannot read" in result.stderr
        assert bogus.read_bytes() == before


class TestDiff:
    def test_two_forks_of_one_source(self, tmp_path):
        """diff prints each side, then only the events past the common prefix, - and +."""
        deeper, variant, _ = make_store(tmp_path)
        result = cowconv("diff", str(tmp_path), "deeper", "variant")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0] == "a: deeper" and lines[2] == "b: variant"
        assert lines[1].startswith("   'Deeper'  openai/stub-model  idle  $0.0000")
        assert lines[4] == "2 events in common; a has 5 more, b has 0 more"
        assert lines[5:10] == [
            f"- [{n}] MessageEvent user: {text}"
            for n, text in enumerate(["m1", "m2", "m3", "m4", "why?"], start=2)
        ]
        assert lines[10] == "cost: +$0.0000; tokens: +0"

    def test_json(self, tmp_path):
        """--json gives the whole comparison, events as their documents."""
        make_store(tmp_path)
        result = cowconv("diff", "--json", str(tmp_path / "cowconv.db"), "root", "debug")
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["common"] == 6
        assert data["a"]["events"] == []
        assert [event["kind"] for event in data["b"]["events"]] == ["MessageEvent"]
        assert data["b"]["tags"] == {} and data["b"]["title"] == "Debug"
        assert data["status_changed"] is False

    def test_width_cuts_long_lines(self, tmp_path):
        """--width cuts event lines with an ellipsis; 0 keeps them whole."""
        store = tmp_path / "store"
        source = Conversation(
            agent=AGENT, workspace=".", persistence_dir=store, conversation_id="s"
        )
        fork = source.fork(conversation_id="f")
        fork.send_message("x" * 200)
        cut = cowconv("diff", "--width", "40", str(store), "s", "f").stdout.splitlines()
        assert all(len(line) <= 40 for line in cut) and cut[-2].endswith("…")
        whole = cowconv("diff", "--width", "0", str(store), "s", "f").stdout
        assert "x" * 200 in whole

    def test_unknown_id_and_missing_store(self, tmp_path):
        """An unknown id or a missing store is one line on stderr, status 2."""
        make_store(tmp_path)
        result = cowconv("diff", str(tmp_path), "root", "nope")
        assert result.returncode == 2
        assert result.stderr == f"error: no conversation 'nope' in {tmp_path}\n"
        missing = cowconv("diff", str(tmp_path / "none"), "a", "b")
        assert missing.returncode == 2 and missing.stderr.startswith("error: no cowconv store")


class TestVersion:
    def test_version(self):
        """cowconv --version prints the installed version, the Python, and pyrsistent's vector."""
        result = cowconv("--version")
        assert result.returncode == 0
        python = platform.python_version()
        expected = (
            f"cowconv {cowconv_version} (Python {python}, pyrsistent {VECTOR_IMPLEMENTATION})"
        )
        assert result.stdout.strip() == expected


class TestServe:
    def test_help_names_the_command(self):
        """serve --help shows the name it was called by, for both ways of starting it."""
        assert "Usage: cowconv serve" in cowconv("serve", "--help").stdout
        own = cowconv("--help", module="cowconv.agent_server")
        assert own.returncode == 0 and "Usage: python -m cowconv.agent_server" in own.stdout

    def test_help_names_every_variable_whole(self):
        """serve --help at 80 columns names each $COWCONV_ variable in full, never cut."""
        text = cowconv("serve", "--help", env={"COLUMNS": "80"}).stdout
        assert max(len(line) for line in text.splitlines()) <= 80
        for name in (
            "HOST",
            "PORT",
            "DATA_DIR",
            "SESSION_API_KEY",
            "LOG_LEVEL",
            "ALLOWED_HOSTS",
            "ALLOWED_ORIGINS",
            "ALLOW_UNAUTHENTICATED",
            "MAX_BODY_SIZE",
        ):
            assert f"$COWCONV_{name}" in text, name
        assert "…" not in text

    @pytest.mark.parametrize(
        ("args", "env", "message"),
        [
            (["--port", "99999"], {}, "error: --port: input should be less than or equal to 65535"),
            ([], {"COWCONV_PORT": "-1"}, "error: $COWCONV_PORT: input should be greater than"),
            (["--session-api-key", ""], {}, "error: --session-api-key: string should have at"),
            ([], {"COWCONV_LOG_LEVEL": "loud"}, "error: $COWCONV_LOG_LEVEL: input should be"),
            (["--host", "0.0.0.0"], {}, "error: refusing to serve '0.0.0.0' without a session"),
            (["--max-body-size", "0"], {}, "error: --max-body-size: input should be greater"),
        ],
    )
    def test_invalid_settings_fail_in_one_line(self, tmp_path, args, env, message):
        """An invalid option or variable is one line on stderr naming it; nothing is created."""
        result = cowconv("serve", *args, cwd=tmp_path, env=env)
        assert result.returncode == 2
        (line,) = result.stderr.splitlines()
        assert line.startswith(message)
        assert list(tmp_path.iterdir()) == []

    def test_data_dir_that_is_a_file(self, tmp_path):
        """--data-dir naming a file is one clear line; the file is left alone."""
        file = tmp_path / "data"
        file.write_text("notes")
        result = cowconv("serve", "--port", str(free_port()), "--data-dir", str(file), cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr.splitlines() == [
            f"error: data directory {file} exists and is not a directory"
        ]
        assert file.read_text() == "notes" and sorted(tmp_path.iterdir()) == [file]

    def test_busy_port_creates_nothing(self, tmp_path):
        """A port that cannot be bound fails before the data directory is created.

        (An empty variable counts as unset.)
        """
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            result = cowconv("serve", "--port", str(port), cwd=tmp_path, env={"COWCONV_HOST": ""})
        assert result.returncode == 2
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: cannot listen on 127.0.0.1:{port}")
        assert not (tmp_path / ".cowconv").exists()

    def test_unreadable_store_fails_in_one_line(self, tmp_path):
        """A store file that cannot be opened is one line, and it is left as it was."""
        from cowconv.agent_server import STORE_FILE_NAME

        store = tmp_path / STORE_FILE_NAME
        store.write_bytes(b"not sqlite" * 100)
        result = cowconv("serve", "--port", str(free_port()), "--data-dir", str(tmp_path))
        assert result.returncode == 2
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: cannot open the store in {tmp_path}")
        assert store.read_bytes() == b"not sqlite" * 100

    def test_library_log_lines_print_once(self):
        """The server's logging setup prints a litellm log line once, not twice.

        litellm's logger has its own handler; a handler on the root logger printed it again.
        """
        code = (
            "import logging\n"
            "from cowconv.agent_server.serve import _configure_logging\n"
            "_configure_logging('info')\n"
            "from litellm._logging import verbose_logger\n"
            "verbose_logger.setLevel(logging.INFO)\n"
            "verbose_logger.info('one litellm line')\n"
            "logging.getLogger('cowconv.agent_server').info('one cowconv line')\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env={
                "PATH": "/usr/bin:/bin",
                "PYTHONPATH": str(ROOT),
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            },
        )
        assert result.returncode == 0, result.stderr
        output = result.stdout + result.stderr  # litellm's own handler writes to stdout
        assert output.count("one litellm line") == 1
        assert output.count("one cowconv line") == 1

    def test_serve_starts_the_agent_server(self, tmp_path):
        """cowconv serve runs the agent server, which answers /health."""
        port = free_port()
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
        """cowconv bench hands its arguments to the benchmark suite, under its own name."""
        result = cowconv("bench", "--help", cwd=Path("/"))
        assert result.returncode == 0 and "--quick" in result.stdout
        assert "usage: cowconv bench" in result.stdout

    def test_bench_outside_a_checkout_says_what_to_do(self, tmp_path):
        """Installed without a checkout, cowconv bench explains where the suite is."""
        site = tmp_path / "site"
        shutil.copytree(ROOT / "cowconv", site / "cowconv")
        result = cowconv("bench", "--quick", cwd=tmp_path, pythonpath=site)
        assert result.returncode == 2, result.stderr
        assert "source checkout" in result.stderr and "Traceback" not in result.stderr
        assert sorted(tmp_path.iterdir()) == [site]

    def test_bench_from_any_directory_suite_module_from_the_checkout(self, tmp_path):
        """With cowconv installed from a checkout (here: a site dir linking to it, as an
        editable install does), ``cowconv bench`` runs in any directory, while
        ``python -m benchmarks`` runs only in the checkout (what the README says)."""
        site = tmp_path / "site"
        site.mkdir()
        (site / "cowconv").symlink_to(ROOT / "cowconv", target_is_directory=True)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        result = cowconv("bench", "--help", cwd=elsewhere, pythonpath=site)
        assert result.returncode == 0, result.stderr
        assert "usage: cowconv bench" in result.stdout
        outside = cowconv("--help", cwd=elsewhere, module="benchmarks", pythonpath=site)
        assert outside.returncode == 1 and "No module named benchmarks" in outside.stderr
        inside = cowconv("--help", cwd=ROOT, module="benchmarks", pythonpath=site)
        assert inside.returncode == 0 and "--quick" in inside.stdout, inside.stderr
        assert sorted(elsewhere.iterdir()) == []


class TestWrongArguments:
    @pytest.mark.parametrize(
        "args", [["nope"], ["tree"], ["serve", "--port", "x"], ["serve", "--log-level", "loud"]]
    )
    def test_usage_errors_have_no_traceback(self, args):
        """A wrong command or argument is a usage error (status 2), never a traceback."""
        result = cowconv(*args)
        assert result.returncode == 2
        assert "Traceback" not in result.stderr and "Usage: cowconv" in result.stderr
