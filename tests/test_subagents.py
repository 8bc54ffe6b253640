"""Sub-agents: the registry, agent definitions, and the task tool driving child conversations."""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, PrivateAttr

from cowconv import (
    LLM,
    Agent,
    Conversation,
    InvalidTypeError,
    InvalidValueError,
    LLMError,
    LLMProfileStore,
    LLMToolCall,
    Message,
    MessageToolCall,
    ObservationEvent,
    Tool,
    ToolDefinition,
    ToolResult,
    Workspace,
    register_tool,
)
from cowconv.agent_server import InProcessTransport, create_app
from cowconv.subagent import (
    AgentDefinition,
    agent_definition_to_factory,
    get_agent_factory,
    get_factory_info,
    load_agents_from_dir,
    register_agent,
    register_agent_if_absent,
    register_builtins_agents,
    register_file_agents,
)
from cowconv.subagent import registry as registry_module
from cowconv.testing import ScriptedResponse, StubLLMServer, StubReply, TestLLM
from cowconv.tools import DelegationVisualizer, TaskToolSet
from cowconv.tools.task import TaskObservation, task_records
from cowconv.tools.workflow import WorkflowObservation, WorkflowToolSet
from tests.conftest import IN_PROCESS_HOST

PARENT_COST = 0.01
CHILD_COST = 0.25


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    """Each test sees the registry as it was, and leaves it so."""
    saved = dict(registry_module._FACTORIES)
    yield
    registry_module._FACTORIES.clear()
    registry_module._FACTORIES.update(saved)


class BrainLLM(TestLLM):
    """An offline LLM whose answer is a function of the messages it is sent, at a fixed cost."""

    _brain: Callable[[list[dict[str, Any]]], Message] = PrivateAttr()
    _cost: float = PrivateAttr(default=0.0)
    _seen: list[list[dict[str, Any]]] = PrivateAttr(default_factory=list)

    @classmethod
    def thinking(
        cls, brain: Callable[[list[dict[str, Any]]], Message], cost: float, usage_id: str
    ) -> BrainLLM:
        llm = cls(usage_id=usage_id)
        llm._brain = brain
        llm._cost = cost
        return llm

    def completion(
        self, messages: Sequence[Any], tools: Sequence[Any] | None = (), *args: Any, **kwargs: Any
    ) -> ScriptedResponse:
        sent = [dict(message) for message in messages]
        self._seen.append(sent)
        answer = self._brain(sent)
        return ScriptedResponse(
            id=f"brain-{len(self._seen)}",
            content=answer.text,
            tool_calls=tuple(
                LLMToolCall(id=call.id, name=call.name, arguments=call.arguments)
                for call in answer.tool_calls or ()
            ),
            cost=self._cost,
            prompt_tokens=10,
            completion_tokens=2,
            latency=0.0,
            scripted=answer,
        )


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or () if isinstance(part, dict))


def echo_child(messages: list[dict[str, Any]]) -> Message:
    """A child that answers every prompt it was given so far, joined by ``|``."""
    prompts = [_text(message) for message in messages if message["role"] == "user"]
    return Message(role="assistant", content="|".join(prompts))


def delegating_parent(messages: list[dict[str, Any]]) -> Message:
    """A parent that turns ``new <agent> <prompt>`` / ``resume <task> <agent> <prompt>`` into a
    task call, and answers ``done: <result>`` once the call's result is back."""
    last = messages[-1]
    if last["role"] == "tool":
        return Message(role="assistant", content=f"done: {_text(last)}")
    words = _text(last).split(" ", 3)
    arguments: dict[str, Any]
    if words[0] == "resume":
        arguments = {"prompt": words[3], "subagent_type": words[2], "resume": words[1]}
    else:
        arguments = {"prompt": " ".join(words[2:]), "subagent_type": words[1]}
    arguments["description"] = "echo task"
    call_id = f"call-{len(messages)}"
    return Message(
        role="assistant",
        content="Delegating.",
        tool_calls=[
            MessageToolCall(
                id=call_id, name="task", arguments=json.dumps(arguments), origin="completion"
            )
        ],
    )


@pytest.fixture
def child_llm() -> BrainLLM:
    return BrainLLM.thinking(echo_child, CHILD_COST, usage_id="child")


@pytest.fixture
def echo_agent(child_llm: BrainLLM) -> str:
    register_agent("echo", lambda llm: Agent(llm=child_llm), "Repeats every prompt it got.")
    return "echo"


def parent_agent(model: str = "test-model") -> Agent:
    llm = BrainLLM.thinking(delegating_parent, PARENT_COST, usage_id="agent")
    llm = llm.model_copy(update={"model": model})
    return Agent(llm=llm, tools=[Tool(name=TaskToolSet.name)])


def task_observations(conversation: Conversation) -> list[ObservationEvent]:
    return [
        event
        for event in conversation.state.events
        if isinstance(event, ObservationEvent) and event.tool_name == "task"
    ]


class TestRegistry:
    def test_register_agent_refuses_a_taken_name(self):
        """A second register_agent under one name is an InvalidValueError (a ValueError)."""
        register_agent("taken", lambda llm: Agent(llm=llm), "First.")
        with pytest.raises(InvalidValueError, match="Agent 'taken' already registered"):
            register_agent("taken", lambda llm: Agent(llm=llm), "Second.")
        assert get_agent_factory("taken").definition.description == "First."

    def test_register_agent_if_absent_keeps_the_first(self):
        """register_agent_if_absent says whether it registered and never replaces."""
        assert register_agent_if_absent("once", lambda llm: Agent(llm=llm), "First.")
        assert not register_agent_if_absent("once", lambda llm: Agent(llm=llm), "Second.")
        assert get_agent_factory("once").definition.description == "First."

    def test_bad_arguments_are_clear_errors(self):
        """A factory that is not callable, or a description of another type, is refused."""
        with pytest.raises(InvalidTypeError, match="factory_func"):
            register_agent("bad", "not a function", "x")  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError, match="description"):
            register_agent("bad", lambda llm: Agent(llm=llm), 3)  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError, match="non-empty name"):
            register_agent("", lambda llm: Agent(llm=llm), "x")

    def test_unknown_agent_lists_the_registered_ones(self):
        """get_agent_factory of an unknown name names the agents there are."""
        register_agent("known", lambda llm: Agent(llm=llm), "Known.")
        with pytest.raises(InvalidValueError, match="Unknown agent 'nope'.*known"):
            get_agent_factory("nope")

    def test_old_names_find_the_renamed_agent_with_a_warning(self):
        """'default' finds 'general-purpose', as in OpenHands' SDK, with a DeprecationWarning."""
        register_builtins_agents()
        with pytest.warns(DeprecationWarning, match="general-purpose"):
            factory = get_agent_factory("default")
        assert factory.definition.name == "general-purpose"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert get_agent_factory(None).definition.name == "general-purpose"

    def test_factory_info_lists_descriptions_and_tools(self):
        """get_factory_info shows each agent's description and tools, sorted by name."""
        register_agent("b-agent", lambda llm: Agent(llm=llm), "Second.")
        register_agent(
            "a-agent",
            lambda llm: Agent(llm=llm),
            AgentDefinition(name="a-agent", description="First.", tools=["terminal"]),
        )
        info = get_factory_info(lambda definition: definition.name.endswith("-agent"))
        assert info == "- **a-agent**: First. (tools: terminal)\n- **b-agent**: Second."


class TestAgentDefinition:
    def test_load_reads_front_matter_and_body(self, tmp_path: Path):
        """A Markdown agent file gives its settings, system prompt, examples and extras."""
        path = tmp_path / "reviewer.md"
        path.write_text(
            "---\nname: code-reviewer\ndescription: Reviews. <example>a PR</example>\n"
            "tools: [terminal, file_editor]\nskills: a, b\nmax_iteration_per_run: 7\n"
            "permission_mode: Never_Confirm\nowner: qa\n---\n\nReview carefully.\n"
        )
        loaded = AgentDefinition.load(path)
        assert (loaded.name, loaded.tools, loaded.skills) == (
            "code-reviewer",
            ["terminal", "file_editor"],
            ["a", "b"],
        )
        assert loaded.system_prompt == "Review carefully."
        assert loaded.when_to_use_examples == ["a PR"]
        assert (loaded.max_iteration_per_run, loaded.permission_mode) == (7, "never_confirm")
        assert loaded.metadata == {"owner": "qa"}
        assert loaded.source == path.as_posix()

    def test_bad_files_are_clear_errors(self, tmp_path: Path):
        """Front matter that is not a mapping, or a bad permission mode, is an error naming it."""
        listed = tmp_path / "listed.md"
        listed.write_text("---\n- a\n- b\n---\nBody.\n")
        with pytest.raises(InvalidValueError, match="must be a mapping"):
            AgentDefinition.load(listed)
        mode = tmp_path / "mode.md"
        mode.write_text("---\npermission_mode: sometimes\n---\nBody.\n")
        with pytest.raises(InvalidValueError, match="invalid permission_mode 'sometimes'"):
            AgentDefinition.load(mode)

    def test_load_agents_from_dir_skips_what_does_not_load(self, tmp_path: Path):
        """A directory's good files load; a broken one and README.md are skipped."""
        (tmp_path / "good.md").write_text("---\ndescription: Good.\n---\nBody.\n")
        (tmp_path / "bad.md").write_text("---\npermission_mode: x\n---\nBody.\n")
        (tmp_path / "README.md").write_text("# Agents\n")
        assert [d.name for d in load_agents_from_dir(tmp_path)] == ["good"]
        assert load_agents_from_dir(tmp_path / "missing") == []

    def test_factory_builds_the_described_agent(self):
        """The factory's agent has the tools, the prompt as its context's suffix, a condenser."""
        definition = AgentDefinition(name="runner", tools=["terminal"], system_prompt="Run it.")
        llm = TestLLM(usage_id="parent")
        agent = agent_definition_to_factory(definition)(llm)
        assert [tool.name for tool in agent.tools] == ["terminal"]
        assert agent.agent_context is not None
        assert agent.agent_context.system_message_suffix == "Run it."
        assert agent.llm is llm
        assert agent.condenser is not None and agent.condenser.llm.usage_id == "condenser"
        bare = agent_definition_to_factory(AgentDefinition(name="bare"))(llm)
        assert bare.agent_context is None

    def test_skills_are_found_by_name_in_the_project(self, tmp_path: Path, monkeypatch):
        """A skill named by the definition comes from the project's files; a missing one fails."""
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        (tmp_path / "AGENTS.md").write_text("Run the tests with make test.")
        definition = AgentDefinition(name="tester", skills=["agents"])
        agent = agent_definition_to_factory(definition, work_dir=tmp_path)(TestLLM())
        assert agent.agent_context is not None
        assert [skill.content for skill in agent.agent_context.skills] == [
            "Run the tests with make test."
        ]
        missing = AgentDefinition(name="tester", skills=["nope"])
        with pytest.raises(InvalidValueError, match="Skill 'nope' not found .* 'tester'"):
            agent_definition_to_factory(missing, work_dir=tmp_path)

    def test_model_names_an_llm_profile(self, tmp_path: Path):
        """model= other than 'inherit' runs the sub-agent on that stored LLM profile."""
        store = LLMProfileStore(tmp_path)
        store.save("fast", LLM(model="openai/gpt-4o-mini"))
        definition = AgentDefinition(name="quick", model="fast", profile_store_dir=str(tmp_path))
        agent = agent_definition_to_factory(definition)(TestLLM())
        assert agent.llm.model == "openai/gpt-4o-mini"
        unknown = AgentDefinition(name="quick", model="slow", profile_store_dir=str(tmp_path))
        with pytest.raises(InvalidValueError, match="Profile slow not found"):
            agent_definition_to_factory(unknown)(TestLLM())

    def test_factory_refuses_an_unregistered_tool(self):
        """A tool that is not registered is refused when the factory runs, naming it."""
        factory = agent_definition_to_factory(AgentDefinition(name="x", tools=["no-such-tool"]))
        with pytest.raises(InvalidValueError, match="Tool 'no-such-tool' not registered"):
            factory(TestLLM())

    def test_register_file_agents_prefers_the_project_and_code(self, tmp_path: Path, monkeypatch):
        """Project agents win over user agents, and nothing replaces an agent registered by code."""
        home = tmp_path / "home"
        monkeypatch.setenv("HOME", str(home))
        project = tmp_path / "project"
        for folder, text in (
            (project / ".agents" / "agents", "project"),
            (home / ".agents" / "agents", "user"),
        ):
            folder.mkdir(parents=True)
            (folder / "helper.md").write_text(f"---\ndescription: {text}\n---\nHelp.\n")
            (folder / "coded.md").write_text(f"---\ndescription: {text}\n---\nHelp.\n")
        (home / ".agents" / "agents" / "mine.md").write_text("---\ndescription: user\n---\nX\n")
        register_agent("coded", lambda llm: Agent(llm=llm), "code")
        assert sorted(register_file_agents(project)) == ["helper", "mine"]
        assert get_agent_factory("helper").definition.description == "project"
        assert get_agent_factory("mine").definition.level == "user"
        assert get_agent_factory("coded").definition.description == "code"


class TestDelegation:
    def test_child_answer_reaches_the_parent(self, tmp_path: Path, echo_agent: str):
        """The parent's task call runs the child; its answer is the observation the model sees."""
        parent = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        parent.send_message("new echo count the files")
        parent.run()
        [observation] = task_observations(parent)
        assert isinstance(observation.observation, TaskObservation)
        assert observation.observation.status == "completed"
        assert observation.observation.text == "count the files"
        assert observation.output == (
            "Task ID: task_00000001\nSubagent: echo\nStatus: completed" + "count the files"
        )
        assert parent.state.events[-1].text.startswith("done: Task ID: task_00000001")

    def test_child_events_are_recorded_in_the_parent(self, tmp_path: Path, echo_agent: str):
        """The observation records the child's events: its system prompt, the task, the answer."""
        parent = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        parent.send_message("new echo hello")
        parent.run()
        [(task_id, (child_id, events))] = task_records(parent.state.events).items()
        assert task_id == "task_00000001" and len(child_id) == 32
        assert [event.kind for event in events] == [
            "SystemPromptEvent",
            "MessageEvent",
            "MessageEvent",
        ]
        assert [event.text for event in events[1:]] == ["hello", "hello"]

    def test_child_usage_is_accounted_under_the_task(self, tmp_path: Path, echo_agent: str):
        """The child's cost is in the parent's stats under task:<id>, and in the total."""
        parent = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        parent.send_message("new echo one")
        parent.run()
        parent.send_message("new echo two")
        parent.run()
        stats = parent.conversation_stats
        assert stats.usage_to_metrics["task:task_00000001"].accumulated_cost == CHILD_COST
        assert stats.usage_to_metrics["task:task_00000002"].accumulated_cost == CHILD_COST
        assert stats.usage_to_metrics["agent"].accumulated_cost == pytest.approx(4 * PARENT_COST)
        total = stats.get_combined_metrics().accumulated_cost
        assert total == pytest.approx(4 * PARENT_COST + 2 * CHILD_COST)

    def test_resume_continues_the_child_history(
        self, tmp_path: Path, echo_agent: str, child_llm: BrainLLM
    ):
        """A resumed task's child sees its earlier prompts; its cost adds up under one task."""
        parent = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        parent.send_message("new echo first")
        parent.run()
        parent.send_message("resume task_00000001 echo second")
        parent.run()
        last = task_observations(parent)[-1].observation
        assert isinstance(last, TaskObservation)
        assert (last.task_id, last.text) == ("task_00000001", "first|second")
        usage = parent.conversation_stats.usage_to_metrics["task:task_00000001"]
        assert usage.accumulated_cost == pytest.approx(2 * CHILD_COST)
        [(_, (_, events))] = task_records(parent.state.events).items()
        assert [event.text for event in events if event.kind == "MessageEvent"] == [
            "first",
            "first",
            "second",
            "first|second",
        ]

    def test_unknown_agent_or_task_is_an_error_observation(self, tmp_path: Path, echo_agent: str):
        """A task for an unknown agent or task id fails as an observation; the run goes on."""
        parent = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        parent.send_message("new nobody anything")
        parent.run()
        parent.send_message("resume task_00000009 echo again")
        parent.run()
        unknown_agent, unknown_task = (event.observation for event in task_observations(parent))
        assert isinstance(unknown_agent, TaskObservation) and unknown_agent.is_error
        assert "Unknown agent 'nobody'" in unknown_agent.text
        assert isinstance(unknown_task, TaskObservation) and unknown_task.is_error
        assert "Task 'task_00000009' not found" in unknown_task.text
        assert parent.state.execution_status.value == "finished"

    def test_failing_child_is_an_error_with_its_reason(self, tmp_path: Path):
        """A child whose LLM fails ends the task in error; the observation says why."""
        broken = TestLLM.from_messages([LLMError("provider down")])
        register_agent("broken", lambda llm: Agent(llm=broken), "Fails.")
        parent = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        parent.send_message("new broken do it")
        parent.run()
        [event] = task_observations(parent)
        failed = event.observation
        assert isinstance(failed, TaskObservation)
        assert (failed.status, failed.is_error) == ("error", True)
        assert "provider down" in failed.text
        assert parent.state.execution_status.value == "finished"

    def test_child_works_in_the_parent_workspace(self, tmp_path: Path):
        """The child's terminal runs in the parent's working directory."""
        (tmp_path / "marker.txt").write_text("here")
        script = [
            Message(
                role="assistant",
                content="",
                tool_calls=[
                    MessageToolCall(
                        id="t1",
                        name="terminal",
                        arguments='{"command": "cat marker.txt"}',
                        origin="completion",
                    )
                ],
            ),
            Message(role="assistant", content="found it"),
        ]
        child = TestLLM.from_messages(script)
        register_agent(
            "shell", lambda llm: Agent(llm=child, tools=[Tool(name="terminal")]), "Runs."
        )
        parent = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        parent.send_message("new shell look")
        parent.run()
        [(_, (_, events))] = task_records(parent.state.events).items()
        outputs = [event.output for event in events if isinstance(event, ObservationEvent)]
        assert outputs == ["here"]


class TestForkAndPersistence:
    def test_fork_resumes_its_own_copy_of_the_child(self, tmp_path: Path, echo_agent: str):
        """A fork's resumed task continues the child as it was at the fork, not the source's."""
        source = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        source.send_message("new echo a")
        source.run()
        fork = source.fork()
        fork.send_message("resume task_00000001 echo fork")
        fork.run()
        source.send_message("resume task_00000001 echo source")
        source.run()
        fork_last = task_observations(fork)[-1].observation
        source_last = task_observations(source)[-1].observation
        assert isinstance(fork_last, TaskObservation) and isinstance(source_last, TaskObservation)
        assert fork_last.text == "a|fork"
        assert source_last.text == "a|source"

    def test_new_tasks_of_a_fork_number_on_from_the_fork_point(
        self, tmp_path: Path, echo_agent: str
    ):
        """Task ids continue from the history: a fork's next task after one is task_00000002."""
        source = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        source.send_message("new echo a")
        source.run()
        fork = source.fork()
        fork.send_message("new echo b")
        fork.run()
        assert list(task_records(fork.state.events)) == ["task_00000001", "task_00000002"]
        assert list(task_records(source.state.events)) == ["task_00000001"]

    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(
        before=st.lists(st.text("abc", min_size=1, max_size=3), min_size=1, max_size=3),
        on_fork=st.lists(
            st.tuples(st.booleans(), st.text("xyz", min_size=1, max_size=3)), max_size=3
        ),
        on_source=st.lists(
            st.tuples(st.booleans(), st.text("xyz", min_size=1, max_size=3)), max_size=3
        ),
    )
    def test_fork_is_a_deep_copy_of_the_delegations(
        self,
        tmp_path: Path,
        echo_agent: str,
        before: list[str],
        on_fork: list[tuple[bool, str]],
        on_source: list[tuple[bool, str]],
    ):
        """Tasks of a fork and its source evolve as two deep copies of one task table would."""
        source = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        model: dict[str, list[str]] = {}

        def delegate(
            conversation: Conversation, table: dict[str, list[str]], resume: bool, prompt: str
        ) -> None:
            if resume and table:
                task_id = sorted(table)[-1]
                conversation.send_message(f"resume {task_id} echo {prompt}")
            else:
                task_id = f"task_{len(table) + 1:08x}"
                conversation.send_message(f"new echo {prompt}")
            conversation.run()
            table.setdefault(task_id, []).append(prompt)
            last = task_observations(conversation)[-1].observation
            assert isinstance(last, TaskObservation)
            assert (last.task_id, last.text) == (task_id, "|".join(table[task_id]))

        for prompt in before:
            delegate(source, model, False, prompt)
        fork = source.fork()
        fork_model = copy.deepcopy(model)
        for resume, prompt in on_fork:
            delegate(fork, fork_model, resume, prompt)
        for resume, prompt in on_source:
            delegate(source, model, resume, prompt)
        for conversation, table in ((source, model), (fork, fork_model)):
            records = task_records(conversation.state.events)
            assert {
                task_id: [e.text for e in events if e.kind == "MessageEvent" and e.source == "user"]
                for task_id, (_, events) in records.items()
            } == table

    def test_reopened_parent_resumes_the_child(self, tmp_path: Path, echo_agent: str):
        """A parent stored and reopened from SQLite resumes its task with the child history."""
        store = tmp_path / "store"
        agent = parent_agent()
        first = Conversation(
            agent=agent, workspace=tmp_path, persistence_dir=store, visualizer=None
        )
        first.send_message("new echo stored")
        first.run()
        conversation_id = first.id
        first.close()
        # A store keeps a TestLLM as the plain LLM of its settings: reopen with the same brain
        # under another model name, so the agent given here is the one that runs.
        reopened = Conversation(
            agent=parent_agent(model="test-model-reopened"),
            workspace=tmp_path,
            persistence_dir=store,
            conversation_id=conversation_id,
            visualizer=None,
        )
        assert list(task_records(reopened.state.events)) == ["task_00000001"]
        reopened.send_message("resume task_00000001 echo again")
        reopened.run()
        last = task_observations(reopened)[-1].observation
        assert isinstance(last, TaskObservation) and last.text == "stored|again"
        usage = reopened.conversation_stats.usage_to_metrics["task:task_00000001"]
        assert usage.accumulated_cost == pytest.approx(2 * CHILD_COST)

    def test_a_new_process_reads_the_stored_delegation(self, tmp_path: Path, echo_agent: str):
        """A process that never imported the task tool loads a stored parent's task observation."""
        store = tmp_path / "store"
        parent = Conversation(
            agent=parent_agent(), workspace=tmp_path, persistence_dir=store, visualizer=None
        )
        parent.send_message("new echo kept")
        parent.run()
        parent.close()
        code = (
            "import sys; from cowconv import Conversation\n"
            "assert 'cowconv.tools.task' not in sys.modules\n"
            f"c = Conversation.resume({str(store)!r}, {str(parent.id)!r})\n"
            "o = [e for e in c.state.events if e.kind == 'ObservationEvent'][0].observation\n"
            "print(type(o).__name__, o.task_id, o.text)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
        )
        assert out.stdout.strip() == "TaskObservation task_00000001 kept"


class TestDelegationVisualizer:
    def test_titles_name_the_agents(self, tmp_path: Path, echo_agent: str):
        """The parent's events carry its name; the child's follow under the task's description
        (a name with spaces is shown as it is, as OpenHands' SDK does)."""
        out = io.StringIO()
        visualizer = DelegationVisualizer(name="main_delegator", file=out, width=100)
        parent = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=visualizer)
        parent.send_message("new echo ping")
        parent.run()
        titles = [line.split(" ─")[0] for line in out.getvalue().splitlines() if " ──" in line]
        assert titles == [
            "Main Delegator Agent System Prompt",
            "User Message to Main Delegator Agent",
            "Main Delegator Agent Action",
            "Main Delegator Agent Observation",
            "echo task Agent System Prompt",
            "User Message to echo task Agent",
            "Message from echo task Agent to User",
            "Message from Main Delegator Agent to User",
        ]

    def test_highlight_and_sub_visualizer(self):
        """highlight_regex styles matches; a sub-visualizer keeps the settings and the console."""
        visualizer = DelegationVisualizer(name="Main", highlight_regex={"fork": "bold red"})
        text = visualizer._body("cheap fork here")
        assert [(span.start, span.end, span.style) for span in text.spans] == [(6, 10, "bold red")]
        sub = visualizer.create_sub_visualizer("helper")
        assert (
            sub._highlight_patterns == {"fork": "bold red"} and sub._console is visualizer._console
        )


def _calls(*calls: tuple[str, dict[str, Any]]) -> Message:
    return Message(
        role="assistant",
        content="In parallel.",
        tool_calls=[
            MessageToolCall(
                id=f"p{index}", name=name, arguments=json.dumps(arguments), origin="completion"
            )
            for index, (name, arguments) in enumerate(calls)
        ],
    )


class _MeetingBrain:
    """Children that answer only once ``parties`` of them are thinking at the same time."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=60)

    def __call__(self, messages: list[dict[str, Any]]) -> Message:
        self.barrier.wait()  # broken (an error) if the calls ran one after another
        return Message(role="assistant", content=f"met: {_text(messages[-1])}")


class _Overlap(BaseModel):
    text: str = ""


class TestParallelToolCalls:
    def test_task_calls_of_one_step_run_at_once(self, tmp_path: Path):
        """With tool_concurrency_limit=2, two task calls of one step run their children together."""
        meeting = BrainLLM.thinking(_MeetingBrain(2), CHILD_COST, usage_id="child")
        register_agent("meeter", lambda llm: Agent(llm=meeting), "Meets.")
        parent_llm = TestLLM.from_messages(
            [
                _calls(
                    ("task", {"prompt": "left", "subagent_type": "meeter"}),
                    ("task", {"prompt": "right", "subagent_type": "meeter"}),
                ),
                Message(role="assistant", content="Both met."),
            ]
        )
        agent = Agent(llm=parent_llm, tools=[Tool(name=TaskToolSet.name)], tool_concurrency_limit=2)
        parent = Conversation(agent=agent, workspace=tmp_path, visualizer=None)
        parent.send_message("Meet.")
        parent.run()
        observations = [event.observation for event in task_observations(parent)]
        assert all(isinstance(o, TaskObservation) for o in observations)
        # Results in the order of the calls; ids in the order the children started.
        assert [o.text for o in observations] == ["met: left", "met: right"]
        assert {o.task_id for o in observations} == {"task_00000001", "task_00000002"}
        stats = parent.conversation_stats.usage_to_metrics
        assert stats["task:task_00000001"].accumulated_cost == CHILD_COST
        assert stats["task:task_00000002"].accumulated_cost == CHILD_COST
        assert parent.state.events[-1].text == "Both met."

    def test_calls_of_an_undeclared_tool_never_overlap(self, tmp_path: Path):
        """Calls of a tool that declares no resources run one at a time, whatever the limit."""
        active = {"now": 0, "most": 0}
        guard = threading.Lock()

        class OverlapTool(ToolDefinition[_Overlap]):
            name = "overlap_probe"
            description = "Probe."
            Params = _Overlap

            def execute(self, params: _Overlap) -> ToolResult:
                with guard:
                    active["now"] += 1
                    active["most"] = max(active["most"], active["now"])
                threading.Event().wait(0.05)
                with guard:
                    active["now"] -= 1
                return ToolResult(output=params.text, exit_code=0)

        register_tool(OverlapTool)
        llm = TestLLM.from_messages(
            [
                _calls(*(("overlap_probe", {"text": str(n)}) for n in range(4))),
                Message(role="assistant", content="Done."),
            ]
        )
        agent = Agent(llm=llm, tools=[Tool(name="overlap_probe")], tool_concurrency_limit=4)
        conversation = Conversation(agent=agent, workspace=tmp_path, visualizer=None)
        conversation.send_message("Probe.")
        conversation.run()
        outputs = [
            event.output
            for event in conversation.state.events
            if isinstance(event, ObservationEvent)
        ]
        assert outputs == ["0", "1", "2", "3"]
        assert active["most"] == 1


def workflow_parent(script: str, name: str = "fan-out") -> Agent:
    call = MessageToolCall(
        id="w1",
        name="workflow",
        arguments=json.dumps({"name": name, "script": script, "max_concurrency": 2}),
        origin="completion",
    )
    llm = TestLLM.from_messages(
        [
            Message(role="assistant", content="Running a workflow.", tool_calls=[call]),
            Message(role="assistant", content="Workflow done."),
        ]
    )
    return Agent(llm=llm, tools=[Tool(name=WorkflowToolSet.name)])


def workflow_observation(conversation: Conversation) -> ObservationEvent:
    [event] = [
        event
        for event in conversation.state.events
        if isinstance(event, ObservationEvent) and event.tool_name == "workflow"
    ]
    return event


MAP_REDUCE = """
async def main(wf):
    found = await wf.map_agents(["a", "b", "c"], "look at {item}", subagent_type="echo")
    return await wf.reduce_agent(found, prompt="merge", subagent_type="echo")
"""


class TestWorkflow:
    def test_map_then_reduce_runs_children_and_accounts_them(self, tmp_path: Path, echo_agent: str):
        """A map over three items and a reduce run four children; the reducer's answer returns."""
        parent = Conversation(
            agent=workflow_parent(MAP_REDUCE), workspace=tmp_path, visualizer=None
        )
        parent.send_message("Audit.")
        parent.run()
        event = workflow_observation(parent)
        observation = event.observation
        assert isinstance(observation, WorkflowObservation)
        assert observation.status == "completed"
        expected_input = json.dumps(["look at a", "look at b", "look at c"], indent=2)
        assert observation.text == f"merge\n\nInput:\n{expected_input}"
        assert isinstance(event.extra, Mapping)
        tasks = event.extra["workflow"]["tasks"]
        assert sorted(task["task_id"] for task in tasks) == [
            f"task_0000000{n}" for n in (1, 2, 3, 4)
        ]
        usage = parent.conversation_stats.usage_to_metrics
        assert sum(usage[f"task:task_0000000{n}"].accumulated_cost for n in (1, 2, 3, 4)) == (
            pytest.approx(4 * CHILD_COST)
        )
        assert parent.state.events[-1].text == "Workflow done."

    def test_a_failing_item_fails_the_workflow_with_its_reason(self, tmp_path: Path):
        """A sub-agent that fails makes map_agents raise; the observation names the item."""

        def picky(messages: list[dict[str, Any]]) -> Message:
            if "good" not in _text(messages[-1]):
                raise LLMError("refused")
            return Message(role="assistant", content="fine")

        picky_llm = BrainLLM.thinking(picky, 0.0, usage_id="picky")
        register_agent("picky", lambda llm: Agent(llm=picky_llm), "Refuses bad items.")
        script = (
            "async def main(wf):\n"
            "    return await wf.map_agents(['good', 'bad'], '{item}', subagent_type='picky')\n"
        )
        parent = Conversation(agent=workflow_parent(script), workspace=tmp_path, visualizer=None)
        parent.send_message("Try.")
        parent.run()
        observation = workflow_observation(parent).observation
        assert isinstance(observation, WorkflowObservation)
        assert (observation.status, observation.is_error) == ("error", True)
        assert observation.text.startswith("map_agents: one or more sub-agents failed:\n  [1]")
        assert "[item 2]" in observation.text and "refused" in observation.text

    @pytest.mark.parametrize(
        ("script", "reason"),
        [
            ("import os\nasync def main(wf):\n    pass\n", "may not import"),
            ("async def main(wf):\n    return wf._manager\n", "private wf attributes"),
            ("async def main(wf):\n    return eval('1')\n", "may not call `eval`"),
            ("async def main(wf):\n    return ().__class__\n", "dunder attributes"),
            ("def main(wf):\n    pass\n", "exactly one async main(wf)"),
            ("async def main(wf, x):\n    pass\n", "must be `async def main(wf):`"),
            ("async def main(wf):\n    return open('x')\n", "may not call `open`"),
        ],
    )
    def test_unsafe_scripts_are_refused(self, tmp_path: Path, script: str, reason: str):
        """A script that reaches outside wf is refused before it runs, saying why."""
        parent = Conversation(agent=workflow_parent(script), workspace=tmp_path, visualizer=None)
        parent.send_message("Try.")
        parent.run()
        observation = workflow_observation(parent).observation
        assert isinstance(observation, WorkflowObservation) and observation.is_error
        assert reason in observation.text

    def test_pipeline_and_flatten(self, tmp_path: Path, echo_agent: str):
        """pipeline runs each item through the stages; a failing stage drops only its item."""
        script = (
            "async def main(wf):\n"
            "    async def ask(item):\n"
            "        return await wf.run_agent(f'say {item}', subagent_type='echo')\n"
            "    def check(text):\n"
            "        if text.endswith('2'):\n"
            "            raise ValueError(text)\n"
            "        return text.upper()\n"
            "    done = await wf.pipeline([1, 2, 3], ask, check)\n"
            "    return wf.flatten([done, ['end']])\n"
        )
        parent = Conversation(agent=workflow_parent(script), workspace=tmp_path, visualizer=None)
        parent.send_message("Go.")
        parent.run()
        observation = workflow_observation(parent).observation
        assert isinstance(observation, WorkflowObservation)
        assert observation.text == "['SAY 1', None, 'SAY 3', 'end']"


class TestOnTheAgentServer:
    def test_server_in_this_process_runs_the_task_tool(
        self, tmp_path: Path, echo_agent: str, stub: StubLLMServer
    ):
        """An agent server in the process where the sub-agent is registered runs the task tool:
        the parent thinks through litellm's HTTP path to the stub, the child answers, and the
        client reads the task observation and its cost."""
        stub.script(
            StubReply.tool_call(
                "task", prompt="from the server", subagent_type="echo", description="remote"
            ),
            StubReply.text("Relayed."),
        )
        agent = Agent(
            llm=LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0),
            tools=[Tool(name=TaskToolSet.name)],
        )
        with InProcessTransport(create_app(data_dir=tmp_path / "data")) as transport:
            workspace = Workspace(host=IN_PROCESS_HOST, working_dir=str(tmp_path))
            remote = Conversation(agent=agent, workspace=workspace, transport=transport)
            remote.send_message("Delegate.")
            remote.run()
            observation = task_observations(remote)[0].observation
            assert isinstance(observation, TaskObservation)
            assert (observation.status, observation.text) == ("completed", "from the server")
            usage = remote.conversation_stats.by_usage_id["task:task_00000001"]
            assert usage.accumulated_cost == CHILD_COST
            remote.close()


class TestChildCrash:
    def test_a_crashing_child_keeps_its_events(self, tmp_path: Path):
        """A child whose LLM raises a non-LLM error ends the task in error; its events are kept."""
        crashing = TestLLM.from_messages([KeyError("bug in a provider adapter")])
        register_agent("crashing", lambda llm: Agent(llm=crashing), "Crashes.")
        parent = Conversation(agent=parent_agent(), workspace=tmp_path, visualizer=None)
        parent.send_message("new crashing go")
        parent.run()
        [event] = task_observations(parent)
        failed = event.observation
        assert isinstance(failed, TaskObservation)
        assert (failed.status, failed.task_id) == ("error", "task_00000001")
        assert "bug in a provider adapter" in failed.text
        [(_, (_, events))] = task_records(parent.state.events).items()
        assert [e.kind for e in events] == ["SystemPromptEvent", "MessageEvent", "AgentErrorEvent"]
