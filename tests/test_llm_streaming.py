"""Streaming: the stub answers OpenAI's server-sent events, LLM(stream=True) passes each chunk
to a token callback (a conversation's token_callbacks during run()), through litellm."""

from __future__ import annotations

import json
import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cowconv import LLM, Agent, Conversation, InvalidTypeError, InvalidValueError, Tool
from cowconv.core.llm import streaming_to
from cowconv.testing import StubLLMServer, StubReply

HELLO = [{"role": "user", "content": "Hello"}]
TERMINAL_SPEC = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}


def _content(chunks: list) -> str:
    return "".join(
        choice.delta.content or "" for chunk in chunks for choice in chunk.choices if choice.delta
    )


@pytest.fixture
def streaming_llm(stub: StubLLMServer) -> LLM:
    return LLM(**stub.llm_settings(), stream=True, retry_min_wait=0, retry_max_wait=0)


class TestStubStreams:
    def test_stream_request_gets_server_sent_events(self, stub):
        """A request with "stream": true is answered with data: lines of chunks, then [DONE]."""
        stub.script(StubReply.text("Hello there"))
        request = urllib.request.Request(
            stub.base_url + "/chat/completions",
            data=json.dumps(
                {
                    "model": "m",
                    "messages": [],
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.headers["Content-Type"] == "text/event-stream"
            body = answer.read().decode()
        events = [line[len("data: ") :] for line in body.split("\n\n") if line]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(event) for event in events[:-1]]
        assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
        )
        assert text == "Hello there"
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


class TestStreamingCompletion:
    def test_each_chunk_reaches_on_token_and_the_answer_is_whole(self, stub, streaming_llm):
        """Every chunk goes to on_token as it comes; the answer is the chunks put together,
        with its tokens counted."""
        stub.script(StubReply.text("A long story about streams, told word by word."))
        chunks: list = []
        response = streaming_llm.completion(HELLO, on_token=chunks.append)
        assert response.content == "A long story about streams, told word by word."
        assert _content(chunks) == response.content
        assert len(chunks) > 5
        assert type(chunks[0]).__name__ == "ModelResponseStream"
        assert response.completion_tokens > 0
        assert streaming_llm.metrics.completion_tokens == response.completion_tokens
        assert stub.requests[0].body["stream"] is True

    def test_tool_calls_stream_in_pieces(self, stub, streaming_llm):
        """A tool call arrives as its name, then its arguments in pieces; the answer holds the
        whole call."""
        stub.script(StubReply.tool_call("terminal", command="echo streamed arguments"))
        chunks: list = []
        response = streaming_llm.completion(HELLO, [TERMINAL_SPEC], on_token=chunks.append)
        ((call),) = response.tool_calls
        assert (call.name, json.loads(call.arguments)) == (
            "terminal",
            {"command": "echo streamed arguments"},
        )
        pieces = [
            tool.function.arguments
            for chunk in chunks
            for choice in chunk.choices
            for tool in choice.delta.tool_calls or ()
            if tool.function.arguments
        ]
        assert len(pieces) > 1 and "".join(pieces) == call.arguments

    def test_without_stream_no_chunks(self, stub, stub_llm):
        """An LLM without stream=True asks for the whole answer: on_token is not called."""
        chunks: list = []
        stub_llm.completion(HELLO, on_token=chunks.append)
        assert chunks == [] and "stream" not in stub.requests[0].body

    @settings(max_examples=15)
    @given(text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60))
    def test_streamed_text_equals_the_text_answered(self, text):
        """Whatever the text, the chunks put together and the answer are the text sent."""
        with StubLLMServer() as stub:
            stub.script(StubReply.text(text))
            llm = LLM(**stub.llm_settings(), stream=True, num_retries=0)
            chunks: list = []
            response = llm.completion(HELLO, on_token=chunks.append)
        assert response.content == text
        assert _content(chunks) == text

    def test_streaming_to_sets_callbacks_for_a_block(self, stub, streaming_llm):
        """Inside streaming_to(...), a call without on_token streams to those callbacks."""
        first: list = []
        second: list = []
        with streaming_to([first.append, second.append]):
            streaming_llm.completion(HELLO)
        streaming_llm.completion(HELLO)  # outside: nobody hears it
        assert first == second and _content(first) == "You said: Hello"

    def test_non_callable_callbacks_are_refused(self):
        """A token callback that cannot be called is an InvalidTypeError."""
        with pytest.raises(InvalidTypeError):
            with streaming_to(["not callable"]):  # type: ignore[list-item]
                pass


class TestConversationTokenCallbacks:
    def _agent(self, llm: LLM) -> Agent:
        return Agent(llm=llm, tools=[Tool(name="terminal")])

    def test_run_streams_to_token_callbacks(self, stub, streaming_llm, tmp_path):
        """During run(), each chunk of each answer (the tool call, then the text) reaches the
        conversation's token_callbacks; the events are those of a run without streaming."""
        chunks: list = []
        conversation = Conversation(
            agent=self._agent(streaming_llm),
            workspace=tmp_path,
            token_callbacks=[chunks.append],
            visualizer=None,
        )
        conversation.send_message("Please run `echo streamed`.")
        conversation.run()
        names = [
            tool.function.name
            for chunk in chunks
            for choice in chunk.choices
            for tool in choice.delta.tool_calls or ()
            if tool.function.name
        ]
        assert names == ["terminal"]
        assert "streamed" in _content(chunks)
        assert conversation.state.execution_status.value == "finished"
        assert "The terminal printed:" in conversation.state.events[-1].llm_message.text

    def test_background_run_streams_too(self, stub, streaming_llm, tmp_path):
        """run(blocking=False) runs in another thread, and its chunks still reach the callbacks."""
        chunks: list = []
        conversation = Conversation(
            agent=self._agent(streaming_llm),
            workspace=tmp_path,
            token_callbacks=[chunks.append],
            visualizer=None,
        )
        conversation.send_message("Hi")
        conversation.run(blocking=False)
        conversation.run()  # waits for the background run
        assert _content(chunks) == "You said: Hi"

    def test_a_fork_has_no_token_callbacks(self, stub, streaming_llm, tmp_path):
        """token_callbacks belong to the conversation: its fork's run does not call them."""
        chunks: list = []
        source = Conversation(
            agent=self._agent(streaming_llm),
            workspace=tmp_path,
            token_callbacks=[chunks.append],
            visualizer=None,
        )
        fork = source.fork()
        fork.send_message("Hi")
        fork.run()
        assert chunks == []
        assert len(stub.requests) == 1

    def test_bad_token_callbacks_are_refused(self, streaming_llm, tmp_path):
        """token_callbacks that are not callables are an InvalidTypeError."""
        with pytest.raises(InvalidTypeError):
            Conversation(agent=self._agent(streaming_llm), workspace=tmp_path, token_callbacks=[1])

    def test_remote_conversations_refuse_token_callbacks(self, streaming_llm):
        """A conversation on an agent server calls its LLM there: token_callbacks are refused
        before any request is made."""
        from cowconv import RemoteWorkspace

        with pytest.raises(InvalidValueError, match="agent server"):
            Conversation(
                agent=self._agent(streaming_llm),
                workspace=RemoteWorkspace(host="http://127.0.0.1:9", working_dir="/tmp"),
                token_callbacks=[print],
            )


class TestReasoning:
    def test_reasoning_is_answered_streamed_and_recorded(self, stub, tmp_path):
        """A model's reasoning_content comes back on the answer (whole or streamed, where
        example 29 reads it from each chunk's delta) and is recorded on the agent's message."""
        stub.script(
            StubReply.text("42.", reasoning="Six times seven."),
            StubReply.text("43.", reasoning="Plus one."),
            StubReply.text("44.", reasoning="Plus one again."),
        )
        plain = LLM(**stub.llm_settings(), num_retries=0)
        assert plain.completion(HELLO).message.reasoning_content == "Six times seven."
        chunks: list = []
        streaming = LLM(**stub.llm_settings(), num_retries=0, stream=True)
        answer = streaming.completion(HELLO, on_token=chunks.append)
        thought = "".join(
            getattr(choice.delta, "reasoning_content", None) or ""
            for chunk in chunks
            for choice in chunk.choices
        )
        assert (answer.reasoning_content, thought, answer.content) == (
            "Plus one.",
            "Plus one.",
            "43.",
        )
        conversation = Conversation(
            agent=Agent(llm=plain, tools=[Tool(name="terminal")]), workspace=tmp_path
        )
        conversation.send_message("What next?")
        conversation.run()
        reply = conversation.state.events[-1]
        assert (reply.reasoning_content, reply.llm_message.text) == ("Plus one again.", "44.")
