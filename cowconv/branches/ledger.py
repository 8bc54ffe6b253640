"""A branch suite recorded in its store, so that it outlives the process that started it.

``run_branches(source, branches, suite_id=...)`` writes one row per branch
in the store the forks live in (:class:`~cowconv.ports.SuiteRow`): the
branch's fork and its state. A worker *claims* a branch before its first LLM
call (``pending`` -> ``running``, with itself as owner), beats a heartbeat
while it runs, and commits the outcome to the fork and ``done`` to the row
in one transaction. A runner that finds a branch ``running`` under another
owner waits for it; an owner whose heartbeat stalls for ``lease`` seconds
(as the watcher's own clock counts them: no clocks are compared) is dead,
and its branch is ``lost``: it may have paid for LLM calls whose results
are gone, so it is not run again unless asked (``rerun_lost=True``).

>>> from cowconv import MemoryStore
>>> store = MemoryStore()
>>> record(store, "s1", "src", ["f0", "f1"], {"messages": ["a", "b"]})
>>> [row.state for row in branch_rows(store, "s1")]
['pending', 'pending']
>>> ticket = SuiteTicket(location="(memory)", suite="s1", lease=30.0)
>>> claimed = Claim(ticket, 0, "f0", store=store)
>>> claimed.take() is None  # pending -> running, held by this claim
True
>>> print(claimed.take())  # doctest: +ELLIPSIS
branch 0 of suite 's1' is running elsewhere (claimed by ...)
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cowconv._exceptions import (
    BranchCancelledError,
    BranchError,
    BranchLostError,
    BranchTimeoutError,
    BranchWorkspaceError,
    CorruptStoreError,
    StoreError,
    SuiteError,
    SuiteExistsError,
    SuiteNotFoundError,
)
from cowconv.core.events import AgentErrorEvent
from cowconv.core.frozen import decode_json
from cowconv.core.state import ConversationState, ExecutionStatus
from cowconv.core.tree import extend_active
from cowconv.ports import RowTransaction, SuiteRow
from cowconv.stores import is_store_url, open_store
from cowconv.stores.tree import TreeStore

__all__ = [
    "DONE",
    "LEASE",
    "LOST",
    "PENDING",
    "RUNNING",
    "Claim",
    "SuiteTicket",
    "asked",
    "branch_rows",
    "failed_change",
    "failure_error",
    "header",
    "mark_lost",
    "record",
    "reset_lost",
    "shared_store",
    "store_of",
    "without_password",
]

logger = logging.getLogger("cowconv.distributed")

PENDING, RUNNING, DONE, LOST = "pending", "running", "done", "lost"
SUITE = "suite"  # the state of the suite's own row (branch -1)
LEASE = 60.0
"""Default seconds a running branch's heartbeat may stall before its owner counts as dead."""


def failure_error(
    index: int, conversation_id: str, failure: str | None, reason: str
) -> BranchError:
    """The error for a branch that ended with ``failure`` (a word of :class:`BranchOutcome`).

    >>> type(failure_error(0, "c", "timeout", "too slow")).__name__
    'BranchTimeoutError'
    """
    kind: type[BranchError] = {
        "workspace": BranchWorkspaceError,
        "lost": BranchLostError,
        "timeout": BranchTimeoutError,
        "cancelled": BranchCancelledError,
    }.get(failure or "", BranchError)
    return kind(index, conversation_id, reason)


@dataclass(frozen=True)
class SuiteTicket:
    """What a job carries so that its worker can claim it and commit it in the suite's store.

    ``location`` is what :func:`~cowconv.stores.open_store` opens there (a
    SQLite file on this machine, or a ``postgresql://`` URL, with its password
    if it has one: it travels with the job, as API keys do).
    """

    location: str
    suite: str
    lease: float = LEASE


def without_password(location: str) -> str:
    """``location`` without the password of a PostgreSQL URL or connection string.

    >>> without_password("postgresql://suite:s3cret@db.internal:5432/cowconv")
    'postgresql://suite@db.internal:5432/cowconv'
    >>> without_password("host=db.internal user=suite password=s3cret dbname=cowconv")
    'host=db.internal user=suite dbname=cowconv'
    >>> without_password("/srv/suites/cowconv.db")
    '/srv/suites/cowconv.db'
    """
    if is_store_url(location):
        scheme, _, rest = location.partition("://")
        authority, slash, path = rest.partition("/")
        user, at, host = authority.rpartition("@")
        if at and ":" in user:
            authority = f"{user.split(':', 1)[0]}@{host}"
        return f"{scheme}://{authority}{slash}{path}"
    if "password=" in location and "=" in location.split()[0]:
        return " ".join(part for part in location.split() if not part.startswith("password="))
    return location


def store_of(store: object) -> TreeStore:
    """``store`` if a branch suite can be recorded in it and reached by its workers.

    >>> from cowconv import MemoryStore
    >>> store_of(MemoryStore())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.SuiteError: a recorded suite (suite_id=) needs its conversations in ...
    """
    if not isinstance(store, TreeStore) or store.location is None:
        raise SuiteError(
            "a recorded suite (suite_id=) needs its conversations in a store other processes "
            "can open: a SQLiteStore file (one machine) or a PostgresStore (several), got "
            f"{store!r}; give the source conversation one (Conversation(..., store=...))"
        )
    return store


_open: dict[str, TreeStore] = {}
_open_lock = threading.Lock()


def shared_store(location: str) -> TreeStore:
    """The store at ``location``, opened once per process (workers run many branches).

    A SQLite file must exist already: a worker on a machine without it would
    otherwise create an empty store of its own.
    """
    with _open_lock:
        store = _open.get(location)
        if store is None:
            if not is_store_url(location) and not os.path.isfile(location):
                raise StoreError(
                    f"the suite's store {location} is not on this machine "
                    f"({socket.gethostname()}); workers on other machines need a PostgreSQL "
                    "store (postgresql://...)"
                )
            opened = open_store(location)
            assert isinstance(opened, TreeStore)
            store = _open[location] = opened
        return store


def _row(rows: RowTransaction, suite: str, branch: int) -> SuiteRow | None:
    for row in rows.suite_rows(suite):
        if row.branch == branch:
            return row
    return None


def record(
    store: TreeStore, suite: str, source: str, forks: Sequence[str], detail: dict[str, Any]
) -> None:
    """Record a new suite: its own row (``detail``), then one ``pending`` row per fork.

    :class:`~cowconv.SuiteExistsError` if ``suite`` is recorded already.
    """

    def write(rows: RowTransaction) -> None:
        if rows.suite_rows(suite):
            raise SuiteExistsError(
                f"the store already records a suite {suite!r}: resume it (resume_suite, or "
                "run_branches(..., resume=True)) or choose another suite_id"
            )
        rows.put_suite_row(SuiteRow(suite, -1, source, SUITE, None, 0, json.dumps(detail)))
        for index, fork in enumerate(forks):
            rows.put_suite_row(SuiteRow(suite, index, fork, PENDING))

    store.change_suite(write)


def header(store: TreeStore, suite: str) -> tuple[SuiteRow, list[SuiteRow]]:
    """The suite's own row and its branch rows (:class:`~cowconv.SuiteNotFoundError` if none)."""
    rows = store.suite_rows(suite)
    if not rows or rows[0].branch != -1:
        raise SuiteNotFoundError(f"the store {store!r} records no suite {suite!r}")
    return rows[0], rows[1:]


_ASKED: dict[str, Callable[[Any], bool]] = {
    "messages": lambda value: isinstance(value, list) and all(isinstance(v, str) for v in value),
    "max_iteration_per_run": lambda value: (
        isinstance(value, list) and all(type(v) is int and v > 0 for v in value)
    ),
}
"""What a suite's own row records that a resume reads, and the shape each must have."""


def asked(head: SuiteRow) -> dict[str, Any]:
    """What the suite was asked, as its own row ``head`` records it (a JSON object);
    :class:`~cowconv.CorruptStoreError` naming the suite if the row holds anything else,
    or its messages or iteration limits are not lists of texts and of positive integers.

    >>> asked(SuiteRow("s1", -1, "c-1", "suite", None, 0, '{"messages": ["Hi."]}'))
    {'messages': ['Hi.']}
    >>> asked(SuiteRow("s1", -1, "c-1", "suite", None, 0, "[1"))
    Traceback (most recent call last):
    ...
    cowconv._exceptions.CorruptStoreError: the suite 's1' is damaged in its store: its own row \
cannot be read (Expecting ',' delimiter: line 1 column 3 (char 2))
    """
    try:
        detail = decode_json(head.detail or "")
    except ValueError as error:
        reason = str(error)
    else:
        if not isinstance(detail, dict):
            reason = f"not a JSON object but a {type(detail).__name__}"
        else:
            wrong = [key for key, fits in _ASKED.items() if key in detail and not fits(detail[key])]
            if not wrong:
                return detail
            reason = f"{wrong[0]} is {detail[wrong[0]]!r}"
    raise CorruptStoreError(
        f"the suite {head.suite!r} is damaged in its store: its own row cannot be read ({reason})"
    )


def branch_rows(store: TreeStore, suite: str) -> list[SuiteRow]:
    """The suite's branch rows, by index."""
    return header(store, suite)[1]


def mark_lost(
    store: TreeStore,
    suite: str,
    branch: int,
    reason: str,
    *,
    owner: str | None = None,
    beat: int | None = None,
) -> SuiteRow | None:
    """Declare a ``running`` branch ``lost`` (only if still held by ``owner`` at ``beat``,
    when given); returns the branch's row as it is now."""

    def write(rows: RowTransaction) -> SuiteRow | None:
        row = _row(rows, suite, branch)
        if row is None or row.state != RUNNING:
            return row
        if owner is not None and (row.owner, row.beat) != (owner, beat):
            return row
        lost = row._replace(state=LOST, detail=json.dumps({"error": reason, "owner": row.owner}))
        rows.put_suite_row(lost)
        return lost

    return store.change_suite(write)


def reset_lost(store: TreeStore, suite: str, branches: Sequence[int]) -> None:
    """Put ``lost`` branches back to ``pending`` (``rerun_lost=True``: run them again)."""

    def write(rows: RowTransaction) -> None:
        for branch in branches:
            row = _row(rows, suite, branch)
            if row is not None and row.state == LOST:
                rows.put_suite_row(row._replace(state=PENDING, owner=None, beat=0, detail="{}"))

    store.change_suite(write)


class _NotOurs(Exception):
    """The branch's row is no longer held by this claim (another runner took it)."""


def owner_name() -> str:
    """This runner's name: ``host:pid:random`` (two claims of one process differ)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Claim:
    """A worker's hold on one branch of a recorded suite: take it, beat, commit its outcome.

    >>> from cowconv import MemoryStore
    >>> store = MemoryStore()
    >>> record(store, "s", "src", ["f0"], {})
    >>> claim = Claim(SuiteTicket("(memory)", "s"), 0, "f0", store=store)
    >>> claim.take() is None, branch_rows(store, "s")[0].state
    (True, 'running')
    """

    def __init__(
        self,
        ticket: SuiteTicket,
        branch: int,
        conversation_id: str,
        *,
        store: TreeStore | None = None,
    ) -> None:
        self.ticket = ticket
        self.branch = branch
        self.conversation_id = conversation_id
        self.owner = owner_name()
        self._store = store
        self.lost = False
        """Set when the heartbeat finds the branch taken from this claim (declared lost)."""
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None

    @property
    def store(self) -> TreeStore:
        if self._store is None:
            self._store = shared_store(self.ticket.location)
        return self._store

    def take(self) -> str | None:
        """Claim the branch (``pending`` -> ``running``); ``None``, or why it cannot be."""
        suite, branch = self.ticket.suite, self.branch

        def write(rows: RowTransaction) -> str | None:
            row = _row(rows, suite, branch)
            if row is None:
                return f"branch {branch} of suite {suite!r} is not recorded in its store"
            if row.state != PENDING:
                held = f" (claimed by {row.owner})" if row.owner else ""
                where = "elsewhere" if row.state == RUNNING else "already"
                return f"branch {branch} of suite {suite!r} is {row.state} {where}{held}"
            rows.put_suite_row(row._replace(state=RUNNING, owner=self.owner, beat=0))
            return None

        return self.store.change_suite(write)

    def start(self) -> None:
        """Beat every quarter of the lease until :meth:`stop`, in a daemon thread."""
        self._beating = threading.Thread(target=self._beat, name="cowconv-suite-beat", daemon=True)
        self._beating.start()

    def stop(self) -> None:
        self._stop.set()
        if self._beating is not None:
            self._beating.join(30)

    def beat(self) -> bool:
        """Count one heartbeat; ``False`` if the branch is no longer held by this claim."""
        suite, branch = self.ticket.suite, self.branch

        def write(rows: RowTransaction) -> bool:
            row = _row(rows, suite, branch)
            if row is None or row.state != RUNNING or row.owner != self.owner:
                return False
            rows.put_suite_row(row._replace(beat=row.beat + 1))
            return True

        return self.store.change_suite(write)

    def _beat(self) -> None:
        while not self._stop.wait(max(0.1, self.ticket.lease / 4)):
            try:
                if not self.beat():
                    self.lost = True  # declared lost meanwhile: the run stops
                    return
            except Exception as error:  # a busy store: the next beat tries again
                logger.warning(
                    "suite %s branch %d: heartbeat failed: %s",
                    self.ticket.suite,
                    self.branch,
                    error,
                )

    def commit(
        self, change: Callable[[ConversationState], ConversationState], detail: dict[str, Any]
    ) -> None:
        """Apply ``change`` to the stored fork and mark the branch ``done``, in one transaction.

        Refused (:class:`~cowconv.SuiteError`, nothing written) if another
        runner holds the branch now; a branch declared ``lost`` meanwhile is
        taken back: its result arrived after all.
        """
        suite, branch = self.ticket.suite, self.branch
        done = json.dumps({**detail, "owner": self.owner})

        def guard(rows: RowTransaction) -> None:
            row = _row(rows, suite, branch)
            ours = row is not None and row.state == RUNNING and row.owner == self.owner
            if row is None or not (ours or row.state == LOST):
                raise _NotOurs(f"branch {branch} of suite {suite!r} is held by another runner")
            rows.put_suite_row(row._replace(state=DONE, owner=self.owner, detail=done))

        store = self.store
        for attempt in range(3):
            stored = store.load(self.conversation_id)
            try:
                store.save(stored, change(stored), guard=guard)
                return
            except _NotOurs as error:
                raise SuiteError(str(error)) from None
            except StoreError:
                if attempt == 2:
                    raise  # the fork changed under us three times: give up, loudly


def failed_change(error: str) -> Callable[[ConversationState], ConversationState]:
    """The change that records on a fork why its branch did not run (status ``error``)."""

    def change(state: ConversationState) -> ConversationState:
        return state._replace(
            events=extend_active(state, (AgentErrorEvent(error=error),)),
            execution_status=ExecutionStatus.ERROR,
        )

    return change
