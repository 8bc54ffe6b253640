"""File stores as OpenHands' SDK names them: where an on-disk event log keeps its files.

cowconv keeps conversations in a :class:`~cowconv.Store` (SQLite, PostgreSQL,
memory). OpenHands' SDK keeps each event as a JSON file in a ``FileStore``;
:class:`~cowconv.event_store.FileEventLog` reads and writes that layout
through the stores here, so OpenHands' persistence directories (and code
written against ``openhands.sdk.io``) work with cowconv.

Paths are ``/``-separated and relative to the store's root.

>>> store = InMemoryFileStore()
>>> store.write("events/a.json", '{"x": 1}')
>>> store.read("events/a.json"), store.list("events"), store.exists("events/b.json")
('{"x": 1}', ['events/a.json'], False)
>>> store.delete("events")
>>> store.list("events")
[]
"""

from __future__ import annotations

import builtins
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from cowconv._exceptions import FileMissingError, InvalidValueError, StoreLockedError

__all__ = ["FileStore", "InMemoryFileStore", "LocalFileStore"]


def _clean(path: str) -> str:
    parts = [part for part in path.replace("\\", "/").split("/") if part not in ("", ".")]
    if ".." in parts:
        raise InvalidValueError(f"a file store path may not go up ('..'): {path!r}")
    return "/".join(parts)


class FileStore(ABC):
    """Where files live: write, read, list, delete by ``/``-separated path (OpenHands' name).

    ``list(path)`` names the files and directories directly under ``path``
    (directories end with ``/``); ``delete`` removes a file or a whole
    directory; ``lock(path)`` is held while a writer appends.

    >>> store: FileStore = InMemoryFileStore()
    >>> with store.lock("events/.lock"):
    ...     store.write("events/e.json", b"{}")
    >>> store.list(""), store.read("events/e.json")
    (['events/'], '{}')
    """

    @abstractmethod
    def write(self, path: str, contents: str | bytes) -> None:
        """Store ``contents`` at ``path`` (text is written as UTF-8), replacing what was there."""

    @abstractmethod
    def read(self, path: str) -> str:
        """The text at ``path``; a ``FileNotFoundError`` if there is none."""

    @abstractmethod
    def list(self, path: str) -> builtins.list[str]:
        """The paths directly under ``path`` (a directory's end with ``/``), sorted."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove the file or the directory at ``path`` (nothing there: nothing happens)."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether a file or a directory is at ``path``."""

    @abstractmethod
    def get_absolute_path(self, path: str) -> str:
        """``path`` as an absolute path (of the disk, or of the store's own namespace)."""

    @abstractmethod
    def lock(self, path: str, timeout: float = 30.0) -> AbstractContextManager[None]:
        """Hold the lock named ``path`` for the ``with`` block."""


class _PathLocks:
    """Re-entrant locks of this process by path, made on first use (both stores' ``lock``)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._held: dict[str, threading.RLock] = {}

    @contextmanager
    def hold(self, path: str, timeout: float) -> Iterator[None]:
        with self._guard:
            held = self._held.setdefault(_clean(path), threading.RLock())
        if not held.acquire(timeout=timeout):
            raise StoreLockedError(f"could not lock {path!r} within {timeout} s")
        try:
            yield
        finally:
            held.release()


class InMemoryFileStore(FileStore):
    """A file store in a dict: for tests, and for logs that need not outlive the process.

    >>> store = InMemoryFileStore({"a/b.txt": "hi"})
    >>> store.list(""), store.list("a"), store.get_absolute_path("a/b.txt")
    (['a/'], ['a/b.txt'], '/a/b.txt')
    """

    def __init__(self, files: dict[str, str] | None = None) -> None:
        self.files: dict[str, str] = {_clean(path): text for path, text in (files or {}).items()}
        self._guard = threading.Lock()
        self._locks = _PathLocks()

    def write(self, path: str, contents: str | bytes) -> None:
        text = contents.decode("utf-8") if isinstance(contents, bytes) else contents
        with self._guard:
            self.files[_clean(path)] = text

    def read(self, path: str) -> str:
        try:
            return self.files[_clean(path)]
        except KeyError:
            raise FileMissingError(f"no file at {path!r} in this file store") from None

    def list(self, path: str) -> builtins.list[str]:
        prefix = _clean(path)
        prefix = f"{prefix}/" if prefix else ""
        found: set[str] = set()
        for name in builtins.list(self.files):
            if name.startswith(prefix):
                head, slash, _ = name[len(prefix) :].partition("/")
                found.add(f"{prefix}{head}{slash}")
        return sorted(found)

    def delete(self, path: str) -> None:
        target = _clean(path)
        with self._guard:
            for name in builtins.list(self.files):
                if name == target or name.startswith(f"{target}/") or not target:
                    del self.files[name]

    def exists(self, path: str) -> bool:
        target = _clean(path)
        return any(name == target or name.startswith(f"{target}/") for name in self.files)

    def get_absolute_path(self, path: str) -> str:
        return f"/{_clean(path)}"

    def lock(self, path: str, timeout: float = 30.0) -> AbstractContextManager[None]:
        return self._locks.hold(path, timeout)


class LocalFileStore(FileStore):
    """A file store in a directory of the disk; writes are atomic (a new file, then a rename).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as root:
    ...     store = LocalFileStore(root)
    ...     store.write("events/e.json", "{}")
    ...     print(store.list("events"), store.read("events/e.json"))
    ['events/e.json'] {}
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._locks = _PathLocks()

    def _full(self, path: str) -> Path:
        return self.root / _clean(path)

    def write(self, path: str, contents: str | bytes) -> None:
        target = self._full(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def read(self, path: str) -> str:
        return self._full(path).read_text(encoding="utf-8")

    def list(self, path: str) -> builtins.list[str]:
        directory = self._full(path)
        if not directory.is_dir():
            return []
        prefix = _clean(path)
        prefix = f"{prefix}/" if prefix else ""
        return sorted(
            f"{prefix}{entry.name}{'/' if entry.is_dir() else ''}"
            for entry in directory.iterdir()
            if not entry.name.startswith(".tmp-")
        )

    def delete(self, path: str) -> None:
        target = self._full(path)
        if target.is_dir():
            for child in sorted(target.rglob("*"), reverse=True):
                child.rmdir() if child.is_dir() else child.unlink()
            target.rmdir()
        else:
            target.unlink(missing_ok=True)

    def exists(self, path: str) -> bool:
        return self._full(path).exists()

    def get_absolute_path(self, path: str) -> str:
        return str(self._full(path))

    def lock(self, path: str, timeout: float = 30.0) -> AbstractContextManager[None]:
        return self._locks.hold(path, timeout)
