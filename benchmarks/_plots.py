"""Log-log line charts (matplotlib, Agg backend), imported only when plotting."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Line:
    label: str
    series: Sequence[dict[str, Any]]
    """Points as stored in results.json: size, median, min, max, extrapolated."""
    x: str = "size"


@dataclass
class Panel:
    title: str
    ylabel: str
    lines: list[Line]
    xlabel: str = "history length (events)"
    hlines: list[tuple[float, str]] = field(default_factory=list)
    yscale: Callable[[float], float] = float
    """Converts stored values (seconds, bytes) to the unit on the axis."""
    logx: bool = True


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def chart(path: Path, panels: Sequence[Panel], *, title: str | None = None) -> str:
    """Draw ``panels`` side by side into ``path``; return the file name.

    Error bars span min–max; extrapolated points are hollow on a dashed line.
    """
    plt = _pyplot()
    figure, axes = plt.subplots(
        1, len(panels), figsize=(6.4 * len(panels), 4.6), squeeze=False, layout="constrained"
    )
    for ax, panel in zip(axes[0], panels, strict=True):
        for index, line in enumerate(panel.lines):
            colour = f"C{index}"
            _draw(ax, line, colour, panel.yscale)
        for value, label in panel.hlines:
            ax.axhline(panel.yscale(value), color="grey", linestyle=":", linewidth=1)
            ax.annotate(
                label,
                xy=(0.01, panel.yscale(value)),
                xycoords=("axes fraction", "data"),
                fontsize=8,
                color="grey",
                va="bottom",
            )
        if panel.logx:
            ax.set_xscale("log")
        ax.set_yscale("log")
        low, high = ax.get_ylim()
        if high < low * 10:
            # At least a decade, so a flat line looks flat and noise looks like noise.
            middle = (low * high) ** 0.5
            ax.set_ylim(middle / 10**0.5, middle * 10**0.5)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.set_title(panel.title, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path.name


def _draw(ax: Any, line: Line, colour: str, yscale: Callable[[float], float]) -> None:
    points = sorted(line.series, key=lambda entry: entry[line.x])
    real = [entry for entry in points if not entry["extrapolated"]]
    guessed = [entry for entry in points if entry["extrapolated"]]
    if real:
        xs = [entry[line.x] for entry in real]
        ys = [yscale(entry["median"]) for entry in real]
        low = [
            y - yscale(entry["min"] if entry["min"] is not None else entry["median"])
            for y, entry in zip(ys, real, strict=True)
        ]
        high = [
            yscale(entry["max"] if entry["max"] is not None else entry["median"]) - y
            for y, entry in zip(ys, real, strict=True)
        ]
        ax.errorbar(
            xs,
            ys,
            yerr=[low, high],
            color=colour,
            marker="o",
            markersize=4,
            capsize=3,
            label=line.label,
        )
    if guessed:
        bridge = real[-1:] + guessed
        ax.plot(
            [entry[line.x] for entry in bridge],
            [yscale(entry["median"]) for entry in bridge],
            color=colour,
            linestyle="--",
            marker="o",
            markerfacecolor="none",
            markersize=5,
            label=f"{line.label} (extrapolated)",
        )
