"""TaskTrackerTool: OpenHands' task_tracker, its list kept in each conversation's own history."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, rule, run_state_machine_as_test

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ExecutionStatus,
    InvalidTypeError,
    Message,
    MessageToolCall,
    ObservationEvent,
    SQLiteStore,
    Tool,
    ToolArgumentError,
    registered_tools,
    resolve_tool,
    run_branches,
)
from cowconv.backends.wire import event_to_openhands
from cowconv.distributed import ProcessExecutor
from cowconv.testing import StubLLMServer, StubReply, TestLLM
from cowconv.tools.task_tracker import (
    TaskItem,
    TaskTrackerAction,
    TaskTrackerExecutor,
    TaskTrackerObservation,
    TaskTrackerTool,
)
from tests.conftest import BACKENDS, open_backend

ROOT = Path(__file__).resolve().parents[1]


def tracker() -> TaskTrackerTool:
    [tool] = TaskTrackerTool.create()
    return tool


def call(tool: TaskTrackerTool, **arguments: Any) -> TaskTrackerObservation:
    answer = tool(tool.validate_arguments(arguments))
    assert isinstance(answer, TaskTrackerObservation)
    return answer


def tracker_answers(events) -> list[TaskTrackerObservation]:
    return [
        e.observation
        for e in events
        if isinstance(e, ObservationEvent) and isinstance(e.observation, TaskTrackerObservation)
    ]


def as_dicts(task_list) -> list[dict[str, str]]:
    return [task.model_dump() for task in task_list]


class TestTaskItem:
    @pytest.mark.parametrize(
        ("sent", "status"),
        [
            ("todo", "todo"),
            ("In Progress", "in_progress"),
            ("in-progress", "in_progress"),
            (" DONE ", "done"),
            ("pending", "todo"),
            ("to do", "todo"),
            ("completed", "done"),
            ("complete", "done"),
        ],
    )
    def test_statuses_and_their_aliases(self, sent, status):
        """A status is read case-insensitively, with OpenHands' aliases of other agents' names."""
        assert TaskItem(title="t", status=sent).status == status

    def test_an_unknown_status_is_refused(self):
        """A status that is none of the three (nor an alias) is a validation error."""
        with pytest.raises(pydantic.ValidationError, match="status"):
            TaskItem(title="t", status="blocked")

    def test_defaults_and_extra_keys(self):
        """Notes default to empty, status to todo; a key the model adds is ignored."""
        item = TaskItem.model_validate({"title": "t", "id": "7"})
        assert item.model_dump() == {"title": "t", "notes": "", "status": "todo"}

    def test_items_are_frozen(self):
        """A task shared by a fork's history cannot be changed in place."""
        item = TaskItem(title="t")
        with pytest.raises(AttributeError):
            item.title = "changed"  # type: ignore[misc]


class TestExecutor:
    def test_view_before_any_plan(self):
        """view on an empty list says how to make one (OpenHands' text)."""
        answer = TaskTrackerExecutor()(TaskTrackerAction(command="view"))
        assert answer.text == 'No task list found. Use the "plan" command to create one.'
        assert (answer.command, answer.task_list, answer.is_error) == ("view", (), False)

    def test_plan_replaces_the_list_and_view_shows_it(self):
        """plan answers the count; view shows numbered tasks, status icons and notes."""
        executor = TaskTrackerExecutor()
        first = [{"title": "old"}]
        executor(TaskTrackerAction(command="plan", task_list=first))
        tasks = [
            {"title": "Design", "status": "done", "notes": "see docs/design.md"},
            {"title": "Build", "status": "in_progress"},
            {"title": "Test"},
        ]
        answer = executor(TaskTrackerAction(command="plan", task_list=tasks))
        assert answer.text == "Task list has been updated with 3 item(s)."
        assert answer.command == "plan"
        assert [t.title for t in answer.task_list] == ["Design", "Build", "Test"]
        view = executor(TaskTrackerAction(command="view"))
        assert view.text == (
            "# Task List\n\n1. ✅ Design\n   see docs/design.md\n\n2. 🔄 Build\n\n3. ⏳ Test"
        )
        assert view.task_list == answer.task_list

    def test_an_empty_plan_empties_the_list(self):
        """plan with no tasks answers 0 items; view then finds no list."""
        executor = TaskTrackerExecutor()
        executor(TaskTrackerAction(command="plan", task_list=[{"title": "a"}]))
        answer = executor(TaskTrackerAction(command="plan"))
        assert answer.text == "Task list has been updated with 0 item(s)."
        assert executor(TaskTrackerAction(command="view")).text.startswith("No task list found")

    def test_an_unknown_command_is_an_error_observation(self):
        """A command validation cannot produce (model_construct) gets OpenHands' error answer."""
        action = TaskTrackerAction.model_construct(command="delete", task_list=())
        answer = TaskTrackerExecutor()(action)
        assert answer.is_error
        assert answer.text == 'Unknown command: delete. Supported commands are "view" and "plan".'

    def test_save_dir_keeps_the_list_in_tasks_json(self, tmp_path):
        """With save_dir, plan writes TASKS.json and a new executor reads it back."""
        executor = TaskTrackerExecutor(save_dir=str(tmp_path / "state"))
        executor(TaskTrackerAction(command="plan", task_list=[{"title": "a", "status": "done"}]))
        saved = json.loads((tmp_path / "state" / "TASKS.json").read_text())
        assert saved == [{"title": "a", "notes": "", "status": "done"}]
        again = TaskTrackerExecutor(save_dir=tmp_path / "state")
        assert as_dicts(again.task_list) == saved

    @pytest.mark.parametrize("text", ["{not json", '{"a": 1}', '[{"status": "done"}]'])
    def test_an_unreadable_tasks_file_starts_empty(self, tmp_path, text):
        """A TASKS.json that is not a list of tasks gives an empty list, as in OpenHands."""
        (tmp_path / "TASKS.json").write_text(text)
        assert TaskTrackerExecutor(save_dir=tmp_path).task_list == ()

    def test_an_unwritable_save_dir_keeps_the_list_in_memory(self, tmp_path):
        """A save_dir that cannot be created loses nothing: the plan still holds."""
        blocker = tmp_path / "file"
        blocker.write_text("x")
        executor = TaskTrackerExecutor(save_dir=blocker / "sub")
        answer = executor(TaskTrackerAction(command="plan", task_list=[{"title": "a"}]))
        assert not answer.is_error
        assert [t.title for t in executor(TaskTrackerAction(command="view")).task_list] == ["a"]


class TestTool:
    def test_resolves_by_name_without_importing_it_first(self):
        """Tool(name='task_tracker') resolves in a fresh process that never imported it."""
        program = (
            "import sys\n"
            "from cowconv import resolve_tool, registered_tools\n"
            "assert 'cowconv.tools.task_tracker' not in sys.modules\n"
            "assert 'task_tracker' in registered_tools()\n"
            "print(resolve_tool('task_tracker').__name__)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "TaskTrackerTool"
        assert "task_tracker" in registered_tools()
        assert resolve_tool("task_tracker") is TaskTrackerTool

    def test_spec_is_openhands_schema(self):
        """The model sees OpenHands' schema: two commands, the task item inlined, no $ref."""
        spec = tracker().to_openai_tool()
        assert spec["type"] == "function"
        assert spec["function"]["name"] == "task_tracker"
        assert "task management" in spec["function"]["description"]
        parameters = spec["function"]["parameters"]
        assert "$defs" not in json.dumps(parameters) and "$ref" not in json.dumps(parameters)
        assert parameters["type"] == "object"
        assert "required" not in parameters  # both fields have defaults
        command = parameters["properties"]["command"]
        assert (command["type"], command["enum"]) == ("string", ["view", "plan"])
        items = parameters["properties"]["task_list"]["items"]
        assert items["required"] == ["title"]
        assert items["properties"]["status"]["enum"] == ["todo", "in_progress", "done"]
        assert sorted(items["properties"]) == ["notes", "status", "title"]

    def test_create_takes_a_conversation_state_and_no_settings(self):
        """create(conv_state) answers one tool; a setting is a clear error."""
        assert [t.name for t in TaskTrackerTool.create(object())] == ["task_tracker"]
        with pytest.raises(InvalidTypeError, match="takes no settings"):
            TaskTrackerTool.create(None, save_dir="/tmp")
        with pytest.raises(InvalidTypeError, match="takes no settings"):
            TaskTrackerTool.create(None, {"x": 1})

    def test_each_tool_has_its_own_list(self):
        """Two tools (two conversations) never share a list."""
        one, two = tracker(), tracker()
        call(one, command="plan", task_list=[{"title": "one's"}])
        assert call(two, command="view").task_list == ()

    @pytest.mark.parametrize(
        ("arguments", "message"),
        [
            ({"command": "delete"}, "command"),
            ({"command": "plan", "task_list": [{"notes": "no title"}]}, "title"),
            ({"command": "plan", "task_list": [{"title": "t", "status": "blocked"}]}, "status"),
            ({"command": "plan", "task_list": "not a list"}, "task_list"),
        ],
    )
    def test_bad_arguments_are_explained(self, arguments, message):
        """Arguments that do not fit are a ToolArgumentError naming the field."""
        with pytest.raises(ToolArgumentError, match=message):
            tracker().validate_arguments(arguments)

    def test_restore_takes_the_last_successful_answer(self):
        """restore reads the last non-error task_tracker answer; other tools' are ignored."""
        plan = TaskTrackerObservation.from_text(
            "ok", command="plan", task_list=[TaskItem(title="kept")]
        )
        failed = TaskTrackerObservation.from_text("bad", command="plan", is_error=True)
        other = TaskTrackerObservation.from_text(
            "ok", command="plan", task_list=[TaskItem(title="other tool")]
        )
        events = [
            ObservationEvent(tool_name="task_tracker", tool_call_id="c1", observation=plan),
            ObservationEvent(tool_name="task_tracker", tool_call_id="c2", observation=failed),
            ObservationEvent(tool_name="renamed", tool_call_id="c3", observation=other),
        ]
        tool = tracker()
        tool.restore(events)
        assert [t.title for t in call(tool, command="view").task_list] == ["kept"]
        tool.restore([])
        assert call(tool, command="view").task_list == ()


def scripted(*steps: Mapping[str, Any] | str) -> TestLLM:
    """A TestLLM answering each step: a task_tracker call (its arguments) or a text."""
    messages = [
        Message(role="assistant", content=step)
        if isinstance(step, str)
        else Message(
            role="assistant",
            content="",
            tool_calls=[
                MessageToolCall(id=f"c{n}", name="task_tracker", arguments=json.dumps(step))
            ],
        )
        for n, step in enumerate(steps)
    ]
    return TestLLM.from_messages(messages)


class TestRun:
    def test_a_scripted_run_plans_and_views(self, tmp_path):
        """A run driven by TestLLM: the answers are recorded whole and the model reads them."""
        tasks = [{"title": "Write the parser", "status": "in_progress"}, {"title": "Test it"}]
        llm = scripted({"command": "plan", "task_list": tasks}, {"command": "view"}, "Done.")
        agent = Agent(llm=llm, tools=[Tool(name="task_tracker")])
        with Conversation(agent=agent, workspace=tmp_path) as conversation:
            conversation.send_message("Plan the work.")
            conversation.run()
            state = conversation.state
        assert state.execution_status is ExecutionStatus.FINISHED
        plan, view = tracker_answers(state.events)
        assert plan.text == "Task list has been updated with 2 item(s)."
        assert as_dicts(view.task_list) == [
            {"title": "Write the parser", "notes": "", "status": "in_progress"},
            {"title": "Test it", "notes": "", "status": "todo"},
        ]
        outputs = [e.output for e in state.events if isinstance(e, ObservationEvent)]
        assert outputs[1] == "# Task List\n\n1. 🔄 Write the parser\n\n2. ⏳ Test it"
        assert not any(tmp_path.iterdir())  # no TASKS.json: the history holds the list

    def test_bad_arguments_reach_the_model_and_lose_nothing(self, tmp_path):
        """A plan the tool refuses is an error observation; the earlier list stays."""
        llm = scripted(
            {"command": "plan", "task_list": [{"title": "first"}]},
            {"command": "plan", "task_list": [{"title": "t", "status": "blocked"}]},
            {"command": "view"},
            "Done.",
        )
        agent = Agent(llm=llm, tools=[Tool(name="task_tracker")])
        with Conversation(agent=agent, workspace=tmp_path) as conversation:
            conversation.send_message("Plan.")
            conversation.run()
            observed = [e for e in conversation.state.events if isinstance(e, ObservationEvent)]
        assert "status" in observed[1].output and observed[1].extra["error"] == "invalid_arguments"
        assert [t.title for t in observed[2].observation.task_list] == ["first"]

    def test_a_fork_starts_from_the_list_at_the_fork_point(self, tmp_path):
        """The fork views its source's list; later plans of either never reach the other."""
        # One script, shared by the source and its fork (they share the agent), in run order.
        llm = scripted(
            {"command": "plan", "task_list": [{"title": "shared"}]},
            {"command": "view"},
            "Planned.",
            {"command": "plan", "task_list": [{"title": "fork only"}]},
            "Replanned.",
            {"command": "view"},
            "Viewed.",
        )
        agent = Agent(llm=llm, tools=[Tool(name="task_tracker")])
        with SQLiteStore(tmp_path / "store") as store:
            with Conversation(agent=agent, workspace=tmp_path, store=store) as source:
                source.send_message("Plan.")
                source.run()
                with source.fork() as fork:
                    fork.send_message("Replan.")
                    fork.run()
                    forked = tracker_answers(fork.state.events)[-1]
                source.send_message("View.")
                source.run()
                viewed = tracker_answers(source.state.events)[-1]
        assert [t.title for t in forked.task_list] == ["fork only"]
        assert (viewed.command, [t.title for t in viewed.task_list]) == ("view", ["shared"])
        assert llm.remaining_responses == 0

    def test_navigating_back_brings_back_the_list_of_that_point(self, tmp_path):
        """After navigate_to an earlier event, view shows the list the branch had there."""
        llm = scripted(
            {"command": "plan", "task_list": [{"title": "A"}]},
            "Planned A.",
            {"command": "plan", "task_list": [{"title": "B"}]},
            "Planned B.",
            {"command": "view"},
            "Viewed.",
        )
        agent = Agent(llm=llm, tools=[Tool(name="task_tracker")])
        with Conversation(agent=agent, workspace=tmp_path) as conversation:
            conversation.send_message("Plan A.")
            conversation.run()
            after_a = conversation.state.leaf_event_id
            conversation.send_message("Plan B.")
            conversation.run()
            conversation.navigate_to(after_a)
            conversation.send_message("View.")
            conversation.run()
            viewed = tracker_answers(conversation.state.branch)[-1]
        assert (viewed.command, [t.title for t in viewed.task_list]) == ("view", ["A"])


# -- the isolation property: a fork's plan is a deep copy's, on every backend -----------------


def _brain(body: Mapping[str, Any]) -> StubReply:
    """The user's message says what to call: ``PLAN <json>`` or ``VIEW``; then a text answer."""
    last = body["messages"][-1]
    if last["role"] != "user":
        return StubReply.text("ok")
    content = last["content"]
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    if text.startswith("PLAN "):
        return StubReply.tool_call("task_tracker", command="plan", task_list=json.loads(text[5:]))
    return StubReply.tool_call("task_tracker", command="view")


task_lists = st.lists(
    st.fixed_dictionaries(
        {
            "title": st.text(min_size=1, max_size=8),
            "notes": st.text(max_size=8),
            "status": st.sampled_from(["todo", "in_progress", "done"]),
        }
    ),
    max_size=3,
)


class TrackerIsolation(RuleBasedStateMachine):
    """Plans, views, forks and navigation over a tree of conversations, against dicts copied
    at each fork (and recorded at the end of each run, for navigate_to)."""

    backend: Any
    agent: Agent

    conversations = Bundle("conversations")

    def __init__(self) -> None:
        super().__init__()
        self.pairs: list[list[Any]] = []

    def _add(self, conversation: Conversation, model: list[dict[str, str]], seen=None):
        # [conversation, list now, {event id: the list when the branch ended there}]; a list,
        # so reopen can put a new Conversation in its place
        pair = [conversation, model, seen if seen is not None else {}]
        self.pairs.append(pair)
        return pair

    def _run(self, pair, text: str) -> TaskTrackerObservation:
        conversation = pair[0]
        conversation.send_message(text)
        conversation.run()
        state = conversation.state
        assert state.execution_status is ExecutionStatus.FINISHED, state.events[-1]
        return tracker_answers(state.branch)[-1]

    def _record(self, pair) -> None:
        conversation, model, seen = pair
        seen[conversation.state.leaf_event_id] = copy.deepcopy(model)

    @rule(target=conversations)
    def create(self):
        return self._add(self.backend.new(self.agent), [])

    @rule(pair=conversations, tasks=task_lists)
    def plan(self, pair, tasks):
        answer = self._run(pair, "PLAN " + json.dumps(tasks))
        pair[1][:] = tasks
        assert as_dicts(answer.task_list) == pair[1]
        self._record(pair)

    @rule(pair=conversations)
    def view(self, pair):
        answer = self._run(pair, "VIEW")
        model = pair[1]
        assert as_dicts(answer.task_list) == model
        if model:
            assert answer.text.startswith("# Task List")
        self._record(pair)

    @rule(target=conversations, pair=conversations)
    def fork(self, pair):
        conversation, model, seen = pair
        return self._add(conversation.fork(), copy.deepcopy(model), copy.deepcopy(seen))

    @rule(pair=conversations, data=st.data())
    def navigate(self, pair, data):
        """navigate_to an earlier end of a run: the list is the one it had there."""
        conversation, model, seen = pair
        if not seen:
            return
        event_id = data.draw(st.sampled_from(sorted(seen)))
        conversation.navigate_to(event_id)
        model[:] = copy.deepcopy(seen[event_id])

    @rule(pair=conversations)
    def reload(self, pair):
        """Read back from where the backend keeps it (another process, for SQLite)."""
        conversation, model, _ = pair
        answers = tracker_answers(self.backend.reload(conversation).branch)
        assert as_dicts(answers[-1].task_list if answers else ()) == model

    @rule(pair=conversations)
    def reopen(self, pair):
        """SQLite: a new Conversation object over the same store starts from the stored list."""
        if self.backend.kind != "sqlite":
            return
        conversation, model, _ = pair
        conversation.close()
        reopened = Conversation(
            agent=self.agent,
            workspace=self.backend.workspace,
            store=self.backend.store,
            conversation_id=conversation.id,
        )
        self.backend.opened.append(reopened)
        pair[0] = reopened
        answer = self._run(pair, "VIEW")
        assert as_dicts(answer.task_list) == model
        self._record(pair)


@pytest.fixture(scope="module")
def tracker_stub():
    with StubLLMServer(brain=_brain) as stub:
        yield stub


@pytest.mark.parametrize("kind", BACKENDS)
def test_task_lists_are_isolated_like_deep_copies(kind, tracker_stub, request, tmp_path):
    """Any interleaving of plans, views and forks leaves each list as a deep copy's would be."""
    server = request.getfixturevalue("in_process_server") if kind == "remote" else None
    reader = request.getfixturevalue("store_reader") if kind == "sqlite" else None
    llm = LLM(**tracker_stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
    agent = Agent(llm=llm, tools=[Tool(name="task_tracker")])

    class Machine(TrackerIsolation):
        def __init__(self) -> None:
            super().__init__()
            directory = tmp_path / uuid.uuid4().hex
            directory.mkdir()
            self.backend = open_backend(kind, directory, server, reader)
            self.agent = agent

        def teardown(self) -> None:
            self.backend.close()

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=12,
            stateful_step_count=8,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )


@given(tasks=task_lists)
@settings(max_examples=50, deadline=None)
def test_observations_round_trip_through_json(tasks):
    """An answer read back from its JSON (a store, the server) is the same answer."""
    answer = TaskTrackerExecutor()(TaskTrackerAction(command="plan", task_list=tasks))
    event = ObservationEvent(tool_name="task_tracker", tool_call_id="c1", observation=answer)
    again = ObservationEvent.model_validate_json(event.model_dump_json())
    assert again.observation == answer
    assert as_dicts(again.observation.task_list) == tasks


class TestOpenHandsWire:
    def test_the_recorded_observation_goes_to_openhands_clients_as_it_is(self):
        """The server's OpenHands-shaped event carries the TaskTrackerObservation, typed."""
        answer = TaskTrackerExecutor()(
            TaskTrackerAction(command="plan", task_list=[{"title": "a", "status": "done"}])
        )
        event = ObservationEvent(
            tool_name="task_tracker", tool_call_id="c1", observation=answer, action_id="e1"
        )
        sent = event_to_openhands(event.model_dump(mode="json"))
        observation = sent["observation"]
        assert observation["kind"] == "TaskTrackerObservation"
        assert observation["task_list"] == [{"title": "a", "notes": "", "status": "done"}]
        assert observation["command"] == "plan" and observation["is_error"] is False
        assert sent["action_id"] == "e1"
        assert TaskTrackerObservation.model_validate(observation) == answer

    def test_a_tool_without_an_observation_still_sends_its_text(self):
        """An observation with output only (cowconv's terminal) is an MCPToolObservation."""
        event = ObservationEvent(tool_name="terminal", tool_call_id="c1", output="hi", exit_code=1)
        sent = event_to_openhands(event.model_dump(mode="json"))
        assert sent["observation"]["kind"] == "MCPToolObservation"
        assert sent["observation"]["is_error"] is True
        assert sent["action_id"] == "c1"


class TestOnWorkerProcesses:
    @pytest.mark.slow
    def test_branches_start_from_the_source_list_and_keep_their_own(self, stub, tmp_path):
        """run_branches on a process worker: each branch views the source's list, plans its
        own; the source's list is untouched."""
        stub.script(
            StubReply.tool_call("task_tracker", command="plan", task_list=[{"title": "A"}]),
            StubReply.text("Planned."),
        )
        llm = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
        agent = Agent(llm=llm, tools=[Tool(name="task_tracker")])
        with Conversation(agent=agent, workspace=tmp_path) as source:
            source.send_message("Plan.")
            source.run()
            # One worker runs the branches one after the other: each takes its replies in turn.
            for title in ("B0", "B1"):
                stub.script(
                    StubReply.tool_call("task_tracker", command="view"),
                    StubReply.tool_call(
                        "task_tracker", command="plan", task_list=[{"title": title}]
                    ),
                    StubReply.text("Replanned."),
                )
            with ProcessExecutor(max_workers=1, progress=False) as executor:
                forks = run_branches(source, ["Replan.", "Replan too."], executor=executor)
            for title, fork in zip(("B0", "B1"), forks, strict=True):
                assert fork.state.execution_status is ExecutionStatus.FINISHED
                view, plan = tracker_answers(fork.state.branch)[-2:]
                assert [t.title for t in view.task_list] == ["A"]
                assert [t.title for t in plan.task_list] == [title]
            answers = tracker_answers(source.state.branch)
            assert [[t.title for t in a.task_list] for a in answers] == [["A"]]
