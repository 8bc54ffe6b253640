"""Hooks: real shell scripts in a temp dir, run by cowconv's loop as OpenHands defines them.

Each hook is a real subprocess reading the event's JSON on stdin; the runs
are recorded as ``HookExecutionEvent`` in the history. The agent is the
scripted ``TestLLM``; its tool is the real terminal.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowconv import (
    Agent,
    Conversation,
    ExecutionStatus,
    HookExecutionEvent,
    InvalidTypeError,
    Message,
    MessageToolCall,
    SQLiteStore,
    Tool,
    UserRejectObservation,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.hooks import (
    HookConfig,
    HookDecision,
    HookDefinition,
    HookEvent,
    HookEventType,
    HookExecutor,
    HookManager,
    HookMatcher,
    HookType,
)
from cowconv.testing import StubLLMServer, StubReply, TestLLM


def script(directory: Path, name: str, body: str) -> str:
    """An executable shell script ``name`` in ``directory``; its path."""
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def call(call_id: str, command: str) -> Message:
    arguments = json.dumps({"command": command})
    return Message(
        role="assistant",
        content="",
        tool_calls=[MessageToolCall(id=call_id, name="terminal", arguments=arguments)],
    )


def text(content: str) -> Message:
    return Message(role="assistant", content=content)


def chat(workspace: Path, config: HookConfig, *answers: Message) -> Conversation:
    agent = Agent(llm=TestLLM.from_messages(list(answers)), tools=[Tool(name="terminal")])
    return Conversation(agent=agent, workspace=str(workspace), hook_config=config)


def runs(conversation: Conversation) -> list[HookExecutionEvent]:
    return [e for e in conversation.state.events if isinstance(e, HookExecutionEvent)]


def matcher(command: str, pattern: str = "*", **options: Any) -> list[HookMatcher]:
    return [HookMatcher(matcher=pattern, hooks=[HookDefinition(command=command, **options)])]


class TestPreToolUse:
    def test_exit_2_blocks_the_call(self, tmp_path: Path) -> None:
        """A PreToolUse hook exiting 2 stops the call: the model reads why, nothing runs."""
        hook = script(
            tmp_path,
            "block.sh",
            'input=$(cat)\ncase "$input" in *"rm -rf"*) echo "no rm -rf" >&2; exit 2;; esac\n',
        )
        conversation = chat(
            tmp_path,
            HookConfig(pre_tool_use=matcher(hook, "terminal")),
            call("c1", "rm -rf victim"),
            call("c2", "echo safe >> log.txt"),
            text("done"),
        )
        (tmp_path / "victim").mkdir()
        conversation.send_message("clean up")
        conversation.run()
        assert (tmp_path / "victim").exists()
        assert (tmp_path / "log.txt").read_text() == "safe\n"
        rejections = [e for e in conversation.state.events if isinstance(e, UserRejectObservation)]
        assert [(r.tool_call_id, r.rejection_source, r.rejection_reason) for r in rejections] == [
            ("c1", "hook", "no rm -rf")
        ]
        blocked, allowed = runs(conversation)
        assert blocked.blocked and blocked.exit_code == 2 and blocked.hook_command == hook
        assert blocked.hook_input is not None
        assert blocked.hook_input["tool_input"] == {"command": "rm -rf victim"}
        assert not allowed.blocked and allowed.success
        assert conversation.state.execution_status is ExecutionStatus.FINISHED

    def test_deny_decision_blocks_and_exit_1_does_not(self, tmp_path: Path) -> None:
        """JSON {"decision": "deny"} blocks with its reason; exit 1 is an error that lets it run."""
        deny = script(tmp_path, "deny.sh", 'echo \'{"decision": "deny", "reason": "policy"}\'\n')
        broken = script(tmp_path, "broken.sh", "echo oops >&2; exit 1\n")
        conversation = chat(
            tmp_path,
            HookConfig(
                pre_tool_use=[
                    HookMatcher(matcher="/ter.*/", hooks=[HookDefinition(command=broken)]),
                    HookMatcher(matcher="nothing", hooks=[HookDefinition(command=deny)]),
                ]
            ),
            call("c1", "echo ran >> log.txt"),
            text("done"),
        )
        conversation.send_message("go")
        conversation.run()
        assert (tmp_path / "log.txt").read_text() == "ran\n"
        (run,) = runs(conversation)
        assert not run.success and not run.blocked and run.exit_code == 1

        denying = chat(
            tmp_path,
            HookConfig(pre_tool_use=matcher(deny)),
            call("c1", "echo again >> log.txt"),
            text("done"),
        )
        denying.send_message("go")
        denying.run()
        assert (tmp_path / "log.txt").read_text() == "ran\n"
        rejection = next(e for e in denying.state.events if isinstance(e, UserRejectObservation))
        assert rejection.rejection_reason == "policy"

    def test_environment_and_stdin(self, tmp_path: Path) -> None:
        """The hook runs in the workspace with OpenHands' variables and the event on stdin."""
        hook = script(
            tmp_path,
            "record.sh",
            'cat > "$OPENHANDS_PROJECT_DIR/event.json"\n'
            'echo "$OPENHANDS_EVENT_TYPE $OPENHANDS_TOOL_NAME $(pwd)" > env.txt\n',
        )
        conversation = chat(
            tmp_path, HookConfig(pre_tool_use=matcher(hook)), call("c1", "true"), text("ok")
        )
        conversation.send_message("go")
        conversation.run()
        event = json.loads((tmp_path / "event.json").read_text())
        assert event["event_type"] == "PreToolUse" and event["tool_name"] == "terminal"
        assert event["tool_input"] == {"command": "true"}
        assert event["session_id"] == str(conversation.id)
        assert (tmp_path / "env.txt").read_text().split() == [
            "PreToolUse",
            "terminal",
            str(tmp_path),
        ]


class TestOtherEvents:
    def test_post_tool_use_sees_the_result(self, tmp_path: Path) -> None:
        """PostToolUse hooks get the call and its result, and never block."""
        hook = script(tmp_path, "post.sh", "cat > post.json\nexit 2\n")
        conversation = chat(
            tmp_path,
            HookConfig(post_tool_use=matcher(hook)),
            call("c1", "echo hello"),
            text("done"),
        )
        conversation.send_message("go")
        conversation.run()
        event = json.loads((tmp_path / "post.json").read_text())
        assert event["event_type"] == "PostToolUse"
        assert event["tool_response"]["content"].strip() == "hello"
        assert conversation.state.events[-1].text == "done"

    def test_user_prompt_submit_adds_context(self, tmp_path: Path) -> None:
        """UserPromptSubmit's additionalContext goes with the message the model reads."""
        hook = script(tmp_path, "ctx.sh", 'echo \'{"additionalContext": "branch: main"}\'\n')
        conversation = chat(tmp_path, HookConfig(user_prompt_submit=matcher(hook)), text("noted"))
        message = conversation.send_message("which branch?")
        assert [c.text for c in message.extended_content] == ["branch: main"]
        (run,) = runs(conversation)
        assert run.message_id == message.id and run.additional_context == "branch: main"
        conversation.run()
        assert conversation.state.events[-1].text == "noted"

    def test_blocked_prompt_is_not_answered(self, tmp_path: Path) -> None:
        """A blocked user message is recorded with the hook's run; run() makes no LLM call."""
        hook = script(tmp_path, "no.sh", "echo 'not that' >&2\nexit 2\n")
        conversation = chat(tmp_path, HookConfig(user_prompt_submit=matcher(hook)))
        conversation.send_message("forbidden")
        conversation.run()  # the TestLLM has no answer: a call would fail the run
        assert conversation.state.execution_status is ExecutionStatus.FINISHED
        assert runs(conversation)[0].reason is None and runs(conversation)[0].blocked

    def test_stop_hook_sends_the_agent_back(self, tmp_path: Path) -> None:
        """A Stop hook that blocks once: its reason reaches the agent, which answers again."""
        hook = script(
            tmp_path,
            "stop.sh",
            "if [ -f stopped ]; then exit 0; fi\ntouch stopped\n"
            'echo \'{"decision": "deny", "reason": "write the summary"}\'\n',
        )
        conversation = chat(
            tmp_path, HookConfig(stop=matcher(hook)), text("done"), text("summary: done")
        )
        conversation.send_message("work")
        conversation.run()
        texts = [e.text for e in conversation.state.events if e.kind == "MessageEvent"]
        assert texts == [
            "work",
            "done",
            "[Stop hook feedback] write the summary",
            "summary: done",
        ]
        assert [r.blocked for r in runs(conversation)] == [True, False]
        assert conversation.state.execution_status is ExecutionStatus.FINISHED

    def test_session_start_and_end(self, tmp_path: Path) -> None:
        """SessionStart at the first run (its context reaches the agent); SessionEnd at close."""
        start = script(tmp_path, "start.sh", 'echo \'{"additionalContext": "repo: demo"}\'\n')
        end = script(tmp_path, "end.sh", "touch ended\n")
        conversation = chat(
            tmp_path,
            HookConfig(session_start=matcher(start), session_end=matcher(end)),
            text("hi"),
        )
        conversation.send_message("hello")
        conversation.run()
        kinds = [(e.kind, getattr(e, "hook_event_type", None)) for e in conversation.state.events]
        assert ("HookExecutionEvent", "SessionStart") in kinds
        assert any(
            e.kind == "MessageEvent" and e.text == "repo: demo" for e in conversation.state.events
        )
        conversation.close()
        assert (tmp_path / "ended").exists()
        assert runs(conversation)[-1].hook_event_type == "SessionEnd"

    def test_timeout_is_an_error_that_does_not_block(self, tmp_path: Path) -> None:
        """A hook past its timeout is killed; the call still runs."""
        conversation = chat(
            tmp_path,
            HookConfig(pre_tool_use=matcher("sleep 30", timeout=1)),
            call("c1", "echo ran >> log.txt"),
            text("done"),
        )
        conversation.send_message("go")
        conversation.run()
        (run,) = runs(conversation)
        assert run.error == "Hook timed out after 1 seconds" and not run.blocked
        assert (tmp_path / "log.txt").read_text() == "ran\n"


class TestStateAndForks:
    def test_fork_and_store_keep_the_hooks(self, tmp_path: Path) -> None:
        """The hook config is state: a fork runs it, a reopened store still has it."""
        config = HookConfig(pre_tool_use=matcher("exit 2"))
        store = SQLiteStore(tmp_path / "db")
        agent = Agent(llm=TestLLM.from_messages([]), tools=[Tool(name="terminal")])
        conversation = Conversation(
            agent=agent, workspace=str(tmp_path), store=store, hook_config=config
        )
        assert conversation.fork().state.hook_config == config
        assert Conversation.resume(store, conversation.id).state.hook_config == config

    def test_bad_hook_config_is_refused(self, tmp_path: Path) -> None:
        """hook_config must be a HookConfig."""
        agent = Agent(llm=TestLLM.from_messages([]))
        with pytest.raises(InvalidTypeError, match="hook_config"):
            Conversation(agent=agent, workspace=str(tmp_path), hook_config={"stop": []})  # type: ignore[call-overload]


class TestConfigAndExecutor:
    def test_hooks_json_round_trip(self, tmp_path: Path) -> None:
        """hooks.json in OpenHands' PascalCase form loads, saves and loads back the same."""
        path = tmp_path / ".openhands" / "hooks.json"
        path.parent.mkdir()
        path.write_text(
            json.dumps(
                {
                    "hooks": {
                        "PreToolUse": [{"matcher": "terminal", "hooks": [{"command": "a.sh"}]}],
                        "Stop": [{"hooks": [{"command": "b.sh", "async": True}]}],
                    }
                }
            )
        )
        config = HookConfig.load(working_dir=tmp_path)
        assert config.stop[0].hooks[0].async_
        config.save(tmp_path / "again.json")
        assert HookConfig.load(tmp_path / "again.json") == config

    @given(st.sampled_from(["*", "", "terminal", "/term.*/", "file|edit", "other", "/[/"]))
    def test_matcher_rules(self, pattern: str) -> None:
        """Matchers: wildcard, exact name, /regex/ and bare regex, as OpenHands matches them."""
        expected = pattern in ("*", "", "terminal", "/term.*/")
        assert HookMatcher(matcher=pattern).matches("terminal") is expected

    def test_prompt_hook_asks_the_llm(self, tmp_path: Path) -> None:
        """A prompt hook's verdict is the model's JSON decision."""
        llm = TestLLM.from_messages(
            [text('{"decision": "deny", "reason": "deletes files"}'), text("no json at all")]
        )
        config = HookConfig(
            pre_tool_use=[
                HookMatcher(hooks=[HookDefinition(type=HookType.PROMPT, prompt="Deny deletions.")])
            ]
        )
        manager = HookManager(config, working_dir=str(tmp_path), llm=llm)
        allowed, (result,) = manager.run_pre_tool_use("terminal", {"command": "rm -rf /"})
        assert not allowed and result.decision is HookDecision.DENY
        assert result.reason == "deletes files"
        allowed, (result,) = manager.run_pre_tool_use("terminal", {"command": "ls"})
        assert allowed and not result.success and result.decision is HookDecision.ALLOW

    def test_async_hook_runs_in_background(self, tmp_path: Path) -> None:
        """An async hook returns at once and its process still gets the event."""
        executor = HookExecutor(working_dir=str(tmp_path))
        hook = HookDefinition(command="cat > bg.json", async_=True)
        result = executor.execute(hook, HookEvent(event_type=HookEventType.STOP))
        assert result.async_started
        for process, _, _ in list(executor.async_process_manager._processes):
            process.wait(timeout=60)
        assert json.loads((tmp_path / "bg.json").read_text())["event_type"] == "Stop"
        executor.async_process_manager.cleanup_all()


class TestAgentHooks:
    def test_agent_hook_decides_with_a_small_run(self, tmp_path: Path) -> None:
        """An agent hook runs a small agent on the event; its JSON answer blocks the call."""
        config = HookConfig(
            pre_tool_use=[
                HookMatcher(
                    matcher="terminal",
                    hooks=[
                        HookDefinition(
                            type=HookType.AGENT,
                            name="reviewer",
                            system_prompt="Deny reading /etc/passwd.",
                            max_iterations=2,
                        )
                    ],
                )
            ]
        )
        conversation = chat(
            tmp_path,
            config,
            call("c1", "awk '{print}' /etc/passwd > copy.txt"),
            text('Verdict: {"decision": "deny", "reason": "reads /etc/passwd"}'),
            text("understood"),
        )
        conversation.send_message("show me the users")
        conversation.run()
        assert not (tmp_path / "copy.txt").exists()
        (run,) = runs(conversation)
        assert run.blocked and run.reason == "reads /etc/passwd"
        assert run.hook_command == "agent-hook:reviewer"
        assert conversation.state.events[-1].text == "understood"
        assert "agent-hook:reviewer" in conversation.state.stats.by_usage_id

    def test_agent_hook_that_cannot_decide_allows(self, tmp_path: Path) -> None:
        """An answer without a decision allows the call, marked unsuccessful."""
        config = HookConfig(
            pre_tool_use=[
                HookMatcher(hooks=[HookDefinition(type=HookType.AGENT, system_prompt="Review.")])
            ]
        )
        conversation = chat(
            tmp_path,
            config,
            call("c1", "echo ran >> log.txt"),
            text("I am not sure."),
            text("done"),
        )
        conversation.send_message("go")
        conversation.run()
        (run,) = runs(conversation)
        assert not run.blocked and not run.success
        assert (tmp_path / "log.txt").read_text() == "ran\n"


class TestOnTheAgentServer:
    def test_remote_conversation_runs_its_hooks_on_the_server(
        self, tmp_path: Path, stub: StubLLMServer, stub_agent: Agent
    ) -> None:
        """Through real uvicorn: hook_config in OpenHands' create request, hooks run there."""
        guard = script(tmp_path, "guard.sh", 'grep -q "rm -rf" && { echo "no" >&2; exit 2; }\n:\n')
        stub.script(
            StubReply.tool_call("terminal", command="rm -rf keep"),
            StubReply.text("stopped"),
        )
        (tmp_path / "keep").mkdir()
        config = HookConfig(pre_tool_use=matcher(guard, "terminal"))
        with BackgroundServer(create_app()) as server:
            workspace = Workspace(host=server.url, working_dir=str(tmp_path))
            remote = Conversation(agent=stub_agent, workspace=workspace, hook_config=config)
            try:
                assert remote.state.hook_config == config
                remote.send_message("clean")
                remote.run()
                events = remote.state.events
                kinds = [event.kind for event in events]
                assert "HookExecutionEvent" in kinds and "UserRejectObservation" in kinds
                assert (tmp_path / "keep").exists()
            finally:
                remote.close()


class TestHookSpend:
    def test_prompt_hook_spend_is_in_the_stats(
        self, tmp_path: Path, stub: StubLLMServer, stub_agent: Agent
    ) -> None:
        """What a prompt hook's LLM call cost is recorded under prompt-hook:<name>."""
        stub.script(
            StubReply.tool_call("terminal", command="echo ran >> log.txt"),
            StubReply.text('{"decision": "allow", "reason": "harmless"}'),
            StubReply.text("done"),
        )
        config = HookConfig(
            pre_tool_use=[
                HookMatcher(
                    hooks=[HookDefinition(type=HookType.PROMPT, name="guard", prompt="Allow echo.")]
                )
            ]
        )
        conversation = Conversation(agent=stub_agent, workspace=str(tmp_path), hook_config=config)
        conversation.send_message("go")
        conversation.run()
        assert (tmp_path / "log.txt").read_text() == "ran\n"
        spent = conversation.state.stats.by_usage_id["prompt-hook:guard"]
        assert spent.prompt_tokens > 0
        hook_request = stub.requests[1].body
        assert "Allow echo." in hook_request["messages"][0]["content"]
