"""cowconv.testing: the offline stub LLM server, over real HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from cowconv.testing import StubLLMServer, StubReply, default_brain


def post(stub: StubLLMServer, body: object, path: str = "/chat/completions"):
    request = urllib.request.Request(
        stub.base_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer k"},
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


TERMINAL = [{"type": "function", "function": {"name": "terminal"}}]


def ask(text: str, tools=TERMINAL) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "tools": tools}


class TestStubLLMServer:
    def test_scripted_replies_come_first_in_order(self, stub):
        """Scripted replies are served in order, then the brain answers."""
        stub.script(StubReply.text("one"), StubReply.tool_call("terminal", command="ls"))
        assert post(stub, ask("x"))[1]["choices"][0]["message"]["content"] == "one"
        second = post(stub, ask("x"))[1]["choices"][0]
        assert second["finish_reason"] == "tool_calls"
        call = second["message"]["tool_calls"][0]
        assert call["function"] == {"name": "terminal", "arguments": '{"command": "ls"}'}
        assert post(stub, ask("hi"))[1]["choices"][0]["message"]["content"] == "You said: hi"
        assert stub.pending == 0

    def test_error_replies(self, stub):
        """An error reply answers with its status and an OpenAI-style error body."""
        stub.script(StubReply.error(429, "slow down"), StubReply.error(401))
        status, body = post(stub, ask("x"))
        assert (status, body["error"]["message"]) == (429, "slow down")
        assert post(stub, ask("x"))[0] == 401

    def test_requests_are_recorded(self, stub):
        """Every request's body and headers are kept, in order."""
        post(stub, ask("first"))
        post(stub, ask("second"))
        assert [r.messages[0]["content"] for r in stub.requests] == ["first", "second"]
        assert stub.requests[0].headers["authorization"] == "Bearer k"

    def test_usage_is_reported(self, stub):
        """Answers report token usage, larger for longer prompts."""
        short = post(stub, ask("x"))[1]["usage"]
        long = post(stub, ask("x" * 400))[1]["usage"]
        assert long["prompt_tokens"] > short["prompt_tokens"] > 0
        assert short["total_tokens"] == short["prompt_tokens"] + short["completion_tokens"]

    def test_a_prefix_seen_before_is_reported_as_cached(self, caching_stub):
        """Tokens of the longest message prefix sent before come back as cached tokens."""
        stub = caching_stub
        history = [{"role": "user", "content": "x" * 400}, {"role": "assistant", "content": "ok"}]
        first = post(stub, {"model": "m", "messages": history})[1]["usage"]
        assert "prompt_tokens_details" not in first
        longer = [*history, {"role": "user", "content": "more"}]
        second = post(stub, {"model": "m", "messages": longer})[1]["usage"]
        cached = second["prompt_tokens_details"]["cached_tokens"]
        assert 100 <= cached < second["prompt_tokens"]
        # The same prefix for another model, or other tools, is a different cache entry.
        other = post(stub, {"model": "other", "messages": longer})[1]["usage"]
        assert "prompt_tokens_details" not in other
        changed = [{"role": "user", "content": "y" * 400}, *longer[1:]]
        assert (
            "prompt_tokens_details"
            not in post(stub, {"model": "m", "messages": changed})[1]["usage"]
        )

    def test_anthropic_messages_cache_only_marked_prefixes(self, caching_stub):
        """POST .../messages answers as Anthropic: marked prefixes are written, then read."""
        mark = {"type": "ephemeral"}
        body = {
            "model": "claude",
            "system": [{"type": "text", "text": "s" * 400, "cache_control": mark}],
            "messages": [{"role": "user", "content": "u" * 400}],
        }
        first = post(caching_stub, body, "/messages")
        assert first[0] == 200 and first[1]["content"][0]["type"] == "text"
        usage = first[1]["usage"]
        assert usage["cache_creation_input_tokens"] > 0 and usage["cache_read_input_tokens"] == 0
        longer = {**body, "messages": [*body["messages"], {"role": "user", "content": "more"}]}
        second = post(caching_stub, longer, "/messages")[1]["usage"]
        assert second["cache_read_input_tokens"] == usage["cache_creation_input_tokens"]
        unmarked = {**longer, "system": "s" * 400}
        third = post(caching_stub, unmarked, "/messages")[1]["usage"]
        assert third["cache_read_input_tokens"] == third["cache_creation_input_tokens"] == 0

    def test_anthropic_tool_use_round_trip(self, stub):
        """tool_use answers and tool_result requests map to the brain's chat form and back."""
        stub.script(StubReply.tool_call("terminal", command="ls"))
        body = {
            "model": "claude",
            "messages": [{"role": "user", "content": "go"}],
            "tools": [{"name": "terminal", "input_schema": {"type": "object"}}],
        }
        answer = post(stub, body, "/messages")[1]
        call = answer["content"][0]
        assert (call["type"], call["name"], call["input"]) == (
            "tool_use",
            "terminal",
            {"command": "ls"},
        )
        assert answer["stop_reason"] == "tool_use"
        follow = {
            "model": "claude",
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [call]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": call["id"], "content": "a.py"}
                    ],
                },
            ],
            "tools": body["tools"],
        }
        reply = post(stub, follow, "/messages")[1]
        assert reply["content"][0]["text"] == "The terminal printed:\na.py"

    def test_the_prompt_cache_is_off_by_default(self):
        """Without prompt_cache=True no request ever reports cached tokens."""
        with StubLLMServer() as stub:
            for _ in range(2):
                usage = post(stub, ask("same"))[1]["usage"]
            assert "prompt_tokens_details" not in usage

    def test_bad_requests(self, stub):
        """Unknown paths are 404, bodies that are not JSON objects are 400."""
        assert post(stub, ask("x"), path="/embeddings")[0] == 404
        assert post(stub, [1, 2])[0] == 400

    def test_broken_brain_answers_500(self, stub):
        """A custom brain that raises makes the stub answer 500, not hang."""
        stub.brain = lambda request: 1 / 0
        status, body = post(stub, ask("x"))
        assert status == 500 and "ZeroDivisionError" in body["error"]["message"]

    def test_lifecycle(self):
        """base_url needs a running server; a stopped one refuses connections."""
        stub = StubLLMServer()
        with pytest.raises(RuntimeError, match="not running"):
            _ = stub.base_url
        with stub:
            url = stub.base_url
            with pytest.raises(RuntimeError, match="already running"):
                stub.start()
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(url + "/models", timeout=5)

    def test_bad_script_values(self, stub):
        """script() takes StubReply values only; error() takes error statuses only."""
        with pytest.raises(TypeError):
            stub.script("text")
        with pytest.raises(ValueError, match="4xx or 5xx"):
            StubReply.error(200)


class TestDefaultBrain:
    def test_runs_commands_in_backticks(self):
        """Each command in backticks becomes a terminal call, if the tool is offered."""
        reply = default_brain(ask("Run `echo a` then `echo b`."))
        assert [json.loads(args)["command"] for _, args in reply.tool_calls] == ["echo a", "echo b"]
        assert default_brain(ask("Run `echo a`.", tools=[])).content.startswith("You said")

    def test_reports_tool_results(self):
        """After tool results it reports them."""
        body = ask("x")
        body["messages"] += [
            {"role": "assistant", "tool_calls": []},
            {"role": "tool", "tool_call_id": "1", "content": "hello"},
        ]
        assert default_brain(body).content == "The terminal printed:\nhello"

    def test_recalls_earlier_commands(self):
        """Asked without commands after running some, it names them."""
        call = {"function": {"name": "terminal", "arguments": '{"command": "ls"}'}}
        body = ask("What did you run?")
        body["messages"] = [
            {"role": "assistant", "tool_calls": [call]},
            *body["messages"],
        ]
        assert default_brain(body).content == "Earlier I ran: `ls`"


class TestCommandLine:
    def test_runs_a_command_against_the_stub(self):
        """`python -m cowconv.testing -- CMD` runs CMD with the LLM_* variables, exit code kept."""
        code = "import os; print(os.environ['LLM_BASE_URL'], os.environ['LLM_MODEL']); exit(3)"
        out = subprocess.run(
            [sys.executable, "-m", "cowconv.testing", "--", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 3
        url, model = out.stdout.split()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert model == "openai/stub-model"

    def test_serves_and_prints_the_environment(self):
        """`python -m cowconv.testing --port N` prints export lines and serves on port N."""
        with StubLLMServer() as probe:  # find a free port, then free it
            port = int(probe.base_url.rsplit(":", 1)[1].split("/")[0])
        process = subprocess.Popen(
            [sys.executable, "-m", "cowconv.testing", "--port", str(port)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert process.stdout is not None
            lines = [process.stdout.readline().strip() for _ in range(3)]
            assert f"export LLM_BASE_URL=http://127.0.0.1:{port}/v1" in lines
            assert "export LLM_API_KEY=stub-key" in lines
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                data=json.dumps(ask("ping")).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                assert json.load(response)["choices"][0]["message"]["content"] == "You said: ping"
        finally:
            process.terminate()
            process.wait(timeout=30)
            process.stdout.close()
