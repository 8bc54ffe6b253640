"""``SnapshotStore``: a workspace's files recorded as snapshots that share structure.

A snapshot is a git tree in a private object database: one blob per file
content, one tree per directory, each named by the hash of what it holds, so
two snapshots share every file and directory that did not change between
them (the idea of the persistent event vector, carried to files). The store
runs ``git`` with its own ``GIT_DIR``, its own index per working directory
(``GIT_INDEX_FILE``) and no user or system configuration: it never reads or
writes a user's repository, branches, index or stash, and works as well on a
directory that is not a git repository.

A snapshot costs O(files changed): the per-directory index keeps each file's
size, mtime and inode, so git re-reads only files whose stat changed (the
stat walk itself is git's, in C). Files the working directory's
``.gitignore`` files ignore, files larger than ``max_file_size``, nested git
repositories and empty directories are left out; :attr:`Snapshot.left_out`
names the ones a snapshot skipped that git does not ignore.

>>> import pathlib, tempfile
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> store = SnapshotStore(root / "store")
>>> work = root / "work"; work.mkdir(); _ = (work / "a.txt").write_text("one")
>>> first = store.snapshot(work)
>>> _ = (work / "a.txt").write_text("two")
>>> second = store.snapshot(work)
>>> store.read(first.tree, "a.txt"), store.read(second.tree, "a.txt")
(b'one', b'two')
>>> store.checkout(first.tree, root / "copy"); (root / "copy" / "a.txt").read_text()
'one'
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from cowconv._exceptions import (
    CorruptStoreError,
    InvalidTypeError,
    InvalidValueError,
    StoreError,
)

__all__ = ["DEFAULT_MAX_FILE_SIZE", "Snapshot", "SnapshotStore", "check_tree_id"]

#: Files larger than this (bytes) are left out of a snapshot unless the store says otherwise.
DEFAULT_MAX_FILE_SIZE = 10 * 1024 * 1024

_TREE_ID = re.compile(r"[0-9a-f]{40}")
_GIT_TIMEOUT = 600.0


def check_tree_id(tree: object) -> str:
    """``tree`` if it is a snapshot id (40 lowercase hex digits), else a clear error.

    >>> check_tree_id("4b825dc642cb6eb9a060e54bf8d69288fbee4904")
    '4b825dc642cb6eb9a060e54bf8d69288fbee4904'
    >>> check_tree_id("HEAD")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: a workspace snapshot id is 40 hex digits, got 'HEAD'
    """
    if not isinstance(tree, str):
        raise InvalidTypeError(f"a workspace snapshot id is a str, got {type(tree).__name__}")
    if not _TREE_ID.fullmatch(tree):
        raise InvalidValueError(f"a workspace snapshot id is 40 hex digits, got {tree!r}")
    return tree


class Snapshot(NamedTuple):
    """One recorded state of a working directory: its tree id and what was left out.

    >>> Snapshot("4b825dc642cb6eb9a060e54bf8d69288fbee4904").left_out
    ()
    """

    tree: str
    left_out: tuple[str, ...] = ()


class SnapshotStore:
    """A content-addressed store of workspace snapshots in one directory (git objects).

    ``max_file_size`` (bytes) leaves larger files out of snapshots. The
    directory is made on first use; several stores (threads, processes) may
    share it: objects are written atomically by git and each working
    directory's index is used under a file lock.

    >>> import tempfile
    >>> SnapshotStore(tempfile.mkdtemp()).max_file_size == DEFAULT_MAX_FILE_SIZE
    True
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, max_file_size: int = DEFAULT_MAX_FILE_SIZE
    ) -> None:
        if not isinstance(directory, str | os.PathLike):
            raise InvalidTypeError(
                f"a snapshot store's directory is a path, got {type(directory).__name__}"
            )
        _size_limit(max_file_size)
        self.directory = Path(os.path.abspath(os.fspath(directory)))
        self.max_file_size = max_file_size
        self._git_dir = self.directory / "objects.git"
        self._ready = False

    def __repr__(self) -> str:
        return f"SnapshotStore({str(self.directory)!r})"

    # -- git, privately ------------------------------------------------------

    def _environment(self, working_dir: Path | None, index: Path | None) -> dict[str, str]:
        environment = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("GIT_") and key not in ("HOME", "XDG_CONFIG_HOME")
        }
        environment.update(
            GIT_DIR=str(self._git_dir),
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL=os.devnull,
            GIT_TERMINAL_PROMPT="0",
            HOME=str(self.directory),
            LC_ALL="C",
        )
        if working_dir is not None:
            environment["GIT_WORK_TREE"] = str(working_dir)
        if index is not None:
            environment["GIT_INDEX_FILE"] = str(index)
        return environment

    def _git(
        self,
        *arguments: str,
        working_dir: Path | None = None,
        index: Path | None = None,
        given: bytes | None = None,
    ) -> bytes:
        self._prepare()
        return self._run_git(arguments, working_dir, index, given)

    def _run_git(
        self,
        arguments: tuple[str, ...],
        working_dir: Path | None,
        index: Path | None,
        given: bytes | None,
    ) -> bytes:
        try:
            done = subprocess.run(
                ["git", *arguments],
                input=given,
                capture_output=True,
                env=self._environment(working_dir, index),
                cwd=str(working_dir) if working_dir is not None else str(self.directory),
                timeout=_GIT_TIMEOUT,
                check=False,
            )
        except FileNotFoundError:
            raise StoreError("workspace snapshots need git, and no git is on PATH") from None
        except subprocess.TimeoutExpired:
            raise StoreError(f"git {arguments[0]} did not finish in {_GIT_TIMEOUT:.0f} s") from None
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip()
            if (
                "not a valid object" in message
                or "unable to read" in message
                or ("bad tree" in message or "missing" in message or "corrupt" in message)
            ):
                raise CorruptStoreError(
                    f"the workspace snapshot store {str(self.directory)!r} cannot read an "
                    f"object: {message}"
                )
            raise StoreError(f"git {arguments[0]} failed in the snapshot store: {message}")
        return done.stdout

    def _prepare(self) -> None:
        if self._ready:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        if not (self._git_dir / "objects").is_dir():
            (self.directory / "indexes").mkdir(exist_ok=True)
            with self._locked(self.directory / "init"):
                if not (self._git_dir / "objects").is_dir():
                    self._run_git(("init", "-q", "--bare", str(self._git_dir)), None, None, None)
                    for key, value in (
                        ("core.autocrlf", "false"),
                        ("core.fileMode", "true"),
                        ("core.symlinks", "true"),
                        ("gc.auto", "0"),
                    ):
                        self._run_git(("config", key, value), None, None, None)
        (self.directory / "indexes").mkdir(exist_ok=True)
        self._ready = True

    def _index(self, working_dir: Path) -> Path:
        key = hashlib.sha256(os.fsencode(working_dir)).hexdigest()[:24]
        return self.directory / "indexes" / key

    @contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        with open(f"{path}.lock-cowconv", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- snapshots -----------------------------------------------------------

    def snapshot(
        self, working_dir: str | os.PathLike[str], *, max_file_size: int | None = None
    ) -> Snapshot:
        """Record ``working_dir``'s files now: O(files changed since its last snapshot).

        ``max_file_size`` (bytes) overrides the store's limit for this
        snapshot (a conversation's own, ``Workspace.max_snapshot_file_size``);
        it applies to the files that changed since the directory's last
        snapshot. A directory still waiting for its lazy checkout
        (:meth:`checkout` with ``lazy=True``) is checked out first.

        >>> import pathlib, tempfile
        >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
        >>> store = SnapshotStore(tempfile.mkdtemp())
        >>> store.snapshot(work) == store.snapshot(work)  # same files, same id
        True
        """
        limit = self.max_file_size if max_file_size is None else _size_limit(max_file_size)
        work = _directory(working_dir)
        index = self._index(work)
        self._prepare()
        self.materialize(work)
        with self._locked(index):
            # Only the working tree against this directory's index (never HEAD: the store
            # has no commits): modified (C), deleted (R) and untracked, not ignored (?) files.
            status = self._git(
                "ls-files", "-z", "-t", "-m", "-d", "-o", "--exclude-standard",
                working_dir=work, index=index,
            )  # fmt: skip
            changed, left_out = self._changed_paths(work, status, limit)
            if changed:
                self._git(
                    "update-index",
                    "--add",
                    "--remove",
                    "-z",
                    "--stdin",
                    working_dir=work,
                    index=index,
                    given=b"\0".join(changed) + b"\0",
                )
            tree = self._git("write-tree", working_dir=work, index=index).decode().strip()
        return Snapshot(tree, tuple(sorted(left_out)))

    def _changed_paths(
        self, work: Path, status: bytes, limit: int
    ) -> tuple[list[bytes], list[str]]:
        changed: list[bytes] = []
        left_out: list[str] = []
        seen: set[bytes] = set()
        for record in status.split(b"\0"):
            if len(record) < 3 or record[2:] in seen:
                continue  # a deleted file is listed as modified too
            path = record[2:]
            seen.add(path)
            if path.endswith(b"/"):  # a nested repository: git will not take its files
                left_out.append(os.fsdecode(path))
                continue
            try:
                size = os.lstat(work / os.fsdecode(path)).st_size
            except FileNotFoundError:
                changed.append(path)  # deleted: --remove drops it
                continue
            if size > limit:
                left_out.append(os.fsdecode(path))
                if record[:1] != b"?":  # it was recorded smaller: it is no longer recorded
                    self._forget(work, path)
                continue
            changed.append(path)
        return changed, left_out

    def _forget(self, work: Path, path: bytes) -> None:
        self._git(
            "update-index",
            "--force-remove",
            "-z",
            "--stdin",
            working_dir=work,
            index=self._index(work),
            given=path + b"\0",
        )

    def has(self, tree: str) -> bool:
        """Whether the store holds the snapshot ``tree``.

        >>> import tempfile
        >>> SnapshotStore(tempfile.mkdtemp()).has("0" * 40)
        False
        """
        check_tree_id(tree)
        self._prepare()
        done = subprocess.run(
            ["git", "cat-file", "-e", f"{tree}^{{tree}}"],
            capture_output=True,
            env=self._environment(None, None),
            cwd=str(self.directory),
            timeout=_GIT_TIMEOUT,
            check=False,
        )
        return done.returncode == 0

    def _require(self, tree: str) -> str:
        if not self.has(tree):
            raise CorruptStoreError(
                f"the workspace snapshot store {str(self.directory)!r} has no snapshot {tree}: "
                "its objects were removed or never written here"
            )
        return tree

    def files(self, tree: str) -> dict[str, str]:
        """Path -> blob id of every file in the snapshot ``tree`` (paths with ``/``).

        >>> import pathlib, tempfile
        >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
        >>> store = SnapshotStore(tempfile.mkdtemp())
        >>> list(store.files(store.snapshot(work).tree))
        ['a']
        """
        self._require(check_tree_id(tree))
        listing = self._git("ls-tree", "-r", "-z", "--full-tree", tree)
        found: dict[str, str] = {}
        for record in listing.split(b"\0"):
            if not record:
                continue
            meta, _, path = record.partition(b"\t")
            found[os.fsdecode(path)] = meta.split()[2].decode()
        return found

    def read(self, tree: str, path: str) -> bytes:
        """The content of the file ``path`` in the snapshot ``tree``.

        >>> import pathlib, tempfile
        >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
        >>> store = SnapshotStore(tempfile.mkdtemp())
        >>> store.read(store.snapshot(work).tree, "a")
        b'x'
        """
        blob = self.files(tree).get(path)
        if blob is None:
            raise InvalidValueError(f"the workspace snapshot {tree} has no file {path!r}")
        return self._git("cat-file", "blob", blob)

    def diff(self, old: str, new: str) -> dict[str, str]:
        """What changed from ``old`` to ``new``: path -> ``"added"``, ``"deleted"``, ``"modified"``.

        >>> import pathlib, tempfile
        >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
        >>> store = SnapshotStore(tempfile.mkdtemp())
        >>> before = store.snapshot(work).tree
        >>> _ = (work / "b").write_text("y")
        >>> store.diff(before, store.snapshot(work).tree)
        {'b': 'added'}
        """
        self._require(check_tree_id(old))
        self._require(check_tree_id(new))
        output = self._git("diff-tree", "-r", "-z", "--no-renames", "--name-status", old, new)
        names = {"A": "added", "D": "deleted", "M": "modified", "T": "modified"}
        fields = [field for field in output.split(b"\0") if field]
        return {
            os.fsdecode(fields[position + 1]): names.get(fields[position].decode()[:1], "modified")
            for position in range(0, len(fields) - 1, 2)
        }

    def patch(self, old: str, new: str) -> str:
        """A unified diff (git's format) of the files changed from ``old`` to ``new``.

        >>> import pathlib, tempfile
        >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x\\n")
        >>> store = SnapshotStore(tempfile.mkdtemp())
        >>> before = store.snapshot(work).tree
        >>> _ = (work / "a").write_text("y\\n")
        >>> store.patch(before, store.snapshot(work).tree).splitlines()[-2:]
        ['-x', '+y']
        """
        self._require(check_tree_id(old))
        self._require(check_tree_id(new))
        return self._git("diff-tree", "-p", "--no-renames", "--no-color", old, new).decode(
            errors="replace"
        )

    # -- files out of the store ----------------------------------------------

    def checkout(self, tree: str, target: str | os.PathLike[str], *, lazy: bool = False) -> None:
        """Write the snapshot ``tree``'s files into ``target``, a new or empty directory.

        ``target``'s index is primed as it is written, so its next snapshot
        re-reads only the files changed afterwards. ``lazy=True`` only makes
        the directory and records which snapshot it is to hold (O(1)); the
        files are written on first use, by :meth:`materialize` (which every
        :meth:`snapshot` and :meth:`restore` of ``target`` calls first).

        >>> import pathlib, tempfile
        >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
        >>> store = SnapshotStore(tempfile.mkdtemp())
        >>> copy = pathlib.Path(tempfile.mkdtemp()) / "copy"
        >>> store.checkout(store.snapshot(work).tree, copy); (copy / "a").read_text()
        'x'
        """
        self._require(check_tree_id(tree))
        path = Path(os.path.abspath(os.fspath(target)))
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise InvalidValueError(
                f"cannot check a workspace snapshot out into {str(path)!r}: it exists and is "
                "not an empty directory"
            )
        path.mkdir(parents=True, exist_ok=True)
        path = Path(os.path.realpath(path))
        index = self._index(path)
        with self._locked(index):
            index.unlink(missing_ok=True)
            if lazy:
                # Written whole, then renamed: a reader sees no marker or a complete one.
                marker = self._marker(path)
                marker.parent.mkdir(exist_ok=True)
                partial = marker.with_name(f"{marker.name}.{os.getpid()}.partial")
                partial.write_text(tree)
                os.replace(partial, marker)
                return
            self._write_files(tree, path, index)

    def _write_files(self, tree: str, path: Path, index: Path) -> None:
        # Under the directory's lock: the index made from the tree, then every file written.
        self._git("read-tree", tree, working_dir=path, index=index)
        self._git("checkout-index", "-a", "-f", "-u", working_dir=path, index=index)

    def _marker(self, path: Path) -> Path:
        return self.directory / "pending" / self._index(path).name

    def pending(self, working_dir: str | os.PathLike[str]) -> str | None:
        """The snapshot a lazy checkout into ``working_dir`` still has to write, else ``None``.

        >>> import pathlib, tempfile
        >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
        >>> store = SnapshotStore(tempfile.mkdtemp())
        >>> copy = pathlib.Path(tempfile.mkdtemp()) / "copy"
        >>> tree = store.snapshot(work).tree
        >>> store.checkout(tree, copy, lazy=True); store.pending(copy) == tree
        True
        """
        if not isinstance(working_dir, str | os.PathLike):
            raise InvalidTypeError(
                f"a working directory is a path, got {type(working_dir).__name__}"
            )
        path = Path(os.path.realpath(os.fspath(working_dir)))
        try:
            return self._marker(path).read_text() or None
        except (FileNotFoundError, NotADirectoryError):
            return None

    def materialize(self, working_dir: str | os.PathLike[str]) -> bool:
        """Write the files of a lazy checkout into ``working_dir``, once; whether this call did.

        Safe from any number of threads and processes at once: the first
        writes the files under the directory's lock, the others find them
        written. A directory with no lazy checkout waiting is left alone
        (``False``), so calling this is cheap (one ``stat``) after first use.
        A snapshot whose objects are gone is a :class:`~cowconv.CorruptStoreError`
        and the checkout stays pending.

        >>> import pathlib, tempfile
        >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
        >>> store = SnapshotStore(tempfile.mkdtemp())
        >>> copy = pathlib.Path(tempfile.mkdtemp()) / "copy"
        >>> store.checkout(store.snapshot(work).tree, copy, lazy=True)
        >>> sorted(copy.iterdir()), store.materialize(copy), (copy / "a").read_text()
        ([], True, 'x')
        >>> store.materialize(copy)
        False
        """
        if self.pending(working_dir) is None:
            return False
        path = Path(os.path.realpath(os.fspath(working_dir)))
        index = self._index(path)
        marker = self._marker(path)
        with self._locked(index):
            tree = self.pending(path)
            if tree is None:
                return False  # another thread or process wrote them while this one waited
            self._require(check_tree_id(tree))
            path.mkdir(parents=True, exist_ok=True)
            index.unlink(missing_ok=True)
            self._write_files(tree, path, index)
            marker.unlink()
        return True

    def restore(self, tree: str, working_dir: str | os.PathLike[str]) -> Snapshot:
        """Make ``working_dir``'s recorded files those of ``tree``; returns what was there before.

        Files the snapshot differs in are rewritten, files it lacks removed;
        files a snapshot leaves out (ignored, too large) are not touched. The
        returned snapshot is of the files just before, so nothing is lost.

        >>> import pathlib, tempfile
        >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
        >>> store = SnapshotStore(tempfile.mkdtemp())
        >>> before = store.snapshot(work).tree
        >>> _ = (work / "b").write_text("y")
        >>> _ = store.restore(before, work); sorted(p.name for p in work.iterdir())
        ['a']
        """
        self._require(check_tree_id(tree))
        work = _directory(working_dir)
        current = self.snapshot(work)
        index = self._index(work)
        with self._locked(index):
            self._git("read-tree", "-m", "-u", current.tree, tree, working_dir=work, index=index)
        return current


def _size_limit(max_file_size: object) -> int:
    if isinstance(max_file_size, bool) or not isinstance(max_file_size, int):
        raise InvalidTypeError(f"max_file_size must be an int, got {max_file_size!r}")
    if max_file_size < 0:
        raise InvalidValueError(f"max_file_size must be >= 0, got {max_file_size}")
    return max_file_size


def _directory(path: str | os.PathLike[str]) -> Path:
    if not isinstance(path, str | os.PathLike):
        raise InvalidTypeError(f"a working directory is a path, got {type(path).__name__}")
    directory = Path(os.path.realpath(os.fspath(path)))
    if not directory.is_dir():
        raise InvalidValueError(f"the working directory {str(directory)!r} is not a directory")
    return directory
