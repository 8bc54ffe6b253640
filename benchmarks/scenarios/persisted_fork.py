"""Scenario 5: persisted fork (SQLiteStore) against writing one JSON file per event."""

from __future__ import annotations

import itertools
import shutil
import sqlite3
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import psutil

from benchmarks._measure import Sample, human_bytes, human_seconds, human_size, time_op
from benchmarks._scenario import (
    Config,
    Context,
    Scenario,
    Skip,
    Target,
    at_size,
    cell,
    estimated_point,
    fmt_ratio,
    point,
    ratio,
    sweep,
    table,
)
from cowconv import Event

FORK_LIMIT_S = 2e-3
BYTES_LIMIT = 16 * 1024
TARGET_SIZE = 10_000


def written_bytes() -> int | None:
    """Bytes this process has passed to write() so far (psutil; Linux only), else None."""
    try:
        counters = psutil.Process().io_counters()  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, psutil.Error):
        return None
    chars = getattr(counters, "write_chars", None)
    return None if chars is None else int(chars)


def stored_bytes(path: Path) -> int:
    """The database's size with its write-ahead log folded in (checkpoint first)."""
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def write_event_files(directory: Path, events: Sequence[Event]) -> int:
    """OpenHands' SDK's persisted fork: every event re-serialised into a file of its own."""
    folder = directory / "events"
    folder.mkdir(parents=True)
    written = 0
    for position, event in enumerate(events):
        written += (folder / f"event-{position:07d}-{event.id}.json").write_bytes(
            event.model_dump_json().encode()
        )
    return written


class PersistedFork(Scenario):
    name = "persisted"
    title = "Persisted fork against one JSON file per event"

    def _forks_per_count(self, config: Config) -> int:
        return 100 if config.quick else 1_000

    def _source_budget(self, config: Config) -> float:
        """Most seconds the source's first save may take before a size is left out."""
        return 3.0 if config.quick else 60.0

    def steps(self, config: Config) -> int:
        return 2 * len(config.sizes)

    def run(self, ctx: Context) -> dict[str, Any]:
        try:
            from cowconv import SQLiteStore
        except ImportError as error:
            raise Skip(
                f"cowconv.SQLiteStore (the persistence piece) is not in this checkout: {error}"
            ) from None
        settings = ctx.settings
        sizes = sorted(ctx.config.sizes)
        path = ctx.scratch / "cowconv.db"
        store = SQLiteStore(path)
        forks, per_fork_written, per_fork_stored, saves = [], [], [], []
        per_event_save: float | None = None
        count = self._forks_per_count(ctx.config)
        try:
            for size in sizes:
                ctx.tick(f"persisted fork at {human_size(size)} events")
                if per_event_save is not None and per_event_save * size > self._source_budget(
                    ctx.config
                ):
                    saves.append(estimated_point(size, per_event_save * size))
                    continue
                started = time.perf_counter()
                source = ctx.workload.saved_conversation(size, store)
                save = time.perf_counter() - started
                per_event_save = save / size
                saves.append(point(size, Sample.of([save])))
                forks.append(point(size, time_op(source.fork, settings)))
                before_stored, before_written = stored_bytes(path), written_bytes()
                for _ in range(count):
                    source.fork()
                # After the checkpoint: the pages it copies from the WAL are the forks' too.
                after_stored, after_written = stored_bytes(path), written_bytes()
                stored = (after_stored - before_stored) / count
                per_fork_stored.append(point(size, Sample.of([stored], count)))
                if before_written is not None and after_written is not None:
                    written = (after_written - before_written) / count
                    per_fork_written.append(point(size, Sample.of([written], count)))
        finally:
            store.close()

        baseline_bytes: dict[int, int] = {}
        folders = itertools.count()
        root = ctx.scratch / "files"

        def one_file_per_event(size: int) -> tuple[Sample, float]:
            events = ctx.workload.events(size)

            def fork() -> None:
                baseline_bytes[size] = write_event_files(root / str(next(folders)), events)

            sample = time_op(fork, settings, max_seconds=settings.baseline_budget_s)
            shutil.rmtree(root)
            return sample, sample.min

        files = sweep(
            sizes,
            one_file_per_event,
            settings.baseline_budget_s,
            lambda size: ctx.tick(f"one file per event at {human_size(size)}"),
        )
        file_bytes = []
        for entry in files:
            size = entry["size"]
            if size in baseline_bytes:
                file_bytes.append(point(size, Sample.of([float(baseline_bytes[size])])))
            else:
                largest = max(baseline_bytes)
                file_bytes.append(estimated_point(size, baseline_bytes[largest] * size / largest))
        return {
            "sizes": sizes,
            "store": "SQLiteStore (WAL, synchronous=full: every commit is fsynced)",
            "forks_per_count": count,
            "source_save": saves,
            "fork": forks,
            "written": per_fork_written,
            "stored": per_fork_stored,
            "files": files,
            "file_bytes": file_bytes,
        }

    def targets(self, data: dict[str, Any]) -> list[Target]:
        fork = at_size(data["fork"], TARGET_SIZE)
        written = at_size(data["written"], TARGET_SIZE)
        stored = at_size(data["stored"], TARGET_SIZE)
        checks = [
            (
                "persisted fork time at 10k events (SQLiteStore, fsync on)",
                "≤ 2 ms",
                fork,
                FORK_LIMIT_S,
                human_seconds,
                True,
            ),
            (
                "persisted fork: bytes written at 10k events (every write(), WAL and checkpoint)",
                "≤ 16 KiB",
                written,
                BYTES_LIMIT,
                human_bytes,
                False,
            ),
            (
                "persisted fork: database growth at 10k events",
                "≤ 16 KiB",
                stored,
                BYTES_LIMIT,
                human_bytes,
                False,
            ),
        ]
        return [
            Target(text, threshold, "10k not in --sizes (or not run)", None)
            if entry is None
            else Target(
                text, threshold, fmt(entry["median"]), entry["median"] <= limit, absolute=absolute
            )
            for text, threshold, entry, limit, fmt, absolute in checks
        ]

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        lines = []
        for entry in data["fork"]:
            size = entry["size"]
            files = at_size(data["files"], size)
            written = at_size(data["written"], size)
            approx = "≈ " if files and files["extrapolated"] else ""
            lines.append(
                (
                    f"persisted fork at {human_size(size)}",
                    f"{human_seconds(entry['median'])}, "
                    f"{human_bytes(written['median']) if written else '—'} written "
                    f"(one file per event: {approx}"
                    f"{human_seconds(files['median']) if files else '—'})",
                )
            )
        return lines

    def plot(self, data: dict[str, Any], directory: Path) -> list[str]:
        from benchmarks._plots import Line, Panel, chart

        time_panel = Panel(
            title="Persisted fork: time",
            unit="s",
            ylabel="time per fork",
            lines=[
                Line("cowconv fork, SQLiteStore", data["fork"]),
                Line("one JSON file per event", data["files"]),
            ],
            hlines=[(FORK_LIMIT_S, "target: 2 ms")],
        )
        bytes_panel = Panel(
            title="Persisted fork: bytes",
            unit="B",
            ylabel="bytes per fork",
            lines=[
                Line("cowconv: bytes written (write syscalls)", data["written"]),
                Line("cowconv: database growth", data["stored"]),
                Line("one JSON file per event: file contents", data["file_bytes"]),
            ],
            hlines=[(BYTES_LIMIT, "target: 16 KiB")],
        )
        return [chart(directory / "persisted_fork.png", [time_panel, bytes_panel])]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        rows = []
        for size in data["sizes"]:
            fork = at_size(data["fork"], size)
            files = at_size(data["files"], size)
            save = at_size(data["source_save"], size)
            rows.append(
                [
                    f"{size:,}",
                    cell(fork, human_seconds),
                    cell(at_size(data["written"], size), human_bytes),
                    cell(at_size(data["stored"], size), human_bytes),
                    cell(files, human_seconds),
                    cell(at_size(data["file_bytes"], size), human_bytes),
                    fmt_ratio(ratio(files, fork)),
                    cell(save, human_seconds),
                ]
            )
        skipped = [p["size"] for p in data["source_save"] if p["extrapolated"]]
        text = [
            f"Store: {data['store']}, on the scratch directory's disk. The source conversation "
            "is saved once (its history written in full; last column), then `source.fork()` "
            "is timed: the store writes one conversation row that names its parent, and no "
            f"event. Bytes are averaged over {data['forks_per_count']:,} more forks: *written* "
            "counts every byte passed to `write()` by the process (`/proc/self/io` wchar): the "
            "write-ahead log's page frames and the checkpoint that copies them into the "
            "database afterwards; *growth* is the database's size after that checkpoint. "
            "SQLite writes whole 4 KiB pages, so the bytes written are mostly page "
            "granularity, not data.",
            "",
            "The baseline is OpenHands' SDK's layout: a fork writes every event again as its own "
            "JSON file (`model_dump_json`, one file per event, in a new directory; no fsync, "
            "which favours it).",
            "",
            table(
                [
                    "events",
                    "cowconv fork",
                    "bytes written",
                    "database growth",
                    "one file per event",
                    "its bytes",
                    "files / fork",
                    "saving the source (once)",
                ],
                rows,
            ),
        ]
        if skipped:
            text += [
                "",
                "Not run at " + ", ".join(human_size(s) for s in skipped) + " events: saving "
                "the source history would have taken longer than the suite allows (the "
                "estimate is in the last column).",
            ]
        return "\n".join(text)
