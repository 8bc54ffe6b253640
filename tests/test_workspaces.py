"""Tests for cowconv.workspaces: snapshots that share structure, and forks that copy the files.

The heart is :class:`WorkspaceIsolation`: any interleaving of direct file
edits, agent runs that write files through the terminal tool and the file
editor (``create``, ``str_replace``, ``insert``, ``undo_edit``), forks with
``workspace="copy"`` (now, and from earlier events) and their first uses
leaves every conversation's directory exactly as a full copy made at its
fork point would, and never changes the source's files; in memory, on a
SQLite file and through the agent server.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pydantic import ValidationError

from cowconv import (
    LLM,
    ActionEvent,
    Agent,
    AgentErrorEvent,
    Branch,
    Conversation,
    ConversationRunError,
    CorruptStoreError,
    EventNotFoundError,
    InvalidTypeError,
    InvalidValueError,
    Message,
    MessageToolCall,
    ObservationEvent,
    RemoteConversation,
    SQLiteStore,
    Tool,
    Workspace,
    run_branches,
)
from cowconv.agent_server import InProcessTransport, create_app
from cowconv.agent_server.conversation_service import ConversationService
from cowconv.agent_server.models import StartConversationRequest
from cowconv.core.ids import id_text
from cowconv.distributed import ProcessExecutor
from cowconv.stores import open_store
from cowconv.testing import StubLLMServer, StubReply, TestLLM
from cowconv.tools.file_editor.editor import MAX_HISTORY_PER_FILE
from cowconv.workspaces import SnapshotStore, file_changes, materialize_workspace, snapshot_at
from tests.conftest import IN_PROCESS_HOST

Files = dict[str, bytes]
ROOT = Path(__file__).resolve().parent.parent


def files_of(directory: Path) -> Files:
    """Every file under ``directory`` (paths with ``/``) and its bytes; no ``.git``."""
    found: Files = {}
    for root, dirs, names in os.walk(directory):
        dirs[:] = [name for name in dirs if name != ".git"]
        for name in names:
            path = Path(root) / name
            found[path.relative_to(directory).as_posix()] = path.read_bytes()
    return found


def write_files(directory: Path, files: Files) -> None:
    for name, content in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def git(directory: Path, *arguments: str) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    environment.update(
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t.invalid",
    )
    done = subprocess.run(
        ["git", *arguments],
        cwd=directory,
        env=environment,
        capture_output=True,
        timeout=60,
        check=True,
        text=True,
    )
    return done.stdout


def terminal_call(call_id: str, command: str) -> Message:
    tool_call = MessageToolCall(
        id=call_id, name="terminal", arguments=json.dumps({"command": command})
    )
    return Message(role="assistant", content="", tool_calls=[tool_call])


def write_command(path: str, content: str) -> str:
    """The shell command that writes ``content`` to ``path`` (its directory made first)."""
    directory = os.path.dirname(path)
    command = f"printf '%s' '{content}' > {path}"
    return f"mkdir -p {directory} && {command}" if directory else command


def writing_llm(path: str, content: str) -> TestLLM:
    """A scripted model that writes ``content`` to ``path`` with the terminal, then answers."""
    command = write_command(path, content)
    return TestLLM.from_messages(
        [
            terminal_call(f"call-{uuid.uuid4().hex[:8]}", command),
            Message(role="assistant", content="Written."),
        ]
    )


def agent_writing(path: str, content: str) -> Agent:
    return Agent(llm=writing_llm(path, content), tools=[Tool(name="terminal")])


@pytest.fixture
def store(tmp_path: Path) -> SnapshotStore:
    return SnapshotStore(tmp_path / "store")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    directory.mkdir()
    write_files(directory, {"a.txt": b"one", "sub/b.txt": b"two", "sub/deep/c.txt": b"three"})
    return directory


# -- the store ---------------------------------------------------------------------------------


class TestSnapshotStore:
    def test_a_checkout_is_the_directory_as_it_was(self, store, work, tmp_path):
        """A snapshot checked out later holds exactly the files of its moment."""
        before = files_of(work)
        first = store.snapshot(work).tree
        write_files(work, {"a.txt": b"changed", "new.txt": b"new"})
        (work / "sub" / "b.txt").unlink()
        second = store.snapshot(work).tree
        store.checkout(first, tmp_path / "first")
        store.checkout(second, tmp_path / "second")
        assert files_of(tmp_path / "first") == before
        assert files_of(tmp_path / "second") == files_of(work)

    def test_unchanged_files_and_directories_are_shared(self, store, work):
        """Two snapshots share every blob and subtree that did not change (same ids)."""
        first = store.snapshot(work).tree
        write_files(work, {"a.txt": b"changed"})
        second = store.snapshot(work).tree
        old, new = store.files(first), store.files(second)
        assert old["sub/b.txt"] == new["sub/b.txt"] and old["a.txt"] != new["a.txt"]
        subtree = git_tree_entry(store, first, "sub"), git_tree_entry(store, second, "sub")
        assert subtree[0] == subtree[1]
        assert store.diff(first, second) == {"a.txt": "modified"}

    def test_same_files_same_id(self, store, work, tmp_path):
        """The id is the content's: another directory with the same files has the same id."""
        other = tmp_path / "other"
        shutil.copytree(work, other)
        assert store.snapshot(work) == store.snapshot(other)

    def test_gitignored_and_large_files_are_left_out_and_said_so(self, tmp_path, work):
        """.gitignore'd files are not recorded; files over the size limit are named."""
        store = SnapshotStore(tmp_path / "limited", max_file_size=10)
        write_files(work, {".gitignore": b"*.log\n", "x.log": b"log", "big.bin": b"b" * 11})
        taken = store.snapshot(work)
        assert taken.left_out == ("big.bin",)
        assert set(store.files(taken.tree)) == {
            ".gitignore",
            "a.txt",
            "sub/b.txt",
            "sub/deep/c.txt",
        }

    def test_a_file_that_grows_too_large_is_no_longer_recorded(self, tmp_path, work):
        """A recorded file grown past the limit leaves the next snapshot (not kept stale)."""
        store = SnapshotStore(tmp_path / "limited", max_file_size=10)
        store.snapshot(work)
        write_files(work, {"a.txt": b"x" * 20})
        taken = store.snapshot(work)
        assert "a.txt" not in store.files(taken.tree) and taken.left_out == ("a.txt",)

    def test_a_users_repository_is_not_touched(self, store, work):
        """In a git repository: HEAD, branches, the index, the stash and status are unchanged."""
        git(work, "init", "-q", "-b", "main")
        git(work, "add", "a.txt")
        git(work, "commit", "-q", "-m", "first")
        write_files(work, {"a.txt": b"stashed"})
        git(work, "stash")
        write_files(work, {"a.txt": b"edited", "untracked.txt": b"u"})
        git(work, "add", "sub/b.txt")
        index = (work / ".git" / "index").read_bytes()
        questions = (
            ["status", "--porcelain"],
            ["stash", "list"],
            ["branch", "-a"],
            ["rev-parse", "HEAD"],
        )
        seen = [git(work, *question) for question in questions]
        taken = store.snapshot(work)
        write_files(work, {"a.txt": b"again"})
        store.restore(taken.tree, work)
        assert (work / ".git" / "index").read_bytes() == index
        assert [git(work, *question) for question in questions] == seen
        assert ".git/HEAD" not in store.files(taken.tree)
        assert (work / "a.txt").read_bytes() == b"edited"

    def test_restore_puts_files_back_and_returns_what_was_there(self, store, work):
        """restore() rewrites, removes and re-adds files; its result restores the undone state."""
        first = store.snapshot(work).tree
        write_files(work, {"a.txt": b"later", "added.txt": b"added"})
        (work / "sub" / "deep" / "c.txt").unlink()
        later = files_of(work)
        undo = store.restore(first, work).tree
        assert files_of(work) == {"a.txt": b"one", "sub/b.txt": b"two", "sub/deep/c.txt": b"three"}
        store.restore(undo, work)
        assert files_of(work) == later

    def test_modes_and_symlinks_survive(self, store, work, tmp_path):
        """An executable keeps its bit and a symlink stays a link."""
        (work / "run.sh").write_text("#!/bin/sh\n")
        (work / "run.sh").chmod(0o755)
        (work / "link").symlink_to("a.txt")
        store.checkout(store.snapshot(work).tree, tmp_path / "copy")
        assert os.access(tmp_path / "copy" / "run.sh", os.X_OK)
        assert os.readlink(tmp_path / "copy" / "link") == "a.txt"

    def test_a_missing_object_is_a_clear_error(self, store, work, tmp_path):
        """A snapshot whose objects are gone: CorruptStoreError, and the store still works."""
        tree = store.snapshot(work).tree
        shutil.rmtree(store.directory / "objects.git" / "objects" / tree[:2])
        with pytest.raises(CorruptStoreError, match=tree):
            store.checkout(tree, tmp_path / "copy")
        assert not (tmp_path / "copy").exists() or not any((tmp_path / "copy").iterdir())
        write_files(work, {"z.txt": b"z"})
        assert "z.txt" in store.files(store.snapshot(work).tree)

    def test_bad_arguments(self, store, work, tmp_path):
        """Bad ids, paths and targets are clear errors."""
        with pytest.raises(InvalidValueError):
            store.files("HEAD")
        with pytest.raises(InvalidTypeError):
            store.snapshot(3)  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError, match="not a directory"):
            store.snapshot(tmp_path / "nowhere")
        tree = store.snapshot(work).tree
        with pytest.raises(InvalidValueError, match="not an empty directory"):
            store.checkout(tree, work)
        with pytest.raises(InvalidValueError):
            SnapshotStore(tmp_path, max_file_size=-1)

    def test_patch_is_a_unified_diff(self, store, work):
        """patch() shows the lines that changed."""
        first = store.snapshot(work).tree
        write_files(work, {"a.txt": b"uno\n"})
        patch = store.patch(first, store.snapshot(work).tree)
        assert "a/a.txt" in patch and "+uno" in patch


def git_tree_entry(store: SnapshotStore, tree: str, name: str) -> str:
    listing = store._git("ls-tree", tree).decode()
    for line in listing.splitlines():
        meta, _, path = line.partition("\t")
        if path == name:
            return meta.split()[2]
    raise AssertionError(f"no {name} in {tree}")


# -- recording and forking -------------------------------------------------------------------


def recording_workspace(work: Path, tmp_path: Path) -> Workspace:
    return Workspace(working_dir=str(work), snapshot_store=str(tmp_path / "store"))


class TestRecording:
    def test_runs_record_the_files_around_each_tool_call(self, work, tmp_path):
        """The first action of a step names the files before it, the observation those after."""
        conversation = Conversation(
            agent=agent_writing("a.txt", "written"), workspace=recording_workspace(work, tmp_path)
        )
        conversation.send_message("Write it.")
        conversation.run()
        events = list(conversation.state.branch)
        action = next(e for e in events if isinstance(e, ActionEvent))
        observation = next(e for e in events if isinstance(e, ObservationEvent))
        store = SnapshotStore(tmp_path / "store")
        assert store.read(action.workspace_snapshot, "a.txt") == b"one"
        assert store.read(observation.workspace_snapshot, "a.txt") == b"written"
        assert snapshot_at(events) == observation.workspace_snapshot

    def test_without_a_store_nothing_is_recorded(self, work):
        """A workspace without snapshot_store records nothing (OpenHands' SDK's events)."""
        conversation = Conversation(agent=agent_writing("a.txt", "x"), workspace=str(work))
        conversation.send_message("Write it.")
        conversation.run()
        dumped = [e.model_dump(mode="json") for e in conversation.state.branch]
        assert all("workspace_snapshot" not in data for data in dumped)
        assert "snapshot_store" not in conversation.state.workspace.model_dump(mode="json")

    def test_snapshot_ids_survive_a_sqlite_store(self, work, tmp_path):
        """The ids are in the events: a conversation read back from SQLite has them."""
        store = SQLiteStore(tmp_path / "db")
        conversation = Conversation(
            agent=agent_writing("a.txt", "x"),
            workspace=recording_workspace(work, tmp_path),
            store=store,
            conversation_id="0f6c2a4e-0d6f-4a3e-9a55-1b2c3d4e5f60",
        )
        conversation.send_message("Write it.")
        conversation.run()
        loaded = SQLiteStore(tmp_path / "db").load(conversation.id)
        assert snapshot_at(loaded.branch) == snapshot_at(conversation.state.branch) is not None
        assert loaded.workspace.snapshot_store == str(tmp_path / "store")


class TestForkWorkspace:
    def test_shared_is_the_default(self, work):
        """fork() shares the directory, as OpenHands' SDK does."""
        source = Conversation(agent=agent_writing("a.txt", "x"), workspace=str(work))
        assert source.fork().workspace.working_dir == str(work)
        assert source.fork(workspace="shared", title="t").workspace.working_dir == str(work)

    def test_copy_gets_the_files_and_isolation(self, work):
        """A copy fork's files equal the source's now; a run in the fork leaves the source alone."""
        source = Conversation(agent=agent_writing("a.txt", "x"), workspace=str(work))
        before = files_of(work)
        fork = source.fork(workspace="copy", agent=agent_writing("a.txt", "in the fork"))
        fork_dir = Path(fork.workspace.working_dir)
        assert fork_dir != work and files_of(fork_dir) == before
        fork.send_message("Write it.")
        fork.run()
        assert files_of(work) == before
        assert (fork_dir / "a.txt").read_bytes() == b"in the fork"

    def test_from_event_id_gets_the_files_of_that_event(self, work, tmp_path):
        """A copy fork from an earlier event has the files as they were after it."""
        source = Conversation(
            agent=agent_writing("a.txt", "first"), workspace=recording_workspace(work, tmp_path)
        )
        source.send_message("Write first.")
        source.run()
        middle = [e for e in source.state.branch if isinstance(e, ObservationEvent)][-1]
        source.switch_llm(writing_llm("a.txt", "second"))
        source.send_message("Write second.")
        source.run()
        assert (work / "a.txt").read_bytes() == b"second"
        fork = source.fork(from_event_id=middle.id, workspace="copy")
        assert (Path(fork.workspace.working_dir) / "a.txt").read_bytes() == b"first"
        assert fork.state.branch[-1].id == middle.id

    def test_a_path_target(self, work, tmp_path):
        """workspace=<path> checks the files out there (a new or empty directory)."""
        source = Conversation(agent=agent_writing("a.txt", "x"), workspace=str(work))
        fork = source.fork(workspace=tmp_path / "mine")
        assert fork.workspace.working_dir == str(tmp_path / "mine")
        assert files_of(tmp_path / "mine") == files_of(work)
        with pytest.raises(InvalidValueError):
            source.fork(workspace=work)

    def test_the_forks_terminal_goes_on_in_the_copy(self, work):
        """A source's terminal left in a subdirectory: the copy fork's starts in its own copy."""
        script = [terminal_call("c1", "cd sub"), Message(role="assistant", content="In.")]
        agent = Agent(llm=TestLLM.from_messages(script), tools=[Tool(name="terminal")])
        source = Conversation(agent=agent, workspace=str(work))
        source.send_message("Go in.")
        source.run()
        fork = source.fork(workspace="copy")
        copied = fork.fork(workspace="copy")  # a copy of a copy maps both origins
        for conversation in (fork, copied):
            conversation.switch_llm(writing_llm("here.txt", "made"))
            conversation.send_message("Write here.")
            conversation.run()
            made = Path(conversation.workspace.working_dir) / "sub" / "here.txt"
            assert made.read_bytes() == b"made"
        assert not (work / "sub" / "here.txt").exists()
        assert not (Path(fork.workspace.working_dir) / "here.txt").exists()

    def test_no_snapshot_recorded_is_a_clear_error(self, work):
        """From an event no snapshot covers: InvalidValueError; an unknown event: not found."""
        source = Conversation(agent=agent_writing("a.txt", "x"), workspace=str(work))
        first = source.send_message("hi")
        with pytest.raises(InvalidValueError, match="no workspace snapshot"):
            source.fork(from_event_id=first.id, workspace="copy")
        with pytest.raises(EventNotFoundError):
            source.fork(from_event_id="nope", workspace="copy")
        with pytest.raises(InvalidTypeError):
            source.fork(workspace=3)  # type: ignore[arg-type]

    def test_restore_workspace_and_navigate_to(self, work, tmp_path):
        """navigate_to moves no file; restore_workspace does, and can be undone."""
        source = Conversation(
            agent=agent_writing("a.txt", "first"), workspace=recording_workspace(work, tmp_path)
        )
        start = source.send_message("Write.")
        source.run()
        action = next(e for e in source.state.branch if isinstance(e, ActionEvent))
        after = files_of(work)
        source.navigate_to(start.id)
        assert files_of(work) == after
        undo = source.restore_workspace(action.id)
        assert (work / "a.txt").read_bytes() == b"one"
        SnapshotStore(tmp_path / "store").restore(undo, work)
        assert files_of(work) == after


# -- lazy copies -------------------------------------------------------------------------------


def lazy_fork(work: Path, tmp_path: Path) -> tuple[Conversation, Conversation, Files]:
    """A source on ``work`` recording into ``tmp_path/store``, its copy fork, the files then."""
    source = Conversation(
        agent=agent_writing("a.txt", "x"), workspace=recording_workspace(work, tmp_path)
    )
    before = files_of(work)
    return source, source.fork(workspace="copy"), before


def change_source(work: Path) -> None:
    write_files(work, {"a.txt": b"changed after the fork", "new.txt": b"new"})
    (work / "sub" / "b.txt").unlink()


class TestLazyCopy:
    def test_the_fork_makes_an_empty_directory_and_records_the_snapshot(self, work, tmp_path):
        """fork(workspace='copy') writes no file: the directory waits for the fork point's tree."""
        _, fork, before = lazy_fork(work, tmp_path)
        directory = Path(fork.state.workspace.working_dir)
        store = SnapshotStore(tmp_path / "store")
        tree = store.pending(directory)
        assert directory.is_dir() and list(directory.iterdir()) == []
        assert tree is not None and {p: store.read(tree, p) for p in store.files(tree)} == before

    @pytest.mark.parametrize("use", ["workspace", "materialize", "run"])
    def test_first_use_writes_the_files_of_the_fork_point(self, work, tmp_path, use):
        """Each first use writes the files as they were at the fork, whatever the source did."""
        source, fork, before = lazy_fork(work, tmp_path)
        change_source(work)
        after = files_of(work)
        directory = Path(fork.state.workspace.working_dir)
        store = SnapshotStore(tmp_path / "store")
        assert store.pending(directory) is not None  # not used yet
        expected = before
        if use == "workspace":
            assert fork.workspace.working_dir == str(directory)
        elif use == "materialize":
            assert materialize_workspace(fork.state.workspace) == fork.state.workspace
        elif use == "run":
            fork.send_message("Write it.")
            fork.run()
            expected = {**before, "a.txt": b"x"}
            action = next(e for e in fork.state.branch if isinstance(e, ActionEvent))
            assert store.read(action.workspace_snapshot, "a.txt") == before["a.txt"]
        assert store.pending(directory) is None
        assert files_of(directory) == expected
        assert files_of(work) == after

    def test_restore_workspace_first_writes_the_files_it_undoes_to(self, work, tmp_path):
        """restore_workspace on an unused copy: its undo id is the fork point's files."""
        source = Conversation(
            agent=agent_writing("a.txt", "first"), workspace=recording_workspace(work, tmp_path)
        )
        source.send_message("Write first.")
        source.run()
        action = next(e for e in source.state.branch if isinstance(e, ActionEvent))
        at_fork = files_of(work)
        fork = source.fork(workspace="copy")
        change_source(work)
        store = SnapshotStore(tmp_path / "store")
        directory = Path(fork.state.workspace.working_dir)
        tree = store.pending(directory)
        undo = fork.restore_workspace(action.id)
        assert undo == tree and store.pending(directory) is None
        assert files_of(directory) == {**at_fork, "a.txt": b"one"}
        store.restore(undo, directory)
        assert files_of(directory) == at_fork

    def test_the_store_sees_an_unused_copy_as_its_snapshot_and_writes_nothing(self, work, tmp_path):
        """snapshot() answers the snapshot a copy waits for; restore() makes it wait for
        another; neither writes a file, and the first use writes the last one asked for."""
        source, fork, before = lazy_fork(work, tmp_path)
        store = SnapshotStore(tmp_path / "store")
        directory = Path(fork.state.workspace.working_dir)
        tree = store.pending(directory)
        change_source(work)
        later = store.snapshot(work).tree
        assert store.snapshot(directory).tree == tree
        assert store.restore(later, directory).tree == tree
        assert store.pending(directory) == later and list(directory.iterdir()) == []
        assert files_of(Path(fork.workspace.working_dir)) == files_of(work) != before

    def test_a_fork_of_an_unused_fork_writes_nothing_and_gets_the_same_files(self, work, tmp_path):
        """Copying a copy still waiting for its files copies the snapshot it waits for."""
        _, fork, before = lazy_fork(work, tmp_path)
        change_source(work)
        second = fork.fork(workspace="copy")
        first_dir = Path(fork.state.workspace.working_dir)
        assert list(first_dir.iterdir()) == []
        assert files_of(Path(second.workspace.working_dir)) == before
        assert files_of(Path(fork.workspace.working_dir)) == before

    def test_many_threads_and_processes_at_once_write_the_files_once(self, work, tmp_path):
        """Eight threads and two processes materialize one copy together: one of them writes."""
        _, fork, before = lazy_fork(work, tmp_path)
        workspace = fork.state.workspace
        code = (
            "import sys; from cowconv.workspaces import SnapshotStore; "
            "print(SnapshotStore(sys.argv[1]).materialize(sys.argv[2]))"
        )
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", code, workspace.snapshot_store, workspace.working_dir],
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            for _ in range(2)
        ]
        barrier = threading.Barrier(8)
        results: list[bool] = []

        def materialize() -> None:
            barrier.wait(timeout=60)
            results.append(
                SnapshotStore(workspace.snapshot_store).materialize(workspace.working_dir)
            )

        threads = [threading.Thread(target=materialize) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        answers = [process.communicate(timeout=300)[0].strip() for process in processes]
        assert all(process.returncode == 0 for process in processes)
        assert results.count(True) + answers.count("True") == 1
        assert len(results) == 8 and sorted(set(answers)) <= ["False", "True"]
        assert files_of(Path(workspace.working_dir)) == before

    def test_a_missing_snapshot_is_a_clear_error_and_the_copy_stays_pending(self, work, tmp_path):
        """Objects removed before first use: CorruptStoreError, the run says so, nothing lost."""
        _, fork, _ = lazy_fork(work, tmp_path)
        store = SnapshotStore(tmp_path / "store")
        directory = Path(fork.state.workspace.working_dir)
        tree = store.pending(directory)
        assert tree is not None
        hidden = tmp_path / "hidden"
        shutil.move(store.directory / "objects.git" / "objects" / tree[:2], hidden)
        with pytest.raises(CorruptStoreError, match=tree):
            materialize_workspace(fork.state.workspace)
        fork.send_message("Write it.")
        with pytest.raises(ConversationRunError):
            fork.run()
        last = fork.state.branch[-1]
        assert isinstance(last, AgentErrorEvent) and tree in last.error
        assert "cannot write the workspace's files" in last.error
        assert store.pending(directory) == tree
        shutil.move(hidden, store.directory / "objects.git" / "objects" / tree[:2])
        assert files_of(Path(fork.workspace.working_dir)) == files_of(work)

    def test_an_eager_checkout_replaces_an_unused_lazy_one(self, store, work, tmp_path):
        """A lazy copy removed unused, then an eager checkout there: no old snapshot comes back."""
        first = store.snapshot(work).tree
        store.checkout(first, tmp_path / "copy", lazy=True)
        shutil.rmtree(tmp_path / "copy")
        write_files(work, {"a.txt": b"later"})
        later = store.snapshot(work).tree
        store.checkout(later, tmp_path / "copy")
        assert store.pending(tmp_path / "copy") is None
        assert store.materialize(tmp_path / "copy") is False
        assert files_of(tmp_path / "copy") == files_of(work)

    def test_a_lazy_checkout_refuses_what_an_eager_one_refuses(self, store, work, tmp_path):
        """lazy=True checks the snapshot and the target as checkout() does."""
        tree = store.snapshot(work).tree
        with pytest.raises(InvalidValueError, match="not an empty directory"):
            store.checkout(tree, work, lazy=True)
        with pytest.raises(CorruptStoreError):
            store.checkout("0" * 40, tmp_path / "copy", lazy=True)
        with pytest.raises(InvalidTypeError):
            materialize_workspace(str(work))  # type: ignore[arg-type]
        assert store.pending(work) is None and store.materialize(work) is False


# -- a conversation's own size limit -----------------------------------------------------------

BIG = "x" * 20  # over the limit of 10 bytes these tests set


def limited_workspace(work: Path, tmp_path: Path, host: str | None = None) -> Workspace:
    return Workspace(
        working_dir=str(work),
        snapshot_store=str(tmp_path / "store"),
        max_snapshot_file_size=10,
        host=host,
    )


class TestMaxSnapshotFileSize:
    def test_the_limit_is_checked(self, work):
        """A negative, a bool, a fraction or a text limit is refused; 0 and None are limits,
        and so is a whole float (JSON Schema's integer, which the agent server publishes,
        includes 7118.0: schemathesis sent it)."""
        for bad in (-1, True, 1.5, -2.0, "10"):
            with pytest.raises(ValidationError, match="max_snapshot_file_size"):
                Workspace(working_dir=str(work), max_snapshot_file_size=bad)
        assert (
            Workspace(working_dir=str(work), max_snapshot_file_size=0).max_snapshot_file_size == 0
        )
        whole = Workspace.model_validate_json(
            json.dumps({"working_dir": str(work), "max_snapshot_file_size": 7118.0})
        )
        assert whole.max_snapshot_file_size == 7118
        assert type(whole.max_snapshot_file_size) is int
        plain = Workspace(working_dir=str(work)).model_dump(mode="json")
        assert "max_snapshot_file_size" not in plain
        with pytest.raises(InvalidValueError, match=">= 0"):
            SnapshotStore(work.parent / "store").snapshot(work, max_file_size=-1)

    @pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
    def test_a_conversations_limit_leaves_its_large_files_out(self, work, tmp_path, kind, request):
        """Runs and copies use the conversation's limit; SQLite and PostgreSQL store it and
        load it again."""
        location = {
            "memory": None,
            "sqlite": str(tmp_path / "db"),
            "postgres": request.getfixturevalue("postgres_dsn") if kind == "postgres" else None,
        }[kind]
        store = None if location is None else open_store(location)
        options: dict[str, Any] = {} if store is None else {"store": store}
        source = Conversation(
            agent=agent_writing("big.txt", BIG),
            workspace=limited_workspace(work, tmp_path),
            **options,
        )
        source.send_message("Write it.")
        source.run()
        snapshots = SnapshotStore(tmp_path / "store")  # its own limit: the default 10 MiB
        observation = [e for e in source.state.branch if isinstance(e, ObservationEvent)][-1]
        assert (work / "big.txt").read_text() == BIG
        assert set(snapshots.files(observation.workspace_snapshot)) == set(files_of(work)) - {
            "big.txt"
        }
        fork = source.fork(workspace="copy")
        assert fork.state.workspace.max_snapshot_file_size == 10
        assert files_of(Path(fork.workspace.working_dir)) == {
            k: v for k, v in files_of(work).items() if k != "big.txt"
        }
        if store is None:
            return
        with open_store(location) as another:  # another connection: read from the database
            assert another.load(source.id).workspace.max_snapshot_file_size == 10
            assert another.load(fork.id).workspace == fork.state.workspace
        source.close()
        reopened = Conversation.resume(store, source.id)
        assert reopened.state.workspace.max_snapshot_file_size == 10
        reopened.switch_llm(writing_llm("other.txt", BIG))
        reopened.send_message("Write another.")
        reopened.run()
        last = [e for e in reopened.state.branch if isinstance(e, ObservationEvent)][-1]
        assert "other.txt" not in snapshots.files(last.workspace_snapshot)
        assert "a.txt" in snapshots.files(last.workspace_snapshot)

    def test_through_the_agent_server_and_after_its_restart(self, work, tmp_path, stub):
        """The server records with the conversation's limit, shows it, and keeps it on restart."""
        agent = Agent(llm=LLM(**stub.llm_settings()), tools=[Tool(name="terminal")])
        data = tmp_path / "data"
        snapshots = SnapshotStore(tmp_path / "store")
        with InProcessTransport(create_app(data_dir=data)) as server:
            source = Conversation(
                agent=agent,
                workspace=limited_workspace(work, tmp_path, IN_PROCESS_HOST),
                transport=server,
            )
            source.send_message(f"Run `{write_command('big.txt', BIG)}`.")
            source.run()
            info = get_json(server, f"/api/conversations/{source.id}")
            assert info["workspace"]["max_snapshot_file_size"] == 10
            fork = source.fork(workspace="copy")
            copy = Path(
                get_json(server, f"/api/conversations/{fork.id}")["workspace"]["working_dir"]
            )
            assert (work / "big.txt").read_text() == BIG
            assert files_of(copy) == {k: v for k, v in files_of(work).items() if k != "big.txt"}
            conversation_id = source.id
        with InProcessTransport(create_app(data_dir=data)) as server:
            info = get_json(server, f"/api/conversations/{conversation_id}")
            assert info["workspace"]["max_snapshot_file_size"] == 10
            attached = RemoteConversation.attach(
                IN_PROCESS_HOST, str(conversation_id), working_dir=str(work), transport=server
            )
            attached.send_message(f"Run `{write_command('other.txt', BIG)}`.")
            attached.run()
            last = [e for e in attached.state.branch if isinstance(e, ObservationEvent)][-1]
            assert (work / "other.txt").read_text() == BIG
            assert "other.txt" not in snapshots.files(last.workspace_snapshot)
            attached.close()


# -- the file editor in copies ------------------------------------------------------------------


def editing_llm(*calls: dict[str, Any]) -> TestLLM:
    """A scripted model that makes ``calls`` with the file editor, one per step, then answers."""
    script = [editor_call(f"edit-{number}-{uuid.uuid4().hex[:6]}", call) for number, call in
              enumerate(calls)]  # fmt: skip
    return TestLLM.from_messages([*script, Message(role="assistant", content="Edited.")])


class TestFileEditorInCopies:
    @pytest.mark.parametrize("kind", ["memory", "sqlite"])
    def test_a_copy_undoes_its_own_history_in_its_own_files(self, work, tmp_path, kind):
        """Edits, a copy fork now and one from an earlier event: each undoes in its own files."""
        options: dict[str, Any] = {}
        if kind == "sqlite":
            options["store"] = SQLiteStore(tmp_path / "db")
        tools = [Tool(name="file_editor")]
        path = str(work / "a.txt")
        source = Conversation(
            agent=Agent(
                llm=editing_llm(
                    {"command": "str_replace", "path": path, "old_str": "one", "new_str": "two"},
                    {"command": "insert", "path": path, "insert_line": 1, "new_str": "three"},
                ),
                tools=tools,
            ),
            workspace=recording_workspace(work, tmp_path),
            **options,
        )
        source.send_message("Edit a.txt twice.")
        source.run()
        assert (work / "a.txt").read_text() == "twothree\n"  # "two" had no newline
        first_edit = [e for e in source.state.branch if isinstance(e, ObservationEvent)][0]
        now = source.fork(workspace="copy")
        early = source.fork(from_event_id=first_edit.id, workspace="copy")
        for fork, expected in ((now, "two"), (early, "one")):
            target = str(Path(fork.state.workspace.working_dir) / "a.txt")
            fork.switch_llm(editing_llm({"command": "undo_edit", "path": target}))
            fork.send_message("Undo.")
            fork.run()
            assert Path(target).read_text() == expected
        assert (work / "a.txt").read_text() == "twothree\n"
        # The source's own history is untouched by its forks' undos.
        source.switch_llm(editing_llm({"command": "undo_edit", "path": path}))
        source.send_message("Undo.")
        source.run()
        assert (work / "a.txt").read_text() == "two"


# -- the isolation machine ---------------------------------------------------------------------

PATHS = ["a.txt", "sub/b.txt", "sub/deep/c.txt", "d.txt"]
ALPHABET = "abcxyz019"
contents = st.text(alphabet=ALPHABET, min_size=0, max_size=6)
EDITOR_COMMANDS = ["create", "str_replace", "insert", "undo_edit"]


class Edit(NamedTuple):
    """One file_editor edit that succeeded: its observation, the file, what undo remembers."""

    event_id: str
    key: str
    command: str
    remembered: str | None  # None: an undo_edit (it forgets the last)


def undo_history(edits: list[Edit], key: str) -> tuple[str, ...]:
    """What undo_edit on ``key`` restores, oldest first: as the editor rebuilds it from events."""
    entries: tuple[str, ...] = ()
    for edit in edits:
        if edit.key != key:
            continue
        if edit.remembered is None:
            entries = entries[:-1]
        else:
            entries = (*entries, edit.remembered)[-MAX_HISTORY_PER_FILE:]
    return entries


def edited(
    command: str, current: bytes | None, history: tuple[str, ...], text: str, old: str, line: int
) -> tuple[str, str | None] | None:
    """What a file_editor command makes of a file: (new text, what undo remembers), or
    ``None`` when the editor refuses it (the file is then unchanged)."""
    if command == "create":
        return None if current is not None else (text, text)
    if current is None:
        return None
    content = current.decode()
    if command == "str_replace":
        if old == text or content.count(old) != 1:
            return None
        return content.replace(old, text, 1), content
    if command == "insert":
        parts = content.split("\n")
        lines = [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        if not 0 <= line <= len(lines):
            return None
        return "".join([*lines[:line], text + "\n", *lines[line:]]), content
    return (history[-1], None) if history else None


def editor_call(call_id: str, arguments: dict[str, Any]) -> Message:
    tool_call = MessageToolCall(id=call_id, name="file_editor", arguments=json.dumps(arguments))
    return Message(role="assistant", content="", tool_calls=[tool_call])


class WorkspaceIsolation(RuleBasedStateMachine):
    """Every conversation's directory is the full copy made at its fork point, then its own edits.

    The model of a directory is a dict of its files; a copy fork copies the
    dict. ``recorded`` maps each event that names a snapshot to the files
    then (what a fork from an event gets: the last one at or before it).
    """

    root: Path
    store: SQLiteStore | None
    transport: httpx.BaseTransport | None = None
    stub: StubLLMServer | None = None

    conversations = Bundle("conversations")

    def __init__(self) -> None:
        super().__init__()
        self.pairs: list[tuple[Conversation, Files]] = []
        self.recorded: dict[str, Files] = {}
        self.edits: list[list[Edit]] = []  # per pair: its branch's file_editor edits, in order
        self.calls: dict[str, tuple[str, ...]] = {}  # action event id -> what its call does
        self.dangling: dict[int, list[str]] = {}  # pair -> its unanswered actions (a fork's)

    def _new(self, **options: object) -> Conversation:
        if self.store is not None:
            options["store"] = self.store
        if self.transport is not None:
            options["transport"] = self.transport
        return Conversation(**options)  # type: ignore[arg-type]

    @rule(target=conversations, files=st.dictionaries(st.sampled_from(PATHS), contents))
    def create(self, files):
        directory = self.root / uuid.uuid4().hex
        directory.mkdir()
        encoded = {name: text.encode() for name, text in files.items()}
        write_files(directory, encoded)
        host = None if self.transport is None else IN_PROCESS_HOST
        workspace = Workspace(
            working_dir=str(directory), snapshot_store=str(self.root / "store"), host=host
        )
        tools = [Tool(name="terminal"), Tool(name="file_editor")]
        if self.stub is None:
            agent = Agent(llm=writing_llm("a.txt", ""), tools=tools)
        else:
            agent = Agent(llm=LLM(**self.stub.llm_settings()), tools=tools)
        conversation = self._new(agent=agent, workspace=workspace)
        self.pairs.append((conversation, encoded))
        self.edits.append([])
        return len(self.pairs) - 1

    @rule(index=conversations, path=st.sampled_from(PATHS), text=contents)
    def edit_directly(self, index, path, text):
        conversation, files = self.pairs[index]
        write_files(Path(conversation.workspace.working_dir), {path: text.encode()})
        files[path] = text.encode()

    @rule(index=conversations, path=st.sampled_from(PATHS))
    def delete_directly(self, index, path):
        conversation, files = self.pairs[index]
        (Path(conversation.workspace.working_dir) / path).unlink(missing_ok=True)
        files.pop(path, None)

    @rule(index=conversations, path=st.sampled_from(PATHS), text=contents)
    def run_agent(self, index, path, text):
        """A run whose one call writes a file with the terminal."""
        conversation, files = self.pairs[index]
        seen = len(conversation.state.branch)
        made = self._make_dangling_calls(index, files)
        before = dict(files)
        if self.stub is None:
            conversation.switch_llm(writing_llm(path, text))
            conversation.send_message(f"Write {path}.")
        else:  # on the server: the stub LLM runs the command in backticks with the terminal
            conversation.send_message(f"Run `{write_command(path, text)}`.")
        conversation.run()
        files[path] = text.encode()
        self._record_run(conversation, seen, made, before, files, ("terminal", path, text))

    def _make_dangling_calls(self, index: int, files: Files) -> list[Files]:
        """The calls a fork from an action event has unanswered: its next run makes them
        first. A terminal write lands in the fork's directory; a file_editor path names the
        source's directory, outside the fork's workspace: refused. The files after each."""
        after: list[Files] = []
        for action_id in self.dangling.pop(index, []):
            call = self.calls[action_id]
            if call[0] == "terminal":
                files[call[1]] = call[2].encode()
            after.append(dict(files))
        return after

    def _record_run(
        self,
        conversation: Conversation,
        seen: int,
        made: list[Files],
        before: Files,
        files: Files,
        call: tuple[str, ...],
    ) -> ObservationEvent:
        """Note the files each new snapshot names (for forks from those events) and the
        run's call; the observation of that call."""
        new = list(conversation.state.branch)[seen:]
        actions = [event for event in new if isinstance(event, ActionEvent)]
        observations = [event for event in new if isinstance(event, ObservationEvent)]
        assert len(actions) == 1 and len(observations) == len(made) + 1
        for event in (*actions, *observations):
            assert event.workspace_snapshot is not None
        self.recorded[actions[0].id] = before
        self.calls[actions[0].id] = call
        for observation, after in zip(observations, [*made, dict(files)], strict=True):
            self.recorded[observation.id] = after
        return observations[-1]

    @rule(
        index=conversations,
        command=st.sampled_from(EDITOR_COMMANDS),
        path=st.sampled_from(PATHS),
        text=contents,
        line=st.integers(0, 2),
        data=st.data(),
    )
    def edit_with_the_file_editor(self, index, command, path, text, line, data):
        """A run whose one call is a file_editor command on one of the files."""
        conversation, files = self.pairs[index]
        seen = len(conversation.state.branch)
        made = self._make_dangling_calls(index, files)
        if command == "create":
            path = path.rsplit("/", 1)[-1]  # its directory may be gone (git keeps no empty one)
        elif files and data.draw(st.booleans()):
            # Mostly a file that is there; for undo_edit, one the editor changed.
            edited_paths = sorted({edit.key for edit in self.edits[index]} & set(files))
            candidates = edited_paths if command == "undo_edit" and edited_paths else sorted(files)
            path = data.draw(st.sampled_from(candidates))
        # old_str: mostly a piece of the file (found once, or more often), else any text.
        current = files.get(path, b"").decode()
        if current and data.draw(st.booleans()):
            start = data.draw(st.integers(0, len(current) - 1))
            old = current[start : data.draw(st.integers(start + 1, len(current)))]
        else:
            old = data.draw(st.text(alphabet=ALPHABET, min_size=1, max_size=2))
        history = undo_history(self.edits[index], path)
        outcome = edited(command, files.get(path), history, text, old, line)
        before = dict(files)
        # The workspace's directory as the conversation names it (not a first use: the run is).
        directory = conversation.state.workspace.working_dir
        arguments: dict[str, Any] = {"command": command, "path": os.path.join(directory, path)}
        if command == "create":
            arguments["file_text"] = text
        elif command == "str_replace":
            arguments.update(old_str=old, new_str=text)
        elif command == "insert":
            arguments.update(insert_line=line, new_str=text)
        if self.stub is None:
            script = [editor_call(f"edit-{uuid.uuid4().hex[:8]}", arguments)]
            conversation.switch_llm(
                TestLLM.from_messages([*script, Message(role="assistant", content="Edited.")])
            )
        else:  # on the server: the stub LLM answers with the call, then with text
            self.stub.script(StubReply.tool_call("file_editor", **arguments), StubReply.text("Ok."))
        conversation.send_message(f"Edit {path}.")
        conversation.run()
        if outcome is not None:
            files[path] = outcome[0].encode()
        observation = self._record_run(
            conversation, seen, made, before, files, ("file_editor", command, path)
        )
        assert observation.tool_name == "file_editor"
        if outcome is not None:
            self.edits[index].append(Edit(observation.id, path, command, outcome[1]))

    @rule(target=conversations, index=conversations)
    def fork_copy(self, index):
        conversation, files = self.pairs[index]
        fork = conversation.fork(workspace="copy")
        self.pairs.append((fork, dict(files)))
        self.edits.append(list(self.edits[index]))
        if index in self.dangling:
            self.dangling[len(self.pairs) - 1] = list(self.dangling[index])
        return len(self.pairs) - 1

    @precondition(lambda self: bool(self.pairs))
    @rule(target=conversations, index=conversations, data=st.data())
    def fork_from_event(self, index, data):
        conversation, _ = self.pairs[index]
        branch = list(conversation.state.branch)
        if not branch:
            return len(self.pairs) - 1
        position = data.draw(st.integers(0, len(branch) - 1))
        expected = next(
            (
                self.recorded[e.id]
                for e in reversed(branch[: position + 1])
                if e.id in self.recorded
            ),
            None,
        )
        if expected is None:
            with pytest.raises(InvalidValueError, match="no workspace snapshot"):
                conversation.fork(from_event_id=branch[position].id, workspace="copy")
            return index
        fork = conversation.fork(from_event_id=branch[position].id, workspace="copy")
        self.pairs.append((fork, dict(expected)))
        prefix = branch[: position + 1]
        kept = {event.id for event in prefix}
        self.edits.append([edit for edit in self.edits[index] if edit.event_id in kept])
        answered = {e.tool_call_id for e in prefix if isinstance(e, ObservationEvent)}
        self.dangling[len(self.pairs) - 1] = [
            e.id for e in prefix if isinstance(e, ActionEvent) and e.tool_call_id not in answered
        ]
        return len(self.pairs) - 1

    @rule(index=conversations, how=st.sampled_from(["workspace", "materialize"]))
    def use(self, index, how):
        """A copy fork's first use (the property, or the explicit call) writes its files."""
        conversation, _ = self.pairs[index]
        if how == "workspace":
            conversation.workspace  # noqa: B018 (the property's first use is the point)
        else:
            materialize_workspace(conversation.state.workspace)

    @invariant()
    def every_directory_is_its_model(self):
        store = SnapshotStore(self.root / "store")
        for conversation, files in self.pairs:
            # state.workspace: reading the model must not be the copy's first use.
            directory = Path(conversation.state.workspace.working_dir)
            if store.pending(directory) is not None:
                # Not used yet (never on the server: it writes a copy's files at once).
                assert self.transport is None and list(directory.iterdir()) == []
                continue
            assert files_of(directory) == files

    @invariant()
    def stored_snapshot_ids_are_the_live_ones(self):
        if self.store is None or not self.pairs:
            return
        conversation, _ = self.pairs[-1]
        loaded = self.store.load(conversation.id)
        assert snapshot_at(loaded.branch) == snapshot_at(conversation.state.branch)
        assert loaded.workspace == conversation.state.workspace

    def teardown(self) -> None:
        for conversation, _ in self.pairs:
            conversation.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "remote"])
def test_workspace_isolation(kind, tmp_path, request):
    """Forks with workspace='copy' behave as full copies at their fork point, on each backend."""
    server = request.getfixturevalue("in_process_server") if kind == "remote" else None
    stub = request.getfixturevalue("stub") if kind == "remote" else None

    class Machine(WorkspaceIsolation):
        def __init__(self) -> None:
            self.root = tmp_path / uuid.uuid4().hex
            self.root.mkdir()
            self.store = SQLiteStore(self.root / "db") if kind == "sqlite" else None
            self.transport = server
            self.stub = stub
            super().__init__()

    run_state_machine_as_test(
        Machine,
        settings=settings(
            # Through the server a run is an HTTP round trip to the stub LLM per step: fewer.
            max_examples={"memory": 40, "sqlite": 20, "remote": 6}[kind],
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# -- suites ------------------------------------------------------------------------------------


class TestSuites:
    @pytest.mark.slow
    def test_twenty_branches_on_processes_each_with_its_own_files(self, work, tmp_path):
        """20 branches write the same file at once on processes: each keeps its own content."""
        source = Conversation(
            agent=agent_writing("a.txt", "unused"), workspace=recording_workspace(work, tmp_path)
        )
        before = files_of(work)
        branches_ = [f"branch {i}" for i in range(20)]
        with ProcessExecutor(max_workers=2, progress=False) as executor:
            forks = run_branches(
                source,
                [_writing_branch(i) for i in range(len(branches_))],
                executor=executor,
                workspace="copy",
                timeout=600,
            )
        assert files_of(work) == before
        directories = {fork.workspace.working_dir for fork in forks}
        assert len(directories) == 20 and str(work) not in directories
        for index, fork in enumerate(forks):
            assert fork.state.execution_status.value == "finished"
            assert (Path(fork.workspace.working_dir) / "a.txt").read_text() == f"branch-{index}"
            expected = {**before, "a.txt": f"branch-{index}".encode()}
            assert files_of(Path(fork.workspace.working_dir)) == expected

    def test_threads_copy_too(self, work, tmp_path):
        """On the thread pool, workspace='copy' gives each branch its own directory."""
        source = Conversation(agent=agent_writing("a.txt", "x"), workspace=str(work))
        forks = run_branches(source, [_writing_branch(i) for i in range(3)], workspace="copy")
        assert (work / "a.txt").read_bytes() == b"one"
        assert [(Path(f.workspace.working_dir) / "a.txt").read_text() for f in forks] == [
            "branch-0",
            "branch-1",
            "branch-2",
        ]


def _writing_branch(index: int) -> Branch:
    return Branch(f"Write branch {index}.", agent=agent_writing("a.txt", f"branch-{index}"))


# -- the agent server --------------------------------------------------------------------------


def get_json(transport: httpx.BaseTransport, path: str) -> Any:
    """``GET path`` through the server's transport (left open: the session shares it)."""
    response = transport.handle_request(httpx.Request("GET", f"{IN_PROCESS_HOST}{path}"))
    response.read()
    assert response.status_code == 200, response.text
    return json.loads(response.text)


class TestAgentServer:
    def test_a_fork_asks_for_its_own_copy(self, work, in_process_server):
        """fork(workspace='copy') on a server: the server copies the files; GET names the copy."""
        remote = Workspace(host=IN_PROCESS_HOST, working_dir=str(work))
        source = Conversation(
            agent=agent_writing("a.txt", "x"), workspace=remote, transport=in_process_server
        )
        before = files_of(work)
        fork = source.fork(workspace="copy")
        shared = source.fork()
        info, shared_info = (
            get_json(in_process_server, f"/api/conversations/{conversation.id}")
            for conversation in (fork, shared)
        )
        copy = Path(info["workspace"]["working_dir"])
        assert copy != work and files_of(copy) == before
        assert str(work) in info["workspace"]["copied_from"]
        assert shared_info["workspace"]["working_dir"] == str(work)
        assert "copied_from" not in shared_info["workspace"]
        write_files(copy, {"a.txt": b"only in the fork"})
        assert files_of(work) == before
        with pytest.raises(InvalidValueError, match="shared' or 'copy'"):
            source.fork(workspace=str(work))
        for conversation in (source, fork, shared):
            conversation.close()

    def test_worktree_on_create_gets_its_own_copy(self, work, tmp_path):
        """OpenHands' worktree=True: the conversation works in a copy under the worktree root."""
        service = ConversationService(conversation_worktree_root=tmp_path / "worktrees")
        request = StartConversationRequest.model_validate(
            {
                "agent": {"llm": {"model": "openai/gpt-4o"}},
                "workspace": {"kind": "LocalWorkspace", "working_dir": str(work)},
                "worktree": True,
            }
        )
        info, created = asyncio.run(service.start_conversation(request))
        copy = Path(info.workspace["working_dir"])
        assert created and copy == tmp_path / "worktrees" / id_text(info.id) / work.name
        assert files_of(copy) == files_of(work)
        assert info.workspace["copied_from"][0] == str(work)
        shown = asyncio.run(service.get_conversation(info.id))
        assert shown is not None and shown.workspace["working_dir"] == str(copy)
        asyncio.run(service.close())


# -- comparing the files of two branches -----------------------------------------------------


class TestFileChanges:
    def test_each_branch_s_files_since_the_fork_point(self, work, tmp_path):
        """file_changes and `cowconv diff` show what each branch did to its own files."""
        store = SQLiteStore(tmp_path / "db")
        source = Conversation(
            agent=agent_writing("a.txt", "base"),
            workspace=recording_workspace(work, tmp_path),
            store=store,
        )
        source.send_message("Write the base.")
        source.run()
        left = source.fork(workspace="copy", agent=agent_writing("left.txt", "l"))
        right = source.fork(workspace="copy", agent=agent_writing("a.txt", "r"))
        for branch in (left, right):
            branch.send_message("Go.")
            branch.run()
        assert file_changes(left.state, right.state) == {
            "a": {"left.txt": "added"},
            "b": {"a.txt": "modified"},
        }
        environment = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)}
        shown = subprocess.run(
            [
                sys.executable,
                "-m",
                "cowconv",
                "diff",
                str(tmp_path / "db"),
                str(left.id),
                str(right.id),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=environment,
            check=True,
        )
        assert json.loads(shown.stdout)["files"] == {
            "a": {"left.txt": "added"},
            "b": {"a.txt": "modified"},
        }
        text = subprocess.run(
            [
                sys.executable,
                "-m",
                "cowconv",
                "diff",
                str(tmp_path / "db"),
                str(left.id),
                str(right.id),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=environment,
            check=True,
        ).stdout
        assert "a added left.txt" in text and "b modified a.txt" in text
