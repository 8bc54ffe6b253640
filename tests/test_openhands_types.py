"""OpenHands' SDK types cowconv provides: confirmation policies, the conversation
error event, state update events, Metrics, LLM(log_completions=)."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cowconv import (
    LLM,
    Agent,
    AlwaysConfirm,
    ConfirmationPolicyBase,
    ConfirmRisky,
    Conversation,
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    ConversationStats,
    Event,
    InvalidTypeError,
    InvalidValueError,
    Metrics,
    NeverConfirm,
    RemoteError,
    RemoteWorkspace,
    SecurityRisk,
    Usage,
    Workspace,
)
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.backends.wire import event_from_openhands
from cowconv.core.error_classification import FailureKind, classify_error
from cowconv.testing import StubLLMServer, StubReply

RANK = {SecurityRisk.LOW: 1, SecurityRisk.MEDIUM: 2, SecurityRisk.HIGH: 3}
KNOWN = list(RANK)
WAIT = 60.0


class TestConfirmationPolicies:
    @given(
        threshold=st.sampled_from(KNOWN),
        confirm_unknown=st.booleans(),
        risk=st.sampled_from(list(SecurityRisk)),
    )
    def test_confirm_risky_confirms_at_and_above_its_threshold(
        self, threshold: SecurityRisk, confirm_unknown: bool, risk: SecurityRisk
    ):
        policy = ConfirmRisky(threshold=threshold, confirm_unknown=confirm_unknown)
        expected = (
            confirm_unknown if risk is SecurityRisk.UNKNOWN else RANK[risk] >= RANK[threshold]
        )
        assert policy.should_confirm(risk) is expected
        assert AlwaysConfirm().should_confirm(risk) is True
        assert NeverConfirm().should_confirm(risk) is False

    @given(threshold=st.sampled_from(KNOWN), confirm_unknown=st.booleans())
    def test_json_names_the_class_and_validates_back(
        self, threshold: SecurityRisk, confirm_unknown: bool
    ):
        for policy in (
            AlwaysConfirm(),
            NeverConfirm(),
            ConfirmRisky(threshold=threshold, confirm_unknown=confirm_unknown),
        ):
            data = json.loads(policy.model_dump_json())
            assert data["kind"] == type(policy).__name__
            assert ConfirmationPolicyBase.model_validate(data) == policy

    def test_unknown_cannot_be_a_threshold_nor_compared(self):
        with pytest.raises(ValidationError, match="cannot be UNKNOWN"):
            ConfirmRisky(threshold=SecurityRisk.UNKNOWN)
        with pytest.raises(InvalidValueError, match="UNKNOWN risk cannot be compared"):
            SecurityRisk.HIGH.is_riskier(SecurityRisk.UNKNOWN)
        assert SecurityRisk.HIGH.is_riskier(SecurityRisk.HIGH, reflexive=False) is False

    @pytest.mark.slow
    def test_sent_to_openhands_agent_server_and_read_back(
        self,
        openhands_server: str,
        stub: StubLLMServer,
        tmp_path: Path,
    ):
        """A RemoteConversation sends the policy; OpenHands' server keeps exactly it."""
        agent = Agent(llm=LLM(model="openai/stub", base_url=stub.base_url, api_key="sk-stub"))
        conversation = Conversation(
            agent=agent,
            workspace=Workspace(host=openhands_server, working_dir=str(tmp_path)),
            visualizer=None,
        )
        try:
            with httpx.Client(base_url=openhands_server, timeout=WAIT) as client:
                for policy in (
                    AlwaysConfirm(),
                    ConfirmRisky(threshold=SecurityRisk.MEDIUM, confirm_unknown=False),
                    NeverConfirm(),
                ):
                    conversation.set_confirmation_policy(policy)
                    info = client.get(f"/api/conversations/{conversation.id}").json()
                    kept = ConfirmationPolicyBase.model_validate(info["confirmation_policy"])
                    assert kept == policy
        finally:
            conversation.close()


class TestConversationErrorEvent:
    def test_classified_from_code_and_detail_unless_given(self):
        error = ConversationErrorEvent(code="LLMAuthenticationError", detail="bad key")
        assert error.source == "environment"
        assert error.classification is not None
        assert error.classification.kind is FailureKind.AUTH
        assert error.classification.user_action == "settings"
        given_one = classify_error("LLMRateLimitError")
        assert (
            ConversationErrorEvent(code="X", detail="y", classification=given_one).classification
            == given_one
        )
        generic = ConversationErrorEvent(code="APIError", detail="Error code: 429 rate limit")
        assert generic.classification is not None
        assert (generic.classification.kind, generic.classification.retryable) == (
            FailureKind.RATE_LIMIT,
            True,
        )

    @given(code=st.text(max_size=30), detail=st.text(max_size=80))
    @settings(max_examples=60)
    def test_json_round_trip(self, code: str, detail: str):
        error = ConversationErrorEvent(code=code, detail=detail, parent_id="e1")
        back = Event.model_validate_json(error.model_dump_json())
        assert type(back) is ConversationErrorEvent and back == error

    @pytest.mark.slow
    def test_reads_openhands_sdk_json(self, openhands: Path):
        """The JSON OpenHands' SDK writes for its ConversationErrorEvent loads as ours."""
        script = (
            "from openhands.sdk.event.conversation_error import ConversationErrorEvent as E\n"
            "print(E(source='environment', code='LLMAuthenticationError', "
            "detail='invalid api key').model_dump_json())\n"
        )
        written = subprocess.run(
            [str(openhands), "-c", script], capture_output=True, text=True, timeout=300, check=True
        ).stdout
        theirs = json.loads(written)
        ours = Event.model_validate(theirs)
        assert isinstance(ours, ConversationErrorEvent)
        assert (ours.id, ours.code, ours.detail) == (
            theirs["id"],
            "LLMAuthenticationError",
            "invalid api key",
        )
        assert ours.classification is not None
        assert ours.classification.model_dump(mode="json") == theirs["classification"]
        # as cowconv's client reads it from an OpenHands agent server's history
        cached = event_from_openhands(theirs)
        assert cached is not None and Event.model_validate(cached) == ours
        unknown = {**theirs, "classification": {**theirs["classification"], "kind": "newer"}}
        cached = event_from_openhands(unknown)
        assert cached is not None and Event.model_validate(cached) == ours  # derived again

    def test_recorded_in_a_history_but_never_sent_to_the_llm(
        self, stub: StubLLMServer, tmp_path: Path
    ):
        conversation = Conversation(
            agent=Agent(llm=LLM(**stub.llm_settings())), workspace=str(tmp_path), visualizer=None
        )
        conversation.send_message("hello")
        recorded = conversation.append_event(
            ConversationErrorEvent(code="RuntimeError", detail="interrupted startup")
        )
        update = conversation.append_event(
            ConversationStateUpdateEvent(key="execution_status", value="idle")
        )
        events = conversation.state.events
        assert [events[-2].id, events[-1].id] == [recorded.id, update.id]
        stub.script(StubReply.text("Hi."))
        conversation.run()
        sent = json.dumps(stub.requests[-1].messages)
        assert "hello" in sent
        assert "interrupted startup" not in sent and "execution_status" not in sent


class TestMetrics:
    @given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), max_size=20))
    def test_costs_add_up_and_copies_are_independent(self, costs: list[float]):
        metrics = Metrics(model_name="m")
        for cost in costs:
            metrics.add_cost(cost)
        assert metrics.accumulated_cost == pytest.approx(sum(costs))
        assert [c.cost for c in metrics.costs] == costs
        assert all(c.model == "m" for c in metrics.costs)
        copy = metrics.deep_copy()
        copy.add_cost(1.0)
        assert metrics.accumulated_cost == pytest.approx(sum(costs))
        assert len(metrics.costs) == len(costs)

    def test_bad_costs_are_refused_and_nothing_is_lost(self):
        metrics = Metrics()
        metrics.add_cost(0.5)
        for bad in (-0.1, float("nan"), float("inf"), "1"):
            with pytest.raises(InvalidValueError):
                metrics.add_cost(bad)  # type: ignore[arg-type]
        assert (metrics.accumulated_cost, len(metrics.costs)) == (0.5, 1)
        with pytest.raises(ValidationError):
            metrics.accumulated_cost = -1.0
        assert metrics.accumulated_cost == 0.5

    def test_tokens_latencies_and_merge(self):
        a = Metrics(model_name="a")
        a.add_cost(0.25)
        a.add_token_usage(prompt_tokens=10, completion_tokens=2)
        a.add_response_latency(1.5, "r1")
        b = Metrics(model_name="b")
        b.add_cost(0.5)
        b.add_token_usage(prompt_tokens=1, completion_tokens=1)
        a.merge(b)
        assert a.accumulated_cost == 0.75
        assert a.usage == Usage(accumulated_cost=0.75, prompt_tokens=11, completion_tokens=3)
        assert [r.response_id for r in a.response_latencies] == ["r1"]

    @given(
        st.dictionaries(
            st.text(min_size=1, max_size=8),
            st.floats(min_value=0, max_value=1e3, allow_nan=False),
            max_size=5,
        )
    )
    def test_conversation_stats_from_usage_to_metrics(self, costs: dict[str, float]):
        accounts = {}
        for usage_id, cost in costs.items():
            accounts[usage_id] = Metrics(model_name=usage_id)
            accounts[usage_id].add_cost(cost)
            accounts[usage_id].add_token_usage(prompt_tokens=3)
        stats = ConversationStats(usage_to_metrics=accounts)
        assert stats.accumulated_cost == pytest.approx(sum(costs.values()))
        assert stats.prompt_tokens == 3 * len(costs)
        assert {k: v.accumulated_cost for k, v in stats.usage_to_metrics.items()} == costs
        # its JSON (as a server streams it) loads back the same
        assert ConversationStats.model_validate_json(stats.model_dump_json()) == stats
        # and OpenHands' JSON of the accounts reads too
        as_json = {k: v.model_dump(mode="json") for k, v in accounts.items()}
        assert ConversationStats(usage_to_metrics=as_json) == stats

    def test_conversation_stats_refuses_what_is_not_an_account(self):
        with pytest.raises(InvalidTypeError, match="must be a Metrics or a Usage"):
            ConversationStats(usage_to_metrics={"agent": 0.75})
        with pytest.raises(InvalidTypeError, match="must map usage ids"):
            ConversationStats(usage_to_metrics=[("agent", Metrics())])
        with pytest.raises(ValidationError, match="not both"):
            ConversationStats(usage_to_metrics={}, by_usage_id={})


class TestLogCompletions:
    def test_each_answered_call_is_written_as_utf8_json_without_the_key(
        self, stub: StubLLMServer, tmp_path: Path
    ):
        folder = tmp_path / "completions"
        llm = LLM(**stub.llm_settings(), log_completions=True, log_completions_folder=str(folder))
        stub.script(StubReply.text("héllo 🔐"), StubReply.text("again"))
        llm.completion([{"role": "user", "content": "say hi ✓"}])
        llm.completion([{"role": "user", "content": "twice"}])
        files = sorted(folder.iterdir())
        assert len(files) == 2
        texts = [f.read_text(encoding="utf-8") for f in files]
        records = [json.loads(text) for text in texts]
        by_prompt = {r["request"]["messages"][0]["content"]: r for r in records}
        assert set(by_prompt) == {"say hi ✓", "twice"}
        first = by_prompt["say hi ✓"]
        assert first["response"]["choices"][0]["message"]["content"] == "héllo 🔐"
        assert "🔐" in "".join(texts)  # written as UTF-8, not escaped
        assert first["usage_id"] == llm.usage_id
        key = llm.api_key.get_secret_value() if llm.api_key is not None else "sk-"
        assert all(key not in text for text in texts)

    def test_off_by_default_and_an_unwritable_folder_loses_no_answer(
        self, stub: StubLLMServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ):
        assert LLM(model="openai/gpt-4o").log_completions is False
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        llm = LLM(**stub.llm_settings(), log_completions=True, log_completions_folder=str(blocker))
        stub.script(StubReply.text("still here"))
        with caplog.at_level(logging.WARNING, logger="cowconv.llm"):
            response = llm.completion([{"role": "user", "content": "hi"}])
        assert response.content == "still here"
        assert "could not log the completion" in caplog.text

    def test_kept_in_the_llm_json(self):
        llm = LLM(model="openai/gpt-4o", log_completions=True, log_completions_folder="x")
        assert LLM.model_validate_json(llm.model_dump_json()) == llm
        with pytest.raises(ValidationError):
            LLM(model="openai/gpt-4o", log_completions="sometimes")  # type: ignore[arg-type]


def test_state_update_is_an_event_the_remote_cache_skips():
    update = ConversationStateUpdateEvent(key="stats", value={"accumulated_cost": 0.5})
    assert isinstance(update, Event) and update.source == "environment"
    assert Event.model_validate_json(update.model_dump_json()) == update
    with pytest.raises(InvalidTypeError):
        ConversationStats(usage_to_metrics={"agent": object()})  # type: ignore[dict-item]


@pytest.mark.slow
def test_update_state_from_event_feeds_the_cost_close_reports(
    openhands_server: str,
    stub: StubLLMServer,
    tmp_path: Path,
):
    """state.update_state_from_event keeps a streamed stats update; close() reports its cost."""
    workspace = RemoteWorkspace(host=openhands_server, working_dir=str(tmp_path))
    agent = Agent(llm=LLM(model="openai/stub", base_url=stub.base_url, api_key="sk-stub"))
    conversation = Conversation(agent=agent, workspace=workspace, visualizer=None)
    account = Metrics(model_name="stub")
    account.add_cost(0.75)
    state = conversation.state
    state.update_state_from_event(
        ConversationStateUpdateEvent(
            key="stats", value=ConversationStats(usage_to_metrics={"agent": account})
        )
    )
    with pytest.raises(InvalidTypeError, match="expected a ConversationStateUpdateEvent"):
        state.update_state_from_event(ConversationErrorEvent(code="E", detail="d"))  # type: ignore[arg-type]
    conversation.close()
    assert workspace.accumulated_cost == 0.75


def test_a_local_state_refuses_a_server_update(tmp_path: Path):
    conversation = Conversation(
        agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=str(tmp_path), visualizer=None
    )
    update = ConversationStateUpdateEvent(key="execution_status", value="idle")
    with pytest.raises(InvalidTypeError, match="only a RemoteConversation"):
        conversation.state.update_state_from_event(update)
    assert len(conversation.state.events) == 0  # nothing recorded


def test_cowconv_server_takes_every_policy(stub: StubLLMServer, tmp_path: Path):
    """cowconv's agent server acts on confirmation policies: each one is taken and kept."""
    agent = Agent(llm=LLM(**stub.llm_settings()))
    with BackgroundServer(create_app()) as server:
        conversation = Conversation(
            agent=agent,
            workspace=Workspace(host=server.url, working_dir=str(tmp_path)),
            visualizer=None,
        )
        try:
            for policy in (NeverConfirm(), AlwaysConfirm(), ConfirmRisky(threshold="MEDIUM")):
                conversation.set_confirmation_policy(policy)
                assert conversation.state.confirmation_policy == policy
            with pytest.raises(RemoteError) as refused:
                conversation.set_confirmation_policy({"kind": "SometimesConfirm"})
            assert refused.value.status_code == 422 and "policy" in str(refused.value)
        finally:
            conversation.close()
