"""What runs ``file_editor`` calls: OpenHands' ``FileEditorExecutor`` and ``file_editor``.

>>> import os, tempfile
>>> from cowconv.tools.file_editor.schema import FileEditorAction
>>> root = tempfile.mkdtemp()
>>> executor = FileEditorExecutor(workspace_root=root)
>>> answer = executor(FileEditorAction(command="view", path=os.path.join(root, "missing.txt")))
>>> answer.is_error, answer.text.endswith("does not exist. Please provide a valid path.")
(True, True)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

from cowconv._exceptions import ToolError
from cowconv.agent.tools import ToolExecutor
from cowconv.core.events import Event
from cowconv.tools.file_editor.editor import FileEditor
from cowconv.tools.file_editor.schema import CommandLiteral, FileEditorAction, FileEditorObservation

__all__ = ["FileEditorExecutor", "file_editor"]


class FileEditorExecutor(ToolExecutor[FileEditorAction, FileEditorObservation]):
    """Runs file editor actions with one :class:`FileEditor` (OpenHands' executor).

    A refusal (a missing file, a path outside ``workspace_root``, no match)
    is answered as an error observation carrying OpenHands' text; nothing
    raises. ``allowed_edits_files`` limits every command but ``view`` to
    those files, as in OpenHands' SDK.

    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> target = os.path.join(root, "a.txt")
    >>> executor = FileEditorExecutor(workspace_root=root, allowed_edits_files=[target])
    >>> executor(FileEditorAction(command="create", path=target, file_text="x")).is_error
    False
    >>> other = FileEditorAction(command="create", path=os.path.join(root, "b.txt"), file_text="")
    >>> executor(other).text.startswith("Operation 'create' is not allowed")
    True
    """

    def __init__(
        self,
        workspace_root: str | os.PathLike[str] | None = None,
        allowed_edits_files: Sequence[str] | None = None,
    ) -> None:
        self.editor = FileEditor(workspace_root=workspace_root)
        self.allowed_edits_files: set[Path] | None = (
            {Path(name).resolve() for name in allowed_edits_files} if allowed_edits_files else None
        )

    def __call__(
        self, action: FileEditorAction, conversation: object = None
    ) -> FileEditorObservation:
        """Run ``action``; a refusal is an error observation (OpenHands' texts)."""
        if self.allowed_edits_files is not None and action.command != "view":
            target = Path(action.path).resolve()
            if target not in self.allowed_edits_files:
                return FileEditorObservation.from_text(
                    f"Operation '{action.command}' is not allowed on file '{target}'. Only the "
                    "following files can be edited: "
                    f"{sorted(str(name) for name in self.allowed_edits_files)}",
                    is_error=True,
                    command=action.command,
                )
        return _answer(self.editor, action.command, action)

    def restore(self, events: Sequence[Event], tool_name: str = "file_editor") -> None:
        """Rebuild the editor's undo history from a conversation's events (see :class:`FileEditor`).

        >>> FileEditorExecutor().restore([])
        """
        self.editor.restore(events, tool_name)


def _answer(
    editor: FileEditor, command: CommandLiteral, action: FileEditorAction
) -> FileEditorObservation:
    try:
        return editor(
            command=command,
            path=action.path,
            file_text=action.file_text,
            view_range=action.view_range,
            old_str=action.old_str,
            new_str=action.new_str,
            insert_line=action.insert_line,
        )
    except ToolError as refusal:
        return FileEditorObservation.from_text(str(refusal), is_error=True, command=command)


_GLOBAL_EDITOR: FileEditor | None = None
_GLOBAL_LOCK = threading.Lock()


def file_editor(
    command: CommandLiteral,
    path: str,
    file_text: str | None = None,
    view_range: list[int] | None = None,
    old_str: str | None = None,
    new_str: str | None = None,
    insert_line: int | None = None,
) -> FileEditorObservation:
    """Run one command with the process's own editor (OpenHands' module-level function).

    That editor is not confined to a workspace and keeps one undo history
    for the whole process, as in OpenHands' SDK; a conversation's tool has
    its own (see :class:`FileEditorExecutor`).

    >>> file_editor("view", "relative.txt").is_error
    True
    """
    global _GLOBAL_EDITOR
    with _GLOBAL_LOCK:
        if _GLOBAL_EDITOR is None:
            _GLOBAL_EDITOR = FileEditor()
        editor = _GLOBAL_EDITOR
    action = FileEditorAction.model_construct(
        command=command,
        path=path,
        file_text=file_text,
        view_range=view_range,
        old_str=old_str,
        new_str=new_str,
        insert_line=insert_line,
    )
    return _answer(editor, command, action)
