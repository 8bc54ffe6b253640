"""Running a branch: per-step client overhead against history length, and prompt caching.

Three measurements, each side by side in one run:

- ``run()`` of a fork with one new message and one LLM call (the stub LLM on
  loopback), with a condenser, at 100 events and at 20,000 (its history
  condensed as a real run would have left it), alternating; the same without a
  condenser for contrast.
- rendering a fork's chat messages once its source's rendering is cached, at
  100 and 50,000 events, against rendering the whole history from scratch.
- a branch suite: 100 branches of a 1,000-event conversation against a stub
  that reports cached prompt tokens like a provider: tokens served from the
  cache, and input tokens billed with and without caching at two providers'
  cache prices (litellm's price list).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks._measure import Sample, human_seconds, human_size
from benchmarks._scenario import Config, Context, Scenario, Target, cell, fmt_ratio, table
from benchmarks._workload import make_event
from cowconv import (
    LLM,
    Agent,
    Conversation,
    EventLog,
    LLMSummarizingCondenser,
    MessageEvent,
    SystemPromptEvent,
)
from cowconv.agent.condenser import condenser_view, plan_condensation
from cowconv.agent.messages import Rendering, render
from cowconv.testing import StubLLMServer, StubReply

RUN_SIZES = (100, 20_000)
RENDER_SIZES = (100, 50_000)
# --quick: the same comparisons at sizes that take seconds, not a minute.
QUICK_RUN_SIZES = (100, 4_000)
QUICK_RENDER_SIZES = (100, 10_000)
QUICK_SUITE = (20, 300)
RUN_LIMIT = 1.5
RENDER_LIMIT = 2.0
MAX_SIZE = 60
KEEP_FIRST = 2
SUITE_BRANCHES = 100
SUITE_EVENTS = 1_000
# (label, litellm price-list key): input tokens served from the cache cost this much less.
PRICED_MODELS = (
    ("Anthropic claude-sonnet-4-5", "claude-sonnet-4-5-20250929"),
    ("OpenAI gpt-4o", "gpt-4o"),
)
SUMMARY = "Summary of the earlier turns: tests were run and off-by-one errors fixed. " * 4


def _brain(request: Any) -> StubReply:
    return StubReply.text("ok")


def condensed_history(size: int, condenser: LLMSummarizingCondenser) -> EventLog:
    """``size`` events of agent work, condensed wherever the condenser would have.

    Ends with room in the view for one more exchange, so a fork's next
    ``run()`` makes one LLM call and no summary call.
    """
    log = EventLog([SystemPromptEvent(system_prompt="You are a benchmark agent.")])
    position = 0
    while len(log) < size:
        log = log.append(make_event(position))
        position += 1
        view = condenser_view(condenser, log)
        if len(view) > condenser.max_size - 4:
            plan = plan_condensation(condenser, view)
            if plan is not None:
                log = log.append(plan.event(SUMMARY))
    return log


def plain_history(size: int) -> EventLog:
    return EventLog(
        [SystemPromptEvent(system_prompt="You are a benchmark agent.")]
        + [make_event(position) for position in range(size - 1)]
    )


def _conversation(agent: Agent, events: EventLog, workspace: str) -> Conversation:
    conversation = Conversation(agent=agent, workspace=workspace)
    conversation._commit(lambda state: state._replace(events=events))
    return conversation


def _fork_and_run(source: Conversation) -> float:
    started = time.perf_counter()
    fork = source.fork()
    fork.send_message("And what next?")
    fork.run()
    seconds = time.perf_counter() - started
    assert fork.state.events[-1].kind == "MessageEvent", fork.state.events[-1]
    return seconds


def _alternating(ops: dict[int, Callable[[], float]], repeats: int) -> dict[int, dict[str, Any]]:
    """Each op ``repeats`` times, sizes interleaved, after one warm-up each; medians."""
    for op in ops.values():
        op()
    times: dict[int, list[float]] = {size: [] for size in ops}
    for _ in range(repeats):
        for size, op in ops.items():
            times[size].append(op())
    return {
        size: {"size": size, **Sample.of(values).to_json(), "extrapolated": False}
        for size, values in times.items()
    }


def _ratio(points: dict[str, dict[str, Any]], large: int, small: int) -> float:
    return float(points[str(large)]["median"] / points[str(small)]["median"])


class BranchRuntime(Scenario):
    name = "branch_runtime"
    title = "Running a branch: per-step overhead and prompt caching"
    uses_events = False

    def steps(self, config: Config) -> int:
        return 4

    def _repeats(self, config: Config) -> int:
        return 7 if config.quick else 25

    def run(self, ctx: Context) -> dict[str, Any]:
        quick = ctx.config.quick
        run_sizes = QUICK_RUN_SIZES if quick else RUN_SIZES
        render_sizes = QUICK_RENDER_SIZES if quick else RENDER_SIZES
        branches, events = QUICK_SUITE if quick else (SUITE_BRANCHES, SUITE_EVENTS)
        repeats = self._repeats(ctx.config)
        workspace = tempfile.mkdtemp(dir=ctx.scratch)
        with StubLLMServer(brain=_brain) as stub:
            llm = LLM(**stub.llm_settings(), usage_id="agent")
            condenser = LLMSummarizingCondenser(
                llm=llm.model_copy(update={"usage_id": "condenser"}),
                max_size=MAX_SIZE,
                keep_first=KEEP_FIRST,
            )
            with_condenser = Agent(llm=llm, condenser=condenser)
            without = Agent(llm=llm)
            ctx.tick("run() of a fork with a condenser, two sizes alternating")
            sources = {
                size: _conversation(with_condenser, condensed_history(size, condenser), workspace)
                for size in run_sizes
            }
            condensed = _alternating(
                {size: (lambda s=source: _fork_and_run(s)) for size, source in sources.items()},
                repeats,
            )
            view_sizes = {
                size: len(condenser_view(condenser, source.state.events))
                for size, source in sources.items()
            }
            ctx.tick("run() of a fork without a condenser, two sizes alternating")
            plain_sources = {
                size: _conversation(without, plain_history(size), workspace) for size in run_sizes
            }
            uncondensed = _alternating(
                {
                    size: (lambda s=source: _fork_and_run(s))
                    for size, source in plain_sources.items()
                },
                max(3, repeats // 5),
            )
        ctx.tick("rendering a fork's messages, two sizes, source prefix cached")
        rendering = self._rendering(render_sizes, repeats * 20)
        ctx.tick(f"branch suite: {branches} branches of a {events}-event conversation")
        suite = self._suite(workspace, branches, events)
        return {
            "run_sizes": list(run_sizes),
            "render_sizes": list(render_sizes),
            "run_condensed": {str(k): v for k, v in condensed.items()},
            "run_uncondensed": {str(k): v for k, v in uncondensed.items()},
            "view_sizes": {str(k): v for k, v in view_sizes.items()},
            "render": rendering,
            "suite": suite,
            "max_size": MAX_SIZE,
            "keep_first": KEEP_FIRST,
        }

    def _rendering(self, sizes: Sequence[int], repeats: int) -> dict[str, Any]:
        logs = {size: plain_history(size) for size in sizes}
        for log in logs.values():
            render(log)  # the source's rendering, cached
        forks = {
            size: [
                log.append(MessageEvent(source="user", role="user", content=f"branch {n}"))
                for n in range(repeats + 1)
            ]
            for size, log in logs.items()
        }
        counters = {size: iter(made) for size, made in forks.items()}

        def fork_render(size: int) -> Callable[[], float]:
            def op() -> float:
                fork = next(counters[size])
                started = time.perf_counter()
                render(fork)
                return time.perf_counter() - started

            return op

        cached = _alternating({size: fork_render(size) for size in sizes}, repeats)

        def full(size: int) -> Callable[[], float]:
            def op() -> float:
                started = time.perf_counter()
                Rendering.empty().add(iter(logs[size]))
                return time.perf_counter() - started

            return op

        scratch = _alternating({size: full(size) for size in sizes}, 3)

        def listing(size: int) -> Callable[[], float]:
            rendered = render(logs[size])

            def op() -> float:
                started = time.perf_counter()
                rendered.to_list()
                return time.perf_counter() - started

            return op

        as_list = _alternating({size: listing(size) for size in sizes}, repeats)
        return {
            "cached": {str(k): v for k, v in cached.items()},
            "scratch": {str(k): v for k, v in scratch.items()},
            "to_list": {str(k): v for k, v in as_list.items()},
        }

    def _suite(self, workspace: str, branches: int, events: int) -> dict[str, Any]:
        with StubLLMServer(brain=_brain, prompt_cache=True) as stub:
            agent = Agent(llm=LLM(**stub.llm_settings(), usage_id="agent"))
            source = _conversation(agent, plain_history(events - 1), workspace)
            source.send_message("Where do we stand?")
            source.run()  # the source's own last step writes the shared prefix to the cache
            started = time.perf_counter()
            prompt = cached = calls = 0
            for branch in range(branches):
                fork = source.fork()
                fork.send_message(f"Variant {branch}: try another fix.")
                fork.run()
                stats = fork.state.stats
                prompt += stats.prompt_tokens
                cached += stats.cache_read_tokens
                calls += len(fork.agent.llm.metrics.latencies)
            seconds = time.perf_counter() - started
        prices = {}
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        for label, key in PRICED_MODELS:
            entry = litellm.model_cost.get(key, {})
            full = entry.get("input_cost_per_token")
            read = entry.get("cache_read_input_token_cost")
            if full and read:
                prices[label] = {"input": full, "cache_read": read}
        return {
            "branches": branches,
            "events": events,
            "prompt_tokens": prompt,
            "cache_read_tokens": cached,
            "seconds": seconds,
            "prices": prices,
        }

    def targets(self, data: dict[str, Any]) -> list[Target]:
        small, large = data["run_sizes"]
        run_ratio = _ratio(data["run_condensed"], large, small)
        render = data["render"]["cached"]
        r_small, r_large = data["render_sizes"]
        render_ratio = _ratio(render, r_large, r_small)
        suite = data["suite"]
        share = suite["cache_read_tokens"] / suite["prompt_tokens"] if suite["prompt_tokens"] else 0
        return [
            Target(
                f"run() of a fork (one message, one LLM call, condenser) at {human_size(large)} "
                f"events against {human_size(small)}, side by side (medians)",
                f"≤ {RUN_LIMIT:g}×",
                f"{run_ratio:.2f}×",
                run_ratio <= RUN_LIMIT,
            ),
            Target(
                f"rendering a fork's messages at {human_size(r_large)} events against "
                f"{human_size(r_small)}, source prefix cached (medians)",
                f"≤ {RENDER_LIMIT:g}×",
                f"{render_ratio:.2f}×",
                render_ratio <= RENDER_LIMIT,
            ),
            Target(
                f"branch suite ({suite['branches']} branches of {suite['events']} events): "
                "prompt tokens served from the cache",
                "reported",
                f"{share:.1%} of {suite['prompt_tokens']:,}",
                suite["cache_read_tokens"] > 0,
            ),
        ]

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        small, large = data["run_sizes"]
        r_small, r_large = data["render_sizes"]
        suite = data["suite"]
        runs = data["run_condensed"]
        at_large = human_seconds(runs[str(large)]["median"])
        at_small = human_seconds(runs[str(small)]["median"])
        return [
            (
                "fork run() with condenser",
                f"{at_large} at {human_size(large)} vs {at_small} at {human_size(small)} "
                f"({fmt_ratio(_ratio(runs, large, small))})",
            ),
            (
                "fork render, prefix cached",
                f"{fmt_ratio(_ratio(data['render']['cached'], r_large, r_small))} from "
                f"{human_size(r_small)} to {human_size(r_large)} events",
            ),
            (
                "branch suite prompt cache",
                f"{suite['cache_read_tokens']:,} of {suite['prompt_tokens']:,} prompt tokens "
                "cached",
            ),
        ]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        small, large = data["run_sizes"]
        r_small, r_large = data["render_sizes"]
        run_rows = []
        for label, key in (
            ("with a condenser", "run_condensed"),
            ("no condenser", "run_uncondensed"),
        ):
            points = data[key]
            run_rows.append(
                [
                    label,
                    cell(points[str(small)], human_seconds),
                    cell(points[str(large)], human_seconds),
                    fmt_ratio(_ratio(points, large, small)),
                ]
            )
        render_rows = []
        for label, key in (
            ("fork's messages, source cached", "cached"),
            ("whole history from scratch (0.1.0)", "scratch"),
            ("materialising the list for litellm", "to_list"),
        ):
            points = data["render"][key]
            render_rows.append(
                [
                    label,
                    cell(points[str(r_small)], human_seconds),
                    cell(points[str(r_large)], human_seconds),
                    fmt_ratio(_ratio(points, r_large, r_small)),
                ]
            )
        suite = data["suite"]
        prompt, cached = suite["prompt_tokens"], suite["cache_read_tokens"]
        bill_rows = [["any provider, no caching", f"{prompt:,}", "1×"]]
        for label, price in suite["prices"].items():
            factor = price["cache_read"] / price["input"]
            billed = prompt - cached + cached * factor
            bill_rows.append(
                [
                    f"{label} (cached input at {factor:.0%} of the price)",
                    f"{billed:,.0f}",
                    fmt_ratio(billed / prompt if prompt else None),
                ]
            )
        views = ", ".join(
            f"{human_size(int(k))} events → {v} in view" for k, v in data["view_sizes"].items()
        )
        return "\n".join(
            [
                "`run()` of a fork with one new message and one LLM call (the stub LLM on "
                "loopback), measured alternately at both sizes. The condenser is "
                f"`LLMSummarizingCondenser(max_size={data['max_size']}, "
                f"keep_first={data['keep_first']})`; the histories were condensed as a run "
                f"would have left them ({views}).",
                "",
                table(["run()", human_size(small), human_size(large), "ratio"], run_rows),
                "",
                "Rendering the chat messages of a fork (its source plus one message) once the "
                "source's rendering is cached, against rendering the whole history from "
                "scratch (what every step cost in 0.1.0). Handing litellm a list copies one "
                "pointer per message; with a condenser the list is the short view.",
                "",
                table(
                    ["rendering", human_size(r_small), human_size(r_large), "ratio"], render_rows
                ),
                "",
                f"Branch suite: {suite['branches']} forks of a {suite['events']:,}-event "
                "conversation, each one message and one LLM call, against a stub that reports "
                "the longest prompt prefix it saw before as cached (as OpenAI does; Anthropic "
                f"needs the cache marks cowconv adds). {cached:,} of {prompt:,} prompt tokens "
                f"({cached / prompt if prompt else 0:.1%}) were served from the cache, in "
                f"{human_seconds(suite['seconds'])}. Input tokens billed, in full-price tokens "
                "(cache writes billed as plain input):",
                "",
                table(["prices", "input tokens billed", "of no caching"], bill_rows),
            ]
        )


__all__ = ["BranchRuntime", "condensed_history", "plain_history"]
