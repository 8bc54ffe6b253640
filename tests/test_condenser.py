"""LLMSummarizingCondenser: views, pair-safe cuts, and condensation inside run()."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    ActionEvent,
    Agent,
    AgentErrorEvent,
    CondensationEvent,
    CondensationRequest,
    Conversation,
    Event,
    EventLog,
    ExecutionStatus,
    LLMSummarizingCondenser,
    MessageEvent,
    ObservationEvent,
)
from cowconv.agent.condenser import condenser_view, plan_condensation, should_condense
from cowconv.agent.messages import build_messages
from cowconv.testing import StubLLMServer, StubReply
from tests.strategies import agent_steps, paired_events


def condenser(max_size: int = 8, keep_first: int = 2) -> LLMSummarizingCondenser:
    return LLMSummarizingCondenser(
        llm=LLM(model="openai/stub-model", usage_id="condenser"),
        max_size=max_size,
        keep_first=keep_first,
    )


def openhands_view(events: list[Event]) -> list[Event]:
    """OpenHands' SDK's view: every event no condensation forgot, the summary at its offset."""
    forgotten = {
        i for e in events if isinstance(e, CondensationEvent) for i in e.forgotten_event_ids
    }
    kept = [e for e in events if e.id not in forgotten and not isinstance(e, CondensationEvent)]
    last = next((e for e in reversed(events) if isinstance(e, CondensationEvent)), None)
    if last is None or last.summary is None:
        return kept
    offset = last.summary_offset or 0
    summary = MessageEvent(source="environment", role="user", content=last.summary)
    return [*kept[:offset], summary, *kept[offset:]]


def relabel(events: list[Event], number: int) -> list[Event]:
    """The events with call and response ids made unique to step ``number``."""
    changed = []
    for event in events:
        update: dict[str, Any] = {}
        if isinstance(event, ActionEvent | ObservationEvent):
            update["tool_call_id"] = f"{number}-{event.tool_call_id}"
        if isinstance(event, ActionEvent):
            update["llm_response_id"] = f"r{number}"
        changed.append(event.model_copy(update=update))
    return changed


def unique(events: list[Event], prefix: str) -> list[Event]:
    return [e.model_copy(update={"id": f"{prefix}{i}"}) for i, e in enumerate(events)]


class TestView:
    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(st.lists(paired_events, min_size=1, max_size=12), min_size=1, max_size=6),
        st.integers(4, 12),
        st.integers(0, 3),
    )
    def test_condensing_keeps_pairs_and_matches_the_openhands_view(
        self, batches: list[list[Event]], max_size: int, keep_first: int
    ) -> None:
        """After any condensations the view is OpenHands' SDK's, and no pair is split."""
        keep_first = min(keep_first, max_size // 2 - 1)
        chosen = condenser(max_size, keep_first)
        log = EventLog()
        for number, batch in enumerate(batches):
            log = log.extend(unique(batch, f"b{number}-"))
            view = condenser_view(chosen, log)
            if should_condense(chosen, view):
                plan = plan_condensation(chosen, view)
                if plan is not None:
                    log = log.append(plan.event(f"summary {number}"))
                    assert len(condenser_view(chosen, log)) < len(view)
            assert build_messages(condenser_view(chosen, log).events()) == build_messages(
                openhands_view(list(log))
            )

    @settings(max_examples=200, deadline=None)
    @given(st.lists(agent_steps(), min_size=1, max_size=30), st.integers(4, 12), st.integers(0, 3))
    def test_no_tool_call_is_separated_from_its_result(
        self, steps: list[list[Event]], max_size: int, keep_first: int
    ) -> None:
        """Every call the model sees under condensation carries the result the history has."""
        keep_first = min(keep_first, max_size // 2 - 1)
        chosen = condenser(max_size, keep_first)
        log = EventLog()
        for number, step in enumerate(steps):
            log = log.extend(relabel(step, number))
            view = condenser_view(chosen, log)
            plan = plan_condensation(chosen, view) if should_condense(chosen, view) else None
            if plan is not None:
                log = log.append(plan.event("summary"))
            answers = {
                m["tool_call_id"]: m["content"]
                for m in build_messages(list(log))
                if m["role"] == "tool"
            }
            for message in condenser_view(chosen, log).messages():
                if message["role"] == "tool":
                    assert message["content"] == answers[message["tool_call_id"]]

    def test_view_costs_only_the_events_since_the_last_condensation(self) -> None:
        """The view reads the head and the events after the last condensation, nothing else."""

        class Counting(list[Event]):
            reads: set[int] = set()

            def __getitem__(self, index: Any) -> Any:
                self.reads.add(index)
                return super().__getitem__(index)

        events = [MessageEvent(source="user", role="user", content=str(i)) for i in range(1000)]
        events.append(
            CondensationEvent(
                forgotten_event_ids=tuple(e.id for e in events[2:990]),
                summary="counted",
                summary_offset=2,
            )
        )
        events.append(MessageEvent(source="user", role="user", content="new"))
        counting = Counting(events)
        view = condenser_view(condenser(), counting)
        assert [e.text for e in view.recent] == [str(i) for i in range(990, 1000)] + ["new"]
        assert len(counting.reads) < 20


@pytest.fixture
def summarizing_stub() -> Any:
    """A stub that answers a summary request with a short summary, anything else with 'ok'."""

    def brain(request: Any) -> StubReply:
        first = request["messages"][0]["content"] if request["messages"] else ""
        if "maintain the memory" in str(first):
            return StubReply.text("SUMMARY of earlier turns")
        return StubReply.text("ok")

    with StubLLMServer(brain=brain) as server:
        yield server


def run_turns(conversation: Conversation, count: int) -> None:
    for turn in range(count):
        conversation.send_message(f"turn {turn}")
        conversation.run()


class TestInRun:
    def test_a_long_conversation_is_condensed_and_forks_share_it(
        self, summarizing_stub: StubLLMServer, tmp_path: Path
    ) -> None:
        """Past max_size the model sees head + summary + recent; history and forks keep all."""
        llm = LLM(**summarizing_stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
        summarizer = llm.model_copy(update={"usage_id": "condenser"})
        agent = Agent(
            llm=llm,
            condenser=LLMSummarizingCondenser(llm=summarizer, max_size=10, keep_first=2),
        )
        conversation = Conversation(agent=agent, workspace=tmp_path)
        run_turns(conversation, 8)
        events = conversation.state.events
        condensations = [e for e in events if isinstance(e, CondensationEvent)]
        assert condensations and condensations[-1].summary == "SUMMARY of earlier turns"
        assert [e.text for e in events if isinstance(e, MessageEvent) and e.role == "user"] == [
            f"turn {t}" for t in range(8)
        ]
        last = summarizing_stub.requests[-1].messages
        assert any(m["content"] == "SUMMARY of earlier turns" for m in last)
        assert len(last) <= 11  # system message + at most max_size events of view
        assert conversation.state.stats.by_usage_id["condenser"].prompt_tokens > 0
        fork = conversation.fork()
        fork.send_message("from the fork")
        fork.run()
        assert fork.state.execution_status is ExecutionStatus.FINISHED
        sent = summarizing_stub.requests[-1].messages
        assert any(m["content"] == "SUMMARY of earlier turns" for m in sent)
        assert sent[-1]["content"] == "from the fork"

    def test_a_condensation_request_condenses_at_the_next_step(
        self, summarizing_stub: StubLLMServer, tmp_path: Path
    ) -> None:
        """OpenHands' CondensationRequest: the next step condenses, whatever the size; once."""
        llm = LLM(**summarizing_stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
        agent = Agent(
            llm=llm,
            condenser=LLMSummarizingCondenser(
                llm=llm.model_copy(update={"usage_id": "condenser"}), max_size=100, keep_first=1
            ),
        )
        conversation = Conversation(agent=agent, workspace=tmp_path)
        run_turns(conversation, 3)
        assert not any(isinstance(e, CondensationEvent) for e in conversation.state.events)
        conversation.append_event(CondensationRequest())
        run_turns(conversation, 1)
        condensations = [e for e in conversation.state.events if isinstance(e, CondensationEvent)]
        assert [c.summary for c in condensations] == ["SUMMARY of earlier turns"]
        run_turns(conversation, 1)  # handled: no second condensation
        assert sum(isinstance(e, CondensationEvent) for e in conversation.state.events) == 1
        assert any(
            m["content"] == "SUMMARY of earlier turns"
            for m in summarizing_stub.requests[-1].messages
        )

    def test_a_failed_summary_is_recorded_and_the_step_goes_on(
        self, stub: StubLLMServer, tmp_path: Path
    ) -> None:
        """A failing summary call leaves an error event, loses nothing, and the step answers."""
        llm = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
        agent = Agent(
            llm=llm,
            condenser=LLMSummarizingCondenser(
                llm=llm.model_copy(update={"num_retries": 0}), max_size=4, keep_first=1
            ),
        )
        conversation = Conversation(agent=agent, workspace=tmp_path)
        run_turns(conversation, 2)
        before = list(conversation.state.events)
        stub.script(StubReply.error(401, "no key"), StubReply.text("still here"))
        conversation.send_message("third")
        conversation.run()
        events = list(conversation.state.events)
        assert events[: len(before)] == before
        errors = [e for e in events if isinstance(e, AgentErrorEvent)]
        assert errors and "condensation failed" in errors[-1].error
        assert not any(isinstance(e, CondensationEvent) for e in events)
        assert events[-1].text == "still here"  # type: ignore[attr-defined]
        assert [m["content"] for m in stub.requests[-1].messages][-1] == "third"
