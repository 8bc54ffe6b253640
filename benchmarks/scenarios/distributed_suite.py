"""Scenario: branch suites on executors (issue 14): bytes moved, prefix loads, wall time.

Self-contained: it builds its own history and starts its own engines (Dask
LocalCluster and a local Ray, when installed; worker processes always), all
on 127.0.0.1. Run it alone with ``python -m benchmarks.scenarios.distributed_suite``.

"Shipping each fork whole" is the naive port: the same executor and the same
worker code, but every job carries its fork's whole history (an empty shared
prefix), so every task moves and unpickles all of it.
"""

from __future__ import annotations

import json
import os
import pickle
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks._measure import human_seconds
from benchmarks._scenario import Context, Scenario, Target, table

BYTES_TARGET = 50.0
SCALING_TARGET = 2.0


def _one_line(request: Any) -> Any:
    """The model's answer: one line (the stub's default brain would list every command of the
    history, ~80 KB at 10k events, and the results would outweigh what the suite ships)."""
    from cowconv.testing import StubReply

    return StubReply.text("Done: the one-line answer this variant asked for.")


def _suite_source(events: int, stub: Any, workspace: Path) -> Any:
    from benchmarks._workload import make_event
    from cowconv import LLM, Agent, Conversation
    from cowconv._history import EventLog

    agent = Agent(llm=LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0))
    base = Conversation(agent=agent, workspace=workspace)
    # The suite's realistic events (messages, tool calls, ~430-character outputs), appended
    # one by one so the history has the chunk layout a real conversation has.
    log = EventLog().extend(make_event(position) for position in range(events))
    return Conversation._from_state(base.state._replace(events=log))


def _measure_engine(
    executor: Any, source: Any, branches: int, workers: int, prefix_copies: int
) -> dict[str, Any]:
    """One suite shipped smartly and one shipped whole, through ``executor``'s run_jobs."""
    from cowconv._branch_wire import BranchJob, BranchOutcome, SharedPrefix
    from cowconv._history import EventLog

    forks = [source.fork() for _ in range(branches)]
    for n, fork in enumerate(forks):
        fork.send_message(f"Variant {n}: answer in one line.")
    shared = SharedPrefix.of(source.state.events)
    figures: dict[str, Any] = {}
    # Warm-up: workers start, import litellm and open their first connection.
    warm = [BranchJob.of(i, SharedPrefix.of(EventLog()), f.state, 10) for i, f in enumerate(forks)]
    list(executor.run_jobs(SharedPrefix.of(EventLog()), warm[:workers]))
    for mode, prefix in (("shared", shared), ("whole", SharedPrefix.of(EventLog()))):
        jobs = [BranchJob.of(i, prefix, f.state, 10) for i, f in enumerate(forks)]
        job_bytes = sum(len(job.dumps()) for job in jobs)
        prefix_bytes = len(prefix.dumps())
        started = time.perf_counter()
        results = list(executor.run_jobs(prefix, jobs))
        seconds = time.perf_counter() - started
        failures = [r for _, r in results if isinstance(r, BaseException)]
        if failures:
            raise RuntimeError(f"{len(failures)} branches failed, first: {failures[0]!r}")
        outcomes = [BranchOutcome.loads(r) for _, r in results if isinstance(r, bytes)]
        if any(o.error for o in outcomes):
            raise RuntimeError(next(o.error for o in outcomes if o.error))
        loads: dict[str, int] = {}
        for outcome in outcomes:
            loads[outcome.worker] = max(loads.get(outcome.worker, 0), outcome.prefix_loads)
        figures[mode] = {
            "seconds": seconds,
            "bytes": prefix_bytes * prefix_copies + job_bytes + sum(len(r) for _, r in results),
            "prefix_bytes": prefix_bytes,
            "prefix_pickle_bytes": len(pickle.dumps(prefix.events, pickle.HIGHEST_PROTOCOL)),
            "job_bytes": job_bytes,
            "workers_used": len(loads),
            # "whole" ships the history inside every job: each task unpickles all of it.
            "history_unpickles": sum(loads.values()) if mode == "shared" else len(outcomes),
            "max_prefix_loads_per_worker": max(loads.values(), default=0),
        }
    figures["bytes_ratio"] = figures["whole"]["bytes"] / figures["shared"]["bytes"]
    figures["time_ratio"] = figures["whole"]["seconds"] / figures["shared"]["seconds"]
    figures["workers"] = workers
    return figures


def _scaling(make_executor: Callable[[], Any], stub: Any, workspace: Path, quick: bool) -> Any:
    """run_branches with an executor: the same suite at 100 and at 5,000 events (medians)."""
    from cowconv import run_branches

    branches, sizes, repeats = (4, (100, 500), 1) if quick else (20, (100, 5_000), 3)
    executor_seconds: list[float] = []
    thread_seconds: list[float] = []
    for events in sizes:
        source = _suite_source(events, stub, workspace)
        run_branches(source, ["Warm up."], executor=make_executor())
        messages = [f"Say {n}." for n in range(branches)]
        seconds: dict[str, list[float]] = {"executor": [], "threads": []}
        for _ in range(repeats):  # alternating, so both see the same load
            started = time.perf_counter()
            run_branches(source, messages, executor=make_executor())
            seconds["executor"].append(time.perf_counter() - started)
            started = time.perf_counter()
            run_branches(source, messages, max_workers=2)
            seconds["threads"].append(time.perf_counter() - started)
        executor_seconds.append(statistics.median(seconds["executor"]))
        thread_seconds.append(statistics.median(seconds["threads"]))
    return {
        "branches": branches,
        "sizes": list(sizes),
        "repeats": repeats,
        "seconds": executor_seconds,
        "threads_seconds": thread_seconds,
        "ratio": executor_seconds[1] / executor_seconds[0],
        "threads_ratio": thread_seconds[1] / thread_seconds[0],
    }


class DistributedSuite(Scenario):
    name = "distributed"
    title = "Branch suites on Ray, Dask and worker processes"
    uses_events = False

    def steps(self, config: Any) -> int:
        return 2 if config.quick else 4

    def run(self, ctx: Context) -> dict[str, Any]:
        return measure(quick=ctx.config.quick, workspace=ctx.scratch, tick=ctx.tick)

    def targets(self, data: dict[str, Any]) -> list[Target]:
        return targets(data)

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        return [
            (
                f"{engine}, {data['events']:,} events × {data['branches']} branches",
                f"{row['bytes_ratio']:.0f}× fewer bytes, {row['time_ratio']:.1f}× faster, "
                f"≤{row['shared']['max_prefix_loads_per_worker']} prefix load(s) per worker",
            )
            for engine, row in data["engines"].items()
        ]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        return report(data)


def measure(quick: bool, workspace: Path, tick: Callable[[str], None] = print) -> dict[str, Any]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from cowconv.distributed import ProcessExecutor
    from cowconv.testing import StubLLMServer

    events = 300 if quick else 10_000
    branches = 8 if quick else 100
    workers = 2
    engines: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    if quick:
        # A quick run (the test suite's) starts no engine: the same wire, in this process.
        from cowconv.distributed import PicklingExecutor

        with StubLLMServer(brain=_one_line) as stub:
            source = _suite_source(events, stub, workspace)
            tick("in-process pickling executor")
            engines["in-process"] = _measure_engine(
                PicklingExecutor(workers), source, branches, workers, workers
            )
            tick("scaling: 100 vs 5,000 events (in process)")
            scaling = _scaling(lambda: PicklingExecutor(workers), stub, workspace, quick)
        skipped = {name: "not started in a quick run" for name in ("processes", "dask", "ray")}
        return {
            "events": events,
            "branches": branches,
            "workers": workers,
            "engines": engines,
            "skipped": skipped,
            "scaling": scaling,
            "scaling_engine": "PicklingExecutor",
        }
    with StubLLMServer(brain=_one_line) as stub:
        source = _suite_source(events, stub, workspace)
        tick("worker processes")
        engines["processes"] = _measure_engine(
            ProcessExecutor(workers, progress=False), source, branches, workers, workers
        )
        scaling = None
        tick("Dask LocalCluster")
        try:
            import dask
            from distributed import Client, LocalCluster
        except ImportError as error:
            skipped["dask"] = f"not installed ({error})"
        else:
            from cowconv.distributed import DaskExecutor

            with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
                cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    host="127.0.0.1",
                    dashboard_address=None,
                    # No dashboard; its HTTP server (health checks) on a free port, not on 8787.
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                )
                with cluster, Client(cluster) as client:
                    executor = DaskExecutor(client, progress=False)
                    engines["dask"] = _measure_engine(executor, source, branches, workers, workers)
                    tick("scaling: 100 vs 5,000 events (Dask)")
                    scaling = _scaling(
                        lambda: DaskExecutor(client, progress=False), stub, workspace, quick
                    )
        tick("local Ray")
        try:
            import ray
        except ImportError as error:
            skipped["ray"] = f"not installed ({error})"
        else:
            from cowconv.distributed import RayExecutor

            ray.init(
                num_cpus=workers,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                log_to_driver=False,
            )
            try:
                # One node: the object store holds one copy that its workers share.
                engines["ray"] = _measure_engine(
                    RayExecutor(progress=False), source, branches, workers, 1
                )
            finally:
                ray.shutdown()
    return {
        "events": events,
        "branches": branches,
        "workers": workers,
        "engines": engines,
        "skipped": skipped,
        "scaling": scaling,
        "scaling_engine": "DaskExecutor",
    }


def targets(data: dict[str, Any]) -> list[Target]:
    found = []
    # The figure is at 10k events and 100 branches; a quick run is far smaller.
    full = data["events"] >= 10_000 and data["branches"] >= 100
    for engine, row in data["engines"].items():
        found.append(
            Target(
                promise=f"{engine}: bytes moved vs shipping each fork whole",
                threshold=f"≥ {BYTES_TARGET:.0f}× fewer at 10k events × 100 branches",
                measured=f"{row['bytes_ratio']:.0f}×"
                + ("" if full else f" at {data['events']:,} × {data['branches']} (quick run)"),
                passed=row["bytes_ratio"] >= BYTES_TARGET if full else None,
            )
        )
        loads = row["shared"]["max_prefix_loads_per_worker"]
        found.append(
            Target(
                promise=f"{engine}: shared-prefix deserialisations per worker",
                threshold="≤ 1",
                measured=str(loads),
                passed=loads <= 1,
            )
        )
    scaling = data.get("scaling")
    measured = scaling is not None and scaling["sizes"] == [100, 5_000]
    found.append(
        Target(
            promise="run_branches with an executor: 5,000 events vs 100 events",
            threshold=f"≤ {SCALING_TARGET:.0f}×",
            measured=f"{scaling['ratio']:.2f}× (thread pool: {scaling['threads_ratio']:.2f}×)"
            if measured and scaling is not None
            else "not measured (a quick run, or no Dask)",
            passed=scaling["ratio"] <= SCALING_TARGET if measured and scaling is not None else None,
        )
    )
    return found


def report(data: dict[str, Any]) -> str:
    rows = []
    for engine, row in data["engines"].items():
        shared, whole = row["shared"], row["whole"]
        rows.append(
            [
                engine,
                f"{shared['bytes'] / 1e6:.2f} MB",
                f"{whole['bytes'] / 1e6:.1f} MB",
                f"{row['bytes_ratio']:.0f}×",
                f"{shared['history_unpickles']} ({shared['max_prefix_loads_per_worker']}/worker)",
                str(whole["history_unpickles"]),
                human_seconds(shared["seconds"]),
                human_seconds(whole["seconds"]),
                f"{row['time_ratio']:.1f}×",
            ]
        )
    lines = [
        f"{data['branches']} branches of a {data['events']:,}-event conversation on "
        f"{data['workers']} workers, each branch one LLM step against the local stub. "
        "Bytes: the prefix times the copies the engine makes of it, plus every job and result. "
        "The prefix travels pickled and zlib-compressed "
        + ", ".join(
            f"({engine}: {row['shared']['prefix_pickle_bytes'] / 1e6:.1f} MB pickled, "
            f"{row['shared']['prefix_bytes'] / 1e6:.2f} MB sent)"
            for engine, row in list(data["engines"].items())[:1]
        )
        + "; jobs and results are not compressed, and forks shipped whole are plain pickles.",
        "",
        table(
            [
                "engine",
                "bytes, prefix once",
                "bytes, forks whole",
                "fewer bytes",
                "history unpickles, prefix once",
                "history unpickles, forks whole",
                "wall, prefix once",
                "wall, forks whole",
                "faster",
            ],
            rows,
        ),
    ]
    scaling = data.get("scaling")
    if scaling is not None:
        (small, large), seconds = scaling["sizes"], scaling["seconds"]
        threads = scaling["threads_seconds"]
        lines += [
            "",
            f"`run_branches` with `{data['scaling_engine']}`, {scaling['branches']} branches, "
            f"median of {scaling['repeats']}: {human_seconds(seconds[0])} at {small:,} events, "
            f"{human_seconds(seconds[1])} at {large:,} events ({scaling['ratio']:.2f}×). The same "
            f"suite in the thread pool (2 threads): {human_seconds(threads[0])} and "
            f"{human_seconds(threads[1])} ({scaling['threads_ratio']:.2f}×): each branch's LLM "
            "request carries the whole history, whatever runs it.",
        ]
    for engine, why in data["skipped"].items():
        lines.append(f"\n{engine}: not measured, {why}.")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        figures = measure(args.quick, Path(scratch))
    print(report(figures))
    for target in targets(figures):
        print(f"{target.status:>12}  {target.promise}: {target.measured} ({target.threshold})")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
