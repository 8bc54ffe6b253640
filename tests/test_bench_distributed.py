"""The distributed benchmark scenario's condensed workload: real condensations, bounded views."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.scenarios.distributed_suite import SUMMARY, _one_line, condensed_source
from cowconv import CondensationEvent, run_branches
from cowconv.agent.condenser import SUMMARY_INSTRUCTIONS
from cowconv.distributed import PicklingExecutor
from cowconv.testing import StubLLMServer


@pytest.fixture(scope="module")
def one_line_stub() -> Iterator[StubLLMServer]:
    with StubLLMServer(brain=_one_line) as stub:
        yield stub


class TestCondensedSource:
    def test_condensations_come_from_real_summary_calls(self, one_line_stub, tmp_path):
        """Each CondensationEvent holds the stub's summary, asked for by the condenser's LLM."""
        seen = len(one_line_stub.requests)
        source = condensed_source(300, one_line_stub, tmp_path)
        state = source.state
        condensations = [e for e in state.events if isinstance(e, CondensationEvent)]
        summary_requests = [
            r
            for r in one_line_stub.requests[seen:]
            if r.messages[0].get("content") == SUMMARY_INSTRUCTIONS
        ]
        assert len(state.events) >= 300
        assert len(condensations) == len(summary_requests) >= 5
        assert all(event.summary == SUMMARY for event in condensations)
        assert state.stats.by_usage_id["condenser"].prompt_tokens > 0

    def test_a_branch_sends_as_many_messages_at_any_history_length(
        self, one_line_stub, tmp_path: Path
    ):
        """Forked from 100 or 1,000 condensed events, a branch sends the same bounded view."""
        per_size = {}
        for size in (100, 1_000):
            source = condensed_source(size, one_line_stub, tmp_path)
            for executor in (PicklingExecutor(max_workers=2), None):
                seen = len(one_line_stub.requests)
                forks = run_branches(source, ["Say 1.", "Say 2."], executor=executor)
                assert all(f.state.events[-1].text.startswith("Done:") for f in forks)
                counts = {len(r.messages) for r in one_line_stub.requests[seen:]}
                per_size.setdefault(size, set()).update(counts)
        assert per_size[100] == per_size[1_000]
        assert len(per_size[100]) == 1
        assert max(per_size[1_000]) < 60
