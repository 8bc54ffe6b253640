"""compare(a, b): what two conversations of one tree did past their common prefix."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    Agent,
    Conversation,
    InvalidTypeError,
    MessageEvent,
    SQLiteStore,
    compare,
)

AGENT = Agent(llm=LLM(model="openai/stub-model"))
texts = st.lists(st.text(min_size=1, max_size=20), max_size=6)


def _messages(events):
    return [event.text for event in events if isinstance(event, MessageEvent)]


class TestCompare:
    @settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(shared=texts, left=texts, right=texts, back=st.integers(min_value=0, max_value=6))
    def test_each_side_is_the_rest_of_its_history(self, tmp_path, shared, left, right, back):
        """For two forks of one source (the second from an earlier event), each side's events
        are exactly its history past the common prefix, and the prefix is what both share."""
        source = Conversation(agent=AGENT, workspace=tmp_path)
        for text in shared:
            source.send_message(text)
        a = source.fork()
        events = source.state.events
        cut = max(len(events) - back, 1) if events else 0
        b = source.fork(from_event_id=events[cut - 1].id) if cut else source.fork()
        for text in left:
            a.send_message(text)
        for text in right:
            b.send_message(text)
        diff = compare(a, b)
        ea, eb = a.state.events, b.state.events
        assert ea[: diff.common] == eb[: diff.common]
        assert (
            diff.common == len(ea) or diff.common == len(eb) or ea[diff.common] != eb[diff.common]
        )
        assert tuple(ea)[diff.common :] == diff.a.events
        assert tuple(eb)[diff.common :] == diff.b.events
        assert diff.identical == (ea == eb)

    def test_the_same_from_a_store(self, tmp_path):
        """States loaded from a store (no shared lineage in memory) compare the same way."""
        source = Conversation(
            agent=AGENT, workspace=".", persistence_dir=tmp_path, conversation_id="s"
        )
        for n in range(50):
            source.send_message(f"m{n}")
        a = source.fork(conversation_id="a", title="A", tags={"variant": "A"})
        b = source.fork(from_event_id=source.state.events[10].id, conversation_id="b")
        a.send_message("only in a")
        b.send_message("only in b")
        in_memory = compare(a, b)
        store = SQLiteStore(tmp_path)
        try:
            loaded = compare(store.load("a"), store.load("b"))
        finally:
            store.close()
        assert loaded.common == in_memory.common == 11
        assert _messages(loaded.a.events) == _messages(in_memory.a.events)
        assert _messages(loaded.b.events) == ["only in b"]
        assert loaded.to_dict() == in_memory.to_dict()
        data = json.loads(loaded.to_json())
        assert data["a"]["title"] == "A" and data["a"]["tags"] == {"variant": "A"}
        assert len(data["a"]["events"]) == 41  # m10..m49 and "only in a"

    def test_differences_in_status_cost_and_tokens(self, stub, stub_llm, tmp_path):
        """A branch that ran against one that did not: status, cost and tokens differ, b - a."""
        source = Conversation(agent=Agent(llm=stub_llm), workspace=tmp_path)
        source.send_message("Hello")
        ran = source.fork(title="ran")
        ran.run()
        diff = compare(source, ran)
        assert diff.a.status == "idle" and diff.b.status == "finished"
        assert diff.token_differences["prompt_tokens"] == ran.state.stats.prompt_tokens > 0
        assert diff.cost_difference == ran.state.stats.accumulated_cost
        text = diff.text()
        assert "status: idle -> finished" in text
        assert f"+ [2] MessageEvent agent: {ran.state.events[-1].text}" in text

    def test_not_a_conversation(self):
        """Anything but a conversation or a state is an InvalidTypeError naming it."""
        source = Conversation(agent=AGENT, workspace=".")
        with pytest.raises(InvalidTypeError, match="b=42"):
            compare(source, 42)
