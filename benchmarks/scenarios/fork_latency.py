"""Scenario 1: fork latency against history length, cowconv against two copies."""

from __future__ import annotations

import copy
import math
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._measure import fit_loglog, human_seconds, human_size, time_op
from benchmarks._scenario import (
    Config,
    Context,
    Scenario,
    Target,
    at_size,
    cell,
    fmt_ratio,
    measured,
    point,
    ratio,
    sweep,
    table,
)
from cowconv import Event

FORK_LIMIT_S = 2e-6
UUID4_FACTOR = 2.5
"""Fork against ``uuid.uuid4()`` timed in the same run: the ratio a loaded machine moves less."""
SLOPE_LIMIT = 0.05
DEEPCOPY_FACTOR = 1_000
JSON_FACTOR = 10_000

LABELS = {
    "cowconv": "cowconv Conversation.fork()",
    "deepcopy": "copy.deepcopy(events)",
    "json": "JSON round trip of every event",
}


def json_round_trip(events: Sequence[Event]) -> list[Event]:
    """What OpenHands' SDK's fork does to each event."""
    return [Event.model_validate_json(event.model_dump_json()) for event in events]


class ForkLatency(Scenario):
    name = "fork"
    title = "Fork latency against history length"

    def steps(self, config: Config) -> int:
        return 4 * len(config.sizes)

    def run(self, ctx: Context) -> dict[str, Any]:
        sizes = sorted(ctx.config.sizes)
        settings = ctx.settings
        forks, uuids, read = [], [], []
        for size in sizes:
            ctx.tick(f"cowconv fork at {human_size(size)} events, uuid.uuid4() beside it")
            conversation = ctx.workload.conversation(size)
            # uuid.uuid4() right before each fork measurement: the ratio is of one moment.
            uuids.append(point(size, time_op(uuid.uuid4, settings)))
            forks.append(point(size, time_op(conversation.fork, settings)))
            ctx.tick(f"fork and its first snapshot at {human_size(size)} events")
            # A fork's first snapshot is built when first read: what a fork that is used pays.
            read.append(point(size, time_op(lambda c=conversation: c.fork().state, settings)))

        def copying(op: Any) -> Any:
            def measure(size: int) -> Any:
                events = ctx.workload.events(size)
                budget = settings.baseline_budget_s
                sample = time_op(lambda: op(events), settings, max_seconds=budget)
                return sample, sample.min

            return measure

        deepcopies = sweep(
            sizes,
            copying(copy.deepcopy),
            settings.baseline_budget_s,
            lambda size: ctx.tick(f"deepcopy at {human_size(size)} events"),
        )
        round_trips = sweep(
            sizes,
            copying(json_round_trip),
            settings.baseline_budget_s,
            lambda size: ctx.tick(f"JSON round trip at {human_size(size)} events"),
        )
        series = {"cowconv": forks, "deepcopy": deepcopies, "json": round_trips}
        slopes = {}
        for name, points in series.items():
            real = measured(points)
            slopes[name] = fit_loglog([p["size"] for p in real], [p["median"] for p in real])[0]
        return {
            "sizes": sizes,
            "series": series,
            "slopes": slopes,
            "uuid4": uuids,
            "fork_and_read": read,
        }

    def _ratios(self, data: dict[str, Any], size: int) -> tuple[float | None, float | None]:
        series = data["series"]
        fork = at_size(series["cowconv"], size)
        return (
            ratio(at_size(series["deepcopy"], size), fork),
            ratio(at_size(series["json"], size), fork),
        )

    def targets(self, data: dict[str, Any]) -> list[Target]:
        series = data["series"]
        forks = series["cowconv"]
        worst = max(forks, key=lambda p: p["median"])
        slope = data["slopes"]["cowconv"]
        sizes = data["sizes"]
        span = f"{human_size(min(sizes))}–{human_size(max(sizes))} events"
        found = [
            Target(
                f"Conversation.fork() median at every size ({span})",
                "≤ 2 µs",
                f"worst {human_seconds(worst['median'])} at {human_size(worst['size'])}",
                worst["median"] <= FORK_LIMIT_S,
                absolute=True,
            ),
            self._uuid4_target(data, span),
            Target(
                f"fitted log-log slope of fork time ({span})",
                "< 0.05",
                f"{slope:+.3f}",
                None if math.isnan(slope) else abs(slope) < SLOPE_LIMIT,
            ),
        ]
        checks = (
            ("deepcopy", DEEPCOPY_FACTOR, "faster than copy.deepcopy of the events at 10k events"),
            ("json", JSON_FACTOR, "faster than the JSON round trip of every event at 10k events"),
        )
        for name, factor, text in checks:
            baseline = at_size(series[name], 10_000)
            fork = at_size(forks, 10_000)
            if baseline is None or fork is None:
                found.append(Target(text, f"≥ {factor:,}×", "10k not in --sizes", None))
            elif baseline["extrapolated"]:
                value = ratio(baseline, fork)
                found.append(
                    Target(
                        text,
                        f"≥ {factor:,}×",
                        f"{fmt_ratio(value)} (baseline extrapolated)",
                        None,
                        unjudged="baseline extrapolated",
                    )
                )
            else:
                value = ratio(baseline, fork)
                assert value is not None
                found.append(Target(text, f"≥ {factor:,}×", fmt_ratio(value), value >= factor))
        return found

    @staticmethod
    def _uuid4_ratios(data: dict[str, Any]) -> dict[int, float | None]:
        uuids = data.get("uuid4") or []
        return {
            entry["size"]: ratio(entry, at_size(uuids, entry["size"]))
            for entry in data["series"]["cowconv"]
        }

    def _uuid4_target(self, data: dict[str, Any], span: str) -> Target:
        ratios = [value for value in self._uuid4_ratios(data).values() if value is not None]
        worst = max(ratios) if ratios else None
        return Target(
            f"Conversation.fork() against uuid.uuid4() in the same run, worst size ({span})",
            f"≤ {UUID4_FACTOR:g}×",
            "not measured" if worst is None else f"{worst:.2f}×",
            None if worst is None else worst <= UUID4_FACTOR,
        )

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        series = data["series"]
        by_uuid4 = self._uuid4_ratios(data)
        lines = []
        for entry in series["cowconv"]:
            size = entry["size"]
            by_deepcopy, by_json = self._ratios(data, size)
            lines.append(
                (
                    f"fork at {human_size(size)} events",
                    f"{human_seconds(entry['median'])}  ({fmt_ratio(by_uuid4.get(size))} of"
                    f" uuid4; deepcopy {fmt_ratio(by_deepcopy)} slower, JSON"
                    f" {fmt_ratio(by_json)} slower)",
                )
            )
        slopes = data["slopes"]
        lines.append(
            (
                "log-log slopes",
                ", ".join(f"{name} {slope:+.3f}" for name, slope in slopes.items()),
            )
        )
        return lines

    def plot(self, data: dict[str, Any], directory: Path) -> list[str]:
        from benchmarks._plots import Line, Panel, chart

        series = data["series"]
        panel = Panel(
            title="Fork latency (median, min–max bars)",
            unit="s",
            ylabel="time per fork",
            lines=[
                Line(f"{LABELS[name]} (slope {data['slopes'][name]:+.2f})", series[name])
                for name in ("cowconv", "deepcopy", "json")
            ],
            hlines=[(FORK_LIMIT_S, "target: 2 µs")],
        )
        return [chart(directory / "fork_latency.png", [panel])]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        series = data["series"]
        by_uuid4 = self._uuid4_ratios(data)
        rows = []
        for size in data["sizes"]:
            by_deepcopy, by_json = self._ratios(data, size)
            rows.append(
                [
                    f"{size:,}",
                    cell(at_size(series["cowconv"], size), human_seconds),
                    cell(at_size(data.get("uuid4") or [], size), human_seconds),
                    fmt_ratio(by_uuid4.get(size)),
                    cell(at_size(data.get("fork_and_read") or [], size), human_seconds),
                    cell(at_size(series["deepcopy"], size), human_seconds),
                    cell(at_size(series["json"], size), human_seconds),
                    fmt_ratio(by_deepcopy),
                    fmt_ratio(by_json),
                ]
            )
        slopes = data["slopes"]
        extrapolated = sorted(
            {
                f"{LABELS[name]} at {human_size(p['size'])}"
                for name in ("deepcopy", "json")
                for p in series[name]
                if p["extrapolated"]
            }
        )
        text = [
            table(
                [
                    "events",
                    "cowconv fork",
                    "uuid.uuid4()",
                    "fork / uuid4",
                    "fork + first read of its state",
                    "deepcopy",
                    "JSON round trip",
                    "deepcopy / fork",
                    "JSON / fork",
                ],
                rows,
            ),
            "",
            "Fitted log-log slopes (measured points only): "
            + ", ".join(f"{LABELS[name]} **{slopes[name]:+.3f}**" for name in slopes)
            + ". A slope of 0 is constant time, 1 is linear.",
        ]
        if extrapolated:
            text += [
                "",
                "Extrapolated, not measured (one call would have taken too long): "
                + "; ".join(extrapolated)
                + ". The values are scaled linearly from the largest measured size.",
            ]
        return "\n".join(text)
