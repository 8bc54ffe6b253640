"""The branch_runtime benchmark scenario's workload: histories as a condensed run leaves them."""

from __future__ import annotations

from benchmarks.scenarios.branch_runtime import condensed_history, plain_history
from cowconv import LLM, CondensationEvent, LLMSummarizingCondenser, SystemPromptEvent
from cowconv.agent.condenser import condenser_view, should_condense


class TestWorkload:
    def test_condensed_history_leaves_room_for_one_more_exchange(self) -> None:
        """The view stays below max_size, so a fork's run makes one LLM call and no summary."""
        condenser = LLMSummarizingCondenser(llm=LLM(model="openai/stub"), max_size=20, keep_first=2)
        log = condensed_history(500, condenser)
        assert len(log) >= 500
        assert isinstance(log[0], SystemPromptEvent)
        assert sum(isinstance(event, CondensationEvent) for event in log) >= 10
        view = condenser_view(condenser, log)
        assert len(view) <= condenser.max_size - 3
        assert not should_condense(condenser, view)

    def test_plain_history_starts_with_the_system_prompt(self) -> None:
        """The uncondensed history has the requested length and its prompt first."""
        log = plain_history(50)
        assert len(log) == 50 and isinstance(log[0], SystemPromptEvent)
