"""OpenHands' tool model on cowconv: ``create(conv_state)`` instances, executors, tool sets.

OpenHands' SDK defines a tool as instances its class's ``create(conv_state, **params)``
returns, each with a ``description``, an ``action_type``, an ``observation_type`` and an
``executor``; ``register_tool(name, factory)`` registers it, and a tool set's ``create``
returns several. Its examples (``02_custom_tools.py``) build a grep tool on a
``TerminalExecutor`` shared with the terminal. These tests run such tools, written the way
OpenHands' users write them, through cowconv's own loop.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from cowconv import (
    Action,
    Agent,
    AgentErrorEvent,
    Conversation,
    ImageContent,
    Message,
    MessageToolCall,
    Observation,
    ObservationEvent,
    TextContent,
    Tool,
    ToolDefinition,
    ToolExecutor,
    register_tool,
)
from cowconv._exceptions import ConversationRunError, InvalidTypeError, InvalidValueError
from cowconv.agent.tools import create_tools, resolve_tool
from cowconv.testing import StubLLMServer, StubReply, TestLLM
from cowconv.tools.terminal import (
    TerminalAction,
    TerminalExecutor,
    TerminalObservation,
    TerminalTool,
)


class GrepAction(Action):
    pattern: str = Field(description="Regex to search for")
    path: str = Field(default=".", description="Directory to search")


class GrepObservation(Observation):
    matches: list[str] = Field(default_factory=list)
    count: int = 0

    @property
    def to_llm_content(self) -> Sequence[TextContent | ImageContent]:
        if not self.count:
            return [TextContent(text="No matches found.")]
        return [TextContent(text=f"Found {self.count} matching lines.\n" + "\n".join(self.matches))]


class GrepExecutor(ToolExecutor[GrepAction, GrepObservation]):
    def __init__(self, terminal: TerminalExecutor):
        self.terminal = terminal

    def __call__(self, action: GrepAction, conversation=None) -> GrepObservation:
        command = f"grep -rHn {shlex.quote(action.pattern)} {shlex.quote(action.path)}"
        result = self.terminal(TerminalAction(command=command))
        matches = [line for line in result.text.splitlines() if line.strip()]
        return GrepObservation(matches=matches, count=len(matches))


class GrepTool(ToolDefinition[GrepAction, GrepObservation]):
    """Search file contents."""

    @classmethod
    def create(cls, conv_state, terminal_executor=None) -> Sequence[ToolDefinition]:
        if terminal_executor is None:
            terminal_executor = TerminalExecutor(working_dir=conv_state.workspace.working_dir)
        return [
            cls(
                description="Search file contents with a regular expression.",
                action_type=GrepAction,
                observation_type=GrepObservation,
                executor=GrepExecutor(terminal_executor),
            )
        ]


class BashAndGrepToolSet(ToolDefinition[Action, Observation]):
    """A terminal and a grep tool on one shell, as OpenHands' custom-tools example builds it."""

    @classmethod
    def create(cls, conv_state, **params) -> Sequence[ToolDefinition]:
        terminal_executor = TerminalExecutor(working_dir=conv_state.workspace.working_dir)
        terminal = TerminalTool.create(conv_state, executor=terminal_executor, **params)[0]
        grep = GrepTool.create(conv_state, terminal_executor=terminal_executor)[0]
        return [terminal, grep]


register_tool(BashAndGrepToolSet.name, BashAndGrepToolSet)


def call(call_id: str, name: str, **arguments: object) -> Message:
    tool_call = MessageToolCall(id=call_id, name=name, arguments=json.dumps(arguments))
    return Message(role="assistant", content="", tool_calls=[tool_call])


def answer(text: str) -> Message:
    return Message(role="assistant", content=text)


def observations(conversation) -> list[ObservationEvent]:
    return [e for e in conversation.state.events if isinstance(e, ObservationEvent)]


class TestToolSets:
    def test_a_tool_set_shares_one_shell_between_its_tools(self, tmp_path):
        """The terminal and grep of one tool set run in one shell: grep sees the terminal's cd."""
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "notes.txt").write_text("fork me\nkeep me\nfork again\n")
        # The set's grep tool is named "grep" (its class's name), its terminal "terminal".
        llm = TestLLM.from_messages(
            [
                call("c1", "terminal", command="cd sub"),
                call("c2", "grep", pattern="fork"),
                answer("Done."),
            ]
        )
        conversation = Conversation(
            agent=Agent(llm=llm, tools=[Tool(name=BashAndGrepToolSet.name)]),
            workspace=str(tmp_path),
        )
        try:
            conversation.send_message("Find 'fork'.")
            conversation.run()
        finally:
            conversation.close()
        terminal, grep = observations(conversation)
        assert terminal.exit_code == 0
        assert grep.output.splitlines() == [
            "Found 2 matching lines.",
            "./notes.txt:1:fork me",
            "./notes.txt:3:fork again",
        ]
        assert isinstance(grep.observation, GrepObservation)
        assert grep.observation.count == 2
        assert grep.action_id is not None
        assert conversation.state.execution_status.value == "finished"

    def test_the_model_is_offered_every_tool_of_the_set(self, tmp_path):
        """Over litellm's HTTP path the model is sent the terminal's and the grep's specs."""
        with StubLLMServer() as stub:
            stub.script(StubReply.text("Nothing to do."))
            conversation = Conversation(
                agent=Agent(llm=_llm(stub), tools=[Tool(name=BashAndGrepToolSet.name)]),
                workspace=str(tmp_path),
            )
            conversation.send_message("Hello.")
            conversation.run()
            conversation.close()
            offered = {
                tool["function"]["name"]: tool["function"]
                for tool in stub.requests[0].body["tools"]
            }
        assert set(offered) == {"terminal", "grep"}
        assert offered["grep"]["description"] == "Search file contents with a regular expression."
        assert offered["grep"]["parameters"]["required"] == ["pattern"]

    def test_a_fork_gets_its_own_shell(self, tmp_path):
        """A fork's tool set is made anew: its shell does not inherit the source's variables."""
        llm = TestLLM.from_messages(
            [call("c1", "terminal", command="export MARK=source; echo $MARK"), answer("ok")]
        )
        source = Conversation(
            agent=Agent(llm=llm, tools=[Tool(name=BashAndGrepToolSet.name)]),
            workspace=str(tmp_path),
        )
        source.send_message("Mark it.")
        source.run()
        fork_llm = TestLLM.from_messages(
            [call("c2", "terminal", command="echo [${MARK:-unset}]"), answer("ok")]
        )
        fork = source.fork(agent=source.agent.model_copy(update={"llm": fork_llm}))
        fork.send_message("Look.")
        fork.run()
        source.close()
        fork.close()
        assert observations(fork)[-1].output.strip() == "[unset]"
        assert len(observations(source)) == 1


def _llm(stub: StubLLMServer):
    from cowconv import LLM

    return LLM(**stub.llm_settings())


class TestRegistration:
    def test_a_function_factory_is_registered_under_its_name(self, tmp_path):
        """register_tool(name, function): the function's tools run like a class's."""

        def make_echo(conv_state, prefix: str = ">"):
            class EchoAction(Action):
                text: str

            class Echo(ToolExecutor[EchoAction, Observation]):
                def __call__(self, action, conversation=None):
                    return Observation.from_text(f"{prefix} {action.text}")

            tool = GrepTool(description="Echo.", action_type=EchoAction, executor=Echo())
            return [tool]

        register_tool("test_echo_factory", make_echo)
        llm = TestLLM.from_messages([call("c1", "grep", text="hi"), answer("Done.")])
        conversation = Conversation(
            agent=Agent(llm=llm, tools=[Tool(name="test_echo_factory", params={"prefix": "#"})]),
            workspace=str(tmp_path),
        )
        conversation.send_message("Echo.")
        conversation.run()
        assert observations(conversation)[0].output == "# hi"

    def test_bad_registrations_are_refused(self):
        """A name without a factory, or a factory that is neither a tool class nor callable."""
        with pytest.raises(InvalidTypeError, match="function returning tools"):
            register_tool("test_not_a_factory", 42)
        with pytest.raises(InvalidValueError, match="non-empty name"):
            register_tool("", GrepTool)
        with pytest.raises(InvalidValueError, match="already registered"):
            register_tool("terminal", GrepTool)

    def test_create_takes_a_state_or_a_workspace(self, tmp_path):
        """OpenHands' call, create(conv_state, executor=...), is a list; cowconv's an instance."""
        conversation = Conversation(
            agent=Agent(llm=TestLLM.from_messages([])), workspace=str(tmp_path)
        )
        executor = TerminalExecutor(working_dir=str(tmp_path))
        [terminal] = TerminalTool.create(conversation.state, executor=executor)
        assert terminal.executor is executor
        assert isinstance(TerminalTool.create(conversation.state.workspace), TerminalTool)
        with pytest.raises(InvalidTypeError, match="takes a Workspace or a conversation state"):
            TerminalTool.create(42)
        executor.close()


class TestBadTools:
    def _run(self, tmp_path, factory_name, script, fails=False):
        conversation = Conversation(
            agent=Agent(llm=TestLLM.from_messages(script), tools=[Tool(name=factory_name)]),
            workspace=str(tmp_path),
        )
        conversation.send_message("Go.")
        if fails:
            with pytest.raises(ConversationRunError):
                conversation.run()
        else:
            conversation.run()
        return conversation

    def test_a_create_that_answers_no_tools_stops_the_run_clearly(self, tmp_path):
        """create() answering something else than tools: the run ends in error saying so."""
        register_tool("test_bad_create", lambda conv_state: "not tools")
        conversation = self._run(tmp_path, "test_bad_create", [answer("never")], fails=True)
        error = conversation.state.events[-1]
        assert isinstance(error, AgentErrorEvent)
        assert "the tools of 'test_bad_create'" in error.error
        assert "must be a sequence of ToolDefinition instances, got 'not tools'" in error.error
        assert conversation.state.execution_status.value == "error"

    def test_an_executor_answering_garbage_is_a_crashed_tool(self, tmp_path):
        """An executor answering neither an observation nor a model: the tool crashed, said why."""

        class Garbage(ToolExecutor[GrepAction, Observation]):
            def __call__(self, action, conversation=None):
                return 42

        register_tool(
            "test_garbage_executor",
            lambda conv_state: [
                GrepTool(description="x", action_type=GrepAction, executor=Garbage())
            ],
        )
        conversation = self._run(
            tmp_path,
            "test_garbage_executor",
            [call("c1", "grep", pattern="x"), answer("no")],
            fails=True,
        )
        error = conversation.state.events[-1]
        assert isinstance(error, AgentErrorEvent)
        assert "answered int" in error.error

    def test_invalid_arguments_reach_the_model(self, tmp_path):
        """Arguments that do not fit the action type: an error observation, the run goes on."""
        conversation = self._run(
            tmp_path,
            BashAndGrepToolSet.name,
            [call("c1", "grep", path="."), answer("I see.")],
        )
        [observation] = observations(conversation)
        assert observation.output.startswith("Error: invalid arguments for 'grep': pattern:")
        assert conversation.state.execution_status.value == "finished"


class TestTerminalExecutor:
    @settings(max_examples=15, deadline=None)
    @given(words=st.lists(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), min_size=1, max_size=4))
    def test_runs_commands_in_one_shell(self, tmp_path_factory, words):
        """Each command sees what the ones before it set; the answer carries the exit code."""
        directory = tmp_path_factory.mktemp("shell")
        executor = TerminalExecutor(working_dir=str(directory))
        try:
            for index, word in enumerate(words):
                executor(TerminalAction(command=f"export W{index}={word}"))
            echoed = executor(
                TerminalAction(command="echo " + " ".join(f"$W{i}" for i in range(len(words))))
            )
            assert isinstance(echoed, TerminalObservation)
            assert echoed.text.split() == words
            assert (echoed.exit_code, echoed.command.startswith("echo")) == (0, True)
            assert executor(TerminalAction(command="exit 3")).exit_code == 3
            reset = executor(TerminalAction(command="echo ${W0:-gone}", reset=True))
            assert reset.text.strip() == "gone"
        finally:
            executor.close()

    def test_input_to_a_running_command_is_refused(self, tmp_path):
        """is_input=True: an error observation saying it is not supported."""
        executor = TerminalExecutor(working_dir=str(tmp_path))
        refused = executor(TerminalAction(command="y", is_input=True))
        assert refused.is_error and "not supported" in refused.text
        executor.close()


def test_create_tools_of_a_plain_tool(tmp_path):
    """cowconv's own tools make one instance through create_tools, for the state's workspace."""
    conversation = Conversation(agent=Agent(llm=TestLLM.from_messages([])), workspace=str(tmp_path))
    [terminal] = create_tools(Tool(name="terminal"), conversation.state)
    assert isinstance(terminal, resolve_tool("terminal"))
    assert terminal.workspace.working_dir == os.fspath(tmp_path)
