"""OpenHands' file editor tool: ``Tool(name="file_editor")``.

>>> from cowconv.tools.file_editor import FileEditorTool
>>> FileEditorTool.name
'file_editor'

``view`` shows a file as ``cat -n`` does (or a directory two levels deep),
``create`` writes a new file, ``str_replace`` replaces exactly one match,
``insert`` adds lines after a line, ``undo_edit`` reverts the last edit of a
file. Paths are absolute and must lie inside the conversation's workspace.
The undo history is rebuilt from the conversation's own events, so it forks
with the conversation: a fork undoes only edits of its own history.
"""

from cowconv.tools.file_editor.definition import (
    TOOL_DESCRIPTION,
    FileEditorAction,
    FileEditorObservation,
    FileEditorTool,
)
from cowconv.tools.file_editor.editor import (
    DIRECTORY_CONTENT_TRUNCATED_NOTICE,
    MAX_RESPONSE_LEN_CHAR,
    TEXT_FILE_CONTENT_TRUNCATED_NOTICE,
    FileEditor,
)
from cowconv.tools.file_editor.exceptions import (
    EditorToolParameterInvalidError,
    EditorToolParameterMissingError,
    FileValidationError,
    ToolError,
)
from cowconv.tools.file_editor.impl import FileEditorExecutor, file_editor

__all__ = [
    "DIRECTORY_CONTENT_TRUNCATED_NOTICE",
    "EditorToolParameterInvalidError",
    "EditorToolParameterMissingError",
    "FileEditor",
    "FileEditorAction",
    "FileEditorExecutor",
    "FileEditorObservation",
    "FileEditorTool",
    "FileValidationError",
    "MAX_RESPONSE_LEN_CHAR",
    "TEXT_FILE_CONTENT_TRUNCATED_NOTICE",
    "TOOL_DESCRIPTION",
    "ToolError",
    "file_editor",
]
