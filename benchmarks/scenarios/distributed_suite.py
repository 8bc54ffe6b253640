"""Scenario: branch suites on executors: bytes moved, prefix loads, wall time.

Self-contained: it builds its own history and starts its own engines (Dask
LocalCluster and a local Ray, when installed; worker processes always), all
on 127.0.0.1. Run it alone with ``python -m benchmarks.scenarios.distributed_suite``.

"Shipping each fork whole" is the naive port: the same executor and the same
worker code, but every job carries its fork's whole history (an empty shared
prefix), so every task moves and unpickles all of it.

"Scaling" runs the same suite (``run_branches`` with each executor, and the
thread pool for reference) from a conversation of 100 events and one of 5,000.
It is judged on what a user with long conversations runs: an agent with a
condenser (``LLMSummarizingCondenser``), whose conversations were built by
real runs, so the shared history holds the CondensationEvents the condenser
recorded and every branch's LLM request is the bounded view. The same suite
without a condenser is reported beside it, for information: there every
request carries the whole history.
"""

from __future__ import annotations

import json
import os
import pickle
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from benchmarks._measure import human_seconds
from benchmarks._scenario import Context, Scenario, Target, table

BYTES_TARGET = 50.0
SCALING_TARGET = 2.0
SCALING_SIZES = (100, 5_000)
QUICK_SCALING_SIZES = (100, 500)
# The condensed workload: an agent with LLMSummarizingCondenser(max_size=40, keep_first=4);
# each user turn follows 24 events of agent work (messages, tool calls and results), so the
# view outgrows max_size at every turn once the conversation is under way.
MAX_SIZE = 40
KEEP_FIRST = 4
WORK_PER_TURN = 24
SUMMARY = "Summary of the earlier turns: tests were run and off-by-one errors were fixed."


def _one_line(request: Any) -> Any:
    """The model's answer: one line (the stub's default brain would list every command of the
    history, ~80 KB at 10k events, and the results would outweigh what the suite ships).
    A condenser's summary request gets a one-line summary."""
    from cowconv.agent.condenser import SUMMARY_INSTRUCTIONS
    from cowconv.testing import StubReply

    messages = request.get("messages") or [{}]
    if messages[0].get("content") == SUMMARY_INSTRUCTIONS:
        return StubReply.text(SUMMARY)
    return StubReply.text("Done: the one-line answer this variant asked for.")


def _suite_source(events: int, stub: Any, workspace: Path) -> Any:
    from benchmarks._workload import make_event
    from cowconv import LLM, Agent, Conversation
    from cowconv.core.history import EventLog

    agent = Agent(llm=LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0))
    base = Conversation(agent=agent, workspace=workspace)
    # The suite's realistic events (messages, tool calls, ~430-character outputs), appended
    # one by one so the history has the chunk layout a real conversation has.
    log = EventLog().extend(make_event(position) for position in range(events))
    base._commit(lambda state: state._replace(events=log))
    return base


def condensed_source(events: int, stub: Any, workspace: Path) -> Any:
    """A conversation of at least ``events`` events, as an agent with a condenser leaves it.

    Each turn records ``WORK_PER_TURN`` events of agent work (the suite's
    realistic events), then a user message, then ``run()``: the runtime
    condenses the view when it outgrows ``MAX_SIZE`` (a real summary call to
    the stub, recorded as a CondensationEvent) and makes one LLM call.
    """
    from benchmarks._workload import make_event
    from cowconv import LLM, Agent, Conversation, LLMSummarizingCondenser

    llm = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
    condenser = LLMSummarizingCondenser(
        llm=llm.model_copy(update={"usage_id": "condenser"}),
        max_size=MAX_SIZE,
        keep_first=KEEP_FIRST,
    )
    conversation = Conversation(agent=Agent(llm=llm, condenser=condenser), workspace=workspace)
    position = 0
    while len(conversation.state.events) < events:
        for _ in range(WORK_PER_TURN):  # a multiple of 4: every tool call with its result
            conversation.append_event(make_event(position))
            position += 1
        conversation.send_message("Go on with the next failing test.")
        conversation.run()
    return conversation


def _measure_engine(
    executor: Any, source: Any, branches: int, workers: int, prefix_copies: int
) -> dict[str, Any]:
    """One suite shipped smartly and one shipped whole, through ``executor``'s run_jobs."""
    from cowconv.branches.wire import BranchJob, BranchOutcome, SharedPrefix
    from cowconv.core.history import EventLog

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


def _scaling(
    make_executor: Callable[[], Any] | None,
    sources: dict[str, dict[int, Any]],
    stub: Any,
    quick: bool,
) -> dict[str, Any]:
    """run_branches from sources of two sizes, per workload (medians, sizes alternating).

    ``make_executor`` gives a fresh executor per suite; ``None`` is the thread
    pool (2 threads). Also records how many messages each request carried.
    """
    from cowconv import run_branches

    branches, repeats = (4, 3) if quick else (20, 3)
    messages = [f"Say {n}." for n in range(branches)]

    def suite(source: Any, branch_messages: list[str]) -> None:
        if make_executor is None:
            run_branches(source, branch_messages, max_workers=2)
        else:
            run_branches(source, branch_messages, executor=make_executor())

    found: dict[str, Any] = {}
    for workload, by_size in sources.items():
        sizes = sorted(by_size)
        for size in sizes:
            suite(by_size[size], ["Warm up."])  # workers start, import litellm, connect
        seconds: dict[int, list[float]] = {size: [] for size in sizes}
        request_messages: dict[int, set[int]] = {size: set() for size in sizes}
        for _ in range(repeats):
            for size in sizes:
                seen = len(stub.requests)
                started = time.perf_counter()
                suite(by_size[size], messages)
                seconds[size].append(time.perf_counter() - started)
                request_messages[size].update(len(r.messages) for r in stub.requests[seen:])
        medians = [statistics.median(seconds[size]) for size in sizes]
        found[workload] = {
            "sizes": sizes,
            "seconds": medians,
            "ratio": medians[-1] / medians[0],
            "request_messages": [sorted(request_messages[size]) for size in sizes],
        }
    return {"branches": branches, "repeats": repeats, **found}


def _describe(sources: dict[str, dict[int, Any]]) -> dict[str, Any]:
    """Events, condensations and the size of the view of each scaling source."""
    from cowconv import CondensationEvent
    from cowconv.agent.condenser import condenser_view

    described: dict[str, Any] = {}
    for workload, by_size in sources.items():
        rows = []
        for size in sorted(by_size):
            state = by_size[size].state
            condenser = state.agent.condenser
            rows.append(
                {
                    "size": size,
                    "events": len(state.events),
                    "condensations": sum(isinstance(e, CondensationEvent) for e in state.events),
                    "view": len(state.events)
                    if condenser is None
                    else len(condenser_view(condenser, state.events)),
                }
            )
        described[workload] = rows
    return described


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
        ] + [
            (
                f"{engine}, suite at {row['condensed']['sizes'][1]:,} vs "
                f"{row['condensed']['sizes'][0]:,} events",
                f"{row['condensed']['ratio']:.2f}× condensed, "
                f"{row['uncondensed']['ratio']:.2f}× uncondensed",
            )
            for engine, row in _scaling_rows(data)
        ]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        return report(data)


def measure(quick: bool, workspace: Path, tick: Callable[[str], None] = print) -> dict[str, Any]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from cowconv.testing import StubLLMServer

    events = 300 if quick else 10_000
    branches = 8 if quick else 100
    workers = 2
    sizes = QUICK_SCALING_SIZES if quick else SCALING_SIZES
    engines: dict[str, Any] = {}
    scaling: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    with StubLLMServer(brain=_one_line) as stub:
        source = _suite_source(events, stub, workspace)
        tick(f"scaling sources: {sizes[0]:,} and {sizes[1]:,} events, condensed by real runs")
        sources = {
            "condensed": {size: condensed_source(size, stub, workspace) for size in sizes},
            "uncondensed": {size: _suite_source(size, stub, workspace) for size in sizes},
        }
        scaling["threads"] = _scaling(None, sources, stub, quick)
        if quick:
            # A quick run (the test suite's) starts no engine: the same wire, in this process.
            from cowconv.distributed import PicklingExecutor

            tick("in-process pickling executor")
            engines["in-process"] = _measure_engine(
                PicklingExecutor(workers), source, branches, workers, workers
            )
            scaling["in-process"] = _scaling(
                lambda: PicklingExecutor(workers), sources, stub, quick
            )
            skipped = {name: "not started in a quick run" for name in ("processes", "dask", "ray")}
        else:
            engine_starts = (
                ("processes", "worker processes", _processes, workers),
                ("dask", "Dask LocalCluster", _dask, workers),
                # One Ray node: the object store holds one copy that its workers share.
                ("ray", "local Ray", _ray, 1),
            )
            for name, label, start, prefix_copies in engine_starts:
                tick(label)
                with ExitStack() as stack:
                    try:
                        make = stack.enter_context(start(workers))
                    except ImportError as error:
                        skipped[name] = f"not installed ({error})"
                        continue
                    engines[name] = _measure_engine(
                        make(), source, branches, workers, prefix_copies
                    )
                    scaling[name] = _scaling(make, sources, stub, quick)
        described = _describe(sources)
    return {
        "events": events,
        "branches": branches,
        "workers": workers,
        "engines": engines,
        "skipped": skipped,
        "scaling": scaling,
        "scaling_sources": described,
        "condenser": {"max_size": MAX_SIZE, "keep_first": KEEP_FIRST},
    }


Executors = Callable[[], Any]


@contextmanager
def _processes(workers: int) -> Iterator[Executors]:
    from cowconv.distributed import ProcessExecutor

    yield lambda: ProcessExecutor(workers, progress=False)


@contextmanager
def _dask(workers: int) -> Iterator[Executors]:
    import dask
    from distributed import Client, LocalCluster

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
            yield lambda: DaskExecutor(client, progress=False)


@contextmanager
def _ray(workers: int) -> Iterator[Executors]:
    import ray

    from cowconv.distributed import RayExecutor

    ray.init(
        num_cpus=workers,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
    )
    try:
        yield lambda: RayExecutor(progress=False)
    finally:
        ray.shutdown()


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
                unjudged="" if full else "quick run",
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
    found += scaling_targets(data)
    return found


def _scaling_rows(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(engine, figures) of each executor measured, the thread pool last."""
    scaling = data.get("scaling") or {}
    if "sizes" in scaling:  # results written before the condensed workload: not comparable
        return []
    return sorted(scaling.items(), key=lambda item: item[0] == "threads")


def _ratio_text(row: dict[str, Any]) -> str:
    condensed, uncondensed = row["condensed"], row["uncondensed"]
    return (
        f"{condensed['ratio']:.2f}× (uncondensed, for information: {uncondensed['ratio']:.2f}×, "
        "every request carrying the whole history)"
    )


def scaling_targets(data: dict[str, Any]) -> list[Target]:
    """run_branches with each executor, 5,000 vs 100 events, judged on condensed conversations."""
    found = []
    for engine, row in _scaling_rows(data):
        if engine == "threads":
            continue  # the reference, not an executor
        sizes = row["condensed"]["sizes"]
        full = sizes == list(SCALING_SIZES)
        found.append(
            Target(
                promise=f"run_branches with {engine}: the same suite at "
                f"{SCALING_SIZES[1]:,} vs {SCALING_SIZES[0]:,} events (condensed conversations)",
                threshold=f"≤ {SCALING_TARGET:.0f}×",
                measured=_ratio_text(row)
                + ("" if full else f" at {sizes[1]:,} vs {sizes[0]:,} events (quick run)"),
                passed=row["condensed"]["ratio"] <= SCALING_TARGET if full else None,
                unjudged="" if full else "quick run",
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
    lines += _scaling_report(data)
    for engine, why in data["skipped"].items():
        lines.append(f"\n{engine}: not measured, {why}.")
    return "\n".join(lines)


def _scaling_report(data: dict[str, Any]) -> list[str]:
    rows = _scaling_rows(data)
    if not rows:
        return []
    first = rows[0][1]
    small, large = first["condensed"]["sizes"]
    sources = data["scaling_sources"]
    condensed, uncondensed = sources["condensed"], sources["uncondensed"]
    cells = []
    for engine, row in rows:
        c, u = row["condensed"], row["uncondensed"]
        cells.append(
            [
                "thread pool (2 threads, reference)" if engine == "threads" else engine,
                human_seconds(c["seconds"][0]),
                human_seconds(c["seconds"][1]),
                f"**{c['ratio']:.2f}×**",
                human_seconds(u["seconds"][0]),
                human_seconds(u["seconds"][1]),
                f"{u['ratio']:.2f}×",
            ]
        )
    judged = [(engine, row) for engine, row in rows if engine != "threads"]
    full = [small, large] == list(SCALING_SIZES)
    worst = max((row["condensed"]["ratio"] for _, row in judged), default=float("nan"))
    verdict = (
        f"Verdict: with every executor the suite at {large:,} events costs at most "
        f"{worst:.2f}× the suite at {small:,} events on condensed conversations "
        + (
            f"(target ≤ {SCALING_TARGET:.0f}×: "
            + ("met" if worst <= SCALING_TARGET else "NOT met")
            + ")."
            if full
            else f"(a quick run; the target, ≤ {SCALING_TARGET:.0f}×, is judged at "
            f"{SCALING_SIZES[1]:,} vs {SCALING_SIZES[0]:,} events)."
        )
        + " Without a condenser it grows with the history: every branch's LLM request carries "
        "all of it (rendered, serialised and parsed by litellm, read by the model), whatever "
        "runs the branch."
    )

    def messages(rows: list[dict[str, Any]], figures: dict[str, Any]) -> str:
        return " and ".join(
            f"{row['events']:,} events ({row['condensations']} condensations, "
            f"{'/'.join(str(n) for n in per_request)} messages per request)"
            for row, per_request in zip(rows, figures["request_messages"], strict=True)
        )

    started = (
        [
            "",
            "`processes`: every suite starts its own worker processes (spawn, then import "
            "cowconv and litellm): a fixed cost of seconds in both of its columns, which "
            "flattens its ratios.",
        ]
        if any(engine == "processes" for engine, _ in rows)
        else []
    )
    return [
        "",
        f"The same suite from a conversation of {small:,} and of {large:,} events: "
        f"`run_branches` with {first['branches']} branches (one LLM step each), median of "
        f"{first['repeats']}, sizes alternating. **Condensed**: the sources were built by real "
        "runs of an agent with `LLMSummarizingCondenser("
        f"max_size={data['condenser']['max_size']}, keep_first={data['condenser']['keep_first']})"
        f"` ({WORK_PER_TURN} events of agent work per user turn; each condensation a real "
        f"summary call to the stub): {messages(condensed, first['condensed'])}. "
        f"**Uncondensed**: the same kind of events, no condenser: "
        f"{messages(uncondensed, first['uncondensed'])}.",
        "",
        table(
            [
                "runs on",
                f"condensed, {small:,}",
                f"condensed, {large:,}",
                "condensed ratio",
                f"uncondensed, {small:,}",
                f"uncondensed, {large:,}",
                "uncondensed ratio (information)",
            ],
            cells,
        ),
        *started,
        "",
        verdict,
    ]


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
