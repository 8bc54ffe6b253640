"""Scenario 3: fork from an earlier event, at several depths and history lengths."""

from __future__ import annotations

from collections.abc import Sequence
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
    point,
    sweep,
    table,
)
from benchmarks._workload import make_event
from cowconv import Conversation

FORK_FROM_LIMIT_S = 20e-6
TARGET_SIZE = 1_000_000
GENERATIONS = 100
"""Fork-from-event + append rounds that split a history into many chunks."""


def depths(size: int) -> list[int]:
    """Positions to fork from: the first event, 1 %, 25 %, 50 %, 75 % and the one before last."""
    last = max(0, size - 2)
    return sorted(
        {min(last, p) for p in (0, size // 100, size // 4, size // 2, 3 * size // 4)} | {last}
    )


def fragment(source: Conversation, generations: int) -> Conversation:
    """Fork just before the tip and append, ``generations`` times: one new chunk each."""
    conversation = source
    for generation in range(generations):
        events = conversation.state.events
        conversation = conversation.fork(from_event_id=events[len(events) - 5].id)
        for offset in range(40):
            conversation.append_event(make_event(generation * 40 + offset))
    return conversation


class ForkFromEvent(Scenario):
    name = "fork-from-event"
    title = "Fork from an earlier event"

    def steps(self, config: Config) -> int:
        return len(depths(config.largest)) + 2 * len(config.sizes) + 2

    def run(self, ctx: Context) -> dict[str, Any]:
        settings = ctx.settings
        sizes = sorted(ctx.config.sizes)
        largest = sizes[-1]
        source = ctx.workload.conversation(largest)
        events = ctx.workload.events(largest)
        by_depth = []
        for position in depths(largest):
            ctx.tick(f"fork from event {position:,} of {human_size(largest)}")
            event_id = events[position].id
            sample = time_op(
                lambda event_id=event_id: source.fork(from_event_id=event_id), settings
            )
            by_depth.append(point(largest, sample, position=position, kept=position + 1))

        by_size, takes = [], []
        for size in sizes:
            ctx.tick(f"fork from the middle event at {human_size(size)}")
            conversation = ctx.workload.conversation(size)
            middle = ctx.workload.events(size)[size // 2].id
            sample = time_op(lambda c=conversation, m=middle: c.fork(from_event_id=m), settings)
            by_size.append(point(size, sample))
            log, keep = ctx.workload.log(size), size // 2 + 1
            takes.append(point(size, time_op(lambda log=log, k=keep: log.take(k), settings)))

        def pvector_slice(size: int) -> tuple[Sample, float]:
            vector = pvector(ctx.workload.events(size))
            keep = size // 2 + 1
            sample = time_op(
                lambda: vector[:keep], settings, max_seconds=settings.baseline_budget_s
            )
            return sample, sample.min

        slices = sweep(
            sizes,
            pvector_slice,
            settings.baseline_budget_s,
            lambda size: ctx.tick(f"pyrsistent slice at {human_size(size)}"),
        )

        ctx.tick(f"splitting {human_size(largest)} into {GENERATIONS + 1} chunks")
        fragmented = fragment(source, GENERATIONS)
        log = fragmented.state.events
        middle_id = log[len(log) // 2].id
        ctx.tick("fork from the middle of the split history")
        sample = time_op(lambda: fragmented.fork(from_event_id=middle_id), settings)
        chunked = {"size": len(log), "chunks": len(log._chunks), "middle": point(len(log), sample)}
        return {
            "sizes": sizes,
            "largest": largest,
            "by_depth": by_depth,
            "by_size": by_size,
            "take": takes,
            "pvector_slice": slices,
            "chunked": chunked,
        }

    def targets(self, data: dict[str, Any]) -> list[Target]:
        description = "fork from an earlier event at 1M events (every depth tried)"
        if data["largest"] < TARGET_SIZE:
            return [
                Target(
                    description,
                    "≤ 20 µs",
                    f"largest size run was {human_size(data['largest'])}",
                    None,
                )
            ]
        worst = max(data["by_depth"], key=lambda p: p["median"])
        return [
            Target(
                description,
                "≤ 20 µs",
                f"worst {human_seconds(worst['median'])} (event {worst['position']:,})",
                worst["median"] <= FORK_FROM_LIMIT_S,
                absolute=True,
            )
        ]

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        largest = human_size(data["largest"])
        worst = max(data["by_depth"], key=lambda p: p["median"])
        best = min(data["by_depth"], key=lambda p: p["median"])
        chunked = data["chunked"]
        return [
            (
                f"fork from event at {largest}",
                f"{human_seconds(best['median'])}–{human_seconds(worst['median'])} over depths",
            ),
            (
                f"same, history in {chunked['chunks']} chunks",
                human_seconds(chunked["middle"]["median"]),
            ),
        ]

    def plot(self, data: dict[str, Any], directory: Path) -> list[str]:
        from benchmarks._plots import Line, Panel, chart

        depth = Panel(
            title=f"Fork from event k of {human_size(data['largest'])} events",
            xlabel="events kept (k + 1)",
            unit="s",
            ylabel="time per fork",
            lines=[Line("cowconv fork(from_event_id=...)", data["by_depth"], x="kept")],
            hlines=[(FORK_FROM_LIMIT_S, "target: 20 µs")],
        )
        size = Panel(
            title="Fork from the middle event",
            unit="s",
            ylabel="time per fork",
            lines=[
                Line("cowconv fork(from_event_id=...)", data["by_size"]),
                Line("cowconv EventLog.take(k)", data["take"]),
                Line("pyrsistent PVector[:k] (copies k)", data["pvector_slice"]),
            ],
            hlines=[(FORK_FROM_LIMIT_S, "target: 20 µs")],
        )
        return [chart(directory / "fork_from_event.png", [depth, size])]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        largest = data["largest"]
        depth_rows = [
            [f"{p['position']:,}", f"{p['kept']:,}", cell(p, human_seconds)]
            for p in data["by_depth"]
        ]
        size_rows = [
            [
                f"{size:,}",
                cell(at_size(data["by_size"], size), human_seconds),
                cell(at_size(data["take"], size), human_seconds),
                cell(at_size(data["pvector_slice"], size), human_seconds),
            ]
            for size in data["sizes"]
        ]
        chunked = data["chunked"]
        return "\n".join(
            [
                f"`conversation.fork(from_event_id=...)` on a {largest:,}-event conversation, "
                "forking at event *k* (the fork keeps events 0..k):",
                "",
                table(["event k", "events kept", "fork from event"], depth_rows),
                "",
                "Forking from the middle event (k = n/2) as the history grows; the history "
                "operation alone (`EventLog.take(k + 1)`) beside the O(k) slice of a pyrsistent "
                "`PVector` (what a fork from an earlier event would cost if it sliced):",
                "",
                table(
                    ["events", "cowconv fork from middle", "EventLog.take(k+1)", "PVector[:k+1]"],
                    size_rows,
                ),
                "",
                f"After {GENERATIONS} rounds of *fork just before the tip, then append 40 "
                f"events* the history has {chunked['size']:,} events in {chunked['chunks']} "
                "chunks (prefix views); forking from its middle event takes "
                f"{cell(chunked['middle'], human_seconds)}.",
            ]
        )
