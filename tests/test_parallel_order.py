"""The order a parallel run hands tests out in (``tests/conftest.py``'s ``_in_parallel_order``).

Slow tests first; the slow ones that mostly wait (marker ``waits``) spread among the quick ones,
evenly, and none in their last third; a group's tests, which run with their group, stay with
the slow ones; every kind keeps its own order.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import _in_parallel_order

KINDS = {
    "quick": (),
    "slow": ("slow",),
    "waits": ("slow", "waits"),
    "grouped": ("slow", "waits", "xdist_group"),
}


@dataclass(eq=False)
class FakeItem:
    """What the ordering reads of a pytest item: its markers."""

    index: int
    kind: str

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in KINDS[self.kind] else None


def _items(kinds: list[str]) -> list[FakeItem]:
    return [FakeItem(index, kind) for index, kind in enumerate(kinds)]


@given(st.lists(st.sampled_from(sorted(KINDS))))
def test_every_test_once_slow_first_each_kind_in_its_order(kinds: list[str]) -> None:
    items = _items(kinds)
    ordered = _in_parallel_order(items)  # type: ignore[arg-type]
    assert sorted(item.index for item in ordered) == list(range(len(items)))
    first = ordered[: sum(kind in ("slow", "grouped") for kind in kinds)]
    assert [item.kind in ("slow", "grouped") for item in first] == [True] * len(first)
    for kind in KINDS:
        of_kind = [item.index for item in ordered if item.kind == kind]
        assert of_kind == sorted(of_kind)


@st.composite
def suites(draw: st.DrawFn) -> list[str]:
    """The kinds of a suite's tests, in collection order, with quick tests enough to spread
    the waiting ones (three or more per waiting test; the real suite has ~200)."""
    waiting = draw(st.integers(0, 30))
    counts = {
        "waits": waiting,
        "quick": draw(st.integers(3 * waiting, 3 * waiting + 400)),
        "slow": draw(st.integers(0, 10)),
        "grouped": draw(st.integers(0, 5)),
    }
    kinds = [kind for kind, count in counts.items() for _ in range(count)]
    return draw(st.permutations(kinds))


@given(suites())
def test_waiting_tests_are_spaced_evenly_and_end_before_the_last_third(kinds: list[str]) -> None:
    ordered = _in_parallel_order(_items(kinds))  # type: ignore[arg-type]
    quick_seen = 0
    before_each: list[int] = []  # quick tests handed out before each waiting one
    for item in ordered:
        if item.kind == "quick":
            quick_seen += 1
        elif item.kind == "waits":
            before_each.append(quick_seen)
    if not before_each:
        return
    gaps = {
        later - earlier for earlier, later in zip([0, *before_each[:-1]], before_each, strict=True)
    }
    assert len(gaps) == 1 and gaps.pop() >= 1  # the same number of quick ones before each
    quick = kinds.count("quick")
    assert quick - before_each[-1] >= quick / 3  # the last third of the quick ones is quick
