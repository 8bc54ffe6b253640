"""OpenHands' file editor on cowconv: its commands and texts, its confinement, its undo history.

``Tool(name="file_editor")`` is a built-in: view, create, str_replace, insert and undo_edit,
with OpenHands' SDK's schema, observations and error texts, in the conversation's
workspace only. Its undo history is rebuilt from the conversation's own events, so it
forks, persists and crosses processes with the conversation; the isolation property at
the end checks that on every backend.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ConversationState,
    CowconvError,
    InvalidTypeError,
    InvalidValueError,
    Message,
    MessageToolCall,
    ObservationEvent,
    Tool,
    ToolArgumentError,
    Workspace,
    registered_tools,
    resolve_tool,
    run_branches,
)
from cowconv.agent.tools import create_tools
from cowconv.distributed import ProcessExecutor
from cowconv.testing import StubLLMServer, StubReply, TestLLM
from cowconv.tools.file_editor import (
    TOOL_DESCRIPTION,
    EditorToolParameterInvalidError,
    EditorToolParameterMissingError,
    FileEditor,
    FileEditorAction,
    FileEditorExecutor,
    FileEditorObservation,
    FileEditorTool,
    FileValidationError,
    ToolError,
    file_editor,
)
from cowconv.tools.file_editor.editor import MAX_HISTORY_PER_FILE, clip
from tests.conftest import BACKENDS, open_backend

WAIT = 120.0


def make_tool(root: Path, llm: LLM | None = None) -> FileEditorTool:
    state = ConversationState(
        id="c1",
        agent=Agent(llm=llm or LLM(model="openai/gpt-4o")),
        workspace=Workspace(working_dir=str(root)),
    )
    [tool] = FileEditorTool.create(state)
    return tool


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return workspace.resolve()


@pytest.fixture
def tool(root: Path) -> Iterator[FileEditorTool]:
    made = make_tool(root)
    yield made
    made.close()


def run(tool: FileEditorTool, **arguments: Any) -> FileEditorObservation:
    """One call as a run makes it: arguments validated, then the tool executed."""
    result = tool.execute(tool.validate_arguments(arguments))
    assert isinstance(result.observation, FileEditorObservation)
    # What the model reads: the text, after OpenHands' error header when the call failed.
    header = "[An error occurred during execution.]\n" if result.observation.is_error else ""
    assert result.output == header + result.observation.text
    return result.observation


def refused(tool: FileEditorTool, **arguments: Any) -> str:
    observation = run(tool, **arguments)
    assert observation.is_error
    assert observation.command == arguments["command"]
    return observation.text


# -- the tool as the model sees it ------------------------------------------------------------


class TestSpec:
    def test_name_and_parameters_are_openhands(self, tool: FileEditorTool):
        """The spec is OpenHands' SDK's: name file_editor, its seven parameters, two required."""
        function = tool.to_openai_tool()["function"]
        assert function["name"] == "file_editor" == FileEditorTool.name
        parameters = function["parameters"]
        assert sorted(parameters["required"]) == ["command", "path"]
        assert parameters["properties"]["command"]["enum"] == [
            "view",
            "create",
            "str_replace",
            "insert",
            "undo_edit",
        ]
        assert parameters["properties"]["insert_line"]["anyOf"][0] == {
            "minimum": 0,
            "type": "integer",
        }
        assert set(parameters["properties"]) == {
            "command",
            "path",
            "file_text",
            "old_str",
            "new_str",
            "insert_line",
            "view_range",
        }

    def test_description_names_the_working_directory(self, tool: FileEditorTool, root: Path):
        """The description is OpenHands' text followed by the conversation's working directory."""
        assert tool.description.startswith(TOOL_DESCRIPTION)
        assert f"Your current working directory is: {root}\n" in tool.description

    def test_built_in_without_an_import(self):
        """In a fresh process, Tool(name='file_editor') resolves without importing the module."""
        code = (
            "import sys; from cowconv import resolve_tool, registered_tools;"
            "assert 'cowconv.tools.file_editor' not in sys.modules;"
            "assert 'file_editor' in registered_tools();"
            "print(resolve_tool('file_editor').__qualname__)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT, check=True
        )
        assert out.stdout.strip() == "FileEditorTool"
        assert "file_editor" in registered_tools()
        assert resolve_tool("file_editor") is FileEditorTool

    def test_create_tools_makes_one_editor(self, root: Path):
        """create_tools(Tool(name='file_editor'), state) gives one editor for the workspace."""
        state = ConversationState(
            id="c1",
            agent=Agent(llm=LLM(model="openai/gpt-4o")),
            workspace=Workspace(working_dir=str(root)),
        )
        [made] = create_tools(Tool(name="file_editor"), state)
        assert isinstance(made, FileEditorTool)
        assert isinstance(made.executor, FileEditorExecutor)
        made.close()

    def test_settings_through_the_tool_reference(self, root: Path):
        """Tool(name='file_editor', params={'allowed_edits_files': [...]}) limits the edits."""
        allowed = str(root / "ok.txt")
        state = ConversationState(
            id="c1",
            agent=Agent(llm=LLM(model="openai/gpt-4o")),
            workspace=Workspace(working_dir=str(root)),
        )
        reference = Tool(name="file_editor", params={"allowed_edits_files": [allowed]})
        [made] = create_tools(reference, state)
        assert not run(made, command="create", path=allowed, file_text="x").is_error
        other = refused(made, command="create", path=str(root / "no.txt"), file_text="x")
        assert other.startswith("Operation 'create' is not allowed on file")
        made.close()

    @pytest.mark.parametrize(
        "settings",
        [{"colour": "red"}, {"allowed_edits_files": "a.txt"}, {"allowed_edits_files": [1]}],
    )
    def test_bad_settings_are_refused(self, root: Path, settings: dict[str, Any]):
        """A setting the editor does not have, or a malformed one, is an InvalidValueError."""
        with pytest.raises(InvalidValueError, match="invalid settings for tool 'file_editor'"):
            FileEditorTool.create(Workspace(working_dir=str(root)), **settings)

    def test_a_workspace_or_a_state_and_nothing_else(self, root: Path):
        """create() takes a Workspace too; anything else is an InvalidTypeError."""
        [made] = FileEditorTool.create(Workspace(working_dir=str(root)))
        assert isinstance(made.executor, FileEditorExecutor)
        with pytest.raises(InvalidTypeError, match="conversation state or a Workspace"):
            FileEditorTool.create(str(root))


# -- the commands, one by one ---------------------------------------------------------------


IN_RANGE = "should be within the range of lines of the file: [1, 3]."
IN_ORDER = "should be greater than or equal to the first element"


class TestView:
    def test_a_file_as_cat_n(self, tool: FileEditorTool, root: Path):
        """view prints each line numbered in six columns and a tab, under OpenHands' heading."""
        (root / "a.py").write_text("one\ntwo\n")
        observation = run(tool, command="view", path=str(root / "a.py"))
        assert observation.text == (
            f"Here's the result of running `cat -n` on {root / 'a.py'}:\n     1\tone\n     2\ttwo\n"
        )
        assert (observation.path, observation.prev_exist) == (str(root / "a.py"), True)
        assert observation.old_content is None and observation.new_content is None

    def test_an_empty_file(self, tool: FileEditorTool, root: Path):
        """An empty file shows the heading alone."""
        (root / "empty").write_text("")
        assert run(tool, command="view", path=str(root / "empty")).text == (
            f"Here's the result of running `cat -n` on {root / 'empty'}:\n"
        )

    def test_a_range(self, tool: FileEditorTool, root: Path):
        """view_range [2, 3] shows lines 2 and 3 with their numbers; -1 means to the end."""
        (root / "a").write_text("1\n2\n3\n4\n")
        path = str(root / "a")
        assert run(tool, command="view", path=path, view_range=[2, 3]).text.endswith(
            ":\n     2\t2\n     3\t3\n"
        )
        assert run(tool, command="view", path=path, view_range=[3, -1]).text.endswith(
            ":\n     3\t3\n     4\t4\n"
        )

    def test_a_range_past_the_end_is_cut_with_a_note(self, tool: FileEditorTool, root: Path):
        """An end past the last line shows to the end, after OpenHands' note."""
        (root / "a").write_text("1\n2\n")
        text = run(tool, command="view", path=str(root / "a"), view_range=[1, 9]).text
        assert text.startswith(
            "NOTE: We only show up to 2 since there're only 2 lines in this file.\n"
        )
        assert text.endswith("     1\t1\n     2\t2\n")

    @pytest.mark.parametrize(
        ("view_range", "hint"),
        [
            ([1], "It should be a list of two integers."),
            ([1, 2, 3], "It should be a list of two integers."),
            ([0, 1], f"Its first element `0` {IN_RANGE}"),
            ([4, 4], f"Its first element `4` {IN_RANGE}"),
            ([3, 2], f"Its second element `2` {IN_ORDER} `3`."),
            ([2, -5], f"Its second element `-5` {IN_ORDER} `2`."),
        ],
    )
    def test_bad_ranges(self, tool: FileEditorTool, root: Path, view_range, hint):
        """A range that is not two line numbers in order is refused with OpenHands' text."""
        (root / "a").write_text("1\n2\n3\n")
        text = refused(tool, command="view", path=str(root / "a"), view_range=view_range)
        assert text == f"Invalid `view_range` parameter: {view_range}. {hint}"

    def test_a_directory_two_levels_deep(self, tool: FileEditorTool, root: Path):
        """A directory lists non-hidden entries two levels deep, sorted, and counts hidden ones."""
        (root / "src" / "pkg" / "deep").mkdir(parents=True)
        (root / "src" / "pkg" / "deep" / "too_deep.py").write_text("")
        (root / "src" / "main.py").write_text("")
        (root / "src" / ".secret").write_text("")
        (root / "README").write_text("")
        (root / ".git").mkdir()
        text = run(tool, command="view", path=str(root)).text
        assert text == (
            f"Here's the files and directories up to 2 levels deep in {root}, excluding hidden "
            f"items:\n{root}/\n{root}/README\n{root}/src/\n{root}/src/main.py\n{root}/src/pkg/\n"
            f"\n1 hidden files/directories in this directory are excluded. You can use "
            f"'ls -la {root}' to see them."
        )

    def test_a_directory_refuses_a_range(self, tool: FileEditorTool, root: Path):
        """view_range on a directory is refused."""
        assert refused(tool, command="view", path=str(root), view_range=[1, 2]) == (
            "Invalid `view_range` parameter: [1, 2]. The `view_range` parameter is not allowed "
            "when `path` points to a directory."
        )

    def test_an_image_is_shown_as_image_content(self, tool: FileEditorTool, root: Path):
        """A .png is answered as a text part and a data: URL of its bytes."""
        data = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
        (root / "dot.png").write_bytes(data)
        observation = run(tool, command="view", path=str(root / "dot.png"))
        text, image = observation.content
        assert (
            text.text
            == f"Image file {root / 'dot.png'} read successfully. Displaying image content."
        )
        assert image.image_urls == (f"data:image/png;base64,{base64.b64encode(data).decode()}",)

    def test_long_output_is_clipped_in_the_middle(self, tool: FileEditorTool, root: Path):
        """A file over 16,000 characters shows its start and end around OpenHands' notice."""
        (root / "long").write_text("".join(f"line {n}\n" for n in range(5000)))
        text = run(tool, command="view", path=str(root / "long")).text
        assert "<response clipped><NOTE>Due to the max output limit" in text
        # As in OpenHands' SDK the text is clipped before it is numbered: the lines after the
        # notice are numbered on from it, not with their place in the file.
        assert "     1\tline 0\n" in text and text.endswith("\tline 4999\n")
        assert "line 2499\n" not in text

    def test_clip_keeps_the_limit(self):
        """clip() never answers more than its limit, and keeps what fits."""
        for size in range(40):
            content = "x" * size
            clipped = clip(content, 20, "[cut]")
            assert len(clipped) <= 20
            assert clipped == content or "[cut]" in clipped


class TestCreate:
    def test_creates_a_file(self, tool: FileEditorTool, root: Path):
        """create writes the text and answers prev_exist=False with the new content."""
        path = root / "new.py"
        observation = run(tool, command="create", path=str(path), file_text="x = 1\n")
        assert path.read_text() == "x = 1\n"
        assert observation.text == f"File created successfully at: {path}"
        assert (observation.prev_exist, observation.old_content, observation.new_content) == (
            False,
            None,
            "x = 1\n",
        )

    def test_never_overwrites(self, tool: FileEditorTool, root: Path):
        """create on an existing file is refused and the file is untouched."""
        (root / "a").write_text("keep")
        assert refused(tool, command="create", path=str(root / "a"), file_text="lost") == (
            f"Invalid `path` parameter: {root / 'a'}. File already exists at: {root / 'a'}. "
            "Cannot overwrite files using command `create`."
        )
        assert (root / "a").read_text() == "keep"

    def test_needs_file_text(self, tool: FileEditorTool, root: Path):
        """create without file_text is refused and writes nothing."""
        assert refused(tool, command="create", path=str(root / "a")) == (
            "Parameter `file_text` is required for command: create."
        )
        assert not (root / "a").exists()

    def test_a_missing_directory_is_an_error_with_no_leftovers(
        self, tool: FileEditorTool, root: Path
    ):
        """create in a directory that does not exist says why, and leaves nothing behind."""
        text = refused(tool, command="create", path=str(root / "no" / "a"), file_text="x")
        assert text.startswith("Ran into [Errno 2] No such file or directory")
        assert text.endswith(f"while trying to write to {root / 'no' / 'a'}")
        assert list(root.iterdir()) == []


class TestStrReplace:
    def test_replaces_the_one_match(self, tool: FileEditorTool, root: Path):
        """One match is replaced; the answer shows a numbered snippet and both contents."""
        (root / "a").write_text("a\nb\nc\n")
        observation = run(
            tool, command="str_replace", path=str(root / "a"), old_str="b", new_str="B"
        )
        assert (root / "a").read_text() == "a\nB\nc\n"
        assert observation.text == (
            f"The file {root / 'a'} has been edited. Here's the result of running `cat -n` on a "
            f"snippet of {root / 'a'}:\n     1\ta\n     2\tB\n     3\tc\nReview the changes and "
            "make sure they are as expected. Edit the file again if necessary."
        )
        assert (observation.old_content, observation.new_content) == ("a\nb\nc\n", "a\nB\nc\n")

    def test_no_match(self, tool: FileEditorTool, root: Path):
        """No match is refused with OpenHands' text; the file is untouched."""
        (root / "a").write_text("abc")
        assert refused(
            tool, command="str_replace", path=str(root / "a"), old_str="z", new_str="y"
        ) == (f"No replacement was performed, old_str `z` did not appear verbatim in {root / 'a'}.")
        assert (root / "a").read_text() == "abc"

    def test_several_matches_name_their_lines(self, tool: FileEditorTool, root: Path):
        """Several matches are refused, naming the lines they are on."""
        (root / "a").write_text("x = 1\ny = 2\nx = 1\n")
        assert refused(
            tool, command="str_replace", path=str(root / "a"), old_str="x = 1", new_str="z"
        ) == (
            "No replacement was performed. Multiple occurrences of old_str `x = 1` in lines "
            "[1, 3]. Please ensure it is unique."
        )
        assert (root / "a").read_text() == "x = 1\ny = 2\nx = 1\n"

    def test_surrounding_blanks_are_retried_stripped(self, tool: FileEditorTool, root: Path):
        """old_str with blanks around it matches stripped; new_str is written as given."""
        (root / "a").write_text("a = 1\n")
        run(tool, command="str_replace", path=str(root / "a"), old_str="  a = 1  ", new_str=" b")
        assert (root / "a").read_text() == " b\n"

    def test_same_strings_and_missing_parameters(self, tool: FileEditorTool, root: Path):
        """new_str equal to old_str, or old_str/new_str missing, is refused."""
        (root / "a").write_text("a")
        path = str(root / "a")
        assert refused(tool, command="str_replace", path=path, old_str="a", new_str="a") == (
            "Invalid `new_str` parameter: a. No replacement was performed. `new_str` and "
            "`old_str` must be different."
        )
        assert refused(tool, command="str_replace", path=path, new_str="b") == (
            "Parameter `old_str` is required for command: str_replace."
        )
        assert refused(tool, command="str_replace", path=path, old_str="a") == (
            "Parameter `new_str` is required for command: str_replace."
        )
        assert (root / "a").read_text() == "a"

    def test_keeps_permissions_and_a_single_byte_encoding(self, tool: FileEditorTool, root: Path):
        """An edit keeps the file's mode, and its latin-1 bytes where the new text fits."""
        path = root / "run.sh"
        path.write_bytes("caf\xe9 = 1\n".encode("latin-1"))
        path.chmod(0o754)
        run(tool, command="str_replace", path=str(path), old_str="1", new_str="2")
        assert path.read_bytes() == "caf\xe9 = 2\n".encode("latin-1")
        assert stat.S_IMODE(path.stat().st_mode) == 0o754
        run(tool, command="str_replace", path=str(path), old_str="2", new_str="\u2192")
        assert path.read_text(encoding="utf-8") == "caf\xe9 = \u2192\n"  # UTF-8 when it must

    def test_crlf_reads_as_lf(self, tool: FileEditorTool, root: Path):
        """Windows line ends read as \\n (a file opened in text mode), as OpenHands does."""
        (root / "a").write_bytes(b"one\r\ntwo\r\n")
        observation = run(
            tool, command="str_replace", path=str(root / "a"), old_str="two", new_str="2"
        )
        assert observation.old_content == "one\ntwo\n"
        assert (root / "a").read_bytes() == b"one\n2\n"


class TestInsert:
    def test_inserts_after_the_line(self, tool: FileEditorTool, root: Path):
        """insert puts new_str's lines after insert_line (0: at the top)."""
        (root / "a").write_text("a\nb\n")
        observation = run(
            tool, command="insert", path=str(root / "a"), insert_line=1, new_str="x\ny"
        )
        assert (root / "a").read_text() == "a\nx\ny\nb\n"
        assert observation.text == (
            f"The file {root / 'a'} has been edited. Here's the result of running `cat -n` on a "
            "snippet of the edited file:\n     1\ta\n     2\tx\n     3\ty\n     4\tb\nReview the "
            "changes and make sure they are as expected (correct indentation, no duplicate "
            "lines, etc). Edit the file again if necessary."
        )
        assert (observation.old_content, observation.new_content) == ("a\nb\n", "a\nx\ny\nb\n")
        run(tool, command="insert", path=str(root / "a"), insert_line=0, new_str="top")
        assert (root / "a").read_text() == "top\na\nx\ny\nb\n"

    def test_a_line_out_of_range(self, tool: FileEditorTool, root: Path):
        """insert_line past the end is refused with the allowed range."""
        (root / "a").write_text("a\nb\n")
        assert refused(
            tool, command="insert", path=str(root / "a"), insert_line=3, new_str="x"
        ) == (
            "Invalid `insert_line` parameter: 3. It should be within the range of allowed "
            "values: [0, 2]"
        )

    def test_missing_parameters(self, tool: FileEditorTool, root: Path):
        """insert needs insert_line and new_str."""
        (root / "a").write_text("a")
        path = str(root / "a")
        assert refused(tool, command="insert", path=path, new_str="x") == (
            "Parameter `insert_line` is required for command: insert."
        )
        assert refused(tool, command="insert", path=path, insert_line=0) == (
            "Parameter `new_str` is required for command: insert."
        )

    def test_a_negative_line_is_an_invalid_argument(self, tool: FileEditorTool):
        """insert_line < 0 does not validate (OpenHands' schema says minimum 0)."""
        with pytest.raises(ToolArgumentError, match="insert_line"):
            tool.validate_arguments({"command": "insert", "path": "/a", "insert_line": -1})


class TestUndoEdit:
    def test_undoes_edits_last_first(self, tool: FileEditorTool, root: Path):
        """undo_edit restores the text before each edit, last edit first, then says none is left."""
        path = root / "a"
        run(tool, command="create", path=str(path), file_text="1\n")
        run(tool, command="str_replace", path=str(path), old_str="1", new_str="2")
        run(tool, command="insert", path=str(path), insert_line=1, new_str="3")
        undone = run(tool, command="undo_edit", path=str(path))
        assert path.read_text() == "2\n"
        assert undone.text == (
            f"Last edit to {path} undone successfully. Here's the result of running `cat -n` on "
            f"{path}:\n     1\t2\n"
        )
        assert (undone.old_content, undone.new_content) == ("2\n3\n", "2\n")
        run(tool, command="undo_edit", path=str(path))
        assert path.read_text() == "1\n"
        # As in OpenHands' SDK, create is an undo step too: it restores the created text.
        run(tool, command="undo_edit", path=str(path))
        assert path.read_text() == "1\n"
        assert refused(tool, command="undo_edit", path=str(path)) == (
            f"No edit history found for {path}."
        )

    def test_keeps_the_last_ten_per_file(self, tool: FileEditorTool, root: Path):
        """Only the last ten edits of a file can be undone."""
        path = root / "a"
        path.write_text("0")
        for n in range(1, 13):
            run(tool, command="str_replace", path=str(path), old_str=str(n - 1), new_str=str(n))
        for _ in range(MAX_HISTORY_PER_FILE):
            run(tool, command="undo_edit", path=str(path))
        assert path.read_text() == "2"
        assert refused(tool, command="undo_edit", path=str(path)).startswith("No edit history")

    def test_a_file_never_edited(self, tool: FileEditorTool, root: Path):
        """A file the conversation never edited has no history."""
        (root / "a").write_text("a")
        assert refused(tool, command="undo_edit", path=str(root / "a")) == (
            f"No edit history found for {root / 'a'}."
        )


operations = st.lists(
    st.tuples(
        st.sampled_from(["create", "str_replace", "insert", "undo_edit", "view"]),
        st.sampled_from(["a", "b", "sub/c"]),
        st.text(alphabet="xy\n", max_size=6),
        st.integers(0, 3),
    ),
    max_size=25,
)


class TestUndoProperty:
    @settings(max_examples=60, deadline=None)
    @given(operations)
    def test_history_rebuilt_from_events_is_the_live_one(self, tmp_path_factory, ops):
        """For any commands, the history rebuilt from their observations equals the live one,
        and each file's text equals a model applying them to a dict of files."""
        root = tmp_path_factory.mktemp("w").resolve()
        (root / "sub").mkdir()
        executor = FileEditorExecutor(workspace_root=str(root))
        editor = executor.editor
        files: dict[str, str] = {}
        stacks: dict[str, list[str]] = {}
        events = []
        for number, (command, name, text, line) in enumerate(ops):
            action = FileEditorAction(command=command, path=str(root / name), file_text=text,
                                      old_str=files.get(name), new_str=f"{text}!",
                                      insert_line=line)  # fmt: skip
            answer = executor(action)
            events.append(ObservationEvent(tool_name="file_editor", tool_call_id=f"c{number}",
                                           observation=answer))  # fmt: skip
            if answer.is_error:
                continue
            stack = stacks.setdefault(name, [])
            if command == "create":
                files[name] = text
                stack.append(text)
            elif command in ("str_replace", "insert"):
                assert answer.old_content == files[name]
                stack.append(files[name])
                files[name] = answer.new_content or ""
            elif command == "undo_edit":
                files[name] = stack.pop()
            del stack[:-MAX_HISTORY_PER_FILE]
            assert (root / name).read_text() == files[name]
        rebuilt = FileEditor(workspace_root=root)
        rebuilt.restore(events)
        assert rebuilt.history() == editor.history()
        assert {name: list(stack) for name, stack in editor.history().items()} == {
            name: stack for name, stack in stacks.items() if stack
        }


# -- what every command refuses ---------------------------------------------------------------


class TestPaths:
    @pytest.mark.parametrize("command", ["view", "create", "str_replace", "insert", "undo_edit"])
    def test_a_relative_path(self, tool: FileEditorTool, root: Path, command: str):
        """A relative path is refused; OpenHands' hint names the absolute path when it exists."""
        (root / "a.py").write_text("x")
        assert refused(tool, command=command, path="a.py") == (
            f"Invalid `path` parameter: a.py. The path should be an absolute path. Maybe you "
            f"meant {root / 'a.py'}?"
        )
        assert refused(tool, command=command, path="b.py") == (
            "Invalid `path` parameter: b.py. The path should be an absolute path."
        )

    @pytest.mark.parametrize("command", ["view", "str_replace", "insert", "undo_edit"])
    def test_a_missing_path(self, tool: FileEditorTool, root: Path, command: str):
        """A path that does not exist is refused (create aside)."""
        assert refused(tool, command=command, path=str(root / "gone")) == (
            f"Invalid `path` parameter: {root / 'gone'}. The path {root / 'gone'} does not "
            "exist. Please provide a valid path."
        )

    @pytest.mark.parametrize("command", ["str_replace", "insert", "undo_edit"])
    def test_a_directory(self, tool: FileEditorTool, root: Path, command: str):
        """Only view works on a directory."""
        (root / "d").mkdir()
        assert refused(tool, command=command, path=str(root / "d")) == (
            f"Invalid `path` parameter: {root / 'd'}. The path {root / 'd'} is a directory and "
            "only the `view` command can be used on directories."
        )

    @pytest.mark.parametrize("command", ["view", "create", "str_replace", "insert", "undo_edit"])
    def test_outside_the_workspace(self, tool: FileEditorTool, root: Path, command: str):
        """A path outside the workspace is refused before anything is read or written."""
        outside = root.parent / "outside.txt"
        outside.write_text("secret")
        for path in (str(outside), f"{root}/../outside.txt", "/"):
            text = refused(tool, command=command, path=path, file_text="x", old_str="s",
                           new_str="t", insert_line=0)  # fmt: skip
            assert text.startswith(f"Invalid `path` parameter: {Path(path)}. The path is outside ")
            assert f"the workspace {root}: the file editor only reads and writes" in text
        assert outside.read_text() == "secret"

    @pytest.mark.parametrize("command", ["view", "create", "str_replace", "insert", "undo_edit"])
    def test_a_symlink_out_of_the_workspace(self, tool: FileEditorTool, root: Path, command: str):
        """A symlink (of a file or a directory) leading outside is refused as outside."""
        outside = root.parent / "elsewhere"
        outside.mkdir()
        (outside / "f").write_text("secret")
        (root / "link").symlink_to(outside)
        (root / "file_link").symlink_to(outside / "f")
        for path in (root / "link" / "f", root / "file_link", root / "link" / "new"):
            text = refused(tool, command=command, path=str(path), file_text="x", old_str="s",
                           new_str="t", insert_line=0)  # fmt: skip
            assert "The path is outside the workspace" in text
        assert (outside / "f").read_text() == "secret" and not (outside / "new").exists()

    def test_a_symlink_inside_is_followed_and_kept(self, tool: FileEditorTool, root: Path):
        """A symlink to a file inside the workspace is edited through: the link stays a link."""
        (root / "real").write_text("a")
        (root / "alias").symlink_to(root / "real")
        run(tool, command="str_replace", path=str(root / "alias"), old_str="a", new_str="b")
        assert (root / "alias").is_symlink() and (root / "real").read_text() == "b"
        run(tool, command="undo_edit", path=str(root / "real"))  # one file, one history
        assert (root / "real").read_text() == "a"

    def test_a_listing_names_but_does_not_enter_a_link_out(self, tool: FileEditorTool, root: Path):
        """view of a directory lists a symlink leading outside but not what is behind it."""
        outside = root.parent / "elsewhere"
        outside.mkdir()
        (outside / "private.key").write_text("")
        (root / "link").symlink_to(outside)
        text = run(tool, command="view", path=str(root)).text
        assert f"{root}/link/" in text and "private.key" not in text

    def test_binary_and_large_files(self, tool: FileEditorTool, root: Path):
        """Binary files and files over 10 MB are refused with OpenHands' texts."""
        (root / "blob").write_bytes(bytes(range(256)))
        for command in ("view", "str_replace", "insert", "undo_edit"):
            text = refused(tool, command=command, path=str(root / "blob"), old_str="a",
                           new_str="b", insert_line=0)  # fmt: skip
            assert text == (
                f"File validation failed for {root / 'blob'}: File appears to be binary and this "
                "file type cannot be read or edited by this tool."
            )
        (root / "big").write_bytes(b"x" * (11 * 1024 * 1024))
        assert refused(tool, command="view", path=str(root / "big")) == (
            f"File validation failed for {root / 'big'}: File is too large (11.0MB). Maximum "
            "allowed size is 10MB."
        )

    def test_a_pipe_is_refused_without_blocking(self, tool: FileEditorTool, root: Path):
        """A named pipe in the workspace is refused, not read (a read would wait forever)."""
        os.mkfifo(root / "pipe")
        for command in ("view", "str_replace", "insert", "undo_edit"):
            text = refused(tool, command=command, path=str(root / "pipe"), old_str="a",
                           new_str="b", insert_line=0)  # fmt: skip
            assert text == (
                f"File validation failed for {root / 'pipe'}: File is not a regular file (a "
                "pipe, a socket or a device) and cannot be read or edited by this tool."
            )

    def test_text_no_file_can_hold_is_refused(self, root: Path):
        """A lone surrogate (only file_editor() lets one in) is an error; nothing is written."""
        answer = file_editor("create", str(root / "a"), file_text="\ud800")
        assert answer.is_error and "while trying to write to" in answer.text
        assert not (root / "a").exists()

    def test_an_unknown_command_does_not_validate(self, tool: FileEditorTool):
        """A command outside the five is an invalid argument (the schema's enum)."""
        with pytest.raises(ToolArgumentError, match="command"):
            tool.validate_arguments({"command": "delete", "path": "/a"})


class TestErrorClasses:
    def test_the_editor_raises_openhands_classes(self, root: Path):
        """FileEditor raises OpenHands' error classes, with their attributes; all are
        ToolErrors, ToolArgumentErrors and CowconvErrors."""
        editor = FileEditor(workspace_root=root)
        with pytest.raises(EditorToolParameterMissingError) as missing:
            editor(command="create", path=str(root / "a"))
        assert (missing.value.command, missing.value.parameter) == ("create", "file_text")
        with pytest.raises(EditorToolParameterInvalidError) as invalid:
            editor(command="view", path="a")
        assert (invalid.value.parameter, invalid.value.value) == ("path", "a")
        (root / "blob").write_bytes(b"\x00\x01")
        with pytest.raises(FileValidationError) as validation:
            editor(command="view", path=str(root / "blob"))
        assert validation.value.path == str(root / "blob")
        assert validation.value.reason.startswith("File appears to be binary")
        (root / "a").write_text("x")
        with pytest.raises(ToolError) as no_match:
            editor(command="str_replace", path=str(root / "a"), old_str="y", new_str="z")
        assert no_match.value.message == str(no_match.value)
        assert no_match.value.message.startswith("No replacement was performed")
        for error in (missing, invalid, validation, no_match):
            assert isinstance(error.value, ToolError | ToolArgumentError | CowconvError)

    def test_the_executor_answers_them(self, root: Path):
        """The executor answers a refusal as an error observation with the error's message."""
        answer = FileEditorExecutor(workspace_root=str(root))(
            FileEditorAction(command="create", path=str(root / "a"))
        )
        assert answer.is_error and answer.text == str(
            EditorToolParameterMissingError("create", "file_text")
        )


class TestExecutorAndFunction:
    def test_allowed_edits_files(self, root: Path):
        """With allowed_edits_files, edits of other files are refused; view is not limited."""
        allowed = root / "ok.txt"
        executor = FileEditorExecutor(workspace_root=str(root), allowed_edits_files=[str(allowed)])
        assert not executor(
            FileEditorAction(command="create", path=str(allowed), file_text="x")
        ).is_error
        other = root / "no.txt"
        answer = executor(FileEditorAction(command="create", path=str(other), file_text="x"))
        assert answer.is_error and answer.text == (
            f"Operation 'create' is not allowed on file '{other}'. Only the following files "
            f"can be edited: ['{allowed}']"
        )
        assert not executor(FileEditorAction(command="view", path=str(root))).is_error

    def test_the_module_function_is_unconfined(self, tmp_path: Path):
        """file_editor() works anywhere, as OpenHands' module-level function does."""
        path = tmp_path / "free.txt"
        assert file_editor("create", str(path), file_text="a").prev_exist is False
        assert file_editor("str_replace", str(path), old_str="a", new_str="b").new_content == "b"
        assert file_editor("undo_edit", str(path)).new_content == "a"
        assert file_editor("view", "relative").is_error

    def test_editor_without_a_workspace_is_unconfined(self, tmp_path: Path):
        """FileEditor() with no workspace_root edits any absolute path, as in OpenHands."""
        path = tmp_path / "a"
        FileEditor()(command="create", path=str(path), file_text="x")
        assert path.read_text() == "x"


# -- in a conversation -------------------------------------------------------------------------


def call(call_id: str, **arguments: Any) -> Message:
    tool_call = MessageToolCall(id=call_id, name="file_editor", arguments=json.dumps(arguments))
    return Message(role="assistant", content="", tool_calls=[tool_call])


def answer(text: str = "Done.") -> Message:
    return Message(role="assistant", content=text)


def editor_agent(*script: Message) -> Agent:
    return Agent(llm=TestLLM.from_messages(script), tools=[Tool(name="file_editor")])


def edits(events: Any) -> list[FileEditorObservation]:
    """The file editor's observations among ``events``, in order."""
    found = []
    for event in events:
        if isinstance(event, ObservationEvent) and event.tool_name == "file_editor":
            assert isinstance(event.observation, FileEditorObservation)
            found.append(event.observation)
    return found


def run_turn(conversation: Conversation, *script: Message, text: str = "Edit.") -> None:
    """One user turn whose model answers ``script`` (a new agent: tools rebuilt from events)."""
    conversation.switch_llm(TestLLM.from_messages([*script, answer()]))
    conversation.send_message(text)
    conversation.run()


class TestInAConversation:
    def test_a_run_edits_files_through_the_tool(self, root: Path):
        """A scripted model creates, edits, views and undoes; each answer is recorded whole."""
        path = str(root / "app.py")
        agent = editor_agent(
            call("c1", command="create", path=path, file_text="x = 1\n"),
            call("c2", command="str_replace", path=path, old_str="x = 1", new_str="x = 2"),
            call("c3", command="view", path=path),
            call("c4", command="undo_edit", path=path),
            call("c5", command="view", path="app.py"),
            answer(),
        )
        conversation = Conversation(agent=agent, workspace=str(root))
        try:
            conversation.send_message("Write app.py.")
            conversation.run()
        finally:
            conversation.close()
        assert (root / "app.py").read_text() == "x = 1\n"
        created, replaced, viewed, undone, relative = edits(conversation.state.events)
        assert (created.command, created.prev_exist, created.new_content) == (
            "create",
            False,
            "x = 1\n",
        )
        assert (replaced.old_content, replaced.new_content) == ("x = 1\n", "x = 2\n")
        assert viewed.text.endswith("     1\tx = 2\n")
        assert (undone.old_content, undone.new_content) == ("x = 2\n", "x = 1\n")
        assert relative.is_error and relative.text.endswith(f"Maybe you meant {path}?")
        assert conversation.state.execution_status.value == "finished"

    def test_bad_arguments_are_an_observation(self, root: Path):
        """A call the schema refuses (an unknown command) is answered, and the run goes on."""
        agent = editor_agent(call("c1", command="delete", path=str(root)), answer())
        conversation = Conversation(agent=agent, workspace=str(root))
        conversation.send_message("Delete it.")
        conversation.run()
        conversation.close()
        [observed] = [e for e in conversation.state.events if isinstance(e, ObservationEvent)]
        assert observed.extra["error"] == "invalid_arguments" and "command" in observed.output
        assert conversation.state.execution_status.value == "finished"

    def test_a_fork_made_before_an_edit_cannot_undo_it(self, root: Path):
        """The source's edit after the fork point is not in the fork's undo history."""
        path = str(root / "a")
        source = Conversation(agent=editor_agent(), workspace=str(root))
        run_turn(source, call("c1", command="create", path=path, file_text="1"))
        fork = source.fork()
        run_turn(source, call("c2", command="str_replace", path=path, old_str="1", new_str="2"))
        # The fork undoes what it has: the create (which restores its text), then nothing.
        run_turn(
            fork,
            call("c3", command="undo_edit", path=path),
            call("c4", command="undo_edit", path=path),
        )
        undo, none_left = edits(fork.state.events)[-2:]
        assert (undo.old_content, undo.new_content) == ("2", "1")  # the file is shared
        assert none_left.is_error and none_left.text == f"No edit history found for {path}."
        # The source still has both steps: its history never saw the fork's undo.
        run_turn(source, call("c5", command="undo_edit", path=path))
        assert edits(source.state.events)[-1].new_content == "1"
        assert [o.command for o in edits(source.state.events)] == [
            "create",
            "str_replace",
            "undo_edit",
        ]
        source.close()
        fork.close()

    def test_the_source_never_sees_a_forks_edits(self, root: Path):
        """A fork's edits are undone by the fork only: the source has none to undo."""
        path = str(root / "a")
        (root / "a").write_text("0")
        source = Conversation(agent=editor_agent(), workspace=str(root))
        run_turn(source, call("c0", command="view", path=path))
        fork = source.fork()
        run_turn(fork, call("c1", command="str_replace", path=path, old_str="0", new_str="1"))
        run_turn(source, call("c2", command="undo_edit", path=path))
        assert edits(source.state.events)[-1].text == f"No edit history found for {path}."
        run_turn(fork, call("c3", command="undo_edit", path=path))
        assert (root / "a").read_text() == "0"
        source.close()
        fork.close()

    def test_the_history_survives_a_reopened_store(self, root: Path, tmp_path: Path):
        """Reopened from SQLite in a new Conversation, the editor can undo the stored edits."""
        path = str(root / "a")
        data = tmp_path / "data"
        first = Conversation(agent=editor_agent(), workspace=str(root), persistence_dir=data)
        run_turn(
            first,
            call("c1", command="create", path=path, file_text="1"),
            call("c2", command="str_replace", path=path, old_str="1", new_str="2"),
        )
        conversation_id = first.id
        first.close()
        again = Conversation(
            agent=editor_agent(),
            workspace=str(root),
            persistence_dir=data,
            conversation_id=conversation_id,
        )
        run_turn(again, call("c3", command="undo_edit", path=path))
        assert (root / "a").read_text() == "1"
        assert edits(again.state.events)[-1].old_content == "2"
        again.close()

    def test_a_store_read_in_a_fresh_process_keeps_the_observations(
        self, root: Path, tmp_path: Path, store_reader
    ):
        """Another process (which never imported the editor) reads the edits back whole."""
        data = tmp_path / "data"
        conversation = Conversation(agent=editor_agent(), workspace=str(root), persistence_dir=data)
        run_turn(conversation, call("c1", command="create", path=str(root / "a"), file_text="1"))
        conversation.close()
        state = store_reader.load(data / "cowconv.db", conversation.id)
        [created] = edits(state.events)
        assert (created.command, created.new_content, created.prev_exist) == ("create", "1", False)

    def test_a_fork_in_a_copy_of_the_workspace_undoes_there(self, tmp_path: Path):
        """The history is kept per file relative to the workspace: a copy finds it."""
        source_dir = tmp_path / "source"
        source_dir.mkdir()
        data = tmp_path / "data"
        source = Conversation(agent=editor_agent(), workspace=str(source_dir), persistence_dir=data)
        path = str(source_dir / "a")
        run_turn(source, call("c1", command="create", path=path, file_text="1"))
        run_turn(source, call("c2", command="str_replace", path=path, old_str="1", new_str="2"))
        fork = source.fork()
        fork_id = fork.id
        fork.close()
        copy_dir = tmp_path / "copy"
        shutil.copytree(source_dir, copy_dir)
        moved = Conversation(
            agent=editor_agent(),
            workspace=str(copy_dir),
            persistence_dir=data,
            conversation_id=fork_id,
        )
        run_turn(moved, call("c3", command="undo_edit", path=str(copy_dir / "a")))
        assert (copy_dir / "a").read_text() == "1"
        assert (source_dir / "a").read_text() == "2"
        moved.close()
        source.close()


# -- on an agent server and on worker processes --------------------------------------------------


def stub_agent(stub: StubLLMServer) -> Agent:
    return Agent(llm=LLM(**stub.llm_settings()), tools=[Tool(name="file_editor")])


def editor_call(**arguments: Any) -> StubReply:
    return StubReply.tool_call("file_editor", **arguments)


def wait_for_end(http: httpx.Client, conversation_id: str) -> dict[str, Any]:
    """Poll the server until the conversation's run has ended (or fail after WAIT)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        info: dict[str, Any] = http.get(f"/api/conversations/{conversation_id}").json()
        if info["execution_status"] in ("finished", "error", "stuck"):
            return info
        time.sleep(0.05)
    raise AssertionError(f"conversation {conversation_id} still running after {WAIT} s")


def server_edits(http: httpx.Client, conversation_id: str) -> list[dict[str, Any]]:
    page = http.get(f"/api/conversations/{conversation_id}/events/search").json()
    return [
        item["observation"]
        for item in page["items"]
        if item["kind"] == "ObservationEvent" and item.get("tool_name") == "file_editor"
    ]


class TestOnAnAgentServer:
    def test_an_openhands_client_gets_a_working_editor(self, agent_server, stub, root: Path):
        """An agent sent as OpenHands' JSON with {"name": "file_editor"} edits files (uvicorn)."""
        path = str(root / "hello.py")
        stub.script(
            editor_call(command="create", path=path, file_text="print(1)\n"),
            editor_call(command="str_replace", path=path, old_str="1", new_str="2"),
            StubReply.text("Done."),
        )
        body = {
            "agent": {
                "kind": "Agent",
                "llm": stub.llm_settings(),
                "tools": [{"name": "file_editor", "params": {}}],
            },
            "workspace": {"working_dir": str(root)},
        }
        with httpx.Client(base_url=agent_server.url, timeout=WAIT) as http:
            started = http.post("/api/conversations", json=body)
            assert started.status_code == 201, started.text
            conversation_id = started.json()["id"]
            message = {"role": "user", "content": [{"type": "text", "text": "Go."}], "run": True}
            assert http.post(
                f"/api/conversations/{conversation_id}/events", json=message
            ).is_success
            assert wait_for_end(http, conversation_id)["execution_status"] == "finished"
            created, replaced = server_edits(http, conversation_id)
            assert (root / "hello.py").read_text() == "print(2)\n"
            assert created["kind"] == "FileEditorObservation" and created["prev_exist"] is False
            assert (replaced["old_content"], replaced["new_content"]) == (
                "print(1)\n",
                "print(2)\n",
            )
            # A fork on the server undoes the edits of its own history.
            forked = http.post(f"/api/conversations/{conversation_id}/fork")
            assert forked.is_success, forked.text
            fork_id = forked.json()["id"]
            stub.script(editor_call(command="undo_edit", path=path), StubReply.text("Undone."))
            assert http.post(f"/api/conversations/{fork_id}/events", json=message).is_success
            assert wait_for_end(http, fork_id)["execution_status"] == "finished"
            undone = server_edits(http, fork_id)[-1]
            assert (undone["command"], undone["new_content"]) == ("undo_edit", "print(1)\n")
            assert len(server_edits(http, conversation_id)) == 2  # the source has no undo
        assert (root / "hello.py").read_text() == "print(1)\n"
        assert stub.pending == 0


def copy_workspace(template: str, index: int, conversation_id: str) -> str:
    """A branch's own copy of ``template`` (run on the worker)."""
    target = f"{template}-branch-{index}"
    shutil.copytree(template, target)
    return target


class TestOnWorkerProcesses:
    @pytest.mark.slow
    def test_branches_undo_in_their_own_copies(self, stub, tmp_path: Path):
        """Branches run on a process worker, each in a copy of the workspace, undo there."""
        source_dir = tmp_path / "source"
        source_dir.mkdir()
        path = str(source_dir / "a.txt")
        stub.script(
            editor_call(command="create", path=path, file_text="1"),
            editor_call(command="str_replace", path=path, old_str="1", new_str="2"),
            StubReply.text("Done."),
        )
        source = Conversation(agent=stub_agent(stub), workspace=str(source_dir))
        source.send_message("Write a.txt.")
        source.run()
        # On a single worker the branches run one after the other: each takes its own replies.
        for index in range(2):
            copy = f"{source_dir}-branch-{index}/a.txt"
            stub.script(editor_call(command="undo_edit", path=copy), StubReply.text("Undone."))
        with ProcessExecutor(max_workers=1, progress=False) as executor:
            forks = run_branches(
                source,
                ["Undo it.", "Undo it too."],
                executor=executor,
                workspace=functools.partial(copy_workspace, str(source_dir)),
            )
        for index, fork in enumerate(forks):
            assert fork.state.execution_status.value == "finished"
            undone = edits(fork.state.events)[-1]
            assert (undone.command, undone.is_error, undone.new_content) == (
                "undo_edit",
                False,
                "1",
            )
            assert Path(f"{source_dir}-branch-{index}/a.txt").read_text() == "1"
        assert (source_dir / "a.txt").read_text() == "2"
        assert [o.command for o in edits(source.state.events)] == ["create", "str_replace"]
        source.close()


# -- the isolation property ----------------------------------------------------------------------


class EditorModel:
    """What one conversation should hold, kept as plain data and deep-copied at a fork."""

    def __init__(self) -> None:
        self.undo: dict[str, list[str]] = {}
        self.observed: list[tuple[str, bool, str | None, str | None]] = []

    def copy(self) -> EditorModel:
        fork = EditorModel()
        fork.undo = {name: list(stack) for name, stack in self.undo.items()}
        fork.observed = list(self.observed)
        return fork


def recorded(events: Any) -> list[tuple[str, bool, str | None, str | None]]:
    return [(o.command, o.is_error, o.old_content, o.new_content) for o in edits(events)]


def rebuilt_history(events: Any, root: Path) -> dict[str, list[str]]:
    """The undo history a fresh editor rebuilds from ``events`` (what a fork or a reload gets)."""
    editor = FileEditor(workspace_root=root)
    editor.restore(events)
    return {name: list(stack) for name, stack in editor.history().items()}


class EditorIsolation(RuleBasedStateMachine):
    """Edits, undos and forks in any order: each conversation is as if deep-copied at its fork.

    By default the workspace's files are shared by the conversations (as a fork shares its
    workspace): the model keeps one set of files and, per conversation, its undo history
    and the observations it recorded. With ``copies`` (a store), each fork is reopened in
    a copy of its source's directory, and the model's files are deep-copied too. Each file
    holds one unique token, so every str_replace matches once and every answer is known.
    """

    copies = False

    conversations = Bundle("conversations")

    def __init__(self) -> None:
        super().__init__()
        self.backend: Any = None  # set by the test's subclass
        self.stub: StubLLMServer | None = None
        self.root = Path()
        self.roots: dict[int, Path] = {}
        self.trees: dict[int, dict[str, str]] = {}
        self.models: dict[int, EditorModel] = {}
        self.handles: dict[int, Conversation] = {}
        self.counter = 0

    def token(self) -> str:
        self.counter += 1
        return f"t{self.counter}"

    def act(self, key: int, text: str, reply: StubReply) -> None:
        assert self.stub is not None
        self.stub.script(reply, StubReply.text("ok"))
        conversation = self.handles[key]
        conversation.send_message(text)
        conversation.run()

    def expect(self, key: int, entry: tuple[str, bool, str | None, str | None]) -> None:
        self.models[key].observed.append(entry)
        assert recorded(self.handles[key].state.events)[-1] == entry

    @rule(target=conversations)
    def start(self) -> int:
        assert self.stub is not None
        conversation = self.backend.new(stub_agent(self.stub))
        key = len(self.handles)
        self.handles[key] = conversation
        self.models[key] = EditorModel()
        self.roots[key] = self.root
        # Conversations started in the shared directory share its files.
        shared = next(
            (self.trees[k] for k, r in self.roots.items() if r == self.root and k != key), None
        )
        self.trees[key] = shared if shared is not None else {}
        return key

    @rule(key=conversations, name=st.sampled_from(["a", "b"]))
    def create(self, key: int, name: str) -> None:
        text = self.token()
        path = str(self.roots[key] / name)
        self.act(key, "create", editor_call(command="create", path=path, file_text=text))
        if name in self.trees[key]:
            self.expect(key, ("create", True, None, None))
            return
        self.trees[key][name] = text
        stack = self.models[key].undo.setdefault(name, [])
        stack[:] = [*stack, text][-MAX_HISTORY_PER_FILE:]
        self.expect(key, ("create", False, None, text))

    @rule(key=conversations, name=st.sampled_from(["a", "b"]))
    def replace(self, key: int, name: str) -> None:
        new = self.token()
        old = self.trees[key].get(name, "missing")
        path = str(self.roots[key] / name)
        self.act(
            key, "edit", editor_call(command="str_replace", path=path, old_str=old, new_str=new)
        )
        if name not in self.trees[key]:
            self.expect(key, ("str_replace", True, None, None))
            return
        self.trees[key][name] = new
        stack = self.models[key].undo.setdefault(name, [])
        stack[:] = [*stack, old][-MAX_HISTORY_PER_FILE:]
        self.expect(key, ("str_replace", False, old, new))

    @rule(key=conversations, name=st.sampled_from(["a", "b"]))
    def undo(self, key: int, name: str) -> None:
        self.act(key, "undo", editor_call(command="undo_edit", path=str(self.roots[key] / name)))
        stack = self.models[key].undo.get(name, [])
        if name not in self.trees[key] or not stack:
            self.expect(key, ("undo_edit", True, None, None))
            return
        previous = stack.pop()
        if not stack:
            del self.models[key].undo[name]
        current, self.trees[key][name] = self.trees[key][name], previous
        self.expect(key, ("undo_edit", False, current, previous))

    @rule(target=conversations, key=conversations)
    def fork(self, key: int) -> int:
        fork_key = len(self.handles)
        fork = self.handles[key].fork()
        self.models[fork_key] = self.models[key].copy()
        if not self.copies:
            self.handles[fork_key], self.roots[fork_key] = fork, self.roots[key]
            self.trees[fork_key] = self.trees[key]
            return fork_key
        # The fork reopened from the store in a copy of its source's directory.
        assert self.stub is not None
        fork.close()
        copy = self.root.parent / f"{self.root.name}-fork-{fork_key}"
        shutil.copytree(self.roots[key], copy)
        self.handles[fork_key] = Conversation(
            agent=stub_agent(self.stub),
            workspace=str(copy),
            store=self.backend.store,
            conversation_id=fork.id,
        )
        self.backend.opened.append(self.handles[fork_key])
        self.roots[fork_key] = copy
        self.trees[fork_key] = dict(self.trees[key])
        return fork_key

    @invariant()
    def every_conversation_matches_its_model(self) -> None:
        for key, conversation in self.handles.items():
            events = conversation.state.events
            model = self.models[key]
            assert recorded(events) == model.observed
            assert rebuilt_history(events, self.roots[key]) == model.undo
            for name, text in self.trees[key].items():
                assert (self.roots[key] / name).read_text() == text

    def teardown(self) -> None:
        try:
            # Read back from where each conversation is kept (another process reading the
            # SQLite file; a new connection to the agent server): the same edits.
            for key, conversation in self.handles.items():
                reloaded = self.backend.reload(conversation)
                assert recorded(reloaded.events) == self.models[key].observed
                assert rebuilt_history(reloaded.events, self.roots[key]) == self.models[key].undo
        finally:
            self.backend.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", BACKENDS)
def test_fork_isolation_of_the_editor(kind, stub, request, tmp_path: Path):
    """A fork's edits and undo history never reach its source, nor the source's its fork."""
    server = request.getfixturevalue("in_process_server") if kind == "remote" else None
    reader = request.getfixturevalue("store_reader") if kind == "sqlite" else None

    class Machine(EditorIsolation):
        def __init__(self) -> None:
            super().__init__()
            directory = (tmp_path / uuid.uuid4().hex).resolve()
            directory.mkdir()
            self.root = directory
            self.stub = stub
            self.backend = open_backend(kind, directory, server, reader)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples={"memory": 25, "sqlite": 12, "remote": 8}[kind],
            stateful_step_count=10,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
    assert stub.pending == 0


@pytest.mark.slow
def test_fork_isolation_of_the_editor_in_copied_workspaces(stub, store_reader, tmp_path: Path):
    """Each fork reopened in a copy of its source's directory: files, undo history and
    observations all behave as a deep copy at the fork point (SQLite store)."""

    class Machine(EditorIsolation):
        copies = True

        def __init__(self) -> None:
            super().__init__()
            directory = (tmp_path / uuid.uuid4().hex).resolve()
            directory.mkdir()
            self.root = directory
            self.stub = stub
            self.backend = open_backend("sqlite", directory, None, store_reader)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=12,
            stateful_step_count=10,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
    assert stub.pending == 0
