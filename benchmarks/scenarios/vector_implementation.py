"""pyrsistent's C vector against its pure-Python one: what Python 3.13+ costs.

pyrsistent 0.20 ships its C extension (``pvectorc``) for Python ≤ 3.12 only;
on 3.13+ histories live in the pure-Python vector. Both are importable side by
side where the C extension exists (``pyrsistent.python_pvector`` is always the
pure one), so the cost is measured as a ratio in one run, on the same events.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from pyrsistent import pvector
from pyrsistent._pvector import python_pvector  # always the pure-Python vector

from benchmarks._measure import human_seconds, time_op
from benchmarks._scenario import Config, Context, Scenario, Target, cell, fmt_ratio, point, table
from cowconv import Event
from cowconv.core.history import VECTOR_IMPLEMENTATION

SIZE = 10_000
BATCH = 1_000
"""Operations per timed call (loop overhead is the same on both sides)."""

OPERATIONS = {
    "append": "Append one event",
    "index": "Index a random position",
    "iterate": "Iterate, per event",
}


def _c_available() -> bool:
    return type(pvector()).__module__ == "pvectorc"


def _ops(
    make: Callable[[Sequence[Event]], Any], events: Sequence[Event], fresh: Sequence[Event]
) -> dict[str, Callable[[], object]]:
    vector = make(events)
    positions = [random.Random(7).randrange(len(events)) for _ in range(BATCH)]

    def append() -> object:
        grown = vector
        for event in fresh:
            grown = grown.append(event)
        return grown

    def index() -> object:
        found = None
        for position in positions:
            found = vector[position]
        return found

    def iterate() -> object:
        last = None
        for last in vector:  # noqa: B007
            pass
        return last

    return {"append": append, "index": index, "iterate": iterate}


class VectorImplementation(Scenario):
    name = "vector"
    title = "pyrsistent's C vector and its pure-Python fallback (Python 3.13+)"

    def steps(self, config: Config) -> int:
        return 2

    def run(self, ctx: Context) -> dict[str, Any]:
        events = ctx.workload.events(SIZE + BATCH)
        base, fresh = events[:SIZE], events[SIZE:]
        per_call = {"append": BATCH, "index": BATCH, "iterate": SIZE}
        sides: dict[str, Callable[[Sequence[Event]], Any]] = {"pure Python": python_pvector}
        if _c_available():
            sides = {"C extension": pvector, **sides}
        results: dict[str, dict[str, Any]] = {}
        for label, make in sides.items():
            ctx.tick(f"{label} vector at {SIZE:,} events")
            ops = _ops(make, base, fresh)
            results[label] = {
                name: point(SIZE, time_op(op, ctx.settings).scaled(1 / per_call[name]))
                for name, op in ops.items()
            }
        if len(sides) == 1:
            ctx.tick("no C extension in this interpreter")
        return {"size": SIZE, "in_use": VECTOR_IMPLEMENTATION, "results": results}

    def _ratios(self, data: dict[str, Any]) -> dict[str, float] | None:
        results = data["results"]
        if "C extension" not in results:
            return None
        return {
            name: results["pure Python"][name]["median"] / results["C extension"][name]["median"]
            for name in OPERATIONS
        }

    def targets(self, data: dict[str, Any]) -> list[Target]:
        # Information, not a promise: the ratio is pyrsistent's, cowconv can only report it.
        return []

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        ratios = self._ratios(data)
        if ratios is None:
            return [("pyrsistent vector", f"{data['in_use']} (no C extension to compare)")]
        slower = ", ".join(f"{name} {fmt_ratio(value)}" for name, value in ratios.items())
        return [("pure-Python vector vs C", f"{slower} slower; in use: {data['in_use']}")]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        results, ratios = data["results"], self._ratios(data)
        header = ["operation", *results, "pure Python / C"]
        rows = [
            [
                label,
                *(cell(results[side][name], human_seconds) for side in results),
                fmt_ratio(ratios[name]) if ratios else "—",
            ]
            for name, label in OPERATIONS.items()
        ]
        lines = [
            f"Per-operation times on a vector of {data['size']:,} events (medians, min–max), "
            f"both implementations in the same run. This interpreter's histories use the "
            f"**{data['in_use']}** vector.",
            "",
            table(header, rows),
            "",
            "pyrsistent 0.20 ships its C extension for Python ≤ 3.12 only; on 3.13+ pip "
            "installs the pure-Python vector (building the extension from the sdist there "
            "crashed under our suite). A fork stays O(1) either way; appends, indexing "
            "and iteration pay the ratio above. `cowconv --version` says which one is in use.",
        ]
        return "\n".join(lines)
