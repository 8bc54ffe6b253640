"""The file operations behind ``file_editor``: view, create, str_replace, insert, undo_edit.

>>> import os, tempfile
>>> root = tempfile.mkdtemp()
>>> editor = FileEditor(workspace_root=root)
>>> path = os.path.join(root, "hello.py")
>>> editor(command="create", path=path, file_text="print('hi')\\n").text.startswith("File created")
True
>>> editor(command="view", path=path).text.splitlines()[1]
"     1\\tprint('hi')"
>>> editor(command="str_replace", path=path, old_str="hi", new_str="bye").new_content
"print('bye')\\n"
>>> editor(command="undo_edit", path=path).new_content
"print('hi')\\n"

Texts, limits and checks are OpenHands' SDK's (its ``FileEditor``): paths
must be absolute, ``create`` never overwrites, ``str_replace`` needs exactly
one match, files over 10 MB and binary files are refused, long output is
clipped in the middle. What cowconv adds: with a ``workspace_root``, a path
that leads outside it (after ``..`` and symlinks are resolved) is refused,
and the undo history is data rebuilt from the conversation's own events
(:meth:`FileEditor.restore`), so a fork undoes only its own edits.

Every refusal is a :class:`~cowconv.ToolError` whose message is the
text OpenHands' SDK answers; :class:`~cowconv.tools.file_editor.FileEditorExecutor`
turns it into an error observation. Nothing is written when a call is refused.
"""

from __future__ import annotations

import base64
import codecs
import mimetypes
import os
import re
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pyrsistent import PMap, pmap

from cowconv._exceptions import (
    EditorToolParameterInvalidError,
    EditorToolParameterMissingError,
    FileValidationError,
    ToolError,
)
from cowconv.core.events import Event, ObservationEvent
from cowconv.core.message import ImageContent, TextContent
from cowconv.tools.file_editor.schema import COMMANDS, FileEditorObservation

__all__ = [
    "DIRECTORY_CONTENT_TRUNCATED_NOTICE",
    "FileEditor",
    "HISTORY_KEY",
    "MAX_HISTORY_PER_FILE",
    "MAX_RESPONSE_LEN_CHAR",
    "TEXT_FILE_CONTENT_TRUNCATED_NOTICE",
    "clip",
]

#: Output longer than this (in characters) is clipped in the middle, as in OpenHands' SDK.
MAX_RESPONSE_LEN_CHAR = 16_000
#: Lines shown before and after an edit in its snippet.
SNIPPET_CONTEXT_WINDOW = 4
#: Undo steps kept per file (the oldest go first), as in OpenHands' SDK.
MAX_HISTORY_PER_FILE = 10
#: The key of an edit observation's ``extra`` naming the file relative to the workspace.
HISTORY_KEY = "workspace_file"

_CLIPPED = "<response clipped><NOTE>Due to the max output limit, only part of "
#: What replaces the middle of a long file's text (OpenHands' notice).
TEXT_FILE_CONTENT_TRUNCATED_NOTICE = (
    _CLIPPED + "this file has been shown to you. You should retry this tool after you have "
    "searched inside the file with `grep -n` in order to find the line numbers of what you "
    "are looking for.</NOTE>"
)
#: What replaces the middle of a long directory listing (OpenHands' notice).
DIRECTORY_CONTENT_TRUNCATED_NOTICE = (
    _CLIPPED + "this directory has been shown to you. You should use `ls -la` instead to "
    "view large directories incrementally.</NOTE>"
)
_IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp"})
# Control bytes that never appear in ordinary text files.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
# Encodings tried, in order, for a file that is not UTF-8.
_FALLBACK_ENCODINGS = ("cp1252", "latin-1")


def clip(
    content: str,
    limit: int = MAX_RESPONSE_LEN_CHAR,
    notice: str = TEXT_FILE_CONTENT_TRUNCATED_NOTICE,
) -> str:
    """``content`` cut in the middle to at most ``limit`` characters, ``notice`` marking the cut.

    The head gets the odd character; a notice longer than the limit is itself cut.

    >>> clip("abcdefghij", 7, "[..]")
    'ab[..]j'
    >>> clip("short", 7, "[..]")
    'short'
    """
    if limit <= 0 or len(content) <= limit:
        return content
    if len(notice) >= limit:
        return notice[:limit]
    room = limit - len(notice)
    head = room // 2 + room % 2
    tail = room - head
    return content[:head] + notice + (content[-tail:] if tail > 0 else "")


def _refuse(parameter: str, value: object, hint: str | None = None) -> ToolError:
    return EditorToolParameterInvalidError(parameter, str(value), hint)


def _missing(command: str, parameter: str) -> ToolError:
    return EditorToolParameterMissingError(command, parameter)


def _split_newlines(text: str) -> list[str]:
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


class _Text:
    """A text file as the editor reads it: its content (newlines as ``\\n``) and encoding."""

    def __init__(self, content: str, encoding: str) -> None:
        self.content = content
        self.encoding = encoding
        self.lines = _split_newlines(content)


class FileEditor:
    """The editor OpenHands' ``file_editor`` runs: one per conversation, called per command.

    ``workspace_root`` is where relative paths are suggested from and, in
    cowconv, the directory no path may leave. ``None``: the current
    directory for suggestions, and no confinement (OpenHands' behaviour).

    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> editor = FileEditor(workspace_root=root)
    >>> editor(command="view", path="notes.txt")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.EditorToolParameterInvalidError: Invalid `path` parameter: notes.txt. ...
    >>> editor(command="view", path="/etc/hostname")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.EditorToolParameterInvalidError: Invalid `path` parameter: /etc/hostname...
    """

    MAX_FILE_SIZE_MB: int = 10

    def __init__(
        self,
        workspace_root: str | os.PathLike[str] | None = None,
        max_file_size_mb: int | None = None,
    ) -> None:
        self._confined = workspace_root is not None
        root = os.fspath(workspace_root) if workspace_root is not None else os.getcwd()
        self._cwd = os.path.abspath(root)
        self._root = os.path.realpath(root)
        self._max_file_size = (max_file_size_mb or self.MAX_FILE_SIZE_MB) * 1024 * 1024
        self._history: PMap[str, tuple[str, ...]] = pmap()
        self._lock = threading.RLock()

    # -- the undo history ------------------------------------------------------

    def history_key(self, path: str | os.PathLike[str]) -> str:
        """The name ``path``'s undo history is kept under: relative to the workspace when inside.

        Symlinks and ``..`` are resolved, so two names of one file share it; a
        workspace copied elsewhere (a fork's) finds its files' history.

        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> FileEditor(workspace_root=root).history_key(os.path.join(root, "a", "..", "b.py"))
        'b.py'
        """
        real = os.path.realpath(os.fspath(path))
        if _inside(real, self._root):
            return Path(os.path.relpath(real, self._root)).as_posix()
        return real

    def undo_history(self, path: str | os.PathLike[str]) -> tuple[str, ...]:
        """The contents ``undo_edit`` on ``path`` would restore, oldest first.

        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> editor = FileEditor(workspace_root=root)
        >>> _ = editor(command="create", path=os.path.join(root, "a"), file_text="1")
        >>> editor.undo_history(os.path.join(root, "a"))
        ('1',)
        """
        return self._history.get(self.history_key(path), ())

    def history(self) -> Mapping[str, tuple[str, ...]]:
        """Every file's undo history (history key -> contents, oldest first), a frozen map.

        >>> FileEditor().history()
        pmap({})
        """
        return self._history

    def record(self, observation: FileEditorObservation, key: str | None = None) -> None:
        """Apply what an edit's observation says to the undo history (errors and views: nothing).

        ``create`` remembers the new text, ``str_replace`` and ``insert`` the
        text before, ``undo_edit`` forgets the last; at most
        :data:`MAX_HISTORY_PER_FILE` are kept per file. ``key`` defaults to
        :meth:`history_key` of the observation's path.

        >>> editor = FileEditor()
        >>> editor.record(FileEditorObservation.from_text(
        ...     "", command="str_replace", path="/w/a", old_content="x", new_content="y"))
        >>> editor.undo_history("/w/a")
        ('x',)
        """
        if observation.is_error or observation.path is None or observation.command == "view":
            return
        if key is None:
            key = self.history_key(observation.path)
        with self._lock:
            entries = self._history.get(key, ())
            if observation.command == "undo_edit":
                entries = entries[:-1]
            else:
                remembered = (
                    observation.new_content
                    if observation.command == "create"
                    else observation.old_content
                )
                if remembered is None:
                    return
                entries = (*entries, remembered)[-MAX_HISTORY_PER_FILE:]
            self._history = (
                self._history.set(key, entries) if entries else self._history.discard(key)
            )

    def restore(self, events: Iterable[Event], tool_name: str = "file_editor") -> None:
        """Rebuild the undo history from a conversation's events: its edits, in order.

        Every observation of ``tool_name`` holding a :class:`FileEditorObservation`
        is applied with :meth:`record`; what the history held before is dropped.
        A fork's editor restored from the fork's events can undo the edits
        before the fork point and its own, never the source's later ones.

        >>> from cowconv.core.events import ObservationEvent
        >>> edit = FileEditorObservation.from_text(
        ...     "", command="create", path="/w/a", new_content="1", prev_exist=False)
        >>> editor = FileEditor()
        >>> editor.restore([ObservationEvent(tool_name="file_editor", tool_call_id="c1",
        ...                                  observation=edit)])
        >>> editor.undo_history("/w/a")
        ('1',)
        """
        with self._lock:
            self._history = pmap()
            for event in events:
                if not isinstance(event, ObservationEvent) or event.tool_name != tool_name:
                    continue
                observation = event.observation
                if not isinstance(observation, FileEditorObservation):
                    continue
                extra = event.extra
                key = extra.get(HISTORY_KEY) if isinstance(extra, Mapping) else None
                self.record(observation, key if isinstance(key, str) else None)

    # -- the commands ------------------------------------------------------------

    def __call__(
        self,
        *,
        command: str,
        path: str,
        file_text: str | None = None,
        view_range: Sequence[int] | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
    ) -> FileEditorObservation:
        """Run one command on ``path``; a refusal is a :class:`~cowconv.ToolError`.

        A successful edit is added to the undo history before it is answered.

        >>> FileEditor()(command="delete", path="/tmp")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.ToolError: Unrecognized command delete. The allowed ...
        """
        if command not in COMMANDS:
            raise ToolError(
                f"Unrecognized command {command}. The allowed commands for "
                f"{type(self).__name__} tool are: {', '.join(COMMANDS)}"
            )
        given = Path(path)
        with self._lock:
            self._validate_path(command, given)
            real = Path(os.path.realpath(given))
            answer = self._run(
                command, given, real, file_text, view_range, old_str, new_str, insert_line
            )
            self.record(answer)
            return answer

    def _run(
        self,
        command: str,
        path: Path,
        real: Path,
        file_text: str | None,
        view_range: Sequence[int] | None,
        old_str: str | None,
        new_str: str | None,
        insert_line: int | None,
    ) -> FileEditorObservation:
        if command == "view":
            return self._view(path, real, view_range)
        if command == "create":
            if file_text is None:
                raise _missing(command, "file_text")
            self._write(path, real, file_text, None)
            return FileEditorObservation.from_text(
                f"File created successfully at: {path}",
                command="create",
                path=str(path),
                new_content=file_text,
                prev_exist=False,
            )
        if command == "str_replace":
            if old_str is None:
                raise _missing(command, "old_str")
            if new_str is None:
                raise _missing(command, "new_str")
            if new_str == old_str:
                raise _refuse(
                    "new_str",
                    new_str,
                    "No replacement was performed. `new_str` and `old_str` must be different.",
                )
            return self._str_replace(path, real, old_str, new_str)
        if command == "insert":
            if insert_line is None:
                raise _missing(command, "insert_line")
            if new_str is None:
                raise _missing(command, "new_str")
            return self._insert(path, real, insert_line, new_str)
        return self._undo(path, real)

    def _validate_path(self, command: str, path: Path) -> None:
        text = os.fspath(path).strip()
        if not text or not Path(text).expanduser().is_absolute():
            hint = "The path should be an absolute path."
            suggested = Path(self._cwd) / path
            if suggested.exists():
                hint += f" Maybe you meant {suggested}?"
            raise _refuse("path", path, hint)
        if self._confined and not _inside(os.path.realpath(path), self._root):
            raise _refuse(
                "path",
                path,
                f"The path is outside the workspace {self._root}: the file editor only reads "
                "and writes files inside it.",
            )
        if command == "create" and path.exists():
            raise _refuse(
                "path",
                path,
                f"File already exists at: {path}. Cannot overwrite files using command `create`.",
            )
        if command != "create" and not path.exists():
            raise _refuse(
                "path", path, f"The path {path} does not exist. Please provide a valid path."
            )
        if command != "view" and path.is_dir():
            raise _refuse(
                "path",
                path,
                f"The path {path} is a directory and only the `view` command can be used on "
                "directories.",
            )

    def _read(self, path: Path, real: Path) -> _Text:
        """The file's text, or the refusal OpenHands answers (too large, binary, unreadable)."""
        try:
            size = os.path.getsize(real)
        except OSError as error:
            raise ToolError(f"Ran into {error} while trying to read {path}") from None
        if not real.is_file():
            # A pipe or a device would block the read, or never end it.
            raise FileValidationError(
                str(path),
                "File is not a regular file (a pipe, a socket or a device) and cannot be read "
                "or edited by this tool.",
            )
        if size > self._max_file_size:
            raise FileValidationError(
                str(path),
                f"File is too large ({size / 1024 / 1024:.1f}MB). Maximum allowed size is "
                f"{int(self._max_file_size / 1024 / 1024)}MB.",
            )
        try:
            raw = real.read_bytes()
        except OSError as error:
            raise ToolError(f"Ran into {error} while trying to read {path}") from None
        decoded = _decode(raw)
        if decoded is None:
            raise FileValidationError(
                str(path),
                "File appears to be binary and this file type cannot be read or edited by this "
                "tool.",
            )
        text, encoding = decoded
        # As a file opened in text mode reads: \r\n and \r are \n.
        return _Text(text.replace("\r\n", "\n").replace("\r", "\n"), encoding)

    def _write(self, path: Path, real: Path, text: str, encoding: str | None) -> None:
        """Write ``text`` atomically (a temporary file beside it, then a rename): all or nothing.

        The file keeps its permission bits and its encoding, unless the
        encoding cannot hold the new text (then UTF-8, as OpenHands does).
        """
        try:
            data = text.encode(encoding or "utf-8")
        except UnicodeEncodeError:
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError as error:  # a lone surrogate: no file can hold it
                raise ToolError(f"Ran into {error} while trying to write to {path}") from None
        try:
            handle = tempfile.NamedTemporaryFile(
                dir=real.parent, prefix=f".{real.name}.", suffix=".tmp", delete=False
            )
        except OSError as error:
            raise ToolError(f"Ran into {error} while trying to write to {path}") from None
        temporary = Path(handle.name)
        try:
            with handle:
                handle.write(data)
            if real.exists():
                os.chmod(temporary, os.stat(real).st_mode & 0o7777)
            os.replace(temporary, real)
        except OSError as error:
            temporary.unlink(missing_ok=True)
            raise ToolError(f"Ran into {error} while trying to write to {path}") from None
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise

    def _view(
        self, path: Path, real: Path, view_range: Sequence[int] | None
    ) -> FileEditorObservation:
        if real.is_dir():
            if view_range:
                raise _refuse(
                    "view_range",
                    list(view_range),
                    "The `view_range` parameter is not allowed when `path` points to a directory.",
                )
            return self._view_directory(path, real)
        if real.suffix.lower() in _IMAGE_EXTENSIONS:
            return self._view_image(path, real)
        text = self._read(path, real)
        number = len(text.lines)
        if not view_range:
            return FileEditorObservation.from_text(
                _numbered(text.content, str(path)), command="view", path=str(path)
            )
        shown = list(view_range)
        if len(shown) != 2 or not all(isinstance(i, int) for i in shown):
            raise _refuse("view_range", shown, "It should be a list of two integers.")
        start, end = shown
        if start < 1 or start > number:
            raise _refuse(
                "view_range",
                shown,
                f"Its first element `{start}` should be within the range of lines of the file: "
                f"{[1, number]}.",
            )
        warning = None
        if end == -1:
            end = number
        elif end > number:
            warning = (
                f"We only show up to {number} since there're only {number} lines in this file."
            )
            end = number
        if end < start:
            raise _refuse(
                "view_range",
                shown,
                f"Its second element `{end}` should be greater than or equal to the first "
                f"element `{start}`.",
            )
        output = _numbered("".join(text.lines[start - 1 : end]), str(path), start)
        if warning:
            output = f"NOTE: {warning}\n{output}"
        return FileEditorObservation.from_text(output, command="view", path=str(path))

    def _view_directory(self, path: Path, real: Path) -> FileEditorObservation:
        try:
            hidden = sum(1 for item in real.iterdir() if item.name.startswith("."))
            listed = self._listing(path, real)
        except OSError as error:
            return FileEditorObservation.from_text(
                str(error), is_error=True, command="view", path=str(path)
            )
        parts = [
            f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden "
            "items:\n" + "\n".join(listed)
        ]
        if hidden:
            parts.append(
                f"\n{hidden} hidden files/directories in this directory are excluded. You can "
                f"use 'ls -la {path}' to see them."
            )
        output = clip("\n".join(parts), notice=DIRECTORY_CONTENT_TRUNCATED_NOTICE)
        return FileEditorObservation.from_text(output, command="view", path=str(path))

    def _listing(self, path: Path, real: Path) -> list[str]:
        shown = path.as_posix()
        lines = [f"{shown}/"]
        for item in sorted(real.iterdir(), key=str):
            if item.name.startswith("."):
                continue
            name = f"{shown}/{item.name}"
            if not item.is_dir():
                lines.append(name)
                continue
            lines.append(f"{name}/")
            if self._confined and not _inside(os.path.realpath(item), self._root):
                continue  # a symlink out of the workspace: named, not entered
            try:
                children = sorted(item.iterdir(), key=str)
            except OSError:
                continue
            for child in children:
                if not child.name.startswith("."):
                    suffix = "/" if child.is_dir() else ""
                    lines.append(f"{name}/{child.name}{suffix}")
        return lines

    def _view_image(self, path: Path, real: Path) -> FileEditorObservation:
        try:
            data = real.read_bytes()
        except OSError as error:
            raise ToolError(f"Failed to read image file {path}: {error}") from None
        mime, _ = mimetypes.guess_type(str(real))
        if not mime or not mime.startswith("image/"):
            mime = "image/png"
        url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        return FileEditorObservation(
            command="view",
            content=(
                TextContent(text=f"Image file {path} read successfully. Displaying image content."),
                ImageContent(image_urls=(url,)),
            ),
            path=str(path),
        )

    def _str_replace(
        self, path: Path, real: Path, old_str: str, new_str: str
    ) -> FileEditorObservation:
        text = self._read(path, real)
        content = text.content
        found = _occurrences(content, old_str)
        if not found:
            # Perhaps only surrounding blanks differ: retry the match (not the replacement)
            # stripped, as OpenHands does.
            old_str = old_str.strip()
            found = _occurrences(content, old_str)
            if not found:
                raise ToolError(
                    f"No replacement was performed, old_str `{old_str}` did not appear "
                    f"verbatim in {path}."
                )
        if len(found) > 1:
            numbers = sorted({line for line, _ in found})
            raise ToolError(
                f"No replacement was performed. Multiple occurrences of old_str `{old_str}` in "
                f"lines {numbers}. Please ensure it is unique."
            )
        line, start = found[0]
        new_content = content[:start] + new_str + content[start + len(old_str) :]
        self._write(path, real, new_content, text.encoding)
        first = max(0, line - SNIPPET_CONTEXT_WINDOW)
        last = line + SNIPPET_CONTEXT_WINDOW + new_str.count("\n")
        snippet = "".join(_split_newlines(new_content)[first:last])
        output = (
            f"The file {path} has been edited. "
            + _numbered(snippet, f"a snippet of {path}", first + 1)
            + "Review the changes and make sure they are as expected. Edit the file again if "
            "necessary."
        )
        return FileEditorObservation.from_text(
            output,
            command="str_replace",
            path=str(path),
            old_content=content,
            new_content=new_content,
        )

    def _insert(
        self, path: Path, real: Path, insert_line: int, new_str: str
    ) -> FileEditorObservation:
        text = self._read(path, real)
        number = len(text.lines)
        if insert_line < 0 or insert_line > number:
            raise _refuse(
                "insert_line",
                insert_line,
                f"It should be within the range of allowed values: {[0, number]}",
            )
        inserted = [line + "\n" for line in new_str.split("\n")]
        new_content = "".join([*text.lines[:insert_line], *inserted, *text.lines[insert_line:]])
        self._write(path, real, new_content, text.encoding)
        first = max(0, insert_line - SNIPPET_CONTEXT_WINDOW)
        last = min(number + len(inserted), insert_line + SNIPPET_CONTEXT_WINDOW + len(inserted))
        # Read back as the file now reads (a last line without \n joins the inserted text).
        written = _split_newlines(new_content)
        snippet = "".join(written[first:last])
        output = (
            f"The file {path} has been edited. "
            + _numbered(
                snippet,
                "a snippet of the edited file",
                max(1, insert_line - SNIPPET_CONTEXT_WINDOW + 1),
            )
            + "Review the changes and make sure they are as expected (correct indentation, no "
            "duplicate lines, etc). Edit the file again if necessary."
        )
        return FileEditorObservation.from_text(
            output,
            command="insert",
            path=str(path),
            old_content=text.content,
            new_content=new_content,
        )

    def _undo(self, path: Path, real: Path) -> FileEditorObservation:
        text = self._read(path, real)
        entries = self._history.get(self.history_key(real), ())
        if not entries:
            raise ToolError(f"No edit history found for {path}.")
        previous = entries[-1]
        self._write(path, real, previous, text.encoding)
        return FileEditorObservation.from_text(
            f"Last edit to {path} undone successfully. {_numbered(previous, str(path))}",
            command="undo_edit",
            path=str(path),
            old_content=text.content,
            new_content=previous,
        )


def _inside(real: str, root: str) -> bool:
    """Whether the resolved path ``real`` is ``root`` or below it."""
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _decode(raw: bytes) -> tuple[str, str] | None:
    """The text of a file's bytes and its encoding; ``None`` when it looks binary.

    UTF-8 (with or without a byte-order mark) first, then the single-byte
    encodings OpenHands falls back to; text holding control bytes is binary.
    """
    if raw.startswith(codecs.BOM_UTF8):
        candidates: tuple[str, ...] = ("utf-8-sig",)
    else:
        candidates = ("utf-8", *_FALLBACK_ENCODINGS)
    for encoding in candidates:
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError:
            continue
        if _CONTROL.search(text) is None:
            return text, encoding
        if encoding.startswith("utf-8"):
            return None  # valid UTF-8 with control bytes: binary, not another encoding
    return None


def _occurrences(content: str, needle: str) -> list[tuple[int, int]]:
    """(line number, offset) of each non-overlapping occurrence of ``needle`` in ``content``."""
    return [
        (content.count("\n", 0, match.start()) + 1, match.start())
        for match in re.finditer(re.escape(needle), content)
    ]


def _numbered(content: str, description: str, start: int = 1) -> str:
    """``content`` as ``cat -n`` prints it, under OpenHands' heading (clipped when long)."""
    content = clip(content)
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    body = "\n".join(f"{number + start:6}\t{line}" for number, line in enumerate(lines))
    output = f"Here's the result of running `cat -n` on {description}:\n"
    return output + body + "\n" if body else output
