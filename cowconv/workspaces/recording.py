"""Which snapshot of the workspace follows which event, and the workspace a fork gets.

The runtime records a snapshot id on the first :class:`~cowconv.ActionEvent`
of a step (the files just before its calls ran) and on every
:class:`~cowconv.ObservationEvent` (the files just after), when the
conversation's :class:`~cowconv.Workspace` names a ``snapshot_store``. The
ids live in the events, so they fork the O(1) way with the history and are
stored wherever the events are. The files at an event are those of the last
snapshot recorded at or before it (:func:`snapshot_at`).

>>> from cowconv import ObservationEvent
>>> events = [ObservationEvent(tool_name="terminal", tool_call_id="c1", output="",
...                            workspace_snapshot="4b825dc642cb6eb9a060e54bf8d69288fbee4904")]
>>> snapshot_at(events)
'4b825dc642cb6eb9a060e54bf8d69288fbee4904'
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from cowconv._exceptions import EventNotFoundError, InvalidTypeError, InvalidValueError
from cowconv.core.events import ActionEvent, Event, ObservationEvent
from cowconv.core.state import ConversationState
from cowconv.core.tree import history_to
from cowconv.core.workspace import Workspace
from cowconv.workspaces.store import SnapshotStore

__all__ = [
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

logger = logging.getLogger("cowconv.workspaces")


def default_store_directory() -> str:
    """Where a workspace without a ``snapshot_store`` keeps the snapshots its copies need.

    ``$COWCONV_WORKSPACE_STORE`` if set, else a directory per user under the
    system's temporary directory.

    >>> os.path.isabs(default_store_directory())
    True
    """
    given = os.environ.get("COWCONV_WORKSPACE_STORE")
    if given:
        return os.path.abspath(given)
    return os.path.join(tempfile.gettempdir(), f"cowconv-workspaces-{os.getuid()}")


@functools.lru_cache(maxsize=64)
def _store(directory: str) -> SnapshotStore:
    return SnapshotStore(directory)


def store_at(directory: str | os.PathLike[str]) -> SnapshotStore:
    """The :class:`SnapshotStore` in ``directory`` (one object per directory and process).

    >>> import tempfile
    >>> place = tempfile.mkdtemp()
    >>> store_at(place) is store_at(place)
    True
    """
    if not isinstance(directory, str | os.PathLike):
        raise InvalidTypeError(
            f"a snapshot store's directory is a path, got {type(directory).__name__}"
        )
    return _store(os.path.abspath(os.fspath(directory)))


def record_snapshot(workspace: Workspace) -> str | None:
    """Snapshot ``workspace``'s files if it names a ``snapshot_store``; the id, else ``None``.

    A snapshot that fails (no ``git``, a full disk) is logged and gives
    ``None``: the run goes on, and a fork from that event says no snapshot
    was recorded there.

    >>> import tempfile
    >>> record_snapshot(Workspace(working_dir=tempfile.mkdtemp())) is None
    True
    """
    if workspace.snapshot_store is None or workspace.is_remote:
        return None
    try:
        taken = store_at(workspace.snapshot_store).snapshot(
            workspace.working_dir, max_file_size=workspace.max_snapshot_file_size
        )
    except Exception:
        logger.exception("could not snapshot the workspace %s", workspace.working_dir)
        return None
    if taken.left_out:
        logger.info(
            "workspace snapshot %s leaves out %d file(s) (too large or nested repositories): %s",
            taken.tree,
            len(taken.left_out),
            ", ".join(taken.left_out[:10]),
        )
    return taken.tree


def snapshot_at(events: Sequence[Event]) -> str | None:
    """The last workspace snapshot recorded in ``events`` (the files after its last event).

    >>> snapshot_at([]) is None
    True
    """
    for position in range(len(events) - 1, -1, -1):
        event = events[position]
        if isinstance(event, ActionEvent | ObservationEvent):
            recorded = event.workspace_snapshot
            if recorded is not None:
                return recorded
    return None


def copy_workspace(
    workspace: Workspace,
    events: Sequence[Event] | None = None,
    target: str | os.PathLike[str] | None = None,
    *,
    lazy: bool = False,
) -> Workspace:
    """A new workspace holding ``workspace``'s files: now, or after ``events`` (a history).

    ``events`` given, the files are those of the last snapshot recorded in
    them (:class:`~cowconv.InvalidValueError` if none was); otherwise a
    snapshot is taken now. ``target`` is the new directory (new or empty),
    by default one under the store's ``worktrees/``. The copy records its
    own snapshots in the same store (``snapshot_store`` set), sharing every
    unchanged file with the source's, under the source's
    ``max_snapshot_file_size``.

    ``lazy=True`` makes the directory and records the snapshot, and writes
    the files on first use (:func:`materialize_workspace`): the copy costs a
    snapshot of the source (O(files changed)), not O(files). A source that
    is itself a copy still waiting for its files is copied from the snapshot
    it waits for, without writing them.

    >>> import pathlib, tempfile
    >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
    >>> store = tempfile.mkdtemp()
    >>> copy = copy_workspace(Workspace(working_dir=str(work), snapshot_store=store))
    >>> (pathlib.Path(copy.working_dir) / "a").read_text(), copy.snapshot_store == store
    ('x', True)
    """
    if workspace.is_remote:
        raise InvalidValueError(
            "cowconv copies only local workspaces: a conversation on an agent server shares "
            "its workspace (fork it with workspace='shared')"
        )
    directory = workspace.snapshot_store or default_store_directory()
    store = store_at(directory)
    if events is None:
        waiting = store.pending(workspace.working_dir)
        limit = workspace.max_snapshot_file_size
        tree = waiting or store.snapshot(workspace.working_dir, max_file_size=limit).tree
    else:
        found = snapshot_at(events)
        if found is None:
            raise InvalidValueError(
                "no workspace snapshot is recorded at or before that event (snapshots are "
                "taken around tool calls when the workspace names a snapshot_store): fork "
                "without from_event_id to copy the files as they are now"
            )
        tree = found
    if target is None:
        place = Path(store.directory) / "worktrees" / uuid.uuid4().hex
    elif isinstance(target, str | os.PathLike):
        place = Path(os.path.abspath(os.fspath(target)))
    else:
        raise InvalidTypeError(f"a workspace path is a str or a path, got {type(target).__name__}")
    store.checkout(tree, place, lazy=lazy)
    given = os.path.abspath(workspace.working_dir)
    origins = (given, os.path.realpath(given), *workspace.copied_from)
    return Workspace(
        working_dir=str(place),
        snapshot_store=str(store.directory),
        copied_from=tuple(dict.fromkeys(origins)),
        max_snapshot_file_size=workspace.max_snapshot_file_size,
    )


def materialize_workspace(workspace: Workspace) -> Workspace:
    """``workspace``, once the files of its lazy copy are written (the first use writes them).

    A copy fork's directory is made empty (``fork(workspace="copy")``) and
    filled from the fork point's snapshot here, once: a run of the fork, its
    ``conversation.workspace``, ``restore_workspace`` and any snapshot of the
    directory call it first. Call it yourself before using a directory taken
    from ``conversation.state.workspace``. Any number of threads and
    processes may call it at once (one writes, the others wait for it); a
    workspace with nothing waiting, or on an agent server, costs a ``stat``
    or nothing.

    >>> import pathlib, tempfile
    >>> work = pathlib.Path(tempfile.mkdtemp()); _ = (work / "a").write_text("x")
    >>> copy = copy_workspace(Workspace(working_dir=str(work)), lazy=True)
    >>> sorted(pathlib.Path(copy.working_dir).iterdir())
    []
    >>> (pathlib.Path(materialize_workspace(copy).working_dir) / "a").read_text()
    'x'
    """
    if not isinstance(workspace, Workspace):
        raise InvalidTypeError(f"workspace must be a Workspace, got {type(workspace).__name__}")
    if workspace.snapshot_store is not None and not workspace.is_remote:
        store_at(workspace.snapshot_store).materialize(workspace.working_dir)
    return workspace


def _history(state: ConversationState, event_id: str) -> Sequence[Event]:
    try:
        return history_to(state, event_id)  # on any branch
    except KeyError:
        raise EventNotFoundError(
            f"no event {event_id!r} in conversation {str(state.id)!r}"
        ) from None


def fork_workspace(
    state: ConversationState,
    workspace: str | os.PathLike[str],
    from_event_id: str | None = None,
) -> Workspace | None:
    """The workspace a fork of ``state`` gets for ``fork(workspace=...)``; ``None``: shared.

    ``"shared"`` shares the source's directory (OpenHands' SDK's behaviour);
    ``"copy"`` gives the fork a new directory under the snapshot store, and
    a path that directory (new or empty), with the files at the fork point:
    now, or at ``from_event_id``. The directory is made at once and its
    files are written on first use (:func:`materialize_workspace`).

    >>> from cowconv import LLM, Agent, Conversation
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="m")), workspace=".")
    >>> fork_workspace(conversation.state, "shared") is None
    True
    """
    if isinstance(workspace, str) and workspace == "shared":
        return None
    if not isinstance(workspace, str | os.PathLike):
        raise InvalidTypeError(
            f"workspace must be 'shared', 'copy' or a path, got {type(workspace).__name__}"
        )
    events = None if from_event_id is None else _history(state, from_event_id)
    target = None if isinstance(workspace, str) and workspace == "copy" else workspace
    return copy_workspace(state.workspace, events, target, lazy=True)


def restore_snapshot(state: ConversationState, event_id: str | None = None) -> str:
    """Put ``state``'s workspace files back as they were at ``event_id``; the id of the files
    just before (restore that to undo).

    ``event_id`` ``None``: the last snapshot of the active branch. Files a
    snapshot leaves out (ignored, too large) are not touched.

    >>> import pathlib, tempfile
    >>> from cowconv import LLM, Agent, Conversation
    >>> work = pathlib.Path(tempfile.mkdtemp())
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="m")),
    ...     workspace=Workspace(working_dir=str(work), snapshot_store=tempfile.mkdtemp()))
    >>> restore_snapshot(conversation.state)
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: no workspace snapshot is recorded at or before...
    """
    events = state.branch if event_id is None else _history(state, event_id)
    tree = snapshot_at(events)
    if tree is None:
        raise InvalidValueError(
            "no workspace snapshot is recorded at or before that event (snapshots are taken "
            "around tool calls when the workspace names a snapshot_store)"
        )
    workspace = state.workspace
    store = store_at(workspace.snapshot_store or default_store_directory())
    return store.restore(tree, workspace.working_dir).tree


def _snapshot_before(events: Sequence[Event], end: int) -> str | None:
    for position in range(min(end, len(events)) - 1, -1, -1):
        event = events[position]
        if isinstance(event, ActionEvent | ObservationEvent) and event.workspace_snapshot:
            return event.workspace_snapshot
    return None


def file_changes(a: ConversationState, b: ConversationState) -> dict[str, dict[str, str] | None]:
    """What each of two conversations did to its files since their fork point.

    ``{"a": {path: "added" | "deleted" | "modified"}, "b": {...}}``, each side
    from the last snapshot recorded in their common history to its own last
    one; a side is ``None`` when either snapshot is not recorded (a workspace
    without ``snapshot_store``, or no tool call before the fork point).

    >>> from cowconv import LLM, Agent, Conversation
    >>> source = Conversation(agent=Agent(llm=LLM(model="m")), workspace=".")
    >>> file_changes(source.state, source.fork().state)
    {'a': None, 'b': None}
    """
    common = a.branch.common_prefix_length(b.branch)
    base = _snapshot_before(a.branch, common)
    changes: dict[str, dict[str, str] | None] = {}
    for name, state in (("a", a), ("b", b)):
        last = snapshot_at(state.branch)
        if base is None or last is None:
            changes[name] = None
            continue
        store = store_at(state.workspace.snapshot_store or default_store_directory())
        changes[name] = store.diff(base, last)
    return changes
