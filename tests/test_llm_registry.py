"""LLMRegistry: LLMs by usage id, as OpenHands' SDK's, with calls through the stub."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowconv import (
    LLM,
    InvalidTypeError,
    InvalidValueError,
    LLMNotFoundError,
    LLMRegistry,
    RegistryEvent,
)

HELLO = [{"role": "user", "content": "Hello"}]
usage_ids = st.text(alphabet="abcdefgh-", min_size=1, max_size=6)


class TestAddAndGet:
    def test_get_returns_the_added_object(self):
        """get() gives back the very LLM that was added, under its usage id."""
        registry = LLMRegistry()
        llm = LLM(model="openai/gpt-4o", usage_id="agent")
        registry.add(llm)
        assert registry.get("agent") is llm
        assert dict(registry.usage_to_llm) == {"agent": llm}

    def test_taken_usage_id_is_refused(self):
        """A second LLM under a taken usage id is a ValueError, and the first one stays."""
        registry = LLMRegistry()
        first = LLM(model="openai/gpt-4o", usage_id="agent")
        registry.add(first)
        with pytest.raises(InvalidValueError, match="already in the registry") as raised:
            registry.add(LLM(model="openai/gpt-4o-mini", usage_id="agent"))
        assert isinstance(raised.value, ValueError)
        assert registry.get("agent") is first

    def test_unknown_usage_id_is_a_key_error(self):
        """get() of an id never added is an LLMNotFoundError, which is a KeyError."""
        registry = LLMRegistry()
        registry.add(LLM(model="openai/gpt-4o", usage_id="agent"))
        with pytest.raises(KeyError) as raised:
            registry.get("condenser")
        assert isinstance(raised.value, LLMNotFoundError)
        assert "registered: agent" in str(raised.value)

    def test_only_llms_are_added(self):
        """Adding something that is not a cowconv LLM is an InvalidTypeError."""
        with pytest.raises(InvalidTypeError):
            LLMRegistry().add("openai/gpt-4o")  # type: ignore[arg-type]

    def test_remove_forgets_and_is_quiet_when_absent(self):
        """remove() drops the LLM; removing an absent id does nothing."""
        registry = LLMRegistry()
        registry.add(LLM(model="openai/gpt-4o", usage_id="agent"))
        registry.remove("agent")
        registry.remove("agent")
        assert registry.list_usage_ids() == []
        with pytest.raises(LLMNotFoundError):
            registry.get("agent")

    @given(st.lists(usage_ids, max_size=8))
    def test_list_usage_ids_keeps_the_order_of_first_adds(self, ids):
        """list_usage_ids() lists each id added once, in the order added; repeats are refused."""
        registry = LLMRegistry()
        for usage_id in ids:
            try:
                registry.add(LLM(model="openai/gpt-4o", usage_id=usage_id))
            except InvalidValueError:
                assert usage_id in registry.list_usage_ids()
        assert registry.list_usage_ids() == list(dict.fromkeys(ids))


class TestSubscription:
    def test_subscriber_hears_each_add(self):
        """The subscriber gets a RegistryEvent holding each LLM added after it subscribed."""
        registry = LLMRegistry()
        registry.add(LLM(model="openai/gpt-4o", usage_id="before"))
        heard: list[RegistryEvent] = []
        registry.subscribe(heard.append)
        llm = LLM(model="openai/gpt-4o", usage_id="agent")
        registry.add(llm)
        assert [event.llm for event in heard] == [llm]
        assert heard[0].llm is llm

    def test_a_failing_subscriber_is_logged_not_raised(self, caplog):
        """A subscriber that raises does not undo the add; the failure is logged."""
        registry = LLMRegistry()

        def broken(event: RegistryEvent) -> None:
            raise RuntimeError("subscriber down")

        registry.subscribe(broken)
        with caplog.at_level(logging.WARNING, logger="cowconv.llm"):
            registry.add(LLM(model="openai/gpt-4o", usage_id="agent"))
        assert registry.list_usage_ids() == ["agent"]
        assert "subscriber down" in caplog.text

    def test_subscriber_must_be_callable(self):
        """subscribe() of a non-callable is an InvalidTypeError."""
        with pytest.raises(InvalidTypeError):
            LLMRegistry().subscribe(42)  # type: ignore[arg-type]


class TestMetrics:
    def test_copies_count_their_own_calls(self, stub):
        """A model_copy of a registered LLM gets metrics of its own when added: each usage id
        counts only its own calls (through litellm to the stub)."""
        registry = LLMRegistry()
        agent = LLM(**stub.llm_settings(), usage_id="agent", retry_min_wait=0)
        registry.add(agent)
        condenser = agent.model_copy(update={"usage_id": "condenser"})
        assert condenser.metrics is agent.metrics  # pydantic's copy shares private state
        registry.add(condenser)
        registry.get("agent").completion(HELLO)
        registry.get("agent").completion(HELLO)
        registry.get("condenser").completion(HELLO)
        assert len(agent.metrics.latencies) == 2
        assert len(condenser.metrics.latencies) == 1
        assert len(stub.requests) == 3

    def test_direct_completion_with_messages(self, stub):
        """As example 05 does: completion() takes cowconv Messages, and the answer's
        .message holds TextContent."""
        from cowconv import Message, TextContent

        registry = LLMRegistry()
        registry.add(LLM(**stub.llm_settings(), usage_id="agent"))
        response = registry.get("agent").completion(
            messages=[Message(role="user", content=[TextContent(text="Say hello.")])]
        )
        texts = [c.text for c in response.message.content if isinstance(c, TextContent)]
        assert texts == ["You said: Say hello."]
        assert stub.requests[0].messages == [{"role": "user", "content": "Say hello."}]
