"""OpenHands' SDK's ``fork()`` beside cowconv's, in memory and persisted, when it is installed.

OpenHands' software-agent-sdk (``pip install openhands-sdk``,
Python ≥ 3.12). Its ``LocalConversation.fork()`` re-serialises every event,
copies the agent and the agent state, all under the conversation's lock;
persisted, it writes every event again as a JSON file of its own. This
scenario builds OpenHands conversations from the same kinds of event as the rest
of the suite and times its fork next to cowconv's at each size, in this run.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._measure import (
    Sample,
    allocated_bytes,
    human_bytes,
    human_seconds,
    human_size,
    time_op,
)
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
    measured,
    point,
    ratio,
    sweep,
    table,
)

OPENHANDS = "OpenHands' software-agent-sdk (openhands-sdk)"
ENABLE = (
    "OpenHands' SDK is not installed here. To measure its fork() beside cowconv's, use "
    "Python ≥ 3.12 and `pip install openhands-sdk` into the environment that runs the suite "
    "(cowconv's own extras leave it out: it needs Python ≥ 3.12), then run the suite again."
)
FACTOR_10K = 1_000
"""cowconv's in-memory fork at 10k events against OpenHands' SDK's: at least this many times
faster."""
TARGET_SIZE = 10_000


def openhands_version() -> str | None:
    """The installed OpenHands' SDK's version, or None."""
    from importlib import metadata

    try:
        return metadata.version("openhands-sdk")
    except metadata.PackageNotFoundError:
        return None


class _OpenHandsWorkload:
    """OpenHands conversations that grow as sizes grow, one in memory and one persisted."""

    def __init__(self, scratch: Path) -> None:
        os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        from openhands.sdk import LLM, Agent, Conversation

        # Its INFO lines (one per fork) and a warning per in-memory conversation would bury
        # the progress bar.
        logging.getLogger("openhands").setLevel(logging.ERROR)
        self._scratch = scratch
        self._agent = Agent(
            llm=LLM(model="openai/gpt-4o", api_key="sk-benchmark", usage_id="main"), tools=[]
        )
        self._conversation = Conversation
        self._workspace = scratch / "workspace"
        self._workspace.mkdir(exist_ok=True)
        self.persisted_root = scratch / "openhands-persisted"

    def new(self, *, persisted: bool) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self._conversation(
                agent=self._agent,
                workspace=str(self._workspace),
                persistence_dir=str(self.persisted_root) if persisted else None,
                visualizer=None,
                stuck_detection=False,
            )

    @staticmethod
    def grow(conversation: Any, size: int) -> None:
        events = conversation._state.events
        for position in range(len(events), size):
            events.append(make_openhands_event(position))


def make_openhands_event(position: int) -> Any:
    """OpenHands' SDK's version of the suite's event at ``position`` (same kinds, same text)."""
    from openhands.sdk import Message, TextContent
    from openhands.sdk.event import ActionEvent, MessageEvent, ObservationEvent
    from openhands.sdk.llm import MessageToolCall
    from openhands.sdk.mcp import MCPToolObservation

    kind = position % 4
    if kind == 0:
        text = f"Please look at src/module_{position}.py and fix failing test {position}."
        return MessageEvent(
            source="user", llm_message=Message(role="user", content=[TextContent(text=text)])
        )
    if kind == 1:
        arguments = {"command": f"pytest -q tests/test_{position}.py", "timeout": 60}
        return ActionEvent(
            thought=[TextContent(text=f"Let me run the tests for module {position} first.")],
            tool_name="terminal",
            tool_call_id=f"call_{position}",
            tool_call=MessageToolCall(
                id=f"call_{position}",
                name="terminal",
                arguments=json.dumps(arguments),
                origin="completion",
            ),
            llm_response_id=f"response_{position}",
        )
    if kind == 2:
        output = f"FAILED tests/test_{position}.py::test_case - AssertionError\n" * 8
        return ObservationEvent(
            tool_name="terminal",
            tool_call_id=f"call_{position - 1}",
            action_id=f"action_{position - 1}",
            observation=MCPToolObservation(
                content=[TextContent(text=output)], tool_name="terminal", is_error=True
            ),
        )
    text = f"The test fails because of an off-by-one error at line {position}; fixing it."
    return MessageEvent(
        source="agent", llm_message=Message(role="assistant", content=[TextContent(text=text)])
    )


def _tree_bytes(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


class OpenHandsFork(Scenario):
    name = "openhands"
    title = "cowconv against OpenHands' SDK's fork(), side by side"

    def _budget(self, config: Config) -> float:
        """Most seconds (warm-up plus three calls) one OpenHands point may take before it is
        extrapolated: longer than the copying baselines', since this is the comparison a
        reader comes for."""
        return 6.0 if config.quick else 60.0

    def steps(self, config: Config) -> int:
        return 4 * len(config.sizes) + 1

    def run(self, ctx: Context) -> dict[str, Any]:
        if sys.version_info < (3, 12):
            raise Skip(ENABLE)
        try:
            import openhands.sdk  # noqa: F401
        except ImportError:
            raise Skip(ENABLE) from None
        from benchmarks.scenarios.persisted_fork import stored_bytes
        from cowconv import SQLiteStore

        settings = ctx.settings
        sizes = sorted(ctx.config.sizes)
        budget = self._budget(ctx.config)
        ctx.tick("OpenHands' SDK: start")
        openhands = _OpenHandsWorkload(ctx.scratch)
        memory_source = openhands.new(persisted=False)

        cowconv_forks = []
        for size in sizes:
            ctx.tick(f"cowconv fork at {human_size(size)} events")
            conversation = ctx.workload.conversation(size)
            cowconv_forks.append(point(size, time_op(conversation.fork, settings)))

        memory: dict[str, list[dict[str, Any]]] = {"cowconv": [], "openhands": []}

        def openhands_fork(size: int) -> tuple[Sample, float]:
            # The source only grows: measure everything at a size while it has that many events.
            openhands.grow(memory_source, size)
            sample = time_op(memory_source.fork, settings, max_seconds=budget)
            if sample.min * 5 <= budget:  # tracemalloc slows the copy several times
                conversation = ctx.workload.conversation(size)
                memory["cowconv"].append(
                    point(size, allocated_bytes(conversation.fork, settings.alloc_count, 3)[0])
                )
                memory["openhands"].append(
                    point(size, allocated_bytes(memory_source.fork, 1, 1)[0])
                )
            return sample, sample.min

        openhands_forks = sweep(
            sizes,
            openhands_fork,
            budget,
            lambda size: ctx.tick(f"OpenHands fork at {human_size(size)} events"),
        )

        persisted = self._persisted(ctx, openhands, sizes, budget)
        store = SQLiteStore(ctx.scratch / "cowconv.db")
        cowconv_persisted, cowconv_bytes = [], []
        try:
            for size in sizes:
                ctx.tick(f"cowconv persisted fork at {human_size(size)} events")
                if at_size(persisted["fork"], size) is None:
                    continue
                source = ctx.workload.saved_conversation(size, store)
                cowconv_persisted.append(point(size, time_op(source.fork, settings)))
                before = stored_bytes(ctx.scratch / "cowconv.db")
                count = 100
                for _ in range(count):
                    source.fork()
                grown = (stored_bytes(ctx.scratch / "cowconv.db") - before) / count
                cowconv_bytes.append(point(size, Sample.of([grown], count)))
        finally:
            store.close()
        return {
            "sizes": sizes,
            "openhands_version": openhands_version(),
            "fork": {"cowconv": cowconv_forks, "openhands": openhands_forks},
            "memory": memory,
            "persisted": {
                "cowconv": cowconv_persisted,
                "openhands": persisted["fork"],
                "cowconv_bytes": cowconv_bytes,
                "openhands_bytes": persisted["bytes"],
                "openhands_source_save": persisted["save"],
            },
        }

    def _persisted(
        self, ctx: Context, openhands: _OpenHandsWorkload, sizes: Sequence[int], budget: float
    ) -> dict[str, list[dict[str, Any]]]:
        """OpenHands' SDK's persisted fork: a source writing a file per event, forked in full."""
        import time

        source = openhands.new(persisted=True)
        forks: list[dict[str, Any]] = []
        written: list[dict[str, Any]] = []
        saves: list[dict[str, Any]] = []
        per_event_save: float | None = None
        for size in sizes:
            ctx.tick(f"openhands persisted fork at {human_size(size)} events")
            grow = size - len(source._state.events)
            if per_event_save is not None and per_event_save * grow > budget:
                break
            started = time.perf_counter()
            openhands.grow(source, size)
            seconds = time.perf_counter() - started
            per_event_save = seconds / max(grow, 1)
            saves.append(point(size, Sample.of([seconds])))
            directories: list[Path] = []

            def fork(source: Any = source, directories: list[Path] = directories) -> None:
                forked = source.fork(conversation_id=None)
                directories.append(Path(forked._state.persistence_dir))

            if forks and not forks[-1]["extrapolated"]:
                known = forks[-1]
                predicted = known["min"] * size / known["size"] * 4
                if predicted > budget:
                    forks.append(estimated_point(size, known["median"] * size / known["size"]))
                    last = written[-1]
                    written.append(estimated_point(size, last["median"] * size / last["size"]))
                    continue
            sample = time_op(fork, ctx.settings, max_seconds=budget)
            forks.append(point(size, sample))
            written.append(point(size, Sample.of([float(_tree_bytes(directories[-1]))])))
            for directory in directories:
                shutil.rmtree(directory, ignore_errors=True)
        for size in sizes:
            if at_size(forks, size) is None and forks:
                known = measured(forks)[-1]
                forks.append(estimated_point(size, known["median"] * size / known["size"]))
                last = measured(written)[-1]
                written.append(estimated_point(size, last["median"] * size / last["size"]))
        return {"fork": forks, "bytes": written, "save": saves}

    # -- reading the data back --------------------------------------------------------------

    def targets(self, data: dict[str, Any]) -> list[Target]:
        fork = at_size(data["fork"]["cowconv"], TARGET_SIZE)
        openhands = at_size(data["fork"]["openhands"], TARGET_SIZE)
        promise = "in-memory fork at 10k events against OpenHands' SDK's fork(), side by side"
        threshold = f"≥ {FACTOR_10K:,}× faster"
        if fork is None or openhands is None:
            return [Target(promise, threshold, "10k not in --sizes", None)]
        value = ratio(openhands, fork)
        if openhands["extrapolated"] or value is None:
            if value is None:
                return [Target(promise, threshold, "not measured", None)]
            measured = f"{fmt_ratio(value)} (OpenHands extrapolated)"
            return [Target(promise, threshold, measured, None, unjudged="OpenHands extrapolated")]
        return [Target(promise, threshold, fmt_ratio(value), value >= FACTOR_10K)]

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        lines = []
        for entry in data["fork"]["cowconv"]:
            size = entry["size"]
            openhands = at_size(data["fork"]["openhands"], size)
            approx = "≈ " if openhands and openhands["extrapolated"] else ""
            lines.append(
                (
                    f"fork at {human_size(size)} events",
                    f"cowconv {human_seconds(entry['median'])}, openhands {approx}"
                    f"{human_seconds(openhands['median']) if openhands else '—'} "
                    f"({approx}{fmt_ratio(ratio(openhands, entry))})",
                )
            )
        return lines

    def plot(self, data: dict[str, Any], directory: Path) -> list[str]:
        from benchmarks._plots import Line, Panel, chart

        persisted = data["persisted"]
        panels = [
            Panel(
                title="Fork in memory",
                unit="s",
                ylabel="time per fork",
                lines=[
                    Line("cowconv Conversation.fork()", data["fork"]["cowconv"]),
                    Line("OpenHands' SDK LocalConversation.fork()", data["fork"]["openhands"]),
                ],
            ),
            Panel(
                title="Persisted fork",
                unit="s",
                ylabel="time per fork",
                lines=[
                    Line("cowconv, SQLiteStore (fsync on)", persisted["cowconv"]),
                    Line("OpenHands' SDK, one JSON file per event", persisted["openhands"]),
                ],
            ),
        ]
        return [chart(directory / "openhands_fork.png", panels)]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        fork, persisted, memory = data["fork"], data["persisted"], data["memory"]
        rows = []
        for size in data["sizes"]:
            ours, openhands = at_size(fork["cowconv"], size), at_size(fork["openhands"], size)
            rows.append(
                [
                    f"{size:,}",
                    cell(ours, human_seconds),
                    cell(openhands, human_seconds),
                    fmt_ratio(ratio(openhands, ours)),
                    cell(at_size(memory["cowconv"], size), human_bytes),
                    cell(at_size(memory["openhands"], size), human_bytes),
                ]
            )
        persisted_rows = []
        for size in data["sizes"]:
            ours, openhands = (
                at_size(persisted["cowconv"], size),
                at_size(persisted["openhands"], size),
            )
            if ours is None and openhands is None:
                continue
            ours_bytes = at_size(persisted["cowconv_bytes"], size)
            openhands_bytes = at_size(persisted["openhands_bytes"], size)
            persisted_rows.append(
                [
                    f"{size:,}",
                    cell(ours, human_seconds),
                    cell(openhands, human_seconds),
                    fmt_ratio(ratio(openhands, ours)),
                    cell(ours_bytes, human_bytes),
                    cell(openhands_bytes, human_bytes),
                    fmt_ratio(ratio(openhands_bytes, ours_bytes)),
                ]
            )
        return "\n".join(
            [
                f"{OPENHANDS} {data['openhands_version']}, installed in the interpreter that ran "
                "the suite, "
                "forked in the same process and run as cowconv. Its conversations hold the same "
                "kinds of event with the same text (its own event classes, so each event is a "
                "little larger than ours). Its `LocalConversation.fork()` re-serialises every "
                "event and copies the agent and agent state under the conversation's lock. "
                "Ratios divide medians measured side by side; memory is the tracemalloc bytes "
                "each fork keeps (one fork of OpenHands' SDK at a time; sizes whose OpenHands "
                "fork is too slow to "
                "trace are left out).",
                "",
                table(
                    [
                        "events",
                        "cowconv fork",
                        "OpenHands fork",
                        "openhands / cowconv",
                        "cowconv memory per fork",
                        "OpenHands memory per fork",
                    ],
                    rows,
                ),
                *(["", data["memory_note"]] if data.get("memory_note") else []),
                "",
                "Persisted: cowconv's `SQLiteStore` (fsync on; bytes = database growth per fork, "
                "averaged over 100 forks) against OpenHands' SDK's file store (a fork writes every "
                "event again as a JSON file of its own; bytes = the new fork's files). OpenHands "
                "points whose cost would pass the suite's budget are extrapolated linearly, "
                "its best case: its fork grows faster than linearly.",
                "",
                table(
                    [
                        "events",
                        "cowconv",
                        "openhands",
                        "openhands / cowconv",
                        "cowconv bytes",
                        "OpenHands bytes",
                        "bytes ratio",
                    ],
                    persisted_rows,
                ),
            ]
        )
