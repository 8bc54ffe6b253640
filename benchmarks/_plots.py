"""Log-log line charts (matplotlib, Agg backend), imported only when plotting.

Made to be read at the size the docs show them (about 750 pixels wide):
one panel per row, ticks in the units people read (``10 µs``, ``1 ms``,
``16 KiB``, ``10k``), legends and target lines below the data, never on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._measure import human_bytes, human_seconds, human_size

WIDTH_IN = 7.0
PANEL_HEIGHT_IN = 3.6
DPI = 110


@dataclass
class Line:
    label: str
    series: Sequence[dict[str, Any]]
    """Points as stored in results.json: size, median, min, max, extrapolated."""
    x: str = "size"
    marker: str = "o"
    linestyle: str = "-"
    """Marker and line style: lines that may run close together (two copying baselines)
    take different ones, so neither hides the other."""
    zorder: float = 2.0
    """Drawing order: a higher value is drawn over lines that run close to it."""


@dataclass
class Panel:
    title: str
    ylabel: str
    lines: list[Line]
    unit: str = ""
    """``"s"`` (seconds) or ``"B"`` (bytes) label the y ticks in readable units; else plain."""
    xlabel: str = "history length (events)"
    hlines: list[tuple[float, str]] = field(default_factory=list)
    """Targets as (value, label): a dotted line, named in the legend."""
    x_ticks: str = "sizes"
    """``"sizes"``: decades as 10, 100, 1k, …; ``"data"``: a tick at each measured x (counts)."""
    logx: bool = True


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _seconds_tick(value: float, _position: object) -> str:
    return human_seconds(value) if value > 0 else ""


def _bytes_tick(value: float, _position: object) -> str:
    return human_bytes(value) if value > 0 else ""


def _size_tick(value: float, _position: object) -> str:
    return human_size(round(value)) if value >= 1 and value == round(value) else ""


def chart(path: Path, panels: Sequence[Panel], *, title: str | None = None) -> str:
    """Draw ``panels`` one under the other into ``path``; return the file name.

    Error bars span min–max; extrapolated points are hollow on a dashed line.
    """
    plt = _pyplot()
    from matplotlib import ticker

    figure, axes = plt.subplots(
        len(panels),
        1,
        figsize=(WIDTH_IN, PANEL_HEIGHT_IN * len(panels)),
        squeeze=False,
        layout="constrained",
    )
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        xs: set[float] = set()
        handles: list[tuple[Any, str]] = []  # in drawing order: matplotlib would group by kind
        for index, line in enumerate(panel.lines):
            xs |= _draw(ax, line, f"C{index}", handles)
        for value, label in panel.hlines:
            handles.append((ax.axhline(value, color="grey", linestyle=":", linewidth=1.2), label))
        if panel.logx:
            ax.set_xscale("log")
        ax.set_yscale("log")
        low, high = ax.get_ylim()
        if high < low * 10:
            # At least a decade, so a flat line looks flat and noise looks like noise.
            middle = (low * high) ** 0.5
            ax.set_ylim(middle / 10**0.5, middle * 10**0.5)
        if panel.unit == "s":
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(_seconds_tick))
        elif panel.unit == "B":
            ax.yaxis.set_major_locator(ticker.LogLocator(base=2, numticks=8))
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(_bytes_tick))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        if panel.x_ticks == "data" and xs:
            ax.xaxis.set_major_locator(ticker.FixedLocator(sorted(xs)))
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(_size_tick))
            ax.xaxis.set_minor_locator(ticker.NullLocator())
        elif panel.logx:
            ax.xaxis.set_major_locator(ticker.LogLocator(base=10))
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(_size_tick))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.set_title(panel.title, fontsize=11)
        ax.grid(True, which="major", alpha=0.3)
        # Below the panel, not on it: a legend inside covers data at one size or another.
        # Two columns only when the labels are short enough to fit side by side.
        widest = max((len(label) for _, label in handles), default=0)
        ax.legend(
            [handle for handle, _ in handles],
            [label for _, label in handles],
            fontsize=9,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.22),
            ncols=2 if len(handles) > 3 and widest <= 40 else 1,
            frameon=False,
        )
    if title:
        figure.suptitle(title)
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path.name


def _draw(ax: Any, line: Line, colour: str, handles: list[tuple[Any, str]]) -> set[float]:
    points = sorted(line.series, key=lambda entry: entry[line.x])
    real = [entry for entry in points if not entry["extrapolated"]]
    guessed = [entry for entry in points if entry["extrapolated"]]
    if real:
        xs = [entry[line.x] for entry in real]
        ys = [entry["median"] for entry in real]
        low = [
            y - (entry["min"] if entry["min"] is not None else y)
            for y, entry in zip(ys, real, strict=True)
        ]
        high = [
            (entry["max"] if entry["max"] is not None else y) - y
            for y, entry in zip(ys, real, strict=True)
        ]
        drawn = ax.errorbar(
            xs,
            ys,
            yerr=[low, high],
            color=colour,
            marker=line.marker,
            markersize=4 if line.marker == "o" else 6,
            linestyle=line.linestyle,
            capsize=3,
            zorder=line.zorder,
        )
        handles.append((drawn, line.label))
    if guessed:
        bridge = real[-1:] + guessed
        (dashed,) = ax.plot(
            [entry[line.x] for entry in bridge],
            [entry["median"] for entry in bridge],
            color=colour,
            linestyle="--",
            marker=line.marker,
            markerfacecolor="none",
            markersize=5,
            zorder=line.zorder,
        )
        handles.append((dashed, f"{line.label} (extrapolated)"))
    return {float(entry[line.x]) for entry in points if math.isfinite(entry[line.x])}
