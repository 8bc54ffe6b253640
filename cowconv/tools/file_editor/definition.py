"""``FileEditorTool``: OpenHands' file editor as a tool of a conversation.

>>> import tempfile
>>> from cowconv import LLM, Agent, ConversationState, Workspace
>>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
...                           workspace=Workspace(working_dir=tempfile.mkdtemp()))
>>> [tool] = FileEditorTool.create(state)
>>> tool.name, sorted(tool.to_openai_tool()["function"]["parameters"]["properties"])
('file_editor', ['command', 'file_text', 'insert_line', 'new_str', 'old_str', 'path', 'view_range'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.agent.tools import ToolDefinition, ToolResult, register_tool
from cowconv.core.events import Event
from cowconv.core.workspace import Workspace
from cowconv.tools.file_editor.editor import HISTORY_KEY
from cowconv.tools.file_editor.impl import FileEditorExecutor
from cowconv.tools.file_editor.schema import FileEditorAction, FileEditorObservation

__all__ = [
    "FileEditorAction",
    "FileEditorObservation",
    "FileEditorTool",
    "TOOL_DESCRIPTION",
]

#: What the model is told about the tool: OpenHands' SDK's text (the working directory follows).
TOOL_DESCRIPTION = """Custom editing tool for viewing, creating and editing files in plain-text format
* State is persistent across command calls and discussions with the user
* If `path` is a text file, `view` displays the result of applying `cat -n`. If `path` is a directory, `view` lists non-hidden files and directories up to 2 levels deep
* The `create` command cannot be used if the specified `path` already exists as a file
* If a `command` generates a long output, it will be truncated and marked with `<response clipped>`
* The `undo_edit` command will revert the last edit made to the file at `path`
* This tool can be used for creating and editing files in plain-text format.


Before using this tool:
1. Use the view tool to understand the file's contents and context
2. Verify the directory path is correct (only applicable when creating new files):
   - Use the view tool to verify the parent directory exists and is the correct location

When making edits:
   - Ensure the edit results in idiomatic, correct code
   - Do not leave the code in a broken state
   - Always use absolute file paths (starting with /)

CRITICAL REQUIREMENTS FOR USING THIS TOOL:

1. EXACT MATCHING: The `old_str` parameter must match EXACTLY one or more consecutive lines from the file, including all whitespace and indentation. The tool will fail if `old_str` matches multiple locations or doesn't match exactly with the file content.

2. UNIQUENESS: The `old_str` must uniquely identify a single instance in the file:
   - Include sufficient context before and after the change point (3-5 lines recommended)
   - If not unique, the replacement will not be performed

3. REPLACEMENT: The `new_str` parameter should contain the edited lines that replace the `old_str`. Both strings must be different.

Remember: when making multiple file edits in a row to the same file, you should prefer to send all edits in a single message with multiple calls to this tool, rather than multiple messages with a single call each.
"""  # noqa: E501

_IMAGE_LINE = (
    "* If `path` is an image file (.png, .jpg, .jpeg, .gif, .webp, .bmp), `view` displays the "
    "image content"
)


def _description(working_dir: str, vision: bool) -> str:
    text = TOOL_DESCRIPTION
    if vision:
        lines = text.split("\n")
        text = "\n".join([*lines[:2], _IMAGE_LINE, *lines[2:]])
    return (
        f"{text}\n\nYour current working directory is: {working_dir}\n"
        "When exploring project structure, start with this directory instead of the root "
        "filesystem."
    )


class FileEditorTool(ToolDefinition[FileEditorAction, FileEditorObservation]):
    """View, create and edit files in the conversation's workspace (``Tool(name="file_editor")``).

    OpenHands' tool: its name, schema, description, observations and error
    texts. Each conversation's tool has its own :class:`FileEditorExecutor`,
    confined to the workspace, whose undo history is rebuilt from the
    conversation's events (:meth:`restore`): a fork undoes the edits of its
    own history only.

    >>> import os, tempfile
    >>> from cowconv import LLM, Agent, ConversationState, Workspace
    >>> root = tempfile.mkdtemp()
    >>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
    ...                           workspace=Workspace(working_dir=root))
    >>> [editor] = FileEditorTool.create(state)
    >>> path = os.path.join(root, "a.txt")
    >>> editor(FileEditorAction(command="create", path=path, file_text="one\\n")).prev_exist
    False
    >>> editor(FileEditorAction(command="view", path="/")).text  # doctest: +ELLIPSIS
    'Invalid `path` parameter: /. The path is outside the workspace ...'
    """

    catalog_description: ClassVar[str] = "View, create and edit files."

    @classmethod
    def create(  # type: ignore[override]
        cls, conv_state: Any = None, params: Mapping[str, Any] | None = None, **options: Any
    ) -> list[FileEditorTool]:
        """The conversation's file editor, working in ``conv_state.workspace.working_dir``.

        ``conv_state`` is a conversation state (anything with a ``workspace``)
        or a :class:`~cowconv.Workspace`. The one setting is OpenHands'
        executor's ``allowed_edits_files`` (``Tool(name="file_editor",
        params={"allowed_edits_files": [...]})``).

        >>> from cowconv import Workspace
        >>> FileEditorTool.create(Workspace(working_dir="."), colour="red")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.InvalidValueError: invalid settings for tool 'file_editor': ...
        """
        workspace = conv_state if isinstance(conv_state, Workspace) else None
        if workspace is None:
            workspace = getattr(conv_state, "workspace", None)
        if not isinstance(workspace, Workspace):
            raise InvalidTypeError(
                f"{cls.__name__}.create() takes a conversation state or a Workspace, "
                f"got {type(conv_state).__name__}"
            )
        settings = {**(params or {}), **options}
        unknown = sorted(set(settings) - {"allowed_edits_files"})
        allowed = settings.get("allowed_edits_files")
        if unknown or not (
            allowed is None
            or (isinstance(allowed, Sequence) and not isinstance(allowed, str)
                and all(isinstance(name, str) for name in allowed))
        ):  # fmt: skip
            raise InvalidValueError(
                f"invalid settings for tool {cls.name!r}: {settings!r:.200} (the one setting "
                "is allowed_edits_files, a list of paths)"
            )
        llm = getattr(getattr(conv_state, "agent", None), "llm", None)
        vision = getattr(llm, "vision_is_active", None)
        working_dir = workspace.working_dir
        return [
            cls(
                action_type=FileEditorAction,
                observation_type=FileEditorObservation,
                description=_description(
                    working_dir, bool(vision()) if callable(vision) else False
                ),
                executor=FileEditorExecutor(
                    workspace_root=working_dir, allowed_edits_files=allowed
                ),
            )
        ]

    def execute(self, params: FileEditorAction) -> ToolResult:
        """Run the call; an edit's observation also names the file relative to the workspace.

        That name (``extra["workspace_file"]``) is what the undo history is
        rebuilt under, so a fork in a copy of the workspace finds it.
        """
        result = super().execute(params)
        observation = result.observation
        if (
            isinstance(self.executor, FileEditorExecutor)
            and isinstance(observation, FileEditorObservation)
            and not observation.is_error
            and observation.command != "view"
            and observation.path is not None
        ):
            key = self.executor.editor.history_key(observation.path)
            return ToolResult(
                output=result.output, observation=observation, extra={HISTORY_KEY: key}
            )
        return result

    def restore(self, events: Sequence[Event]) -> None:
        """Rebuild the undo history from ``events``: the conversation's own edits, in order."""
        if isinstance(self.executor, FileEditorExecutor):
            self.executor.restore(events, self.name)


register_tool(FileEditorTool.name, FileEditorTool)
