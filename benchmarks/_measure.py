"""How the suite measures: timing batches, allocation counts and curve fits.

Every timed figure comes from :func:`time_op`: a calibration run that grows
the batch until it lasts ``min_batch_s`` (and doubles as the warm-up), then
``repeats`` timed batches. The figure is the median time per call with the
fastest and slowest batch beside it. The cyclic garbage collector is off
while a batch runs (as in :mod:`timeit`), which spares the copying baselines
the collections their millions of new objects would otherwise trigger.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
import timeit
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich import filesize


@dataclass(frozen=True)
class Sample:
    """Median, min and max of repeated measurements of one quantity."""

    median: float
    min: float
    max: float
    repeats: int
    number: int = 1

    @classmethod
    def of(cls, values: Sequence[float], number: int = 1) -> Sample:
        return cls(
            median=statistics.median(values),
            min=min(values),
            max=max(values),
            repeats=len(values),
            number=number,
        )

    def scaled(self, factor: float) -> Sample:
        return Sample(
            self.median * factor, self.min * factor, self.max * factor, self.repeats, self.number
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "min": self.min,
            "max": self.max,
            "repeats": self.repeats,
            "number": self.number,
        }


@dataclass(frozen=True)
class Settings:
    """How hard to measure: ``--quick`` lowers all of these."""

    repeats: int
    min_batch_s: float
    baseline_budget_s: float
    """Largest predicted cost (warm-up + three calls) of one baseline point before it is
    extrapolated instead of measured."""
    alloc_count: int
    """Objects kept alive per tracemalloc measurement of a cheap operation."""


FULL = Settings(repeats=7, min_batch_s=0.05, baseline_budget_s=30.0, alloc_count=1000)
QUICK = Settings(repeats=3, min_batch_s=0.005, baseline_budget_s=1.5, alloc_count=200)

_MIN_REPEATS = 3


def settle() -> None:
    """Collect garbage, then exempt every surviving object from later collections.

    The suite collects before every measurement. With a million events alive
    a full collection takes most of a second, so whatever survives (the
    workload, imported libraries) is frozen out of the collector's sight.
    """
    gc.collect()
    gc.freeze()


def time_op(
    op: Callable[[], object],
    settings: Settings,
    *,
    max_seconds: float | None = None,
    collector: bool = False,
) -> Sample:
    """Seconds per call of ``op``: warm-up/calibration, then timed batches.

    Batches run through :class:`timeit.Timer` (which turns the garbage
    collector off while it times; ``collector=True`` turns it back on, as in
    a real program). The calibration is ours rather than
    ``Timer.autorange``: autorange aims every batch at 0.2 s, and ``--quick``
    needs far shorter ones. Slow operations (one call longer than a batch)
    get at least three repeats, fewer than ``settings.repeats`` when they
    would exceed ``max_seconds`` in total.
    """
    settle()
    timer = timeit.Timer(op, setup="gc.enable()" if collector else "pass")
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= settings.min_batch_s or number >= 1 << 22:
            break
        # Aim a little past the target so calibration ends in one or two more steps.
        number = max(number * 2, int(number * settings.min_batch_s * 1.2 / max(elapsed, 1e-9)))
    repeats = settings.repeats
    if max_seconds is not None and elapsed * repeats > max_seconds:
        repeats = max(_MIN_REPEATS, int(max_seconds / max(elapsed, 1e-9)))
    samples = [total / number for total in timer.repeat(repeats, number)]
    return Sample.of(samples, number)


def time_once(op: Callable[[], object]) -> float:
    """Seconds for one call, collector off (for setup costs we only report)."""
    settle()
    return timeit.Timer(op).timeit(1)


def allocated_bytes(make: Callable[[], object], count: int, repeats: int) -> tuple[Sample, float]:
    """Bytes that stay allocated per ``make()`` result, by tracemalloc, and seconds per call.

    ``count`` results are kept alive in a list allocated before tracing starts,
    so the figure is what each result holds on to, shared parts excluded. The
    seconds (traced, so slower than untraced) only serve to budget larger sizes.
    """
    values = []
    seconds = 0.0
    for _ in range(repeats):
        keep: list[object] = [None] * count
        settle()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            started = time.perf_counter()
            for position in range(count):
                keep[position] = make()
            seconds += time.perf_counter() - started
            # Temporaries caught in reference cycles are not "kept": a copy that round-trips
            # through JSON leaves megabytes of them for the collector.
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        values.append((after - before) / count)
        del keep
    return Sample.of(values, count), seconds / (repeats * count)


def fit_loglog(sizes: Sequence[float], values: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``log10(value) = slope * log10(size) + intercept`` (NaNs if undefined)."""
    try:
        fit = statistics.linear_regression(
            [math.log10(s) for s in sizes], [math.log10(v) for v in values]
        )
    except statistics.StatisticsError:  # fewer than two points, or all at one size
        return math.nan, math.nan
    return fit.slope, fit.intercept


def parse_size(text: str) -> int:
    """``"10k"`` → 10000, ``"1M"`` → 1000000, ``"1e5"`` → 100000."""
    text = text.strip().replace("_", "")
    factor = 1
    if text[-1:] in ("k", "K"):
        factor, text = 1_000, text[:-1]
    elif text[-1:] in ("m", "M"):
        factor, text = 1_000_000, text[:-1]
    try:
        value = float(text) * factor
    except ValueError:
        raise ValueError(f"a size is a count such as 10, 1k or 1M, got {text!r}") from None
    if not math.isfinite(value) or value < 1 or value != int(value):
        raise ValueError(f"a size must be a whole number >= 1, got {text!r}")
    return int(value)


def human_size(count: int) -> str:
    """1000000 → ``"1M"``, 10000 → ``"10k"``, 100 → ``"100"``."""
    for factor, suffix in ((1_000_000, "M"), (1_000, "k")):
        if count >= factor and count % factor == 0:
            return f"{count // factor}{suffix}"
    return str(count)


def human_seconds(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "n/a"
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= factor:
            return f"{_digits(seconds / factor)} {unit}"
    return f"{_digits(seconds / 1e-9)} ns"


def human_bytes(count: float) -> str:
    """Binary units, three significant digits: 1536 → ``"1.5 KiB"``, -2048 → ``"-2 KiB"``."""
    if not math.isfinite(count):
        return "n/a"
    unit, suffix = filesize.pick_unit_and_suffix(
        int(abs(count)), ["B", "KiB", "MiB", "GiB", "TiB"], 1024
    )
    if unit == 1:
        return f"{count:.0f} B"
    return f"{_digits(count / unit)} {suffix}"


def signed_bytes(count: float) -> str:
    """A change in size with its sign: ``"+1.5 KiB"``, ``"−232 KiB"``, ``"±0 B"``."""
    if not math.isfinite(count):
        return "n/a"
    sign = "+" if count > 0 else "−" if count < 0 else "±"
    return sign + human_bytes(abs(count))


def _digits(value: float) -> str:
    """Three significant digits without switching to exponent notation."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
