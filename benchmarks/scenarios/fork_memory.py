"""Scenario 2: memory per fork (tracemalloc) and process peaks for K forks."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._measure import (
    Sample,
    allocated_bytes,
    human_bytes,
    human_seconds,
    human_size,
    signed_bytes,
)
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
    sweep,
    table,
)
from cowconv import Conversation

FORK_BYTES_LIMIT = 2 * 1024
ROOT = Path(__file__).resolve().parents[2]

LABELS = {
    "cowconv": "cowconv fork()",
    "cowconv+message": "cowconv fork() + 1 message",
    "deepcopy": "copy.deepcopy(events)",
}


def _fork_and_send(source: Conversation) -> Conversation:
    fork = source.fork()
    fork.send_message("Now try the other approach.")
    return fork


def _peak(mode: str, size: int, count: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks._peak", mode, str(size), str(count)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class ForkMemory(Scenario):
    name = "memory"
    title = "Memory: bytes per fork and process peak for K forks"

    def _forks(self, config: Config) -> int:
        return 100 if config.quick else 1_000

    def _copy_budget(self, config: Config) -> int:
        """Most bytes the measured deep copies may take; the rest is extrapolated."""
        return (128 if config.quick else 1024) << 20

    def steps(self, config: Config) -> int:
        return 3 * len(config.sizes) + 4

    def run(self, ctx: Context) -> dict[str, Any]:
        sizes = sorted(ctx.config.sizes)
        settings = ctx.settings
        count = settings.alloc_count
        per_fork: dict[str, list[dict[str, Any]]] = {"cowconv": [], "cowconv+message": []}
        for size in sizes:
            source = ctx.workload.conversation(size)
            ctx.tick(f"tracemalloc: fork at {human_size(size)} events")
            per_fork["cowconv"].append(point(size, allocated_bytes(source.fork, count, 3)[0]))
            ctx.tick(f"tracemalloc: fork + message at {human_size(size)} events")
            sample = allocated_bytes(lambda source=source: _fork_and_send(source), count, 3)[0]
            per_fork["cowconv+message"].append(point(size, sample))

        def deepcopy_bytes(size: int) -> tuple[Sample, float]:
            events = ctx.workload.events(size)
            return allocated_bytes(lambda: copy.deepcopy(events), 1, 1 if ctx.config.quick else 3)

        per_fork["deepcopy"] = sweep(
            sizes,
            deepcopy_bytes,
            settings.baseline_budget_s,
            lambda size: ctx.tick(f"tracemalloc: deepcopy at {human_size(size)} events"),
        )

        size = ctx.config.reference_size
        forks = self._forks(ctx.config)
        ctx.tick(f"process peak: {human_size(size)} events, no forks")
        base = _peak("none", size, 0)
        ctx.tick(f"process peak: {forks:,} cowconv forks")
        cowconv = _peak("cowconv", size, forks)
        ctx.tick(f"process peak: {forks:,} cowconv forks + 1 message each")
        cowconv_message = _peak("cowconv+message", size, forks)
        copy_size = at_size(per_fork["deepcopy"], size)
        per_copy = copy_size["median"] if copy_size else 1500.0 * size
        copies = int(max(2, min(forks, self._copy_budget(ctx.config) // max(per_copy, 1))))
        ctx.tick(f"process peak: {copies:,} deep copies")
        deep = _peak("deepcopy", size, copies)
        grown = (deep["rss_after"] - deep["rss_before"]) / copies
        estimate = {
            "count": forks,
            "rss_after": deep["rss_before"] + grown * forks,
            "peak_after": max(deep["peak_before"], deep["rss_before"] + grown * forks),
            "collect_seconds": base["collect_seconds"]
            + (deep["collect_seconds"] - base["collect_seconds"]) * forks / copies,
            "extrapolated": copies < forks,
            "from_count": copies,
        }
        return {
            "sizes": sizes,
            "alloc_count": count,
            "per_fork": per_fork,
            "process": {
                "size": size,
                "forks": forks,
                "none": base,
                "cowconv": cowconv,
                "cowconv+message": cowconv_message,
                "deepcopy_measured": deep,
                "deepcopy": estimate,
            },
        }

    def targets(self, data: dict[str, Any]) -> list[Target]:
        forks = data["per_fork"]["cowconv"]
        worst = max(forks, key=lambda p: p["median"])
        return [
            Target(
                "memory per fork, tracemalloc "
                f"({human_size(min(data['sizes']))}–{human_size(max(data['sizes']))} events)",
                "≤ 2 KiB",
                f"worst {human_bytes(worst['median'])} at {human_size(worst['size'])}",
                worst["median"] <= FORK_BYTES_LIMIT,
            )
        ]

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        per_fork = data["per_fork"]
        lines = []
        for entry in per_fork["cowconv"]:
            size = entry["size"]
            copied = at_size(per_fork["deepcopy"], size)
            approx = "≈ " if copied and copied["extrapolated"] else ""
            lines.append(
                (
                    f"bytes per fork at {human_size(size)}",
                    f"{human_bytes(entry['median'])} (deepcopy {approx}"
                    f"{human_bytes(copied['median']) if copied else '—'})",
                )
            )
        process = data["process"]
        lines.append(
            (
                f"process: {process['forks']:,} forks × {human_size(process['size'])}",
                self._process_line(process),
            )
        )
        return lines

    def _process_line(self, process: dict[str, Any]) -> str:
        base = process["none"]["rss_after"]
        grown = process["cowconv"]["rss_after"] - base
        copied = process["deepcopy"]["rss_after"] - base
        approx = "≈ " if process["deepcopy"]["extrapolated"] else ""
        return f"cowconv {signed_bytes(grown)}, deepcopy {approx}{signed_bytes(copied)}"

    def plot(self, data: dict[str, Any], directory: Path) -> list[str]:
        from benchmarks._plots import Line, Panel, chart

        per_fork = data["per_fork"]
        panel = Panel(
            title="Memory per fork (tracemalloc, median, min–max bars)",
            unit="B",
            ylabel="bytes per fork",
            lines=[Line(LABELS[name], per_fork[name]) for name in LABELS],
            hlines=[(FORK_BYTES_LIMIT, "target: 2 KiB")],
        )
        return [chart(directory / "fork_memory.png", [panel])]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        per_fork = data["per_fork"]
        rows = []
        for size in data["sizes"]:
            fork = at_size(per_fork["cowconv"], size)
            copied = at_size(per_fork["deepcopy"], size)
            rows.append(
                [
                    f"{size:,}",
                    cell(fork, human_bytes),
                    cell(at_size(per_fork["cowconv+message"], size), human_bytes),
                    cell(copied, human_bytes),
                    fmt_ratio(ratio(copied, fork)),
                ]
            )
        process = data["process"]
        base = process["none"]
        deep = process["deepcopy"]
        measured_deep = process["deepcopy_measured"]
        forks = process["forks"]

        def grown(entry: dict[str, Any]) -> str:
            return signed_bytes(entry["rss_after"] - base["rss_after"])

        approx = "≈ " if deep["extrapolated"] else ""

        def collect(entry: dict[str, Any]) -> str:
            return human_seconds(entry["collect_seconds"])

        process_rows = [
            [
                f"{human_size(process['size'])}-event conversation alone",
                human_bytes(base["rss_after"]),
                "—",
                human_bytes(base["peak_after"]),
                "—",
                collect(base),
            ],
            *(
                [
                    f"+ {forks:,} {label}",
                    human_bytes(process[mode]["rss_after"]),
                    grown(process[mode]),
                    human_bytes(process[mode]["peak_after"]),
                    human_seconds(process[mode]["seconds"]),
                    collect(process[mode]),
                ]
                for mode, label in (
                    ("cowconv", "cowconv forks"),
                    ("cowconv+message", "cowconv forks, each with 1 new message"),
                )
            ),
            [
                f"+ {forks:,} deep copies of the events"
                + (f" (extrapolated from {deep['from_count']:,})" if deep["extrapolated"] else ""),
                f"{approx}{human_bytes(deep['rss_after'])}",
                f"{approx}{signed_bytes(deep['rss_after'] - base['rss_after'])}",
                f"{approx}{human_bytes(deep['peak_after'])}",
                approx + human_seconds(measured_deep["seconds"] * forks / measured_deep["count"]),
                approx + collect(deep),
            ],
        ]
        text = [
            f"Bytes each fork keeps allocated (tracemalloc, {data['alloc_count']:,} forks kept "
            "alive per measurement; a deep copy is measured one at a time):",
            "",
            table(
                [
                    "events",
                    "cowconv fork",
                    "fork + 1 message",
                    "deepcopy of the events",
                    "deepcopy / fork",
                ],
                rows,
            ),
            "",
            f"Whole process (a fresh subprocess per row, one run each): resident memory after "
            f"keeping {forks:,} forks of a {human_size(process['size'])}-event conversation, "
            "its peak (`VmHWM`), and how long one full garbage collection takes with them "
            "alive (a pause the program pays from time to time).",
            "",
            table(
                [
                    "process holds",
                    "RSS after",
                    "growth",
                    "peak RSS",
                    "time to make them",
                    "one full gc.collect()",
                ],
                process_rows,
            ),
        ]
        per_fork = (process["cowconv"]["rss_after"] - base["rss_after"]) / forks
        per_copy = (deep["rss_after"] - base["rss_after"]) / forks
        text += [
            "",
            f"Resident growth per fork: cowconv {signed_bytes(per_fork)}, a deep copy "
            f"{approx}{signed_bytes(per_copy)}. Resident sizes move in pages and the allocator "
            "reuses memory freed while the history was built, so small growths are rough "
            "(even negative); tracemalloc above is the precise per-fork figure.",
        ]
        if deep["extrapolated"]:
            made = measured_deep["rss_after"] - measured_deep["rss_before"]
            text += [
                "",
                f"The deep-copy row is **extrapolated**: {measured_deep['count']:,} copies were "
                f"made (growth {signed_bytes(made)}), scaled linearly to {forks:,} because that "
                "many would not fit in this "
                "shared machine's memory budget for the suite.",
            ]
        return "\n".join(text)
