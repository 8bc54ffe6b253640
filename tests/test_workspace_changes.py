"""File diffs against the fork point: ``FileChanges``, ``compare(a, b)`` and the suite's report.

On a conversation in memory, one persisted in a SQLite file (the states as the store loads
them back) and conversations on the agent server (in process, through the remote backend's
transport): the branches write files with the terminal, and each side's changes and patch are
those of its own directory since the fork point.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from cowconv import (
    Branch,
    Conversation,
    FileChanges,
    InvalidValueError,
    SnapshotStore,
    SQLiteStore,
    Workspace,
    compare,
    run_branches,
)
from tests.conftest import IN_PROCESS_HOST
from tests.test_workspaces import agent_writing, files_of, write_files


@pytest.fixture
def work(tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    directory.mkdir()
    write_files(directory, {"a.txt": b"one\n", "sub/b.txt": b"two\n", "gone.txt": b"bye\n"})
    return directory


def recording(work: Path, tmp_path: Path) -> Workspace:
    return Workspace(working_dir=str(work), snapshot_store=str(tmp_path / "snapshots"))


def two_branches(source: Conversation) -> tuple[Conversation, Conversation]:
    """Two copy forks of ``source``: one adds left.txt, one rewrites a.txt and deletes gone.txt."""
    left = source.fork(workspace="copy", agent=agent_writing("left.txt", "l"))
    right = source.fork(workspace="copy", agent=agent_writing("a.txt", "r"))
    for branch in (left, right):
        branch.send_message("Go.")
        branch.run()
    (Path(right.workspace.working_dir) / "gone.txt").unlink()
    right.send_message("Again.")
    right.switch_llm(agent_writing("sub/b.txt", "two\n").llm)  # same content: no change
    right.run()
    return left, right


class TestFileChanges:
    def test_between_two_snapshots(self, work, tmp_path):
        """added, modified and deleted paths; the patch is git's unified diff of them."""
        store = SnapshotStore(tmp_path / "store")
        before = store.snapshot(work).tree
        write_files(work, {"a.txt": b"ONE\n", "new/c.txt": b"c\n"})
        (work / "gone.txt").unlink()
        changes = FileChanges.between(store, before, store.snapshot(work).tree)
        assert (changes.added, changes.modified, changes.deleted) == (
            ("new/c.txt",),
            ("a.txt",),
            ("gone.txt",),
        )
        assert changes.lines() == ["M a.txt", "D gone.txt", "A new/c.txt"]
        assert changes.short() == "+1 ~1 -1"
        patch = changes.patch()
        assert "-one\n+ONE" in patch and "+c" in patch and "-bye" in patch
        assert changes.to_dict() == {
            "base": before,
            "tree": changes.tree,
            "added": ["new/c.txt"],
            "modified": ["a.txt"],
            "deleted": ["gone.txt"],
        }

    def test_the_same_snapshot_is_no_change(self, work, tmp_path):
        """From a snapshot to itself: nothing changed, an empty patch."""
        store = SnapshotStore(tmp_path / "store")
        tree = store.snapshot(work).tree
        changes = FileChanges.between(store, tree, tree)
        assert changes.changes == {} and changes.patch() == ""

    def test_bad_ids_are_clear_errors(self, work, tmp_path):
        """A snapshot id that is not 40 hex digits is an InvalidValueError."""
        store = SnapshotStore(tmp_path / "store")
        tree = store.snapshot(work).tree
        with pytest.raises(InvalidValueError, match="40 hex digits"):
            FileChanges.between(store, "HEAD", tree)


class TestCompare:
    def test_each_side_s_files_since_the_fork_point(self, work, tmp_path):
        """compare(a, b): each side's file changes in its own copy, in text and JSON."""
        source = Conversation(
            agent=agent_writing("a.txt", "base"), workspace=recording(work, tmp_path)
        )
        source.send_message("Write the base.")
        source.run()
        left, right = two_branches(source)
        diff = compare(left, right)
        assert diff.a.files is not None and diff.b.files is not None
        assert dict(diff.a.files.changes) == {"left.txt": "added"}
        assert dict(diff.b.files.changes) == {"a.txt": "modified", "gone.txt": "deleted"}
        assert "-base\n\\ No newline at end of file\n+r" in diff.b.files.patch()
        text = diff.text(width=None)
        assert "a's files since the fork point: 1 added, 0 modified, 0 deleted" in text
        assert "   A left.txt" in text and "   D gone.txt" in text
        shown = json.loads(diff.to_json())
        assert shown["a"]["files"]["added"] == ["left.txt"]
        assert shown["b"]["files"]["deleted"] == ["gone.txt"]
        assert files_of(work)["a.txt"] == b"base"  # the source's files untouched

    def test_a_fork_before_any_tool_call_starts_from_its_first_snapshot(self, work, tmp_path):
        """No snapshot before the fork point: the base is the one the fork's first call found."""
        source = Conversation(
            agent=agent_writing("a.txt", "x"), workspace=recording(work, tmp_path)
        )
        fork = source.fork(workspace="copy", agent=agent_writing("a.txt", "forked"))
        fork.send_message("Go.")
        fork.run()
        diff = compare(source, fork)
        assert diff.a.files is None  # the source recorded no snapshot
        assert diff.b.files is not None and dict(diff.b.files.changes) == {"a.txt": "modified"}

    def test_without_snapshots_files_are_none(self, work):
        """A workspace without snapshot_store: no files in the comparison, none in its text."""
        source = Conversation(agent=agent_writing("a.txt", "x"), workspace=str(work))
        diff = compare(source, source.fork())
        assert diff.a.files is None and diff.b.files is None
        assert "files" not in diff.text() and json.loads(diff.to_json())["b"]["files"] is None

    def test_states_loaded_from_sqlite(self, work, tmp_path):
        """The states a SQLite store loads back compare as the live conversations do."""
        database = tmp_path / "db"
        source = Conversation(
            agent=agent_writing("a.txt", "base"),
            workspace=recording(work, tmp_path),
            store=SQLiteStore(database),
        )
        source.send_message("Write the base.")
        source.run()
        left, right = two_branches(source)
        live = compare(left, right)
        reader = SQLiteStore(database)
        try:
            loaded = compare(reader.load(left.id), reader.load(right.id))
        finally:
            reader.close()
        assert loaded.a.files == live.a.files and loaded.b.files == live.b.files
        assert loaded.b.files is not None and loaded.b.files.patch() == live.b.files.patch()

    def test_not_a_conversation(self):
        """compare() of something that is not a conversation is an InvalidTypeError."""
        from cowconv import InvalidTypeError

        with pytest.raises(InvalidTypeError, match="compare"):
            compare("a", "b")  # type: ignore[arg-type]


class TestSuiteReport:
    def test_rows_carry_each_branch_s_files(self, work, tmp_path):
        """The report's rows, JSON, table and page show each branch's files and patch."""
        source = Conversation(
            agent=agent_writing("a.txt", "x"), workspace=recording(work, tmp_path)
        )
        source.send_message("Write.")
        source.run()
        runs = run_branches(
            source,
            [
                Branch("A", agent=agent_writing("a.txt", "branch-a")),
                Branch("B", agent=agent_writing("b/new.txt", "b")),
            ],
            workspace="copy",
        )
        report = runs.report()
        first, second = report.rows
        assert first.files is not None and dict(first.files.changes) == {"a.txt": "modified"}
        assert second.files is not None and dict(second.files.changes) == {"b/new.txt": "added"}
        assert "+branch-a" in first.patch() and "+b" in second.patch()
        rows = json.loads(report.to_json())
        assert rows[0]["files"]["modified"] == ["a.txt"]
        assert rows[1]["files"]["added"] == ["b/new.txt"]
        console = Console(width=80, record=True, file=io.StringIO())
        console.print(report.table())
        lines = console.export_text().splitlines()
        assert max(len(line) for line in lines) <= 80
        assert any("files" in line for line in lines)
        assert any("+0 ~1 -0" in line for line in lines)
        assert any("+1 ~0 -0" in line for line in lines)
        page = report.to_html()
        assert "1 added, 0 modified, 0 deleted" in page and "+branch-a" in page

    def test_without_snapshots_no_files_column(self, work):
        """Branches without snapshots: files None, no files column, an empty patch."""
        source = Conversation(agent=agent_writing("a.txt", "x"), workspace=str(work))
        runs = run_branches(source, [Branch("A", agent=agent_writing("a.txt", "y"))])
        report = runs.report()
        assert report.rows[0].files is None and report.rows[0].patch() == ""
        assert json.loads(report.to_json())[0]["files"] is None
        console = Console(width=80, record=True, file=io.StringIO())
        console.print(report.table())
        assert "files" not in console.export_text()


class TestAgentServer:
    def test_compare_and_report_of_conversations_on_the_server(
        self, work, tmp_path, stub_agent, stub, in_process_server
    ):
        """Forks with their own copies on the server: compare and the report see their files."""
        remote = Workspace(
            host=IN_PROCESS_HOST, working_dir=str(work), snapshot_store=str(tmp_path / "snaps")
        )
        source = Conversation(agent=stub_agent, workspace=remote, transport=in_process_server)
        source.send_message("Run `printf 'base' > a.txt`.")
        source.run()
        left = source.fork(workspace="copy")
        right = source.fork(workspace="copy")
        left.send_message("Run `printf 'l' > left.txt`.")
        right.send_message("Run `printf 'r' > a.txt`.")
        for branch in (left, right):
            branch.run()
        diff = compare(left, right)
        assert diff.a.files is not None and dict(diff.a.files.changes) == {"left.txt": "added"}
        assert diff.b.files is not None and dict(diff.b.files.changes) == {"a.txt": "modified"}
        assert (work / "a.txt").read_text() == "base"
        runs = run_branches(source, ["Run `printf 'x' > x.txt`."], workspace="copy")
        [row] = runs.report().rows
        assert row.files is not None and dict(row.files.changes) == {"x.txt": "added"}
        for conversation in (source, left, right, *runs):
            conversation.close()
