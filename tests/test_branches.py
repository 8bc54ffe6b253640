"""run_branches: A/B fan-out of one conversation, run concurrently against the stub."""

from __future__ import annotations

import pytest

from cowconv import LLM, Agent, Branch, Conversation, ExecutionStatus, MessageEvent, run_branches


@pytest.fixture
def source(stub_agent: Agent, tmp_path) -> Conversation:
    conversation = Conversation(agent=stub_agent, workspace=tmp_path)
    conversation.send_message("Run `echo shared-start` in the terminal.")
    conversation.run()
    return conversation


class TestRunBranches:
    def test_hundred_branches_finish_and_leave_the_source_alone(self, source, stub):
        """100 branches all finish with their own answer; the source is unchanged."""
        before = source.state
        requests_before = len(stub.requests)
        forks = run_branches(source, [f"Run `echo branch-{n}`." for n in range(100)])
        assert source.state is before
        assert len({fork.id for fork in forks}) == 100
        for n, fork in enumerate(forks):
            assert fork.state.execution_status is ExecutionStatus.FINISHED
            assert fork.state.events[: len(before.events)] == before.events
            assert fork.state.events[-1].text.endswith(f"branch-{n}\n\n[exit code: 0]")
            assert fork.state.forked_from_conversation_id == source.id
        assert len(stub.requests) - requests_before == 200

    def test_branches_with_their_own_agent_tags_and_title(self, source, stub):
        """A Branch can bring its own agent, title and tags; the rest keep the source's agent."""
        alt = Agent(llm=LLM(**stub.llm_settings(), usage_id="alt"))
        forks = run_branches(
            source,
            [Branch("Hello A", title="A", tags={"variant": "A"}), Branch("Hello B", agent=alt)],
        )
        assert forks[0].state.tags == {"title": "A", "variant": "A"}
        assert forks[0].state.agent is source.state.agent
        assert forks[1].state.agent is alt
        assert set(forks[1].state.stats.by_usage_id) == {"alt"}
        assert set(forks[0].state.stats.by_usage_id) == {"default"}
        last_asks = [
            [e.text for e in f.state.events if isinstance(e, MessageEvent) and e.role == "user"][-1]
            for f in forks
        ]
        assert last_asks == ["Hello A", "Hello B"]
        assert {f.state.events[-1].text for f in forks} == {"Earlier I ran: `echo shared-start`"}

    def test_from_event_and_carried_metrics(self, source):
        """from_event_id and reset_metrics are passed to every fork."""
        first = source.state.events[1]  # the first message, after the system prompt
        (fork,) = run_branches(source, ["Hi"], from_event_id=first.id, reset_metrics=False)
        messages = [e.text for e in fork.state.events if isinstance(e, MessageEvent)]
        assert messages[:2] == ["Run `echo shared-start` in the terminal.", "Hi"]
        assert fork.state.stats.prompt_tokens > source.state.stats.prompt_tokens

    def test_no_branches(self, source):
        """No branches, no forks."""
        assert run_branches(source, []) == []

    def test_bad_branches_are_refused_before_any_fork(self, source):
        """A branch that is neither a Branch nor a str is a TypeError, and nothing runs."""
        before = source.state
        with pytest.raises(TypeError, match="Branch values or str"):
            run_branches(source, ["fine", 42])
        with pytest.raises(TypeError, match="message must be a str"):
            Branch(b"bytes")
        with pytest.raises(ValueError, match="max_workers"):
            run_branches(source, ["x"], max_workers=0)
        assert source.state is before

    def test_raising_runs_are_reported_together(self, source, monkeypatch):
        """Runs that raise (not errors a run records) come back as an exception group."""

        def broken(self):
            raise OSError("disk full")

        monkeypatch.setattr(Conversation, "run", broken)
        with pytest.raises(ExceptionGroup) as raised:
            run_branches(source, ["a", "b"])
        assert [str(e) for e in raised.value.exceptions] == ["disk full", "disk full"]
