"""The planning agent's tools (glob, grep, planning_file_editor) and get_planning_agent."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ExecutionStatus,
    InvalidTypeError,
    InvalidValueError,
    Message,
    MessageToolCall,
    ObservationEvent,
    Tool,
    Workspace,
    resolve_tool,
)
from cowconv.backends.wire import agent_from_openhands
from cowconv.testing import TestLLM
from cowconv.tools.file_editor import FileEditorAction
from cowconv.tools.planning_file_editor import PlanningFileEditorTool, plan_headers
from cowconv.tools.preset.planning import (
    PLANNING_SYSTEM_PROMPT,
    format_plan_structure,
    get_plan_headers,
    get_planning_agent,
)
from cowconv.tools.search import GlobTool, GrepTool


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small workspace: files of different ages, a hidden directory, a hidden file."""
    (tmp_path / "src").mkdir()
    (tmp_path / ".git").mkdir()
    files = {
        "src/old.py": "def fork():\n    return 1\n",
        "src/new.py": "FORK = True\n",
        "src/app.ts": "export const fork = 1;\n",
        "README.md": "How to fork.\n",
        ".git/config": "fork\n",
        ".hidden.py": "fork\n",
    }
    for index, (name, text) in enumerate(files.items()):
        path = tmp_path / name
        path.write_text(text)
        os.utime(path, (1_000_000 + index, 1_000_000 + index))
    return tmp_path


def glob(root: Path, **arguments: Any):
    [tool] = GlobTool.create(Workspace(working_dir=str(root)))
    return tool(tool.validate_arguments(arguments))


def grep(root: Path, **arguments: Any):
    [tool] = GrepTool.create(Workspace(working_dir=str(root)))
    return tool(tool.validate_arguments(arguments))


class TestGlob:
    def test_matches_at_any_depth_newest_first(self, tree):
        """A pattern without ** matches at any depth; newest first; hidden files left out."""
        found = glob(tree, pattern="*.py")
        assert found.files == (str(tree / "src/new.py"), str(tree / "src/old.py"))
        assert found.text == (
            f"Found 2 file(s) matching pattern '*.py' in '{tree}':\n"
            f"{tree / 'src/new.py'}\n{tree / 'src/old.py'}"
        )
        assert (found.pattern, found.search_path, found.truncated) == ("*.py", str(tree), False)

    def test_path_and_absolute_patterns(self, tree):
        """path= searches there; an absolute pattern searches from its fixed part."""
        assert glob(tree, pattern="*.md", path=str(tree / "src")).files == ()
        assert glob(tree, pattern=f"{tree}/src/*.ts").files == (str(tree / "src/app.ts"),)

    def test_nothing_found_and_a_missing_directory(self, tree):
        """No match is a plain answer; a directory that is not there is an error observation."""
        none = glob(tree, pattern="*.rs")
        assert (none.is_error, none.text) == (
            False,
            f"No files found matching pattern '*.rs' in directory '{tree}'",
        )
        missing = glob(tree, pattern="*", path=str(tree / "nope"))
        assert missing.is_error
        assert missing.text == f"Search path '{tree / 'nope'}' is not a valid directory"

    def test_at_most_100_files(self, tmp_path):
        """More than 100 matches: the first 100 and a note."""
        for index in range(105):
            (tmp_path / f"f{index}.txt").write_text("x")
        found = glob(tmp_path, pattern="*.txt")
        assert len(found.files) == 100 and found.truncated
        assert found.text.endswith(
            "[Results truncated to first 100 files. Consider using a more specific pattern.]"
        )


class TestGrep:
    def test_case_insensitive_regex_newest_first(self, tree):
        """Files whose content matches, any case, newest first; hidden ones left out."""
        found = grep(tree, pattern=r"fork\b")
        assert found.matches == tuple(
            str(tree / name) for name in ("README.md", "src/app.ts", "src/new.py", "src/old.py")
        )
        assert found.text.startswith(f"Found 4 file(s) containing pattern 'fork\\b' in '{tree}':\n")

    def test_include_filters_file_names_with_braces(self, tree):
        """include takes a name pattern, braces included ("*.{ts,md}")."""
        found = grep(tree, pattern="fork", include="*.{ts,md}")
        assert found.matches == (str(tree / "README.md"), str(tree / "src/app.ts"))
        assert "(filtered by '*.{ts,md}')" in found.text

    def test_errors_are_observations(self, tree):
        """A bad regex and a missing directory are error observations naming the problem."""
        bad = grep(tree, pattern="(")
        assert bad.is_error and bad.text.startswith("Invalid regex pattern: ")
        missing = grep(tree, pattern="x", path=str(tree / "nope"))
        assert missing.is_error
        assert missing.text == f"Search path '{tree / 'nope'}' is not a valid directory"

    def test_nothing_found(self, tree):
        """No match names the pattern, the directory and the filter."""
        none = grep(tree, pattern="spoon", include="*.py")
        assert none.text == (
            f"No files found containing pattern 'spoon' in directory '{tree}' (filtered by '*.py')"
        )


class TestSearchTools:
    def test_registered_and_refuse_settings(self, tmp_path):
        """glob and grep resolve by name; a setting is a clear error."""
        assert resolve_tool("glob") is GlobTool and resolve_tool("grep") is GrepTool
        with pytest.raises(InvalidTypeError, match="takes no settings"):
            GlobTool.create(Workspace(working_dir=str(tmp_path)), depth=3)
        with pytest.raises(InvalidTypeError, match="conversation state or a Workspace"):
            GrepTool.create(object())


class TestPlanningFileEditor:
    def test_makes_the_plan_with_its_headers_and_edits_only_it(self, tmp_path):
        """PLAN.md starts with the headers; it can be edited, other files only viewed."""
        [editor] = PlanningFileEditorTool.create(Workspace(working_dir=str(tmp_path)))
        plan = tmp_path / ".agents_tmp" / "PLAN.md"
        assert plan.read_text() == plan_headers() == get_plan_headers()
        assert editor.name == "planning_file_editor"
        replaced = editor(
            FileEditorAction(
                command="str_replace",
                path=str(plan),
                old_str="# 1. OBJECTIVE\n",
                new_str="# 1. OBJECTIVE\nFork cheaply.\n",
            )
        )
        assert not replaced.is_error
        assert "Fork cheaply." in plan.read_text()
        other = tmp_path / "main.py"
        refused = editor(FileEditorAction(command="create", path=str(other), file_text="x"))
        assert refused.is_error and not other.exists()
        (tmp_path / "notes.txt").write_text("read me\n")
        viewed = editor(FileEditorAction(command="view", path=str(tmp_path / "notes.txt")))
        assert not viewed.is_error and "read me" in viewed.text

    def test_plan_path_and_a_plan_at_the_root(self, tmp_path):
        """plan_path= (absolute) sets the plan; a PLAN.md at the root is used as it is."""
        chosen = tmp_path / "plans" / "P.md"
        [editor] = PlanningFileEditorTool.create(
            Workspace(working_dir=str(tmp_path)), plan_path=str(chosen)
        )
        assert editor.plan_path == str(chosen) and chosen.read_text() == plan_headers()
        root_plan = tmp_path / "PLAN.md"
        root_plan.write_text("mine\n")
        [editor] = PlanningFileEditorTool.create(Workspace(working_dir=str(tmp_path)))
        assert editor.plan_path == str(root_plan) and root_plan.read_text() == "mine\n"
        with pytest.raises(InvalidValueError, match="absolute"):
            PlanningFileEditorTool.create(Workspace(working_dir=str(tmp_path)), plan_path="p.md")
        with pytest.raises(InvalidTypeError, match="plan_path only"):
            PlanningFileEditorTool.create(Workspace(working_dir=str(tmp_path)), colour="red")


def call(n: int, name: str, **arguments: Any) -> Message:
    tool_call = MessageToolCall(id=f"c{n}", name=name, arguments=json.dumps(arguments))
    return Message(role="assistant", content="", tool_calls=[tool_call])


class TestPlanningAgent:
    def test_configuration(self):
        """Its tools, prompt (with the plan's structure) and condenser."""
        agent = get_planning_agent(LLM(model="openai/gpt-4o", usage_id="agent"))
        assert [tool.name for tool in agent.tools] == ["glob", "grep", "planning_file_editor"]
        assert agent.system_prompt == PLANNING_SYSTEM_PROMPT
        assert format_plan_structure() in agent.system_prompt
        assert agent.condenser is not None and agent.condenser.llm.usage_id == "planning_condenser"

    def test_a_scripted_run_searches_and_writes_the_plan(self, tree):
        """TestLLM drives glob, grep and a PLAN.md edit; other files are unchanged."""
        plan = tree / ".agents_tmp" / "PLAN.md"
        llm = TestLLM.from_messages(
            [
                call(0, "glob", pattern="*.py"),
                call(1, "grep", pattern="return"),
                call(
                    2,
                    "planning_file_editor",
                    command="str_replace",
                    path=str(plan),
                    old_str="# 1. OBJECTIVE\n",
                    new_str="# 1. OBJECTIVE\nMake fork() return 2.\n",
                ),
                Message(role="assistant", content="The plan is written."),
            ]
        )
        with Conversation(agent=get_planning_agent(llm), workspace=tree) as conversation:
            conversation.send_message("Plan the change.")
            conversation.run()
            state = conversation.state
        assert state.execution_status is ExecutionStatus.FINISHED
        observed = [e for e in state.events if isinstance(e, ObservationEvent)]
        assert [e.tool_name for e in observed] == ["glob", "grep", "planning_file_editor"]
        assert observed[0].observation.files == (str(tree / "src/new.py"), str(tree / "src/old.py"))
        assert observed[1].observation.matches == (str(tree / "src/old.py"),)
        assert not observed[2].observation.is_error
        assert "Make fork() return 2." in plan.read_text()
        assert (tree / "src/old.py").read_text() == "def fork():\n    return 1\n"

    def test_its_tools_resolve_by_name(self):
        """Every tool of the planning agent is a registered built-in."""
        for tool in get_planning_agent(LLM(model="openai/gpt-4o")).tools:
            assert resolve_tool(tool.name).name == tool.name
        assert Tool(name="glob") in get_planning_agent(LLM(model="m")).tools
        assert isinstance(get_planning_agent(LLM(model="m")), Agent)


class TestAgentServerNames:
    def test_an_openhands_planning_agent_keeps_its_tools(self):
        """OpenHands' planning agent JSON (its names or class names) keeps all three tools."""
        sent = {
            "kind": "Agent",
            "llm": {"model": "m"},
            "tools": [
                {"name": "GlobTool"},
                {"name": "grep"},
                {"name": "planning_file_editor", "params": {"plan_path": "/w/PLAN.md"}},
            ],
        }
        tools = agent_from_openhands(sent)["tools"]
        assert tools == [
            {"name": "glob", "params": {}},
            {"name": "grep", "params": {}},
            {"name": "planning_file_editor", "params": {"plan_path": "/w/PLAN.md"}},
        ]
