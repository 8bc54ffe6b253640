"""The tool registry and ToolDefinition: names, specs, arguments, settings."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from cowconv import (
    ToolArgumentError,
    ToolDefinition,
    ToolResult,
    Workspace,
    register_tool,
    registered_tools,
    resolve_tool,
)


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
        """A class without a name or a pydantic Params model, or not a tool, is refused."""

        class Nameless(ToolDefinition[GreetParams]):
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
