"""The ledger of a recorded suite: claims, heartbeats, commits and lost branches, as a property.

Whatever order runners and watchers act in (claim, beat, commit, declare lost,
put a lost branch back), on memory, SQLite and PostgreSQL alike:

- a claim succeeds only on a ``pending`` branch, so two runners never hold one;
- a commit succeeds only for the claim holding the branch (or a branch declared
  ``lost``, whose result arrived after all), and writes the fork and ``done``
  together: the fork holds exactly one outcome per successful commit;
- a ``done`` branch is never claimed or committed again;
- a branch is run (claimed) again only after it was put back (``rerun_lost``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    Agent,
    Conversation,
    MemoryStore,
    MessageEvent,
    SuiteError,
)
from cowconv.branches import ledger
from cowconv.core.state import ConversationState
from cowconv.core.tree import extend_active
from cowconv.stores import open_store
from cowconv.stores.tree import TreeStore

BRANCHES = 3
RUNNERS = 3
OPS = ["claim", "beat", "commit", "lose", "reset"]


def _outcome(label: str):  # type: ignore[no-untyped-def]
    def change(state: ConversationState) -> ConversationState:
        event = MessageEvent(source="agent", role="assistant", content=label)
        return state._replace(events=extend_active(state, (event,)))

    return change


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """Makes a fresh store per example (a database per test for PostgreSQL, reused)."""
    made: list[TreeStore] = []
    count = iter(range(10**6))

    def make() -> TreeStore:
        if request.param == "memory":
            store: TreeStore = MemoryStore()
        elif request.param == "sqlite":
            opened = open_store(str(tmp_path / f"s{next(count)}.db"))
            assert isinstance(opened, TreeStore)
            store = opened
        else:
            opened = open_store(request.getfixturevalue("postgres_dsn"))
            assert isinstance(opened, TreeStore)
            store = opened
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    schedule=st.lists(
        st.tuples(
            st.sampled_from(OPS),
            st.integers(0, RUNNERS - 1),
            st.integers(0, BRANCHES - 1),
        ),
        max_size=40,
    )
)
def test_any_interleaving_runs_and_commits_each_branch_once(new_store, schedule) -> None:  # type: ignore[no-untyped-def]
    store: TreeStore = new_store()
    suite = f"s-{uuid.uuid4().hex}"  # one PostgreSQL database holds every example
    source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".", store=store)
    source.send_message("hi")
    forks = [source.fork() for _ in range(BRANCHES)]
    ledger.record(store, suite, str(source.id), [str(f.id) for f in forks], {})
    start = len(forks[0].state.events)
    ticket = ledger.SuiteTicket("(this process)", suite, 30.0)
    claims: dict[tuple[int, int], ledger.Claim] = {}
    commits = [0] * BRANCHES
    runs = [0] * BRANCHES  # successful claims
    resets = [0] * BRANCHES
    for op, runner, branch in schedule:
        before = {row.branch: row for row in ledger.branch_rows(store, suite)}[branch]
        claim = claims.get((runner, branch))
        if op == "claim":
            fresh = ledger.Claim(ticket, branch, str(forks[branch].id), store=store)
            if fresh.take() is None:
                assert before.state == ledger.PENDING
                claims[(runner, branch)] = fresh
                runs[branch] += 1
            else:
                assert before.state != ledger.PENDING
        elif op == "beat" and claim is not None:
            held = before.state == ledger.RUNNING and before.owner == claim.owner
            assert claim.beat() is held
        elif op == "commit" and claim is not None:
            try:
                claim.commit(_outcome(f"{runner}-{branch}"), {"failure": None})
            except SuiteError:
                assert not (before.state == ledger.RUNNING and before.owner == claim.owner)
                assert before.state != ledger.LOST
            else:
                ours = before.state == ledger.RUNNING and before.owner == claim.owner
                assert ours or before.state == ledger.LOST
                commits[branch] += 1
        elif op == "lose":
            ledger.mark_lost(store, suite, branch, "gone", owner=before.owner, beat=before.beat)
        elif op == "reset":
            if before.state == ledger.LOST:
                resets[branch] += 1
            ledger.reset_lost(store, suite, [branch])
        after = {row.branch: row for row in ledger.branch_rows(store, suite)}[branch]
        if before.state == ledger.DONE:
            assert after == before  # nothing moves a done branch
    rows = ledger.branch_rows(store, suite)
    for branch in range(BRANCHES):
        assert runs[branch] <= 1 + resets[branch]
        assert commits[branch] <= runs[branch]
        own = len(store.load(forks[branch].id).events) - start
        assert own == commits[branch]  # the fork holds exactly what was committed
        assert commits[branch] <= 1  # a done branch never moves: one result, ever
        assert (rows[branch].state == ledger.DONE) == (commits[branch] == 1)
