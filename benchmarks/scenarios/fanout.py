"""Scenario 6: A/B fan-out end to end: fork N branches and run one agent step in each."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._measure import Sample, human_seconds, human_size, settle, time_once, time_op
from benchmarks._scenario import Config, Context, Scenario, Skip, cell, point, table
from benchmarks.scenarios.fork_latency import json_round_trip
from cowconv import LLM, Agent, Conversation


def _missing(error: ImportError) -> Skip:
    return Skip(
        "the runtime pieces (cowconv.run_branches, cowconv.testing.StubLLMServer) are not "
        f"available in this checkout: {error}"
    )


class FanOut(Scenario):
    name = "fanout"
    title = "A/B fan-out end to end against the local stub LLM"

    def _branches(self, config: Config) -> list[int]:
        return [1, 4] if config.quick else [1, 2, 4, 8, 16, 32]

    def _history(self, config: Config) -> int:
        return 100 if config.quick else 1_000

    def _repeats(self, config: Config) -> int:
        return 3 if config.quick else 5

    def steps(self, config: Config) -> int:
        return len(self._branches(config)) + 2

    def run(self, ctx: Context) -> dict[str, Any]:
        try:
            from cowconv import run_branches
            from cowconv.testing import StubLLMServer
        except ImportError as error:
            raise _missing(error) from None
        # litellm fetches its model cost map from the internet unless told otherwise.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        config = ctx.config
        history = self._history(config)
        events = ctx.workload.events(history)
        settings = ctx.settings
        ctx.tick("copying baselines for one branch")
        one_deepcopy = time_op(lambda: copy.deepcopy(events), settings)
        one_round_trip = time_op(lambda: json_round_trip(events), settings)
        rows = []
        with StubLLMServer() as stub:
            agent = Agent(llm=LLM(**stub.llm_settings()))
            source = Conversation(agent=agent, workspace=ctx.scratch)
            log = ctx.workload.log(history)
            source._commit(lambda state: state._replace(events=log))
            ctx.tick("warm-up (imports litellm, first HTTP connection)")
            warm_up = time_once(lambda: run_branches(source, ["Warm up."]))
            settle()  # litellm's many objects would slow every later collection
            for count in self._branches(config):
                ctx.tick(f"{count} branches × 1 agent step")
                messages = [f"Variant {i}: summarise what you did." for i in range(count)]
                before = len(stub.requests)
                outcomes: list[list[str]] = []

                def fan_out(messages: list[str] = messages, outcomes: Any = outcomes) -> None:
                    forks = run_branches(source, messages)
                    outcomes.append([f.state.execution_status.value for f in forks])

                seconds = [time_once(fan_out) for _ in range(self._repeats(config))]
                requests = len(stub.requests) - before
                statuses = sorted({status for run in outcomes for status in run})
                forks_only = time_op(lambda n=count: [source.fork() for _ in range(n)], settings)
                rows.append(
                    {
                        "branches": count,
                        "end_to_end": point(count, Sample.of(seconds)),
                        "forks_only": point(count, forks_only),
                        "deepcopy_forks": point(count, one_deepcopy.scaled(count)),
                        "json_forks": point(count, one_round_trip.scaled(count)),
                        "llm_requests_per_run": requests / len(seconds),
                        "statuses": statuses,
                    }
                )
            if len(source.state.events) != history:
                raise AssertionError("run_branches changed the source conversation")
        return {
            "history": history,
            "warm_up_s": warm_up,
            "repeats": self._repeats(config),
            "rows": rows,
        }

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        lines = []
        for row in data["rows"]:
            total = row["end_to_end"]["median"]
            forks = row["forks_only"]["median"]
            lines.append(
                (
                    f"{row['branches']} branches, {human_size(data['history'])}-event history",
                    f"{human_seconds(total)} end to end; forks {human_seconds(forks)} "
                    f"({forks / total:.2%}); deepcopy forks would be "
                    f"{human_seconds(row['deepcopy_forks']['median'])}",
                )
            )
        return lines

    def plot(self, data: dict[str, Any], directory: Path) -> list[str]:
        from benchmarks._plots import Line, Panel, chart

        rows = data["rows"]

        def series(key: str) -> list[dict[str, Any]]:
            return [row[key] for row in rows]

        panel = Panel(
            title=f"Fan-out from a {human_size(data['history'])}-event conversation",
            xlabel="branches (N)",
            unit="s",
            ylabel="time for N branches",
            x_ticks="data",
            lines=[
                Line(
                    "run_branches end to end (fork + send + 1 LLM step each)", series("end_to_end")
                ),
                Line("cowconv: the N forks alone", series("forks_only")),
                # The two copying baselines run close together: deepcopy is drawn on top,
                # with square markers, and the JSON line dashed under it, so both show.
                Line("N × copy.deepcopy(events)", series("deepcopy_forks"), marker="s", zorder=3),
                Line(
                    "N × JSON round trip of every event",
                    series("json_forks"),
                    marker="^",
                    linestyle="--",
                ),
            ],
        )
        return [chart(directory / "fanout.png", [panel])]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        rows = []
        for row in data["rows"]:
            total = row["end_to_end"]["median"]
            rows.append(
                [
                    str(row["branches"]),
                    cell(row["end_to_end"], human_seconds),
                    f"{row['branches'] / total:.3g}",
                    cell(row["forks_only"], human_seconds),
                    f"{row['forks_only']['median'] / total:.3%}",
                    human_seconds(row["deepcopy_forks"]["median"]),
                    human_seconds(row["json_forks"]["median"]),
                    f"{row['llm_requests_per_run']:g}",
                    ", ".join(row["statuses"]),
                ]
            )
        return "\n".join(
            [
                f"`run_branches(source, messages)` on a {data['history']:,}-event conversation: "
                "it forks the source once per branch, sends each fork its message and runs all "
                "forks concurrently in a thread pool; each run makes one LLM call through "
                "litellm's real HTTP path to `cowconv.testing.StubLLMServer` on 127.0.0.1 "
                "(it answers in text, so each run is one agent step) and records the answer. "
                f"{data['repeats']} timed runs per row after one warm-up run "
                f"({human_seconds(data['warm_up_s'])}, most of it importing litellm). "
                "The copying columns are N times one measured copy of the history: what the "
                "forks alone would cost if they copied.",
                "",
                table(
                    [
                        "branches",
                        "end to end",
                        "branches / s",
                        "cowconv forks alone",
                        "fork share",
                        "N × deepcopy",
                        "N × JSON round trip",
                        "LLM requests per run",
                        "final status",
                    ],
                    rows,
                ),
            ]
        )
