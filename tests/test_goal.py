"""run_goal: a conversation driven until a judge LLM finds its objective done, with the agent
and the judge answering from stub servers through litellm."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowconv import (
    LLM,
    Agent,
    Conversation,
    GoalController,
    InvalidValueError,
    MessageEvent,
    Tool,
    run_goal,
)
from cowconv.goal import parse_verdict
from cowconv.testing import StubLLMServer, StubReply


def _verdict(score: float, complete: bool, missing: str = "") -> StubReply:
    return StubReply.text(json.dumps({"score": score, "complete": complete, "missing": missing}))


@pytest.fixture
def judge_server():
    with StubLLMServer() as server:
        yield server


def _conversation(stub: StubLLMServer, tmp_path) -> Conversation:
    agent = Agent(llm=LLM(**stub.llm_settings(), usage_id="agent"), tools=[Tool(name="terminal")])
    return Conversation(agent=agent, workspace=tmp_path, visualizer=None)


class TestRunGoal:
    def test_runs_until_the_judge_agrees(self, stub, judge_server, tmp_path):
        """The objective is sent and run; a judge that finds something missing gets that sent
        back as the next message; the loop ends complete when the judge agrees."""
        judge_server.script(_verdict(0.3, False, "the test output"), _verdict(1.0, True))
        conversation = _conversation(stub, tmp_path)
        judge = LLM(**judge_server.llm_settings(), usage_id="goal-judge")
        outcome = run_goal(conversation, "Run `echo tests pass` and show it.", judge)
        assert (outcome.status, outcome.iterations) == ("complete", 2)
        assert outcome.verdict.score == 1.0
        users = [
            e.llm_message.text
            for e in conversation.state.events
            if isinstance(e, MessageEvent) and e.source == "user"
        ]
        assert users[0] == "Run `echo tests pass` and show it."
        assert "Still missing: the test output" in users[1]
        # The judge saw the agent's work: the command's output is in its transcript.
        first_audit = judge_server.requests[0].messages
        assert first_audit[0]["role"] == "system" and "JSON" in first_audit[0]["content"]
        assert "tests pass" in first_audit[1]["content"]
        assert len(judge_server.requests) == 2
        assert len(judge.metrics.latencies) == 2

    def test_stops_at_the_cap(self, stub, judge_server, tmp_path):
        """A judge that never agrees ends the loop 'capped' after max_iterations audits."""
        judge_server.script(*[_verdict(0.1, False, "everything")] * 2)
        conversation = _conversation(stub, tmp_path)
        judge = LLM(**judge_server.llm_settings())
        outcome = run_goal(conversation, "Do it.", judge, max_iterations=2)
        assert (outcome.status, outcome.iterations, outcome.verdict.missing) == (
            "capped",
            2,
            "everything",
        )

    def test_an_unreadable_verdict_is_not_done(self, stub, judge_server, tmp_path):
        """A judge that answers without JSON scores 0: the loop does not finish on it."""
        judge_server.script(StubReply.text("Looks fine to me!"))
        outcome = run_goal(
            _conversation(stub, tmp_path),
            "Do it.",
            LLM(**judge_server.llm_settings()),
            max_iterations=1,
        )
        assert (outcome.status, outcome.verdict.score) == ("capped", 0.0)

    @pytest.mark.parametrize(
        ("objective", "iterations"), [("", 3), ("   ", 3), ("ok", 0), ("ok", -1)]
    )
    def test_bad_settings_are_refused(self, objective, iterations):
        """An empty objective or fewer than one audit is an InvalidValueError."""
        with pytest.raises(InvalidValueError):
            GoalController(objective, LLM(model="openai/gpt-4o"), max_iterations=iterations)


class TestParseVerdict:
    @given(
        score=st.floats(allow_nan=False, allow_infinity=False),
        complete=st.none() | st.booleans(),
        chatter=st.text(alphabet="abc .:\n", max_size=20),
    )
    def test_score_is_clamped_and_complete_defaults_to_a_full_score(self, score, complete, chatter):
        """Any JSON verdict, with text around it, parses to a score in [0, 1]; complete is
        the judge's when given, else whether the score is 1."""
        body = {"score": score, **({} if complete is None else {"complete": complete})}
        verdict = parse_verdict(f"{chatter}{json.dumps(body)}{chatter}")
        assert verdict.score == min(1.0, max(0.0, score))
        assert verdict.complete is (verdict.score >= 1.0 if complete is None else complete)
