"""LLM: calls through litellm's real HTTP path to the stub, retries, metrics, secrets."""

from __future__ import annotations

import copy
import io
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import threading

import pytest

from cowconv import LLM, Agent, Conversation, LLMError, LLMMetrics
from cowconv.core.llm import needs_cache_marks
from cowconv.testing import StubLLMServer, StubReply

TERMINAL_SPEC = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
HELLO = [{"role": "user", "content": "Hello"}]


class TestCompletion:
    def test_text_answer(self, stub, stub_llm):
        """A text answer comes back as content, with no tool calls."""
        stub.script(StubReply.text("Hi there."))
        response = stub_llm.completion(HELLO)
        assert (response.content, response.tool_calls) == ("Hi there.", ())
        assert response.id.startswith("chatcmpl-")

    def test_tool_calls_answer(self, stub, stub_llm):
        """Tool calls come back with their ids, names and JSON arguments text."""
        stub.script(StubReply.tool_calls_of([("terminal", {"command": "ls"}), ("terminal", "{")]))
        response = stub_llm.completion(HELLO, [TERMINAL_SPEC])
        assert [(c.name, c.arguments) for c in response.tool_calls] == [
            ("terminal", '{"command": "ls"}'),
            ("terminal", "{"),
        ]
        assert len({c.id for c in response.tool_calls}) == 2

    def test_request_carries_messages_tools_and_key(self, stub, stub_llm):
        """The HTTP request holds the messages, the tools, the model and the bearer key."""
        stub_llm.completion(HELLO, [TERMINAL_SPEC])
        (request,) = stub.requests
        assert request.messages == HELLO
        assert request.body["tools"] == [TERMINAL_SPEC]
        assert request.body["model"] == "stub-model"
        assert request.headers["authorization"] == "Bearer stub-key"

    def test_settings_are_sent(self, stub):
        """temperature and max_output_tokens reach the provider."""
        llm = LLM(**stub.llm_settings(), temperature=0.25, max_output_tokens=77)
        llm.completion(HELLO)
        body = stub.requests[0].body
        assert (body["temperature"], body["max_tokens"]) == (0.25, 77)


class TestRetries:
    def test_transient_errors_are_retried(self, stub, stub_llm):
        """429 and 500 answers are retried until the call succeeds."""
        stub.script(StubReply.error(429), StubReply.error(500), StubReply.error(503))
        stub.script(StubReply.text("finally"))
        assert stub_llm.completion(HELLO).content == "finally"
        assert len(stub.requests) == 4
        assert len(stub_llm.metrics.latencies) == 1

    def test_retries_run_out(self, stub):
        """After num_retries retries the last transient error raises LLMError."""
        llm = LLM(**stub.llm_settings(), num_retries=2, retry_min_wait=0)
        stub.script(*[StubReply.error(429, "slow down")] * 3)
        with pytest.raises(LLMError, match=r"after 3 attempt\(s\).*429.*slow down"):
            llm.completion(HELLO)
        assert len(stub.requests) == 3
        assert llm.metrics.latencies == ()

    def test_authentication_error_fails_at_once(self, stub, stub_llm):
        """A 401 is not retried and the error says to check the API key."""
        stub.script(StubReply.error(401, "invalid api key"))
        with pytest.raises(LLMError, match=r"after 1 attempt\(s\).*401.*Check the API key"):
            stub_llm.completion(HELLO)
        assert len(stub.requests) == 1

    def test_bad_request_fails_at_once(self, stub, stub_llm):
        """A 400 is not retried."""
        stub.script(StubReply.error(400, "messages are malformed"))
        with pytest.raises(LLMError, match="400.*messages are malformed"):
            stub_llm.completion(HELLO)
        assert len(stub.requests) == 1

    def test_timeouts_are_retried(self, stub):
        """A call that outlives LLM.timeout is retried, then fails as a timeout."""
        llm = LLM(**stub.llm_settings(), timeout=0.2, num_retries=1, retry_min_wait=0)
        stub.script(StubReply.text("late", delay=1.0), StubReply.text("late", delay=1.0))
        with pytest.raises(LLMError, match="Timeout"):
            llm.completion(HELLO)
        assert len(stub.requests) == 2

    def test_connection_errors_are_retried(self):
        """Nobody listening on the port is a connection error, retried then raised."""
        with StubLLMServer() as gone:
            base_url = gone.base_url
        llm = LLM(model="openai/stub-model", base_url=base_url, api_key="k", num_retries=1)
        llm = llm.model_copy(update={"retry_min_wait": 0.0})
        with pytest.raises(LLMError, match=r"after 2 attempt\(s\).*Connection") as raised:
            llm.completion(HELLO)
        # Named as what it is: no answer came, so no HTTP status either.
        assert f"cannot connect to {base_url}: ConnectionRefusedError" in str(raised.value)
        assert "HTTP 500" not in str(raised.value)

    def test_retry_is_logged_without_secrets(self, stub, caplog):
        """Each retry logs a warning; the key never appears in it."""
        llm = LLM(**{**stub.llm_settings(), "api_key": "sk-very-secret"}, retry_min_wait=0)
        stub.script(StubReply.error(429, "key sk-very-secret is rate limited"))
        with caplog.at_level(logging.WARNING, logger="cowconv"):
            llm.completion(HELLO)
        assert "Retrying" in caplog.text and "429" in caplog.text
        assert "sk-very-secret" not in caplog.text


class TestMetrics:
    def test_tokens_and_latency_add_up(self, stub, stub_llm):
        """metrics adds every answer's tokens and one latency per call."""
        first = stub_llm.completion(HELLO)
        second = stub_llm.completion(HELLO * 3)
        metrics = stub_llm.metrics
        assert metrics.prompt_tokens == first.prompt_tokens + second.prompt_tokens > 0
        assert metrics.completion_tokens == first.completion_tokens + second.completion_tokens
        assert metrics.latencies == (first.latency, second.latency)
        assert metrics.usage.prompt_tokens == metrics.prompt_tokens

    def test_unknown_model_costs_nothing(self, stub, stub_llm):
        """A model litellm has no price for costs 0 instead of failing the call."""
        assert stub_llm.completion(HELLO).cost == 0.0
        assert stub_llm.metrics.accumulated_cost == 0.0

    def test_known_model_is_priced_by_litellm(self, stub):
        """A model in litellm's price list costs what its cost calculator says."""
        llm = LLM(model="openai/gpt-4o", base_url=stub.base_url, api_key="stub-key")
        response = llm.completion(HELLO)
        import litellm  # after the call, which imports it with the offline price list

        prompt_cost, completion_cost = litellm.cost_per_token(
            model="gpt-4o",
            prompt_tokens=response.prompt_tokens,
            completion_tokens=response.completion_tokens,
        )
        assert response.cost == pytest.approx(prompt_cost + completion_cost)
        assert response.cost > 0
        assert llm.metrics.accumulated_cost == pytest.approx(response.cost)

    def test_concurrent_calls_are_all_counted(self, stub, stub_llm):
        """Calls from many threads are all counted, none lost."""
        threads = [
            threading.Thread(target=lambda: [stub_llm.completion(HELLO) for _ in range(4)])
            for _ in range(6)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        single = stub_llm.completion(HELLO)
        assert len(stub_llm.metrics.latencies) == 25
        assert stub_llm.metrics.prompt_tokens == 25 * single.prompt_tokens


class TestPromptCaching:
    def test_cached_tokens_are_counted_and_priced_at_the_cache_rate(self, caching_stub):
        """A prompt whose prefix the provider cached is cheaper, and its cached tokens count."""
        # gpt-4o's prices (litellm's local price list): cached input costs half.
        stub = caching_stub
        llm = LLM(model="openai/gpt-4o", base_url=stub.base_url, api_key="k")
        prompt = [{"role": "user", "content": "x" * 4000}]
        stub.script(StubReply.text("a"), StubReply.text("a"))
        first = llm.completion(prompt)
        second = llm.completion(prompt)
        assert first.cache_read_tokens == 0
        assert 900 <= second.cache_read_tokens <= second.prompt_tokens == first.prompt_tokens
        assert 0 < second.cost < first.cost
        assert llm.metrics.cache_read_tokens == second.cache_read_tokens
        assert llm.metrics.usage.cache_read_tokens == second.cache_read_tokens
        assert second.usage.cache_read_tokens == second.cache_read_tokens

    def test_a_fork_reads_its_source_prefix_from_the_cache(self, caching_stub, tmp_path):
        """A fork's first step is served its source's prompt from the cache; stats say so."""
        stub_agent = Agent(llm=LLM(**caching_stub.llm_settings()))
        source = Conversation(agent=stub_agent, workspace=tmp_path)
        source.send_message("x" * 2000)
        source.run()
        assert source.state.stats.cache_read_tokens == 0
        fork = source.fork()
        fork.send_message("and then?")
        fork.run()
        stats = fork.state.stats
        assert 500 <= stats.cache_read_tokens < stats.prompt_tokens
        assert stats.by_usage_id[stub_agent.llm.usage_id].cache_read_tokens == (
            stats.cache_read_tokens
        )

    def test_cache_marks_go_where_the_provider_needs_them(self):
        """Anthropic's models get cache_control marks; providers that cache on their own do not."""
        assert needs_cache_marks("anthropic/claude-sonnet-4-5-20250929")
        assert needs_cache_marks("bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0")
        assert not needs_cache_marks("openai/gpt-4o")
        assert not needs_cache_marks("bedrock/amazon.nova-pro-v1:0")
        assert not needs_cache_marks("openai/stub-model")

    def test_anthropic_gets_cache_marks_and_a_fork_reads_the_prefix(self, caching_stub, tmp_path):
        """Through litellm's Anthropic path: system and last message marked; forks read them."""
        llm = LLM(
            model="anthropic/claude-sonnet-4-5-20250929",
            base_url=caching_stub.base_url,
            api_key="k",
        )
        agent = Agent(llm=llm, system_prompt="You are careful. " * 200)
        source = Conversation(agent=agent, workspace=tmp_path)
        source.send_message("x" * 3000)
        source.run()
        body = caching_stub.requests[-1].body
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        written = source.state.stats.cache_write_tokens
        assert written > 1000 and source.state.stats.cache_read_tokens == 0
        fork = source.fork()
        fork.send_message("And then?")
        fork.run()
        stats = fork.state.stats
        assert stats.cache_read_tokens >= written
        assert 0 < stats.accumulated_cost < source.state.stats.accumulated_cost

    def test_caching_prompt_false_sends_no_marks(self, caching_stub):
        """LLM(caching_prompt=False): no cache_control, so Anthropic neither writes nor reads."""
        llm = LLM(
            model="anthropic/claude-sonnet-4-5-20250929",
            base_url=caching_stub.base_url,
            api_key="k",
            caching_prompt=False,
        )
        for _ in range(2):
            response = llm.completion([{"role": "user", "content": "y" * 3000}])
        assert "cache_control" not in json.dumps(caching_stub.requests[-1].body)
        assert response.cache_read_tokens == response.cache_write_tokens == 0

    def test_no_marks_reach_a_provider_that_caches_on_its_own(self, stub):
        """The request to an OpenAI-compatible endpoint carries no cache_control keys."""
        LLM(**stub.llm_settings()).completion([*HELLO, {"role": "user", "content": "again"}])
        assert "cache_control" not in json.dumps(stub.requests[-1].body)


class TestIdentity:
    def test_equality_ignores_metrics(self, stub, stub_llm):
        """Two LLMs with one configuration are equal and hash alike, whatever they spent."""
        twin = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
        stub_llm.completion(HELLO)
        assert twin == stub_llm and hash(twin) == hash(stub_llm)
        assert twin.metrics.latencies == () and len(stub_llm.metrics.latencies) == 1

    def test_copies_keep_totals_separately(self, stub, stub_llm):
        """deepcopy and pickle keep the totals so far, then count on their own."""
        stub_llm.completion(HELLO)
        for copied in (copy.deepcopy(stub_llm), pickle.loads(pickle.dumps(stub_llm))):
            assert copied.metrics.latencies == stub_llm.metrics.latencies
            assert copied.metrics is not stub_llm.metrics
        assert isinstance(stub_llm.metrics, LLMMetrics)

    def test_agent_round_trip(self):
        """An agent's LLM survives a JSON round trip (metrics are not configuration)."""
        agent = Agent(llm=LLM(model="openai/gpt-4o", usage_id="main"))
        agent.llm.metrics.add(cost=1.0, prompt_tokens=1, completion_tokens=1, latency=0.1)
        assert Agent.model_validate_json(agent.model_dump_json()) == agent


class TestSecrets:
    def test_key_is_hidden_from_repr_and_default_dumps(self):
        """The key shows in no repr, str or default dump; exposing it is explicit."""
        llm = LLM(model="openai/gpt-4o", api_key="sk-very-secret")
        shown = [repr(llm), str(llm), llm.model_dump_json(), str(llm.model_dump())]
        assert not any("sk-very-secret" in text for text in shown)
        exposed = llm.model_dump(mode="json", context={"expose_secrets": True})
        assert exposed["api_key"] == "sk-very-secret"

    def test_key_is_masked_in_errors(self, stub):
        """An error message that echoes the key is masked before it reaches the user."""
        llm = LLM(**{**stub.llm_settings(), "api_key": "sk-very-secret"})
        stub.script(StubReply.error(401, "key sk-very-secret is not valid"))
        with pytest.raises(LLMError) as raised:
            llm.completion(HELLO)
        assert "sk-very-secret" not in str(raised.value)
        assert "**********" in str(raised.value)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class TestLoadingNotice:
    def test_on_a_terminal_the_line_ends_with_the_time_taken(self, monkeypatch):
        """On a terminal the notice is one line (a spinner turns at its end, rewriting it)
        that ends with how long the wait was."""
        from cowconv.core.llm import _loading_notice

        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        monkeypatch.delenv("COWCONV_QUIET", raising=False)
        with _loading_notice(True):
            pass
        written = terminal.getvalue()
        assert written.count("\n") == 1 and written.endswith("\n")
        line = written.rsplit("\r", 1)[-1].rstrip("\n")  # what the terminal shows at the end
        assert line.startswith("cowconv: loading litellm for the first LLM call")
        assert re.search(r"\.\.\. done in \d+\.\d s$", line)

    def test_quiet_and_already_loaded_say_nothing(self, monkeypatch):
        """COWCONV_QUIET=1, or litellm imported already: nothing is written."""
        from cowconv.core.llm import _loading_notice

        terminal = _Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        monkeypatch.setenv("COWCONV_QUIET", "1")
        with _loading_notice(True):
            pass
        monkeypatch.delenv("COWCONV_QUIET")
        with _loading_notice(False):
            pass
        assert terminal.getvalue() == ""


class TestLazyImport:
    def test_import_cowconv_does_not_import_litellm(self):
        """import cowconv (testing and the terminal tool too) leaves litellm unimported."""
        code = (
            "import sys, threading\n"
            "import cowconv, cowconv.testing, cowconv.tools.terminal\n"
            "print('litellm' in sys.modules, [t.name for t in threading.enumerate()])\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "False ['MainThread']"

    def test_making_an_llm_imports_nothing_and_starts_no_thread(self):
        """LLM() and a conversation built with it import no litellm and start no thread."""
        code = (
            "import sys, threading\n"
            "from cowconv import LLM, Agent, Conversation, Tool\n"
            "agent = Agent(llm=LLM(model='openai/gpt-4o'), tools=[Tool(name='terminal')])\n"
            "Conversation(agent=agent, workspace='.').send_message('hi')\n"
            "print('litellm' in sys.modules, len(threading.enumerate()))\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "False 1"

    @pytest.mark.slow
    def test_first_use_imports_litellm_once_whichever_thread_comes_first(self, stub):
        """A completion and LLM.preload() in four threads, at once, in a fresh process: litellm
        was not imported before, is imported once (one module), and the completion answers.
        (One process for both: each import of litellm costs seconds.)"""
        code = (
            "import sys, threading\n"
            "from cowconv import LLM\n"
            f"llm = LLM(model='openai/stub-model', base_url={stub.base_url!r}, api_key='k')\n"
            "before = 'litellm' in sys.modules\n"
            "answers = []\n"
            "def ask():\n"
            "    answers.append(llm.completion([{'role': 'user', 'content': 'hi'}]).content)\n"
            "threads = [threading.Thread(target=ask)]\n"
            "threads += [threading.Thread(target=LLM.preload) for _ in range(4)]\n"
            "[t.start() for t in threads]; [t.join() for t in threads]\n"
            "from cowconv.core import llm as module\n"
            "print(before, module._litellm() is sys.modules['litellm'], len(answers))\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == "False True 1"
        # The wait is announced, once, in one line on stderr (not a terminal here: no timing).
        notice = "cowconv: loading litellm for the first LLM call (a few seconds, once per process)"
        assert out.stderr.splitlines().count(notice) == 1, out.stderr


class TestResourcesAtExit:
    def test_llm_calls_leave_no_socket_or_event_loop_open_at_exit(self, tmp_path):
        """A process that made completions (three endpoints, streamed and not, main thread and
        a worker thread, an agent's run with a tool call) exits with no ``ResourceWarning``:
        litellm's cached clients and the loop its timing hook left are closed at exit."""
        script = tmp_path / "calls.py"
        script.write_text(
            "import threading\n"
            "from cowconv import LLM, Agent, Conversation, Tool\n"
            "from cowconv.testing import StubLLMServer\n"
            "import cowconv.tools.terminal\n"
            "hi = [{'role': 'user', 'content': 'hi'}]\n"
            "answers = []\n"
            "for stream in (False, True, False):\n"
            "    with StubLLMServer() as stub:\n"
            "        llm = LLM(model='openai/stub-model', base_url=stub.base_url, api_key='k',\n"
            "                  stream=stream)\n"
            "        answers.append(llm.completion(hi).content)\n"
            "        worker = threading.Thread(target=lambda: answers.append(\n"
            "            llm.completion(hi).content))\n"
            "        worker.start(); worker.join()\n"
            "with StubLLMServer() as stub:\n"
            "    llm = LLM(model='openai/stub-model', base_url=stub.base_url, api_key='k')\n"
            "    agent = Agent(llm=llm, tools=[Tool(name='terminal')])\n"
            f"    conversation = Conversation(agent=agent, workspace={str(tmp_path)!r})\n"
            "    conversation.send_message('Run `echo done-by-tool`.')\n"
            "    conversation.run()\n"
            "    ran = [str(e) for e in conversation.state.events if 'done-by-tool' in str(e)]\n"
            "print(len(answers), all(answers), bool(ran))\n",
            encoding="utf-8",
        )
        done = subprocess.run(
            [sys.executable, "-W", "always::ResourceWarning", str(script)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "COWCONV_QUIET": "1"},
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["6", "True", "True"], done.stdout + done.stderr
        assert "ResourceWarning" not in done.stderr, done.stderr
