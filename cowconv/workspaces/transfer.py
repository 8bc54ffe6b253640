"""Workspace snapshots that travel: to the workers of a branch suite, and back.

``run_branches(source, branches, workspace="copy", executor=...)`` gives
every fork its own directory here. Its workers need not see this machine's
files: :class:`SnapshotPack` holds the objects of the forks' snapshot (a
git pack: every blob and tree of it, compressed, once) and travels with the
suite's shared history, once per worker. A worker unpacks it into a store of
its own (:func:`worker_store`), checks each branch's directory out of it
(:func:`branch_directory`), runs the branch there and sends back only the
objects its snapshots added (:func:`pack_changes`); here they go into the
fork's store and the fork's directory is brought to the branch's last
snapshot (:func:`receive_changes`).

>>> import pathlib, tempfile
>>> from cowconv.workspaces.store import SnapshotStore
>>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a.txt").write_text("one")
>>> here = SnapshotStore(tempfile.mkdtemp())
>>> tree = here.snapshot(work).tree
>>> shipped = SnapshotPack.of(here, [tree])
>>> there = SnapshotStore(tempfile.mkdtemp())
>>> shipped.unpack_into(there); there.read(tree, "a.txt")
b'one'
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.core.events import ActionEvent, Event, ObservationEvent
from cowconv.core.workspace import Workspace
from cowconv.workspaces.recording import default_store_directory, store_at
from cowconv.workspaces.store import SnapshotStore, check_tree_id

__all__ = [
    "SnapshotPack",
    "branch_directory",
    "pack_changes",
    "receive_changes",
    "receive_pack",
    "release_directory",
    "snapshot_loads",
    "worker_store",
]

_loads_lock = threading.Lock()
_loads_by_key: dict[str, int] = {}


@dataclass(frozen=True)
class SnapshotPack:
    """The objects of some snapshots as one git pack: what a worker needs to check them out.

    ``trees`` are the snapshot ids it holds in full (or, from
    :func:`pack_changes`, the ones whose new objects it holds); ``pack`` is
    git's pack format (``git pack-objects``), compressed by git; ``final``
    is, for a branch's changes, its last snapshot (the files its directory
    ended with).

    >>> SnapshotPack(trees=(), pack=b"").size
    0
    """

    trees: tuple[str, ...]
    pack: bytes
    final: str | None = None

    @property
    def size(self) -> int:
        """Bytes of the pack."""
        return len(self.pack)

    @classmethod
    def of(cls, store: SnapshotStore, trees: Sequence[str]) -> SnapshotPack:
        """Every object of the snapshots ``trees`` in ``store``: what a store without any needs.

        A snapshot the store does not hold is a :class:`~cowconv.CorruptStoreError`.

        >>> import tempfile
        >>> SnapshotPack.of(SnapshotStore(tempfile.mkdtemp()), ["1" * 40])
        Traceback (most recent call last):
        ...
        cowconv._exceptions.CorruptStoreError: the workspace snapshot store ... has no snapshot ...
        """
        wanted = tuple(dict.fromkeys(check_tree_id(tree) for tree in trees))
        return cls(trees=wanted, pack=_pack(store, wanted, ()))

    def unpack_into(self, store: SnapshotStore) -> None:
        """Add the pack's objects to ``store`` (nothing, if it holds the pack's snapshots).

        >>> import tempfile
        >>> SnapshotPack(trees=(), pack=b"").unpack_into(SnapshotStore(tempfile.mkdtemp()))
        """
        if not self.pack:
            return
        if self.trees and all(store.has(tree) for tree in self.trees):
            # A snapshot's tree is written after every object under it, so a store that has
            # the trees has the rest: a later suite of the same files adds no second pack.
            return
        store._git("index-pack", "--stdin", given=self.pack)
        for tree in self.trees:
            store._require(tree)  # a pack that does not hold what it names: a clear error


def _pack(store: SnapshotStore, trees: Sequence[str], known: Sequence[str]) -> bytes:
    """A pack of the objects reachable from ``trees`` and not from ``known`` (b"": none)."""
    for tree in (*trees, *known):
        store._require(tree)
    if not trees:
        return b""
    listing = store._git("rev-list", "--objects", *trees, "--not", *known, "--")
    if not listing.strip():
        return b""
    return store._git("pack-objects", "-q", "--stdout", given=listing)


def snapshots_in(events: Iterable[Event]) -> list[str]:
    """The snapshot ids ``events`` name, in order, each once.

    >>> snapshots_in([])
    []
    """
    found: dict[str, None] = {}
    for event in events:
        if isinstance(event, ActionEvent | ObservationEvent) and event.workspace_snapshot:
            found[event.workspace_snapshot] = None
    return list(found)


def pack_changes(
    store: SnapshotStore, base: str, events: Iterable[Event], final: str
) -> SnapshotPack:
    """What a branch sends back: the objects of its snapshots (those ``events`` name and
    ``final``) that the snapshot ``base`` it started from does not hold.

    >>> import pathlib, tempfile
    >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
    >>> store = SnapshotStore(tempfile.mkdtemp())
    >>> base = store.snapshot(work).tree
    >>> pack_changes(store, base, [], base).size  # nothing changed: nothing to send
    0
    """
    trees = list(dict.fromkeys([*snapshots_in(events), check_tree_id(final)]))
    return SnapshotPack(trees=tuple(trees), pack=_pack(store, trees, [base]), final=final)


def worker_store() -> SnapshotStore:
    """The snapshot store a worker unpacks shipped snapshots into and runs branches from.

    ``received/`` under :func:`~cowconv.workspaces.default_store_directory`
    (``$COWCONV_WORKSPACE_STORE`` on the worker, else a per-user directory
    in its temporary directory): never the caller's store, which a worker
    on another machine cannot see.

    >>> worker_store().directory.name
    'received'
    """
    return store_at(os.path.join(default_store_directory(), "received"))


def receive_pack(key: str, shipped: SnapshotPack) -> SnapshotStore:
    """On a worker: unpack ``shipped`` (the snapshot of the suite ``key``) into
    :func:`worker_store`; counted by :func:`snapshot_loads`.

    The caller (the worker's cache of shared prefixes) does so once per
    process and suite.

    >>> import tempfile
    >>> receive_pack("doc-key", SnapshotPack(trees=(), pack=b"")).directory.name
    'received'
    >>> snapshot_loads("doc-key")
    1
    """
    if not isinstance(shipped, SnapshotPack):
        raise InvalidTypeError(f"expected a SnapshotPack, got {type(shipped).__name__}")
    store = worker_store()
    shipped.unpack_into(store)
    with _loads_lock:
        _loads_by_key[key] = _loads_by_key.get(key, 0) + 1
        if len(_loads_by_key) > 1024:
            del _loads_by_key[next(iter(_loads_by_key))]
    return store


def snapshot_loads(key: str | None = None) -> int:
    """How many times this process unpacked a shipped snapshot: for the suite ``key``, or all.

    >>> snapshot_loads("no-such-suite")
    0
    """
    with _loads_lock:
        if key is None:
            return sum(_loads_by_key.values())
        return _loads_by_key.get(key, 0)


def branch_directory(tree: str, workspace: Workspace) -> Workspace:
    """On a worker: a new directory in :func:`worker_store` holding the snapshot ``tree``,
    as the workspace a branch whose fork had ``workspace`` (here) runs in.

    The new workspace records its snapshots in the worker's store, and its
    ``copied_from`` names the fork's directories, so paths the history holds
    are found again in the new directory.

    >>> import pathlib, tempfile
    >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
    >>> tree = worker_store().snapshot(work).tree
    >>> made = branch_directory(tree, Workspace(working_dir="/elsewhere/fork"))
    >>> (pathlib.Path(made.working_dir) / "a").read_text(), made.copied_from
    ('x', ('/elsewhere/fork',))
    >>> release_directory(made)
    """
    store = worker_store()
    place = store.directory / "worktrees" / uuid.uuid4().hex
    store.checkout(check_tree_id(tree), place)
    origins = (workspace.working_dir, *workspace.copied_from)
    return Workspace(
        working_dir=str(place),
        snapshot_store=str(store.directory),
        copied_from=tuple(dict.fromkeys(origins)),
    )


def release_directory(workspace: Workspace) -> None:
    """On a worker: remove a directory :func:`branch_directory` made (its snapshots stay).

    >>> release_directory(Workspace(working_dir="/nonexistent/branch"))
    """
    place = Path(os.path.realpath(workspace.working_dir))
    shutil.rmtree(place, ignore_errors=True)
    if workspace.snapshot_store is not None:
        store_at(workspace.snapshot_store)._index(place).unlink(missing_ok=True)


def receive_changes(workspace: Workspace, changes: SnapshotPack) -> None:
    """Here: add a branch's objects to its fork's store and make the fork's directory hold
    the branch's last snapshot (``changes.final``).

    >>> import pathlib, tempfile
    >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
    >>> store = tempfile.mkdtemp()
    >>> fork = Workspace(working_dir=str(work), snapshot_store=store)
    >>> receive_changes(fork, SnapshotPack(trees=(), pack=b""))  # no snapshot: unchanged
    >>> (work / "a").read_text()
    'x'
    """
    if not isinstance(changes, SnapshotPack):
        raise InvalidTypeError(f"expected a SnapshotPack, got {type(changes).__name__}")
    if workspace.is_remote:
        raise InvalidValueError("a branch's files come back only into a local workspace")
    store = store_at(workspace.snapshot_store or default_store_directory())
    changes.unpack_into(store)
    if changes.final is not None:
        store.restore(changes.final, workspace.working_dir)
