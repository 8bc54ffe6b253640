"""cowconv.workspaces.transfer: snapshots as packs, to a store that has none of their objects.

The property: whatever the files, a snapshot packed here and unpacked into an empty store
checks out to exactly those files; and what a branch sends back (the objects its snapshot added
to the one it started from), unpacked into a store holding only that start, checks out to
exactly the branch's files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import CorruptStoreError, InvalidTypeError, SnapshotStore, Workspace
from cowconv.workspaces.transfer import (
    SnapshotPack,
    branch_directory,
    pack_changes,
    receive_changes,
    receive_pack,
    release_directory,
    snapshot_loads,
    worker_store,
)
from tests.test_workspaces import PATHS, Files, contents, files_of, write_files

file_sets = st.dictionaries(st.sampled_from(PATHS), contents).map(
    lambda files: {name: text.encode() for name, text in files.items()}
)


def directory_with(root: Path, files: Files) -> Path:
    directory = Path(tempfile.mkdtemp(dir=root))
    write_files(directory, files)
    return directory


class TestSnapshotPack:
    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(base=file_sets, after=file_sets)
    def test_round_trip_to_a_store_without_the_objects(self, base, after):
        """Pack, unpack elsewhere, check out: the same files; the changes alone do the same."""
        root = Path(tempfile.mkdtemp())
        try:
            here = SnapshotStore(root / "here")
            work = directory_with(root, base)
            start = here.snapshot(work).tree
            shutil.rmtree(work)
            work.mkdir()
            write_files(work, after)
            end = here.snapshot(work).tree

            there = SnapshotStore(root / "there")
            SnapshotPack.of(here, [start]).unpack_into(there)
            there.checkout(start, root / "start")
            assert files_of(root / "start") == base

            back = pack_changes(here, start, [], end)
            assert back.final == end
            if start == end:
                assert back.size == 0
            back.unpack_into(there)
            there.checkout(end, root / "end")
            assert files_of(root / "end") == after
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def test_the_changes_hold_only_what_changed(self, tmp_path):
        """One changed file among many: the pack back is far smaller than the whole snapshot."""
        store = SnapshotStore(tmp_path / "store")
        files = {f"d{n % 20}/f{n}.bin": os.urandom(2000) for n in range(200)}
        work = directory_with(tmp_path, files)
        start = store.snapshot(work).tree
        write_files(work, {"d7/f7.bin": b"changed"})
        end = store.snapshot(work).tree
        whole = SnapshotPack.of(store, [start])
        changes = pack_changes(store, start, [], end)
        assert 0 < changes.size < whole.size / 10

    def test_a_pack_without_what_it_names_is_a_clear_error(self, tmp_path, work_files):
        """A pack missing the snapshot it names, or no pack at all: CorruptStoreError."""
        store = SnapshotStore(tmp_path / "store")
        tree = store.snapshot(directory_with(tmp_path, work_files)).tree
        empty = SnapshotPack(trees=(tree,), pack=b"")
        empty.unpack_into(SnapshotStore(tmp_path / "other"))  # nothing to add: nothing checked
        whole = SnapshotPack.of(store, [tree])
        again = SnapshotStore(tmp_path / "again")
        whole.unpack_into(again)
        whole.unpack_into(again)  # it holds the snapshot already: no second pack
        assert len(list((again.directory / "objects.git" / "objects" / "pack").glob("*.pack"))) == 1
        lying = SnapshotPack(trees=("1" * 40,), pack=whole.pack)
        with pytest.raises(CorruptStoreError, match="has no snapshot"):
            lying.unpack_into(SnapshotStore(tmp_path / "third"))
        with pytest.raises(CorruptStoreError):
            SnapshotPack.of(SnapshotStore(tmp_path / "fourth"), [tree])


@pytest.fixture
def work_files() -> Files:
    return {"a.txt": b"one", "sub/b.txt": b"two"}


class TestOnTheWorker:
    def test_receive_make_run_and_send_back(self, tmp_path, monkeypatch, work_files):
        """A worker unpacks once, makes the branch's directory in its own store, and what the
        branch changed comes back into the fork's store and directory here."""
        monkeypatch.setenv("COWCONV_WORKSPACE_STORE", str(tmp_path / "worker"))
        here = SnapshotStore(tmp_path / "here")
        fork_dir = directory_with(tmp_path, work_files)
        tree = here.snapshot(fork_dir).tree
        key = f"suite-{tmp_path.name}"
        assert snapshot_loads(key) == 0
        receive_pack(key, SnapshotPack.of(here, [tree]))
        assert snapshot_loads(key) == 1
        assert worker_store().directory == tmp_path / "worker" / "received"

        fork = Workspace(working_dir=str(fork_dir), snapshot_store=str(here.directory))
        made = branch_directory(tree, fork)
        place = Path(made.working_dir)
        assert place.is_relative_to(tmp_path / "worker" / "received")
        assert files_of(place) == work_files and made.copied_from == (str(fork_dir),)
        write_files(place, {"a.txt": b"branch", "new.txt": b"n"})
        (place / "sub" / "b.txt").unlink()
        last = worker_store().snapshot(place).tree
        back = pack_changes(worker_store(), tree, [], last)
        release_directory(made)
        assert not place.exists()

        receive_changes(fork, back)
        assert files_of(fork_dir) == {"a.txt": b"branch", "new.txt": b"n"}
        assert here.has(last)

    def test_bad_values(self, tmp_path):
        """What is not a SnapshotPack is an InvalidTypeError."""
        with pytest.raises(InvalidTypeError):
            receive_pack("k", b"bytes")  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError):
            receive_changes(Workspace(working_dir=str(tmp_path)), b"bytes")  # type: ignore[arg-type]
