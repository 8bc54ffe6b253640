"""What the file editor is called with and what it answers: OpenHands' action and observation.

>>> action = FileEditorAction(command="view", path="/workspace/app.py", view_range=[1, 5])
>>> action.view_range
[1, 5]
>>> answer = FileEditorObservation.from_text("ok", command="view", path="/workspace/app.py")
>>> answer.command, answer.prev_exist, answer.old_content
('view', True, None)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cowconv.core.schema import Action, Observation

__all__ = ["COMMANDS", "CommandLiteral", "FileEditorAction", "FileEditorObservation"]

CommandLiteral = Literal["view", "create", "str_replace", "insert", "undo_edit"]
#: The commands of the file editor, in the order OpenHands' SDK lists them.
COMMANDS: tuple[str, ...] = ("view", "create", "str_replace", "insert", "undo_edit")


class FileEditorAction(Action):
    """The arguments of a ``file_editor`` call (OpenHands' ``FileEditorAction``).

    Field names, types and descriptions are OpenHands' SDK's, so the schema
    the model is given is the same.

    >>> FileEditorAction(command="create", path="/tmp/a.txt", file_text="hi\\n").file_text
    'hi\\n'
    >>> FileEditorAction(command="insert", path="/tmp/a.txt", insert_line=-1)
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for FileEditorAction
    ...
    """

    command: CommandLiteral = Field(
        description="The commands to run. Allowed options are: `view`, `create`, "
        "`str_replace`, `insert`, `undo_edit`."
    )
    path: str = Field(description="Absolute path to file or directory.")
    file_text: str | None = Field(
        default=None,
        description="Required parameter of `create` command, with the content of "
        "the file to be created.",
    )
    old_str: str | None = Field(
        default=None,
        description="Required parameter of `str_replace` command containing the "
        "string in `path` to replace.",
    )
    new_str: str | None = Field(
        default=None,
        description="Optional parameter of `str_replace` command containing the "
        "new string (if not given, no string will be added). Required parameter "
        "of `insert` command containing the string to insert.",
    )
    insert_line: int | None = Field(
        default=None,
        ge=0,
        description="Required parameter of `insert` command. The `new_str` will "
        "be inserted AFTER the line `insert_line` of `path`.",
    )
    view_range: list[int] | None = Field(
        default=None,
        description="Optional parameter of `view` command when `path` points to a "
        "file. If none is given, the full file is shown. If provided, the file "
        "will be shown in the indicated line number range, e.g. [11, 12] will "
        "show lines 11 and 12. Indexing at 1 to start. Setting `[start_line, "
        "-1]` shows all lines from `start_line` to the end of the file.",
    )


class FileEditorObservation(Observation):
    """What a ``file_editor`` call answered (OpenHands' ``FileEditorObservation``).

    ``old_content`` and ``new_content`` are the file before and after an
    edit; an edit's observation is recorded whole in the conversation's
    history, which is where the editor's undo history is rebuilt from.

    >>> edit = FileEditorObservation.from_text(
    ...     "edited", command="str_replace", path="/w/a.py", old_content="a", new_content="b")
    >>> edit.old_content, edit.new_content, edit.is_error
    ('a', 'b', False)
    """

    command: CommandLiteral = Field(
        description=(
            "The command that was run: `view`, `create`, `str_replace`, `insert`, or `undo_edit`."
        )
    )
    path: str | None = Field(default=None, description="The file path that was edited.")
    prev_exist: bool = Field(
        default=True,
        description="Indicates if the file previously existed. If not, it was created.",
    )
    old_content: str | None = Field(
        default=None, description="The content of the file before the edit."
    )
    new_content: str | None = Field(
        default=None, description="The content of the file after the edit."
    )
