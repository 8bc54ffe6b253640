"""Workspace snapshots: the files of a conversation's workspace, forked with it.

:class:`SnapshotStore` records a working directory's files as snapshots
that share every unchanged file (git's object database, used privately);
:func:`copy_workspace` gives a fork its own directory with the files as
they were at the fork point. See ``docs/workspaces.md``.

>>> from cowconv.workspaces import SnapshotStore
>>> SnapshotStore.__name__
'SnapshotStore'
"""

from cowconv.workspaces.recording import (
    copy_workspace,
    default_store_directory,
    file_changes,
    fork_workspace,
    materialize_workspace,
    record_snapshot,
    restore_snapshot,
    snapshot_at,
    store_at,
)
from cowconv.workspaces.store import DEFAULT_MAX_FILE_SIZE, Snapshot, SnapshotStore, check_tree_id

__all__ = [
    "DEFAULT_MAX_FILE_SIZE",
    "Snapshot",
    "SnapshotStore",
    "check_tree_id",
    "copy_workspace",
    "default_store_directory",
    "file_changes",
    "fork_workspace",
    "materialize_workspace",
    "record_snapshot",
    "restore_snapshot",
    "snapshot_at",
    "store_at",
]
