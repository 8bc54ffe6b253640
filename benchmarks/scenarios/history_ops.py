"""Scenario 4: EventLog against a Python list: append, index, find by id, iterate."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyrsistent import pvector

from benchmarks._measure import Sample, human_seconds, human_size, time_op
from benchmarks._scenario import (
    Config,
    Context,
    Scenario,
    Target,
    at_size,
    cell,
    fmt_ratio,
    point,
    ratio,
    table,
)
from benchmarks._workload import make_event
from cowconv import Event, EventLog

ITERATION_FACTOR = 2.0
ITERATION_SIZE = 100_000
BATCH = 1_000
"""Operations per timed call for the per-operation figures (loop overhead is in both)."""

OPERATIONS = {
    "append": (
        "Append one event",
        ("EventLog.append", "EventLog.append, gc on", "PVector.append", "list.append"),
    ),
    "index": ("Index a random position", ("EventLog[i]", "list[i]")),
    "find": ("Find an event's position by id", ("EventLog.index_of(id)", "list scan by id")),
    "iterate": (
        "Iterate, per event",
        ("EventLog", "EventLog after take(n/2) + n/2 appends", "list"),
    ),
}


def _append_log(log: EventLog, new: Sequence[Event]) -> Callable[[], object]:
    def op() -> object:
        grown = log
        for event in new:
            grown = grown.append(event)
        return grown

    return op


def _append_vector(events: Sequence[Event], new: Sequence[Event]) -> Callable[[], object]:
    vector = pvector(events)

    def op() -> object:
        grown = vector
        for event in new:
            grown = grown.append(event)
        return grown

    return op


def _append_list(events: Sequence[Event], new: Sequence[Event]) -> Callable[[], object]:
    items = list(events)
    size = len(items)

    def op() -> object:
        for event in new:
            items.append(event)
        del items[size:]  # back to the same length for the next batch (O(BATCH))
        return items

    return op


def _index(items: Sequence[Event], positions: Sequence[int]) -> Callable[[], object]:
    def op() -> object:
        for position in positions:
            items[position]
        return items

    return op


def _scan(items: Sequence[Event], ids: Sequence[str]) -> Callable[[], object]:
    """What a plain list offers to find an event: look at each one until the id matches."""

    def op() -> object:
        found = []
        for wanted in ids:
            for position, event in enumerate(items):
                if event.id == wanted:
                    found.append(position)
                    break
        return found

    return op


def _iterate(items: Sequence[Event]) -> Callable[[], object]:
    def op() -> object:
        for _ in items:
            pass
        return items

    return op


class HistoryOps(Scenario):
    name = "history"
    title = "History operations against a Python list"

    def _sizes(self, config: Config) -> list[int]:
        return sorted(size for size in config.sizes if size >= 1_000) or [config.largest]

    def steps(self, config: Config) -> int:
        return 4 * len(self._sizes(config))

    def run(self, ctx: Context) -> dict[str, Any]:
        settings = ctx.settings
        sizes = self._sizes(ctx.config)
        results: dict[str, dict[str, list[dict[str, Any]]]] = {
            op: {label: [] for label in labels} for op, (_, labels) in OPERATIONS.items()
        }
        fresh = [make_event(position) for position in range(BATCH)]

        def record(op: str, label: str, size: int, sample: Sample, per_call: int) -> None:
            results[op][label].append(point(size, sample.scaled(1 / per_call)))

        for size in sizes:
            events = ctx.workload.events(size)
            log = ctx.workload.log(size)
            ctx.tick(f"append at {human_size(size)}")
            record(
                "append", "EventLog.append", size, time_op(_append_log(log, fresh), settings), BATCH
            )
            sample = time_op(_append_log(log, fresh), settings, collector=True)
            record("append", "EventLog.append, gc on", size, sample, BATCH)
            record(
                "append",
                "PVector.append",
                size,
                time_op(_append_vector(events, fresh), settings),
                BATCH,
            )
            record(
                "append", "list.append", size, time_op(_append_list(events, fresh), settings), BATCH
            )

            ctx.tick(f"index at {human_size(size)}")
            chooser = random.Random(size)
            positions = [chooser.randrange(size) for _ in range(BATCH)]
            record("index", "EventLog[i]", size, time_op(_index(log, positions), settings), BATCH)
            record("index", "list[i]", size, time_op(_index(events, positions), settings), BATCH)

            ctx.tick(f"find by id at {human_size(size)}")
            ids = [events[position].id for position in positions]
            lookups = max(10, min(BATCH, 2_000_000 // size))
            record(
                "find",
                "EventLog.index_of(id)",
                size,
                time_op(lambda ids=ids, log=log: [log.index_of(i) for i in ids], settings),
                BATCH,
            )
            scan = _scan(events, ids[:lookups])
            budget = settings.baseline_budget_s
            sample = time_op(scan, settings, max_seconds=budget)
            record("find", "list scan by id", size, sample, lookups)

            ctx.tick(f"iterate at {human_size(size)}")
            split = log.take(size // 2).extend(events[size // 2 :])
            record("iterate", "EventLog", size, time_op(_iterate(log), settings), size)
            record(
                "iterate",
                "EventLog after take(n/2) + n/2 appends",
                size,
                time_op(_iterate(split), settings),
                size,
            )
            record("iterate", "list", size, time_op(_iterate(events), settings), size)
        return {"sizes": sizes, "batch": BATCH, "operations": results}

    def _iteration_ratios(self, data: dict[str, Any], size: int) -> dict[str, float | None]:
        iterate = data["operations"]["iterate"]
        base = at_size(iterate["list"], size)
        return {
            label: ratio(at_size(series, size), base)
            for label, series in iterate.items()
            if label != "list"
        }

    def targets(self, data: dict[str, Any]) -> list[Target]:
        layouts = {
            "EventLog": "one vector",
            "EventLog after take(n/2) + n/2 appends": "after take(n/2) + n/2 appends",
        }
        found = []
        ratios = self._iteration_ratios(data, ITERATION_SIZE)
        for label, layout in layouts.items():
            description = f"iterating 100k events against a list ({layout})"
            value = ratios.get(label) if ITERATION_SIZE in data["sizes"] else None
            if value is None:
                found.append(Target(description, "≤ 2×", "100k not in --sizes", None))
            else:
                found.append(
                    Target(description, "≤ 2×", fmt_ratio(value), value <= ITERATION_FACTOR)
                )
        return found

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        operations = data["operations"]
        lines = []
        size = max(data["sizes"])
        for op, (text, labels) in OPERATIONS.items():
            base = at_size(operations[op][labels[-1]], size)
            values = []
            for label in labels:
                entry = at_size(operations[op][label], size)
                values.append(
                    f"{label.split(' (')[0]} {human_seconds(entry['median'])}" if entry else "—"
                )
            lines.append(
                (
                    f"{text} at {human_size(size)}",
                    ", ".join(values) + f"  (list {human_seconds(base['median'])})"
                    if base
                    else ", ".join(values),
                )
            )
        return lines

    def plot(self, data: dict[str, Any], directory: Path) -> list[str]:
        from benchmarks._plots import Line, Panel, chart

        panels = [
            Panel(
                title=text,
                unit="s",
                ylabel="time per operation",
                lines=[Line(label, data["operations"][op][label]) for label in labels],
            )
            for op, (text, labels) in OPERATIONS.items()
        ]
        return [chart(directory / "history_ops.png", panels)]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        operations = data["operations"]
        text = [
            f"Time per operation. Append, index and find are timed as batches of "
            f"{data['batch']:,} operations in a Python loop (the loop costs the same for each "
            "structure); the list scan compares ids from the start until one matches, timed over "
            "fewer lookups at large sizes. *gc on* leaves the garbage collector running during "
            "the batches (everything else here runs with it off). It matters for appends: the "
            "collector walks every event of each new pyrsistent vector (it cannot see that "
            "vectors share their trie), which is why EventLog starts a new vector every 4,096 "
            "events. Append grows "
            "the history from *n* events; the list is trimmed back after each batch. Iteration "
            "is a `for` loop over every event, divided by *n*. The *take + appends* history is "
            "`log.take(n // 2)` extended with the other half one append at a time: what a fork "
            "from an earlier event holds after it grows, in several vectors.",
            "",
        ]
        for op, (title, labels) in OPERATIONS.items():
            base_label = labels[-1]
            rows = []
            for size in data["sizes"]:
                base = at_size(operations[op][base_label], size)
                row = [f"{size:,}"]
                for label in labels:
                    row.append(cell(at_size(operations[op][label], size), human_seconds))
                for label in labels[:-1]:
                    row.append(fmt_ratio(ratio(at_size(operations[op][label], size), base)))
                rows.append(row)
            header = ["events", *labels, *(f"{label} / {base_label}" for label in labels[:-1])]
            text += [f"**{title}**", "", table(header, rows), ""]
        return "\n".join(text).rstrip()
