"""Confirmation mode in cowconv's own loop: policies, waiting, confirming, rejecting, forks.

Runs through the scripted ``TestLLM`` and the real terminal tool (a real
shell), on memory, SQLite, and the agent server (real uvicorn; the agent
thinks through the stub LLM server over litellm's HTTP path).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cowconv import (
    Agent,
    AlwaysConfirm,
    ConfirmRisky,
    Conversation,
    ConversationState,
    ExecutionStatus,
    InvalidTypeError,
    Message,
    MessageToolCall,
    NeverConfirm,
    SecurityRisk,
    Tool,
    UserRejectObservation,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.security import LLMSecurityAnalyzer, SecurityAnalysisEvent
from cowconv.testing import StubLLMServer, StubReply, TestLLM

WAITING = ExecutionStatus.WAITING_FOR_CONFIRMATION

SEEN: list[tuple[list[Any], list[Any]]] = []
"""What each RecordingLLM call was given (messages, tools), in order."""


class RecordingLLM(TestLLM):
    """A scripted LLM that also keeps what the loop sent it (to check the model's view)."""

    def completion(  # type: ignore[override]
        self, messages: Sequence[Any], tools: Sequence[Any] | None = (), *args: Any, **kw: Any
    ) -> Any:
        SEEN.append((list(messages), list(tools or ())))
        return super().completion(messages, tools, *args, **kw)


@pytest.fixture(autouse=True)
def _forget_seen() -> Iterator[None]:
    SEEN.clear()
    yield
    SEEN.clear()


def call(call_id: str, command: str, risk: str | None = None) -> Message:
    """An assistant message asking the terminal to run ``command`` (with a risk, if given)."""
    arguments: dict[str, str] = {"command": command}
    if risk is not None:
        arguments["security_risk"] = risk
    tool_call = MessageToolCall(id=call_id, name="terminal", arguments=json.dumps(arguments))
    return Message(role="assistant", content="", tool_calls=[tool_call])


def text(content: str) -> Message:
    return Message(role="assistant", content=content)


def conversation(tmp_path: Path, *script: Message, **options: object) -> Conversation:
    llm = RecordingLLM.from_messages(list(script))
    agent = Agent(llm=llm, tools=[Tool(name="terminal")])
    return Conversation(agent=agent, workspace=str(tmp_path), **options)  # type: ignore[arg-type]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class TestAlwaysConfirm:
    def test_run_waits_with_the_calls_recorded_and_not_run(self, tmp_path: Path) -> None:
        """A step's tool calls are recorded, not run, and the run ends waiting."""
        chat = conversation(tmp_path, call("c1", "echo ran >> log.txt"), text("done"))
        chat.set_confirmation_policy(AlwaysConfirm())
        chat.send_message("log it")
        chat.run()
        state = chat.state
        assert state.execution_status is WAITING
        assert [a.tool_call_id for a in ConversationState.get_unmatched_actions(state.events)] == [
            "c1"
        ]
        assert lines(tmp_path / "log.txt") == []

    def test_next_run_confirms_and_runs_them(self, tmp_path: Path) -> None:
        """run() again runs the waiting calls, then the agent goes on to its answer."""
        chat = conversation(tmp_path, call("c1", "echo ran >> log.txt"), text("done"))
        chat.set_confirmation_policy(AlwaysConfirm())
        chat.send_message("log it")
        chat.run()
        chat.run()
        assert lines(tmp_path / "log.txt") == ["ran"]
        assert chat.state.execution_status is ExecutionStatus.FINISHED
        assert chat.state.events[-1].text == "done"

    def test_reject_answers_with_a_rejection_and_the_agent_goes_on(self, tmp_path: Path) -> None:
        """reject_pending_actions records OpenHands' rejection; the model reads it next step."""
        llm = RecordingLLM.from_messages([call("c1", "echo ran >> log.txt"), text("understood")])
        chat = Conversation(
            agent=Agent(llm=llm, tools=[Tool(name="terminal")]), workspace=str(tmp_path)
        )
        chat.set_confirmation_policy(AlwaysConfirm())
        chat.send_message("log it")
        chat.run()
        chat.reject_pending_actions("not today")
        rejection = chat.state.events[-1]
        assert isinstance(rejection, UserRejectObservation)
        assert rejection.rejection_reason == "not today" and rejection.rejection_source == "user"
        assert rejection.action_id == chat.state.events[-2].id
        assert chat.state.execution_status is ExecutionStatus.IDLE
        chat.run()
        assert lines(tmp_path / "log.txt") == []
        assert chat.state.events[-1].text == "understood"
        tool_message = [m for m in SEEN[-1][0] if m["role"] == "tool"][-1]
        assert tool_message["content"] == "Action rejected: not today"

    def test_reject_json_is_openhands(self, tmp_path: Path) -> None:
        """The rejection's JSON has OpenHands' fields and reads back as a rejection."""
        chat = conversation(tmp_path, call("c1", "true"))
        chat.set_confirmation_policy(AlwaysConfirm())
        chat.send_message("go")
        chat.run()
        chat.reject_pending_actions()
        dumped = chat.state.events[-1].model_dump(mode="json")
        assert dumped["kind"] == "UserRejectObservation" and "output" not in dumped
        assert dumped["rejection_reason"] == "User rejected the action"
        again = UserRejectObservation.model_validate(dumped)
        assert again.output == "Action rejected: User rejected the action"

    def test_an_answer_without_calls_does_not_wait(self, tmp_path: Path) -> None:
        """A plain answer finishes: there is nothing to confirm."""
        chat = conversation(tmp_path, text("hello"))
        chat.set_confirmation_policy(AlwaysConfirm())
        chat.send_message("hi")
        chat.run()
        assert chat.state.execution_status is ExecutionStatus.FINISHED

    def test_switching_to_never_confirm_runs_at_once(self, tmp_path: Path) -> None:
        """NeverConfirm (the default) runs every call in the same run."""
        chat = conversation(tmp_path, call("c1", "echo ran >> log.txt"), text("done"))
        chat.set_confirmation_policy(AlwaysConfirm())
        chat.set_confirmation_policy(NeverConfirm())
        assert not chat.confirmation_policy_active
        chat.send_message("log it")
        chat.run()
        assert lines(tmp_path / "log.txt") == ["ran"]

    def test_bad_policy_is_refused(self, tmp_path: Path) -> None:
        """A policy that is not one is a clear error, and nothing changes."""
        chat = conversation(tmp_path)
        with pytest.raises(InvalidTypeError, match="confirmation policy"):
            chat.set_confirmation_policy("always")  # type: ignore[arg-type]
        assert isinstance(chat.state.confirmation_policy, NeverConfirm)


class TestConfirmRiskyWithAnalyzer:
    def test_model_rates_its_calls_and_only_high_ones_wait(self, tmp_path: Path) -> None:
        """With LLMSecurityAnalyzer, the model's security_risk decides; the analysis is kept."""
        llm = RecordingLLM.from_messages(
            [
                call("c1", "echo low >> log.txt", risk="LOW"),
                call("c2", "echo high >> log.txt", risk="HIGH"),
                text("done"),
            ]
        )
        chat = Conversation(
            agent=Agent(llm=llm, tools=[Tool(name="terminal")]), workspace=str(tmp_path)
        )
        chat.set_security_analyzer(LLMSecurityAnalyzer())
        chat.set_confirmation_policy(ConfirmRisky())
        assert chat.is_confirmation_mode_active
        chat.send_message("log twice")
        chat.run()
        assert chat.state.execution_status is WAITING
        assert lines(tmp_path / "log.txt") == ["low"]
        analyses = [e for e in chat.state.events if isinstance(e, SecurityAnalysisEvent)]
        assert [list(a.risks.values()) for a in analyses] == [
            [SecurityRisk.LOW],
            [SecurityRisk.HIGH],
        ]
        waiting = ConversationState.get_unmatched_actions(chat.state.events)
        assert [a.security_risk for a in waiting] == [SecurityRisk.HIGH]
        assert "security_risk" not in waiting[0].arguments
        spec = SEEN[-1][1][0]["function"]["parameters"]
        assert "security_risk" in spec["properties"] and "security_risk" in spec["required"]
        chat.run()
        assert lines(tmp_path / "log.txt") == ["low", "high"]

    def test_without_analyzer_the_schema_has_no_risk(self, tmp_path: Path) -> None:
        """The security_risk argument is only asked for while an analyzer is set."""
        llm = RecordingLLM.from_messages([text("done")])
        chat = Conversation(
            agent=Agent(llm=llm, tools=[Tool(name="terminal")]), workspace=str(tmp_path)
        )
        chat.send_message("hi")
        chat.run()
        assert "security_risk" not in SEEN[-1][1][0]["function"]["parameters"]["properties"]

    def test_a_bad_risk_value_is_an_argument_error(self, tmp_path: Path) -> None:
        """A risk that is not LOW/MEDIUM/HIGH: the call is not run, the model is told why."""
        chat = conversation(
            tmp_path, call("c1", "echo ran >> log.txt", risk="SEVERE"), text("sorry")
        )
        chat.set_security_analyzer(LLMSecurityAnalyzer())
        chat.send_message("go")
        chat.run()
        assert lines(tmp_path / "log.txt") == []
        results = [e for e in chat.state.events if e.kind == "ObservationEvent"]
        assert "security_risk must be one of" in results[0].output


class TestForkWhileWaiting:
    def test_fork_waits_for_the_same_calls(self, tmp_path: Path) -> None:
        """A fork of a waiting conversation waits too, for its own copy of the calls."""
        chat = conversation(tmp_path, call("c1", "echo ran >> log.txt"), text("done"))
        chat.set_confirmation_policy(AlwaysConfirm())
        chat.send_message("log it")
        chat.run()
        fork = chat.fork()
        assert fork.state.execution_status is WAITING
        assert isinstance(fork.state.confirmation_policy, AlwaysConfirm)
        fork.run()  # confirmed in the fork: the source still waits
        assert lines(tmp_path / "log.txt") == ["ran"]
        assert chat.state.execution_status is WAITING
        assert len(ConversationState.get_unmatched_actions(chat.state.events)) == 1
        chat.reject_pending_actions("source says no")
        assert lines(tmp_path / "log.txt") == ["ran"]
        assert fork.state.events[-1].text == "done"

    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        operations=st.lists(
            st.tuples(
                st.sampled_from(["source", "fork"]),
                st.sampled_from(["reject", "confirm", "always", "never", "risky"]),
                st.text(alphabet="abc xyz", max_size=8),
            ),
            max_size=5,
        )
    )
    def test_fork_is_a_deep_copy(
        self, tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, str, str]]
    ) -> None:
        """Confirming, rejecting or changing the policy on one side never changes the other:
        each side ends as a deep copy of the waiting snapshot given only its own operations."""
        directory = tmp_path_factory.mktemp("fork")
        chat = conversation(directory, call("c1", "true"), *[text("ok")] * 20)
        chat.set_confirmation_policy(AlwaysConfirm())
        chat.send_message("go")
        chat.run()
        fork = chat.fork()
        sides = {"source": chat, "fork": fork}
        model = {name: copy.deepcopy(side.state.events) for name, side in sides.items()}
        for side, operation, reason in operations:
            target = sides[side]
            if operation == "reject":
                target.reject_pending_actions(reason)
            elif operation == "confirm":
                target.run()
            else:
                policy = {"always": AlwaysConfirm(), "never": NeverConfirm()}.get(
                    operation, ConfirmRisky()
                )
                target.set_confirmation_policy(policy)
        for name, side in sides.items():
            own = [op for op in operations if op[0] == name]
            if not own:
                assert side.state.events == model[name]
                assert side.state.execution_status is WAITING
                assert isinstance(side.state.confirmation_policy, AlwaysConfirm)
            else:
                assert list(side.state.events)[: len(model[name])] == list(model[name])


class TestPersisted:
    def test_sqlite_reopen_keeps_waiting_and_policy(
        self, tmp_path: Path, stub: StubLLMServer, stub_agent: Agent
    ) -> None:
        """A waiting conversation reopened from its SQLite file still waits; run() confirms."""
        data = tmp_path / "data"
        work = tmp_path / "work"
        work.mkdir()
        stub.script(
            StubReply.tool_call("terminal", command="echo ran >> log.txt", security_risk="HIGH"),
            StubReply.text("done"),
        )
        chat = Conversation(
            agent=stub_agent, workspace=str(work), persistence_dir=data, conversation_id="c-1"
        )
        chat.set_confirmation_policy(ConfirmRisky())
        chat.set_security_analyzer(LLMSecurityAnalyzer())
        chat.send_message("log it")
        chat.run()
        assert chat.state.execution_status is WAITING
        chat.close()
        again = Conversation(
            agent=stub_agent, workspace=str(work), persistence_dir=data, conversation_id="c-1"
        )
        state = again.state
        assert state.execution_status is WAITING
        assert isinstance(state.confirmation_policy, ConfirmRisky)
        assert isinstance(state.security_analyzer, LLMSecurityAnalyzer)
        (waiting,) = ConversationState.get_unmatched_actions(state.events)
        assert waiting.security_risk is SecurityRisk.HIGH
        again.run()
        assert lines(work / "log.txt") == ["ran"]
        assert again.state.execution_status is ExecutionStatus.FINISHED
        again.close()


class TestAgentServer:
    def test_remote_conversation_waits_confirms_and_rejects(
        self, tmp_path: Path, stub: StubLLMServer, stub_agent: Agent
    ) -> None:
        """Through real uvicorn: a confirming policy is taken, runs wait, forks wait, and
        OpenHands' respond_to_confirmation route runs or rejects what waits."""
        stub.script(
            StubReply.tool_call("terminal", command="echo one >> log.txt"),
            StubReply.text("done"),
            StubReply.tool_call("terminal", command="echo two >> log.txt"),
        )
        with BackgroundServer(create_app()) as server:
            workspace = Workspace(host=server.url, working_dir=str(tmp_path))
            chat = Conversation(agent=stub_agent, workspace=workspace)
            try:
                chat.set_confirmation_policy(AlwaysConfirm())
                assert isinstance(chat.state.confirmation_policy, AlwaysConfirm)
                chat.send_message("log one")
                chat.run()
                assert chat.state.execution_status is WAITING
                assert lines(tmp_path / "log.txt") == []
                fork = chat.fork()
                assert fork.state.execution_status is WAITING
                chat.run()  # confirms
                assert lines(tmp_path / "log.txt") == ["one"]
                assert chat.state.execution_status is ExecutionStatus.FINISHED
                fork.reject_pending_actions("no thanks")  # OpenHands' route, accept=False
                kinds = [e.kind for e in fork.state.events]
                assert kinds[-1] == "UserRejectObservation"
                assert fork.state.execution_status is ExecutionStatus.IDLE
                assert lines(tmp_path / "log.txt") == ["one"]
                fork.close()
            finally:
                chat.close()

    def test_create_with_policy_and_analyzer(self, tmp_path: Path, stub_agent: Agent) -> None:
        """OpenHands' create request with a confirmation policy and a security analyzer."""
        with BackgroundServer(create_app()) as server:
            body = {
                "agent": stub_agent.model_dump(mode="json", context={"expose_secrets": True}),
                "workspace": {"kind": "LocalWorkspace", "working_dir": str(tmp_path)},
                "confirmation_policy": {"kind": "ConfirmRisky", "threshold": "MEDIUM"},
                "security_analyzer": {"kind": "PatternSecurityAnalyzer"},
            }
            with httpx.Client(base_url=server.url, timeout=60) as client:
                created = client.post("/api/conversations", json=body)
                assert created.status_code == 201, created.text
                info = created.json()
                assert info["confirmation_policy"]["threshold"] == "MEDIUM"
                assert info["security_analyzer"]["kind"] == "PatternSecurityAnalyzer"
                path = f"/api/conversations/{info['id']}"
                removed = client.post(f"{path}/security_analyzer", json={"security_analyzer": None})
                assert removed.status_code == 200
                assert client.get(path).json()["security_analyzer"] is None
