"""What a scenario is: it measures, then reads its own figures back for the report.

A scenario's ``run`` returns plain JSON data (stored in ``results.json``);
everything else (targets, the report section, plots, terminal lines) is
computed from that data alone, so a report can be rebuilt from a results file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._measure import Sample, Settings, human_size
from benchmarks._workload import Workload


class Skip(Exception):
    """The scenario cannot run here (a missing piece or extra); the message says why."""


@dataclass(frozen=True)
class Config:
    quick: bool
    sizes: tuple[int, ...]
    scenarios: tuple[str, ...]
    output: Path
    settings: Settings
    progress: bool = True
    plots: bool = True

    @property
    def largest(self) -> int:
        return max(self.sizes)

    @property
    def reference_size(self) -> int:
        """The size the "at 10k events" targets use (else the closest one)."""
        return min(self.sizes, key=lambda size: abs(math.log10(size) - 4))


@dataclass
class Context:
    config: Config
    workload: Workload
    tick: Callable[[str], None]
    """Advance the progress bar by one step, showing what runs next."""
    scratch: Path
    """A temporary directory this scenario may fill (removed after the run)."""
    notes: list[str] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        return self.config.settings


@dataclass(frozen=True)
class Target:
    """A promise cowconv makes, checked against this run's data."""

    promise: str
    threshold: str
    measured: str
    passed: bool | None
    """``None`` when this run did not measure it (``measured`` says why)."""
    absolute: bool = False
    """An absolute time: it depends on the machine and on what else runs there. On a busy
    machine it is information; the ratios measured side by side beside it are judged."""
    busy: bool = False
    """Set by the runner when the machine was busy while this target's scenario ran."""
    unjudged: str = ""
    """Why a figure that was measured (``passed`` is ``None``) is not judged, e.g. "quick run"
    or "baseline extrapolated": such a row says NOT JUDGED, never NOT MEASURED."""

    @property
    def status(self) -> str:
        if self.passed is None:
            return f"NOT JUDGED ({self.unjudged})" if self.unjudged else "NOT MEASURED"
        if self.passed:
            return "PASS"
        return "NOT JUDGED (busy machine)" if self.absolute and self.busy else "FALLS SHORT"

    def to_json(self) -> dict[str, Any]:
        return {
            "promise": self.promise,
            "threshold": self.threshold,
            "measured": self.measured,
            "status": self.status,
            "absolute": self.absolute,
            "busy": self.busy,
        }


class Scenario:
    """Base class: subclasses set the class attributes and override what they need."""

    number: int = 0
    """Its position in the run, set from the order of ``SCENARIOS``."""
    name: str
    title: str

    def steps(self, config: Config) -> int:
        """How many times ``run`` calls ``ctx.tick`` (for the progress bar)."""
        return 1

    def run(self, ctx: Context) -> dict[str, Any]:
        raise NotImplementedError

    def targets(self, data: dict[str, Any]) -> list[Target]:
        return []

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        """Key figures as (label, value) lines for the terminal table."""
        return []

    def plot(self, data: dict[str, Any], directory: Path) -> list[str]:
        """Write PNGs into ``directory``; return their file names."""
        return []

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        raise NotImplementedError


# -- data helpers shared by scenarios -----------------------------------------


def point(size: int, sample: Sample, **extra: Any) -> dict[str, Any]:
    return {"size": size, **sample.to_json(), "extrapolated": False, **extra}


def estimated_point(size: int, value: float, **extra: Any) -> dict[str, Any]:
    return {
        "size": size,
        "median": value,
        "min": None,
        "max": None,
        "repeats": 0,
        "number": 0,
        "extrapolated": True,
        **extra,
    }


def at_size(series: Sequence[dict[str, Any]], size: int) -> dict[str, Any] | None:
    for entry in series:
        if entry["size"] == size:
            return entry
    return None


def measured(series: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry for entry in series if not entry["extrapolated"]]


def cell(entry: dict[str, Any] | None, fmt: Callable[[float], str]) -> str:
    """A table cell: ``median (min–max)``, or ``≈ value (extrapolated)``."""
    if entry is None:
        return "—"
    if entry["extrapolated"]:
        return f"≈ {fmt(entry['median'])} (extrapolated)"
    if entry["repeats"] <= 1 or entry["min"] is None:
        return fmt(entry["median"])
    return f"{fmt(entry['median'])} ({fmt(entry['min'])}–{fmt(entry['max'])})"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def size_label(size: int) -> str:
    return f"{human_size(size)} events"


def ratio(numerator: dict[str, Any] | None, denominator: dict[str, Any] | None) -> float | None:
    if numerator is None or denominator is None or not denominator["median"]:
        return None
    return float(numerator["median"] / denominator["median"])


def fmt_ratio(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    if value < 0.1:
        return f"1/{1 / value:,.0f}×"
    return f"{value:,.0f}×" if value >= 100 else f"{value:.3g}×"


def sweep(
    sizes: Sequence[int],
    measure: Callable[[int], tuple[Sample, float]],
    budget_s: float,
    on_step: Callable[[int], None],
) -> list[dict[str, Any]]:
    """Measure a baseline at growing sizes until it would blow the time budget.

    ``measure(size)`` returns the sample and the seconds one call took at
    best. Before each size the cost of one call is scaled linearly from the
    largest size measured so far; when warm-up plus three calls would exceed
    ``budget_s`` this size and all larger ones are extrapolated the same way:
    linearly from the largest measured point. The baselines do the same work
    for every event, so linear is what they would do at best (cache misses
    only make large copies slower).
    """
    largest: tuple[int, float, float] | None = None  # size, value, seconds per call
    points: list[dict[str, Any]] = []
    for size in sorted(sizes):
        on_step(size)
        if largest is not None:
            known, value, seconds = largest
            if points[-1]["extrapolated"] or seconds * size / known * 4 > budget_s:
                points.append(estimated_point(size, value * size / known))
                continue
        sample, one_call = measure(size)
        largest = (size, sample.median, one_call)
        points.append(point(size, sample))
    return points
