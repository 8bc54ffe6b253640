"""The markdown report and the terminal summary, both built from results data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks._machine import BUSY_LOAD_PER_CPU
from benchmarks._measure import human_bytes
from benchmarks._scenario import Scenario, Target, table
from benchmarks._workload import EVENT_MIX

METHODOLOGY = """\
- **Timing.** Each figure is the time of one call, from batches of calls timed with
  `time.perf_counter`. A calibration pass grows the batch until it lasts {min_batch} (this
  pass is the warm-up and is discarded); then {repeats} batches are timed. Reported: the
  **median** batch, with the fastest and slowest batch as **min–max**. Calls slower than a
  batch run once per batch, with at least 3 repeats. The cyclic garbage collector is off while
  a batch runs (as in `timeit`); this favours the copying baselines, which allocate millions of
  objects that would otherwise trigger collections. Before each measurement the collector runs
  once and the survivors are frozen (`gc.freeze()`), so a million long-lived events do not make
  every later collection slow.
- **Memory.** Bytes per fork are `tracemalloc` bytes still allocated after creating
  {alloc_count} forks kept alive in a list allocated before tracing started (3 repeats; median,
  min–max). Whole-process figures come from a fresh subprocess: its resident size
  (psutil) and high-water mark (`VmHWM`).
- **Workload.** Histories cycle through four event kinds: {mix}. Every event has its own
  content, so a deep copy cannot share anything. A history of *n* events is the first *n*
  events of one list built once per run; conversations are made from a prebuilt `EventLog`
  (not by *n* `send_message` calls), which is what a conversation that grew to *n* events
  holds.
- **Baselines**, in the same process and run as cowconv, on the same events:
  - *deepcopy*: `copy.deepcopy(events)` of the event list (a list of the pydantic events)
    — the naive fork. It copies only the events, not the agent or agent state, so it
    underestimates a real deep-copy fork.
  - *JSON round trip*: `[Event.model_validate_json(e.model_dump_json()) for e in events]`,
    what OpenHands' SDK's `fork()` does to every event (it also copies the agent and agent
    state; we do not).
  - Ratios ("× slower") divide medians measured side by side in this run.
- **Extrapolation.** A baseline point is measured only while warm-up plus three calls fit in
  {budget} (predicted from the largest size already measured); larger sizes are extrapolated
  linearly from the largest measured size (the copies do the same work for every event, so
  this is their best case), and marked "extrapolated" in tables,
  plots (hollow points, dashed line) and `results.json`. Targets are never judged on
  extrapolated figures.
- **Noise.** The machine may be shared (other processes running tests): load averages are
  recorded at the start and end of each scenario, and a scenario during which the 1-minute
  load average passed {busy_load} runnable processes per CPU is marked *busy machine*. There
  an absolute time that misses its target is reported as *not judged*: the ratios measured
  side by side in the same run are the verdict. Min–max spreads show the noise; medians
  resist it.
"""


def targets_table(targets: Sequence[Target]) -> str:
    rows = [[t.promise, t.threshold, t.measured, f"**{t.status}**"] for t in targets]
    return table(["promise", "threshold", "measured", "status"], rows)


def busy_note(results: Mapping[str, Any]) -> str | None:
    """A sentence for a run during which other work competed for the CPUs, else None."""
    cpus = results["machine"].get("cpus")
    loads = [
        (entry["load_before"], entry["load_after"])
        for entry in results["scenarios"].values()
        if entry.get("busy")
    ]
    if not loads:
        return None
    highest = max(load[0] for pair in loads for load in pair if load)
    return (
        f"The machine was busy during this run (1-minute load average up to {highest:.1f} on "
        f"{cpus} CPUs, in {len(loads)} of {len(results['scenarios'])} scenarios): absolute "
        "times there are information, not verdicts; the ratios measured side by side (fork "
        "against copying, import cowconv against pydantic) are what is judged."
    )


def _openhands_paragraph(results: Mapping[str, Any], scenarios: Sequence[Scenario]) -> list[str]:
    openhands = next((s for s in scenarios if s.name == "openhands"), None)
    entry = results["scenarios"].get("openhands")
    if openhands is None or entry is None:
        return [
            "OpenHands' SDK's `fork()` was not part of this run; `--scenario openhands` "
            "measures it "
            "side by side with cowconv's when `openhands-sdk` is installed (Python ≥ 3.12).",
            "",
        ]
    if entry["status"] == "ok":
        return [
            f"Measured in this run, side by side with cowconv: see section {openhands.number}.",
            "",
        ]
    return [f"**Not measured in this run:** {entry['message']}", ""]


def markdown(
    results: Mapping[str, Any],
    scenarios: Sequence[Scenario],
    plots: Mapping[str, Sequence[str]],
    *,
    image_prefix: str = "",
) -> str:
    """The whole report; plot links are ``image_prefix + file name``."""
    machine = results["machine"]
    settings = results["settings"]
    memory = machine.get("memory_bytes")
    note = busy_note(results)
    lines = [
        "# cowconv benchmarks",
        "",
        f"Generated by `{results['command']}` on "
        f"{results['started_at']} at commit `{results['commit']}`, in "
        f"{results['duration_s']:.0f} s{' with `--quick`' if results['quick'] else ''}. "
        + (
            "**Stopped early**: the scenarios that finished before the run ended. "
            if results.get("partial")
            else ""
        )
        + "Run it again with the same command from a checkout of the repository "
        '(`pip install -e ".[dev]"` first).',
        "",
        "## What cowconv promises",
        "",
        "Each promise checked against this run's data (medians; ratios measured side by side "
        "in this run). Absolute times depend on the machine and on what else runs on it.",
        "",
        results["targets_markdown"],
        "",
        *([f"> {note}", ""] if note else []),
        "## Machine",
        "",
        f"- {machine['cpu']}, {machine['cpus']} CPUs, "
        f"{human_bytes(memory) if memory else 'unknown'} RAM; {machine['platform']}",
        f"- {machine['implementation']} {machine['python']}; "
        + ", ".join(
            f"{name} {version}"
            for name, version in results["versions"].items()
            if version is not None
        ),
        f"- load average at start {machine['load_average']}, at end {results['load_at_end']} "
        "(1, 5, 15 min): the machine is shared, see *Noise* below.",
        "",
        "## Methodology",
        "",
        METHODOLOGY.format(
            min_batch=f"{settings['min_batch_s'] * 1000:g} ms",
            repeats=settings["repeats"],
            alloc_count=settings["alloc_count"],
            mix=EVENT_MIX,
            budget=f"{settings['baseline_budget_s']:g} s",
            busy_load=BUSY_LOAD_PER_CPU,
        ),
        "## OpenHands' SDK",
        "",
        "OpenHands' software-agent-sdk (`openhands-sdk` on PyPI) is the SDK whose "
        "`Conversation.fork()` cowconv replaces.",
        "",
        *_openhands_paragraph(results, scenarios),
    ]
    for scenario in scenarios:
        entry = results["scenarios"].get(scenario.name)
        if entry is None:
            continue
        lines += [f"## {scenario.number}. {scenario.title}", ""]
        if entry["status"] == "ok":
            lines.append(scenario.markdown(entry["data"], plots.get(scenario.name, ())))
            for name in plots.get(scenario.name, ()):
                lines += ["", f"![{scenario.title}]({image_prefix}{name})"]
        elif entry["status"] == "skipped":
            lines.append(f"**Skipped:** {entry['message']}")
        else:
            lines.append(f"**Failed:** {entry['message']}")
        lines += [
            "",
            f"<sub>{entry['duration_s']:.1f} s; load average {entry['load_before']} → "
            f"{entry['load_after']}{' (busy machine)' if entry.get('busy') else ''}</sub>",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"
