"""The tool registry and ToolDefinition: names, specs, arguments, settings."""

from __future__ import annotations

import pytest
from hypothesis import given
from pydantic import BaseModel, Field

from cowconv import (
    Action,
    Observation,
    ToolArgumentError,
    ToolDefinition,
    ToolExecutor,
    ToolResult,
    Workspace,
    register_tool,
    registered_tools,
    resolve_tool,
)
from cowconv.agent.runtime import _action, _execute
from cowconv.core.llm import LLMResponse, LLMToolCall
from tests.strategies import tool_argument_texts


class GreetParams(BaseModel):
    name: str = Field(description="Who to greet.")
    times: int = Field(default=1, ge=1)


class GreetSettings(BaseModel):
    greeting: str = "Hello"


@register_tool
class GreetTool(ToolDefinition[GreetParams]):
    """Greet someone."""

    name = "test-greet"
    Params = GreetParams
    Settings = GreetSettings

    def execute(self, params: GreetParams) -> ToolResult:
        return ToolResult(
            output=" ".join([f"{self.settings.greeting}, {params.name}!"] * params.times)
        )


WORKSPACE = Workspace(working_dir=".")


class TestRegisterTool:
    def test_registered_tool_resolves(self):
        """A registered class resolves by name and is listed."""
        assert resolve_tool("test-greet") is GreetTool
        assert "test-greet" in registered_tools()

    def test_registering_again_is_harmless(self):
        """Registering the same class again changes nothing."""
        assert register_tool(GreetTool) is GreetTool
        assert resolve_tool("test-greet") is GreetTool

    def test_taken_name_is_refused(self):
        """Another class under a taken name is a ValueError."""

        class Impostor(ToolDefinition[GreetParams]):
            name = "test-greet"
            Params = GreetParams

            def execute(self, params: GreetParams) -> ToolResult:
                return ToolResult(output="")

        with pytest.raises(ValueError, match="already registered by GreetTool"):
            register_tool(Impostor)
        assert resolve_tool("test-greet") is GreetTool

    def test_incomplete_classes_are_refused(self):
        """An empty name, no pydantic Params model, or not a tool: refused."""

        class Nameless(ToolDefinition[GreetParams]):
            name = ""
            Params = GreetParams

            def execute(self, params: GreetParams) -> ToolResult:
                return ToolResult(output="")

        class NoParams(ToolDefinition[GreetParams]):
            name = "test-no-params"

            def execute(self, params: GreetParams) -> ToolResult:
                return ToolResult(output="")

        with pytest.raises(ValueError, match="non-empty class attribute `name`"):
            register_tool(Nameless)
        with pytest.raises(ValueError, match="pydantic model as class attribute `Params`"):
            register_tool(NoParams)
        with pytest.raises(TypeError, match="ToolDefinition subclass"):
            register_tool(dict)  # type: ignore[arg-type]

    def test_a_class_without_a_name_is_named_after_its_class(self):
        """As in OpenHands' SDK: snake case of the class name, without a "_tool" suffix."""

        class TestUnnamedEchoTool(ToolDefinition[GreetParams]):
            Params = GreetParams

            def execute(self, params: GreetParams) -> ToolResult:
                return ToolResult(output=params.name)

        assert TestUnnamedEchoTool.name == "test_unnamed_echo"
        register_tool(TestUnnamedEchoTool)
        assert resolve_tool("test_unnamed_echo") is TestUnnamedEchoTool

    def test_openhands_style_type_parameters(self):
        """ToolDefinition[Action, Observation], ToolExecutor[...]: OpenHands spelling."""

        class TestPingAction(Action):
            host: str = "localhost"

        class TestPingObservation(Observation):
            pass

        class TestPingExecutor(ToolExecutor[TestPingAction, TestPingObservation]):
            def __call__(
                self, action: TestPingAction, conversation: object = None
            ) -> TestPingObservation:
                return TestPingObservation.from_text(f"pong from {action.host}")

        class TestPingTool(ToolDefinition[TestPingAction, TestPingObservation]):
            Params = TestPingAction

            def execute(self, params: TestPingAction) -> ToolResult:
                return ToolResult(output=TestPingExecutor()(params).text, exit_code=0)

        register_tool(TestPingTool)
        tool = resolve_tool("test_ping").create(Workspace(working_dir="."))
        assert tool.execute(tool.parse_arguments('{"host": "h1"}')).output == "pong from h1"
        assert TestPingTool.spec()["function"]["parameters"]["properties"]["host"]["default"] == (
            "localhost"
        )


class TestToolDefinition:
    def test_spec_from_params_and_docstring(self):
        """The spec carries the name, the docstring and the Params JSON schema."""
        function = GreetTool.spec()["function"]
        assert function["name"] == "test-greet"
        assert function["description"] == "Greet someone."
        assert function["parameters"]["required"] == ["name"]
        assert function["parameters"]["properties"]["name"]["description"] == "Who to greet."
        assert "title" not in function["parameters"]

    def test_settings_are_validated(self):
        """Settings come from Tool(params=...), validated; bad ones are a ValueError."""
        tool = GreetTool.create(WORKSPACE, {"greeting": "Hi"})
        assert tool.execute(tool.parse_arguments('{"name": "Ada"}')).output == "Hi, Ada!"
        with pytest.raises(ValueError, match="invalid settings for tool 'test-greet'"):
            GreetTool.create(WORKSPACE, {"greeting": 3})

    def test_empty_arguments_mean_no_arguments(self):
        """Empty argument text is an empty object (and then fails on required fields)."""
        tool = GreetTool.create(WORKSPACE)
        with pytest.raises(ToolArgumentError, match="name: Field required"):
            tool.parse_arguments("")

    def test_argument_errors_name_every_problem(self):
        """Every invalid field is named in one message."""
        tool = GreetTool.create(WORKSPACE)
        with pytest.raises(ToolArgumentError) as raised:
            tool.parse_arguments('{"name": 5, "times": 0}')
        assert "name: Input should be a valid string" in str(raised.value)
        assert "times: Input should be greater than or equal to 1" in str(raised.value)


class TestArgumentsAreDecodedOnce:
    def test_validate_arguments_takes_the_decoded_mapping(self):
        """validate_arguments() checks a mapping (frozen or plain) against Params."""
        tool = GreetTool.create(WORKSPACE)
        assert tool.validate_arguments({"name": "Ada", "times": 2}) == GreetParams(
            name="Ada", times=2
        )
        with pytest.raises(ToolArgumentError, match="times: Input should be greater than"):
            tool.validate_arguments({"name": "Ada", "times": 0})

    @pytest.mark.parametrize(
        ("text", "says"),
        [
            ('{"name": NaN}', "cannot be recorded"),
            ('{"name": "\\ud800"}', "cannot be recorded"),
            ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
        ],
    )
    def test_arguments_a_history_cannot_hold_are_refused(self, text, says):
        """NaN, lone surrogates and absurd nesting are a ToolArgumentError, not a crash."""
        with pytest.raises(ToolArgumentError, match=says):
            GreetTool.create(WORKSPACE).parse_arguments(text)

    @given(text=tool_argument_texts)
    def test_a_run_and_parse_arguments_agree(self, text):
        """For any argument text, the run's tool result is what parse_arguments() leads to."""
        tool = GreetTool.create(WORKSPACE)
        call = LLMToolCall(id="c1", name=tool.name, arguments=text)
        response = LLMResponse(
            id="r1",
            content="",
            tool_calls=(call,),
            cost=0.0,
            prompt_tokens=0,
            completion_tokens=0,
            latency=0.0,
        )
        action, problem = _action(response, call, "")
        result = _execute({tool.name: tool}, action, problem)
        try:
            expected = tool.execute(tool.parse_arguments(text)).output
        except ToolArgumentError as error:
            assert result.output == f"Error: {error}"
            assert result.extra == {"error": "invalid_arguments"}
            if problem is not None:  # did not decode: the text is kept for the record
                assert action.arguments == {"__invalid_json__": text}
        else:
            assert problem is None and result.output == expected
