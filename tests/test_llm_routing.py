"""Routers: MultimodalRouter and RandomRouter in front of two stub servers, in a conversation
and alone, through litellm's real HTTP path."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ImageContent,
    InvalidValueError,
    Message,
    MessageEvent,
    MultimodalRouter,
    RandomRouter,
    RouterLLM,
    TextContent,
    Tool,
)
from cowconv.testing import StubLLMServer

IMAGE = "http://images.example/cat.jpg"


def _llm(server: StubLLMServer, usage_id: str, **settings: object) -> LLM:
    return LLM(
        **server.llm_settings(),
        usage_id=usage_id,
        num_retries=0,
        **settings,  # type: ignore[arg-type]
    )


class TestMultimodalRouter:
    def test_conversation_routes_images_to_the_primary(self, tmp_path):
        """As example 19: text goes to the secondary model, a message with an image to the
        primary, then text to the secondary again; the answers are recorded in order."""
        with StubLLMServer() as primary, StubLLMServer() as secondary:
            router = MultimodalRouter(
                usage_id="multimodal-router",
                llms_for_routing={
                    "primary": _llm(primary, "agent-primary"),
                    "secondary": _llm(secondary, "agent-secondary"),
                },
            )
            conversation = Conversation(
                agent=Agent(llm=router, tools=[Tool(name="terminal")]),
                workspace=tmp_path,
                visualizer=None,
            )
            conversation.send_message("Hi there, who trained you?")
            conversation.run()
            assert (len(primary.requests), len(secondary.requests)) == (0, 1)
            conversation.send_message(
                Message(
                    role="user",
                    content=[
                        ImageContent(image_urls=[IMAGE]),
                        TextContent(text="What do you see in the image above?"),
                    ],
                )
            )
            conversation.run()
            assert (len(primary.requests), len(secondary.requests)) == (1, 1)
            parts = primary.requests[0].messages[-1]["content"]
            assert {"type": "image_url", "image_url": {"url": IMAGE}} in parts
            assert router.active_llm is router.llms_for_routing["primary"]
            # The image stays in the history: every later call needs the vision model.
            conversation.send_message("Who trained you as an LLM?")
            conversation.run()
            assert (len(primary.requests), len(secondary.requests)) == (2, 1)
            answers = [
                e.llm_message.text
                for e in conversation.state.events
                if isinstance(e, MessageEvent) and e.source == "agent"
            ]
            assert answers[-1] == "You said: Who trained you as an LLM?"
            stats = conversation.conversation_stats.get_combined_metrics()
            assert stats.accumulated_token_usage.prompt_tokens == router.metrics.prompt_tokens > 0

    @settings(max_examples=20)
    @given(words=st.integers(1, 200))
    def test_overlong_prompts_go_to_the_primary(self, words):
        """A prompt with more tokens than the secondary's max_input_tokens goes to the
        primary; one within it to the secondary (litellm counts the tokens)."""
        router = MultimodalRouter(
            llms_for_routing={
                "primary": LLM(model="openai/gpt-4o"),
                "secondary": LLM(model="openai/gpt-4o-mini", max_input_tokens=60),
            }
        )
        messages = [{"role": "user", "content": " ".join(["word"] * words)}]
        count = router.llms_for_routing["secondary"].get_token_count(messages)
        expected = "primary" if count > 60 else "secondary"
        assert router.select_llm(messages) == expected

    def test_both_keys_are_required(self):
        """A MultimodalRouter without a primary or a secondary LLM is refused (a ValueError,
        as pydantic reports a model's validation)."""
        with pytest.raises(ValueError, match="'secondary'"):
            MultimodalRouter(llms_for_routing={"primary": LLM(model="openai/gpt-4o")})
        with pytest.raises(ValueError, match="at least one"):
            RandomRouter(llms_for_routing={})


class TestRouterLLM:
    def test_a_custom_router_routes_by_its_rule(self, stub):
        """A RouterLLM subclass's select_llm decides; the chosen LLM's and the router's metrics
        both count the call."""
        with StubLLMServer() as other:

            class ByLength(RouterLLM):
                def select_llm(self, messages):
                    return "long" if len(messages) > 1 else "short"

            short, long = _llm(stub, "short"), _llm(other, "long")
            router = ByLength(llms_for_routing={"short": short, "long": long})
            router.completion([{"role": "user", "content": "one"}])
            two = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
            router.completion(two)
            assert (len(stub.requests), len(other.requests)) == (1, 1)
            assert len(short.metrics.latencies) == len(long.metrics.latencies) == 1
            assert len(router.metrics.token_usages) == 2

    def test_choosing_an_unknown_key_is_a_clear_error(self, stub):
        """A select_llm that names no LLM of llms_for_routing is an InvalidValueError."""

        class Lost(RouterLLM):
            def select_llm(self, messages):
                return "nowhere"

        router = Lost(llms_for_routing={"here": _llm(stub, "here")})
        with pytest.raises(InvalidValueError, match="'nowhere'"):
            router.completion([{"role": "user", "content": "Hi"}])
        assert stub.requests == []

    def test_random_router_only_picks_its_llms(self, stub):
        """RandomRouter sends each call to one of its LLMs."""
        with StubLLMServer() as other:
            router = RandomRouter(llms_for_routing={"a": _llm(stub, "a"), "b": _llm(other, "b")})
            for _ in range(6):
                router.completion([{"role": "user", "content": "Hi"}])
            assert len(stub.requests) + len(other.requests) == 6
            assert router.active_llm in (router.llms_for_routing["a"], router.llms_for_routing["b"])
