"""``python -m benchmarks``: run the scenarios, then write results, report and plots."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._machine import busy, git_commit, load_average, machine, versions
from benchmarks._measure import FULL, QUICK, human_size, parse_size, settle
from benchmarks._report import busy_note, markdown, targets_table
from benchmarks._scenario import Config, Context, Scenario, Skip, Target
from benchmarks._workload import Workload
from benchmarks.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = Path("benchmark-results")
"""Relative to the directory the suite is run from."""
DOCS = ROOT / "docs"
FULL_SIZES = (10, 100, 1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (10, 100, 1_000, 10_000)


def _parser(prog: str) -> argparse.ArgumentParser:
    names = ", ".join(f"{s.number}={s.name}" for s in SCENARIOS)
    parser = argparse.ArgumentParser(
        prog=prog,
        description="cowconv benchmark suite: O(1) forks against copying forks.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="sizes up to 10k, few repeats, short budgets: a check that everything runs and a"
        " rough picture (about a minute on an idle 2-CPU machine, longer under load)",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only these scenarios (repeatable or comma separated; names or numbers: {names})",
    )
    parser.add_argument(
        "--sizes",
        metavar="N,N,...",
        help="history lengths, e.g. 10,1k,100k,1M (default 10 to 1M; --quick: 10 to 10k)",
    )
    parser.add_argument(
        "--out",
        "--output",
        dest="output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help="directory for results.json, report.md and plots"
        f" (default ./{DEFAULT_OUTPUT}/, in the directory you run from)",
    )
    parser.add_argument(
        "--docs",
        action="store_true",
        help="also write the report to docs/benchmarks.md and its plots to docs/img/",
    )
    parser.add_argument(
        "--replot",
        type=Path,
        metavar="RESULTS_JSON",
        help="measure nothing: rebuild the report and plots from a results.json of an earlier run",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return parser


def _select(requested: Sequence[str]) -> tuple[Scenario, ...]:
    if not requested:
        return SCENARIOS
    by_key = {s.name: s for s in SCENARIOS} | {str(s.number): s for s in SCENARIOS}
    chosen = set()
    for text in requested:
        for key in filter(None, (part.strip() for part in text.split(","))):
            if key not in by_key:
                raise ValueError(
                    f"unknown scenario {key!r}; choose from "
                    + ", ".join(f"{s.number}/{s.name}" for s in SCENARIOS)
                )
            chosen.add(by_key[key].name)
    return tuple(s for s in SCENARIOS if s.name in chosen)


def main(argv: Sequence[str] | None = None, prog: str = "python -m benchmarks") -> int:
    """Run the suite; returns the exit status (1 when a scenario failed).

    ``prog`` is the command's name in help and in the report (``cowconv bench``).
    """
    parser = _parser(prog)
    args = parser.parse_args(argv)
    try:
        scenarios = _select(args.scenario)
    except ValueError as error:
        parser.error(str(error))
    if args.sizes is not None:
        try:
            sizes = tuple(sorted({parse_size(part) for part in args.sizes.split(",") if part}))
        except ValueError as error:
            parser.error(f"--sizes: {error}")
        if not sizes:
            parser.error("--sizes: give at least one size, e.g. 10,1k,100k")
    else:
        sizes = QUICK_SIZES if args.quick else FULL_SIZES
    config = Config(
        quick=args.quick,
        sizes=sizes,
        scenarios=tuple(s.name for s in scenarios),
        output=args.output,
        settings=QUICK if args.quick else FULL,
        progress=not args.no_progress,
        plots=not args.no_plots,
    )
    if args.replot is not None:
        # Measure nothing: the figures, and the command that measured them, come from the file.
        try:
            results = json.loads(args.replot.read_text())
        except (OSError, ValueError) as error:
            parser.error(f"--replot: cannot read {args.replot}: {error}")
        scenarios = tuple(s for s in scenarios if s.name in results["scenarios"])
        judge(results, scenarios)
    else:
        shown = list(argv if argv is not None else sys.argv[1:])
        results = run(config, scenarios, " ".join([prog, *shown]))
    written = write(results, scenarios, config, docs=args.docs)
    print_summary(results, scenarios, written)
    failed = [entry for entry in results["scenarios"].values() if entry["status"] == "error"]
    return 1 if failed else 0


def run(config: Config, scenarios: Sequence[Scenario], command: str) -> dict[str, Any]:
    started = time.perf_counter()
    results: dict[str, Any] = {
        "schema_version": 1,
        "command": command,
        "quick": config.quick,
        "started_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "machine": machine(),
        "versions": versions(),
        "settings": asdict(config.settings),
        "sizes": list(config.sizes),
        "scenarios": {},
    }
    workload = Workload()
    with _progress(config, sum(s.steps(config) for s in scenarios) + 1) as tick:
        if any(getattr(s, "uses_events", True) for s in scenarios):
            tick(f"building {human_size(config.largest)} events")
            seconds = time.perf_counter()
            workload.events(config.largest)
            results["build_seconds"] = time.perf_counter() - seconds
            settle()
        done: list[Scenario] = []
        for scenario in scenarios:
            results["scenarios"][scenario.name] = _run_one(scenario, config, workload, tick)
            done.append(scenario)
            if len(done) < len(scenarios):
                checkpoint(results, done, config.output, time.perf_counter() - started)
    results["duration_s"] = time.perf_counter() - started
    results["partial"] = False
    results["load_at_end"] = load_average()
    judge(results, scenarios)
    return results


def checkpoint(
    results: dict[str, Any], done: Sequence[Scenario], out: Path, seconds: float
) -> None:
    """Write ``results.json`` and ``report.md`` of the scenarios run so far (no plots).

    A run that is stopped (Ctrl-C, a killed job, a full disk later on) leaves the figures
    of every scenario that finished; ``results.json`` says ``"partial": true`` and
    ``--replot`` turns it into plots. Each file is replaced whole (written beside it, then
    renamed), so a reader never sees half of one.
    """
    partial = {**results, "partial": True, "duration_s": seconds, "load_at_end": load_average()}
    judge(partial, done)
    partial["plots"] = {}
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("results.json", json.dumps(partial, indent=2, default=str) + "\n"),
        ("report.md", markdown(partial, done, {})),
    ):
        scratch = out / f".{name}.partial"
        scratch.write_text(text)
        scratch.replace(out / name)


def judge(results: dict[str, Any], scenarios: Sequence[Scenario]) -> None:
    """Check every scenario's targets against its data (and the load it ran under)."""
    targets: list[Target] = []
    cpus = results["machine"]["cpus"]
    for scenario in scenarios:
        entry = results["scenarios"][scenario.name]
        entry["busy"] = busy(entry["load_before"], cpus) or busy(entry["load_after"], cpus)
        if entry["status"] == "ok":
            targets += [
                dataclasses.replace(target, busy=entry["busy"])
                for target in scenario.targets(entry["data"])
            ]
    results["targets"] = [t.to_json() for t in targets]
    results["targets_markdown"] = targets_table(targets) if targets else "No targets measured."


def _run_one(
    scenario: Scenario, config: Config, workload: Workload, tick: Callable[[str], None]
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "number": scenario.number,
        "title": scenario.title,
        "load_before": load_average(),
    }
    started = time.perf_counter()
    steps: list[dict[str, Any]] = entry.setdefault("steps", [])

    def step(text: str) -> None:
        # Where a scenario's time goes, kept in results.json.
        now = time.perf_counter()
        if steps:
            steps[-1]["seconds"] = now - steps[-1].pop("_started")
        steps.append({"step": text, "_started": now})
        tick(f"{scenario.number}. {text}")

    with tempfile.TemporaryDirectory(prefix=f"cowconv-bench-{scenario.name}-") as scratch:
        ctx = Context(config=config, workload=workload, tick=step, scratch=Path(scratch))
        try:
            entry["data"] = scenario.run(ctx)
            entry["status"] = "ok"
            entry["message"] = ""
        except Skip as reason:
            entry["status"], entry["message"] = "skipped", str(reason)
        except Exception as error:
            # One broken scenario must not cost the figures of the others.
            entry["status"] = "error"
            entry["message"] = f"{type(error).__name__}: {error}"
            entry["traceback"] = traceback.format_exc()
            print(entry["traceback"], file=sys.stderr)
    entry["duration_s"] = time.perf_counter() - started
    if steps:
        steps[-1]["seconds"] = time.perf_counter() - steps[-1].pop("_started")
    entry["load_after"] = load_average()
    return entry


@contextlib.contextmanager
def _progress(config: Config, total: int) -> Iterator[Callable[[str], None]]:
    try:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )
    except ImportError:
        Progress = None  # noqa: N806

    if Progress is None or not config.progress:

        def log(text: str) -> None:
            if config.progress:
                print(f"… {text}", file=sys.stderr, flush=True)

        yield log
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as progress:
        task = progress.add_task("starting", total=total)
        first = True

        def tick(text: str) -> None:
            nonlocal first
            if not first:
                progress.advance(task)
            first = False
            progress.update(task, description=text)

        yield tick
        progress.update(task, completed=total, description="done")


def write(
    results: dict[str, Any], scenarios: Sequence[Scenario], config: Config, *, docs: bool
) -> list[Path]:
    out = config.output
    out.mkdir(parents=True, exist_ok=True)
    plots: dict[str, list[str]] = {}
    plot_error = None
    if config.plots:
        for scenario in scenarios:
            entry = results["scenarios"][scenario.name]
            if entry["status"] != "ok":
                continue
            try:
                plots[scenario.name] = scenario.plot(entry["data"], out)
            except ImportError as error:
                plot_error = f"plots skipped: {error} (pip install 'cowconv[bench]')"
                break
    results["plots"] = plots
    if plot_error:
        results["plot_error"] = plot_error
    results_path = out / "results.json"
    results_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    report_path = out / "report.md"
    report_path.write_text(markdown(results, scenarios, plots))
    written = [results_path, report_path] + [out / n for names in plots.values() for n in names]
    if docs:
        images = DOCS / "img"
        images.mkdir(parents=True, exist_ok=True)
        for names in plots.values():
            for name in names:
                shutil.copyfile(out / name, images / name)
        docs_report = DOCS / "benchmarks.md"
        docs_report.write_text(markdown(results, scenarios, plots, image_prefix="img/"))
        written.append(docs_report)
    return written


def print_summary(
    results: dict[str, Any], scenarios: Sequence[Scenario], written: Sequence[Path]
) -> None:
    rows: list[tuple[str, str, str]] = []
    for scenario in scenarios:
        entry = results["scenarios"][scenario.name]
        heading = f"{scenario.number}. {scenario.title}"
        if entry["status"] != "ok":
            rows.append((heading, entry["status"].upper(), entry["message"]))
            continue
        for label, value in scenario.summary(entry["data"]):
            rows.append((heading, label, value))
            heading = ""
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:
        for row in rows:
            print(" | ".join(row))
        for target in results["targets"]:
            print(f"{target['status']:>12}  {target['promise']}: {target['measured']}")
    else:
        console = Console()
        figures = Table(title="cowconv benchmarks", show_lines=False)
        for column in ("scenario", "figure", "value"):
            figures.add_column(column)
        for row in rows:
            figures.add_row(*(Text(cell) for cell in row))
        console.print(figures)
        checks = Table(title="what cowconv promises, checked against this run")
        for column in ("promise", "threshold", "measured", "status"):
            checks.add_column(column)
        colours = {"PASS": "green", "FALLS SHORT": "red"}
        for target in results["targets"]:
            status = target["status"]
            checks.add_row(
                Text(target["promise"]),
                Text(target["threshold"]),
                Text(target["measured"]),
                Text(status, style=colours.get(status, "yellow")),
            )
        console.print(checks)
        note = busy_note(results)
        if note:
            console.print(Text(note, style="yellow"))
    if results.get("plot_error"):
        print(results["plot_error"])
    print(f"ran in {results['duration_s']:.1f} s; wrote " + ", ".join(str(p) for p in written))
