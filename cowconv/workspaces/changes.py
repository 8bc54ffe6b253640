"""What a conversation did to its files since a fork point, and ``compare`` with those files.

A conversation whose workspace names a ``snapshot_store`` records a
snapshot around every tool call (:mod:`cowconv.workspaces.recording`).
:class:`FileChanges` is the difference between two of them: the files at
the fork point and the files after the conversation's last tool call.
:func:`compare` is :func:`cowconv.core.compare.compare` with each side's
:class:`FileChanges` against the fork point of the two conversations.

>>> import pathlib, tempfile
>>> from cowconv.workspaces.store import SnapshotStore
>>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a.txt").write_text("one\\n")
>>> store = SnapshotStore(tempfile.mkdtemp())
>>> before = store.snapshot(work).tree
>>> _ = (work / "a.txt").write_text("two\\n"); _ = (work / "b.txt").write_text("new\\n")
>>> changes = FileChanges.between(store, before, store.snapshot(work).tree)
>>> changes.added, changes.modified, changes.deleted, changes.summary()
(('b.txt',), ('a.txt',), (), '1 added, 1 modified, 0 deleted')
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cowconv.core.compare import Comparison, HasState
from cowconv.core.compare import compare as compare_events
from cowconv.core.events import ActionEvent, Event, ObservationEvent
from cowconv.core.state import ConversationState
from cowconv.core.workspace import Workspace
from cowconv.workspaces.recording import default_store_directory, snapshot_at, store_at
from cowconv.workspaces.store import SnapshotStore, check_tree_id

__all__ = ["FileChanges", "branch_file_changes", "compare", "fork_point_snapshot"]

_KINDS = ("added", "modified", "deleted")


@dataclass(frozen=True)
class FileChanges:
    """The files a conversation added, modified and deleted between two snapshots.

    ``base`` is the snapshot at the fork point, ``tree`` the one after the
    conversation's last tool call, ``store`` the snapshot store's directory
    holding both; ``changes`` maps each changed path (``/``-separated) to
    ``"added"``, ``"modified"`` or ``"deleted"``. :meth:`patch` is the full
    unified diff, read from the store when asked.

    >>> changes = FileChanges(base="0" * 40, tree="1" * 40, store="/tmp/s",
    ...                       changes={"b": "added", "a": "modified"})
    >>> changes.added, changes.modified, changes.to_dict()["added"]
    (('b',), ('a',), ['b'])
    """

    base: str
    tree: str
    store: str
    changes: Mapping[str, str]

    @classmethod
    def between(cls, store: SnapshotStore, base: str, tree: str) -> FileChanges:
        """The changes from snapshot ``base`` to snapshot ``tree``, both in ``store``.

        A snapshot the store does not hold is a :class:`~cowconv.CorruptStoreError`.

        >>> import tempfile
        >>> FileChanges.between(SnapshotStore(tempfile.mkdtemp()), "1" * 40, "2" * 40)
        Traceback (most recent call last):
        ...
        cowconv._exceptions.CorruptStoreError: the workspace snapshot store ... has no snapshot ...
        """
        check_tree_id(base)
        check_tree_id(tree)
        changed = store.diff(base, tree)
        return cls(base=base, tree=tree, store=str(store.directory), changes=dict(changed))

    def _paths(self, kind: str) -> tuple[str, ...]:
        return tuple(sorted(path for path, how in self.changes.items() if how == kind))

    @property
    def added(self) -> tuple[str, ...]:
        """The paths of the files added, sorted."""
        return self._paths("added")

    @property
    def modified(self) -> tuple[str, ...]:
        """The paths of the files whose content or mode changed, sorted."""
        return self._paths("modified")

    @property
    def deleted(self) -> tuple[str, ...]:
        """The paths of the files deleted, sorted."""
        return self._paths("deleted")

    def summary(self) -> str:
        """``"N added, N modified, N deleted"``.

        >>> FileChanges("0" * 40, "0" * 40, "/tmp/s", {}).summary()
        '0 added, 0 modified, 0 deleted'
        """
        return ", ".join(f"{len(self._paths(kind))} {kind}" for kind in _KINDS)

    def short(self) -> str:
        """``"+A ~M -D"``: the counts in a few columns (the suite's table).

        >>> FileChanges("0" * 40, "1" * 40, "/tmp/s", {"a": "added"}).short()
        '+1 ~0 -0'
        """
        added, modified, deleted = (len(self._paths(kind)) for kind in _KINDS)
        return f"+{added} ~{modified} -{deleted}"

    def lines(self) -> list[str]:
        """One line per changed file, ``A path`` / ``M path`` / ``D path``, sorted by path.

        >>> FileChanges("0" * 40, "1" * 40, "/tmp/s", {"b": "deleted", "a": "added"}).lines()
        ['A a', 'D b']
        """
        return [f"{self.changes[path][0].upper()} {path}" for path in sorted(self.changes)]

    def patch(self) -> str:
        """The unified diff (git's format) of every changed file, from ``base`` to ``tree``.

        >>> FileChanges("0" * 40, "0" * 40, "/tmp/s", {}).patch()  # nothing changed
        ''
        """
        if self.base == self.tree:
            return ""
        return store_at(self.store).patch(self.base, self.tree)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the two snapshot ids and the sorted paths of each kind of change.

        >>> sorted(FileChanges("0" * 40, "0" * 40, "/tmp/s", {}).to_dict())
        ['added', 'base', 'deleted', 'modified', 'tree']
        """
        return {
            "base": self.base,
            "tree": self.tree,
            **{kind: list(self._paths(kind)) for kind in _KINDS},
        }


def _first_snapshot(events: Sequence[Event], start: int) -> str | None:
    for position in range(start, len(events)):
        event = events[position]
        if isinstance(event, ActionEvent | ObservationEvent) and event.workspace_snapshot:
            return event.workspace_snapshot
    return None


def fork_point_snapshot(events: Sequence[Event], fork_point: int) -> str | None:
    """The snapshot of the files at the fork point: after the first ``fork_point`` events.

    The last snapshot recorded in those events; if none was (no tool call
    before the fork), the first one recorded after them: the first
    :class:`~cowconv.ActionEvent` of a run names the files just before its
    calls ran, which for a copy fork are the files it was given.

    >>> fork_point_snapshot([], 0) is None
    True
    """
    found = snapshot_at(events[:fork_point] if fork_point < len(events) else events)
    return found if found is not None else _first_snapshot(events, fork_point)


def _store_of(workspace: Workspace) -> SnapshotStore | None:
    directory = workspace.snapshot_store or default_store_directory()
    if workspace.is_remote and not os.path.isdir(directory):
        return None  # an agent server's store on another machine: not readable from here
    return store_at(directory)


def branch_file_changes(state: ConversationState, fork_point: int) -> FileChanges | None:
    """What ``state``'s conversation did to its files after its first ``fork_point`` events.

    ``None`` when no snapshot is recorded at the fork point or after it (a
    workspace without ``snapshot_store``, no tool call), or when the
    snapshots are on an agent server whose store this machine cannot read.

    >>> from cowconv import LLM, Agent, Conversation
    >>> fork = Conversation(agent=Agent(llm=LLM(model="m")), workspace=".").fork()
    >>> branch_file_changes(fork.state, fork.state.forked_from_event_count or 0) is None
    True
    """
    events = state.branch
    base = fork_point_snapshot(events, fork_point)
    last = snapshot_at(events)
    if base is None or last is None:
        return None
    store = _store_of(state.workspace)
    if store is None:
        return None
    return FileChanges.between(store, base, last)


def _state(value: object) -> ConversationState | None:
    state = getattr(value, "state", None)
    return state if isinstance(state, ConversationState) else None


def compare(a: ConversationState | HasState, b: ConversationState | HasState) -> Comparison:
    """Compare ``a`` and ``b``, events and files: :func:`cowconv.core.compare.compare` with each
    side's :class:`FileChanges` since their fork point (``side.files``; ``None`` where no
    snapshot is recorded).

    >>> from cowconv import LLM, Agent, Conversation
    >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> diff = compare(source, source.fork())
    >>> diff.common, diff.a.files, diff.b.files
    (0, None, None)
    """
    # Each state read once (a remote conversation's is fetched from its server).
    left = a if isinstance(a, ConversationState) else _state(a)
    right = b if isinstance(b, ConversationState) else _state(b)
    if left is None or right is None:
        return compare_events(a, b)  # its error names what is not a conversation
    comparison = compare_events(left, right)
    common = comparison.common
    return replace(
        comparison,
        a=replace(comparison.a, files=branch_file_changes(left, common)),
        b=replace(comparison.b, files=branch_file_changes(right, common)),
    )
