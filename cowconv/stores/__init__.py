"""Conversation stores: the :class:`Store` protocol, :class:`MemoryStore`, :class:`SQLiteStore`,
:class:`~cowconv.stores.postgres.PostgresStore`, all one :class:`TreeStore` over rows.

The implementations load on first use: a conversation that never persists
never imports ``sqlite3``, and only a PostgreSQL store imports psycopg.

>>> open_store(":memory:")
SQLiteStore(':memory:')
"""

import os
from pathlib import Path
from typing import TYPE_CHECKING

import cowconv._lazy as _lazy
from cowconv._exceptions import InvalidTypeError, InvalidValueError, StoreError
from cowconv.stores.base import Store

if TYPE_CHECKING:
    from cowconv.stores.memory import MemoryStore
    from cowconv.stores.postgres import PostgresStore
    from cowconv.stores.sqlite import STORE_FILE_NAME, SQLiteStore, store_file
    from cowconv.stores.tree import TreeStore

__all__ = [
    "STORE_FILE_NAME",
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "TreeStore",
    "is_store_url",
    "local_path",
    "open_directory",
    "open_store",
    "store_file",
]

_LAZY = {
    "MemoryStore": "cowconv.stores.memory",
    "PostgresStore": "cowconv.stores.postgres",
    "SQLiteStore": "cowconv.stores.sqlite",
    "STORE_FILE_NAME": "cowconv.stores.sqlite",
    "store_file": "cowconv.stores.sqlite",
    "TreeStore": "cowconv.stores.tree",
}


__getattr__, __dir__ = _lazy.lazy_attributes(__name__, _LAZY, globals())


def local_path(location: object, what: str = "a store's location") -> Path:
    """``location`` as a local path, ``~`` expanded: the one check of every path a store is
    opened at (``SQLiteStore``, ``open_store``, ``persistence_dir``, ``store=``,
    ``Conversation.resume``, the agent server's ``data_dir``).

    Not a path (``None``, a number, bytes): :class:`~cowconv.InvalidTypeError`; a path no
    file can have (a NUL character, ``~user`` for no such user):
    :class:`~cowconv.InvalidValueError`; ``what`` names it in the message.

    >>> local_path("~/notes.db") == Path.home() / "notes.db"
    True
    >>> local_path(None, "persistence_dir")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidTypeError: persistence_dir must be a path, not NoneType
    """
    text = os.fspath(location) if isinstance(location, str | os.PathLike) else None
    if not isinstance(text, str):
        raise InvalidTypeError(f"{what} must be a path, not {type(location).__name__}")
    if "\x00" in text:
        raise InvalidValueError(f"{what} cannot hold a NUL character: {text!r}")
    try:
        return Path(text).expanduser()
    except RuntimeError as error:  # ~user for no such user
        raise InvalidValueError(f"{what} {text!r}: {error}") from None


def open_directory(location: object, what: str = "a store's directory") -> Store:
    """The SQLite store in the directory ``location`` (its ``cowconv.db``), the directory made
    if missing: ``persistence_dir``, ``store=`` given a path, the agent server's ``data_dir``.

    A location :func:`local_path` refuses is refused; a directory that cannot be made is a
    :class:`~cowconv.StoreError` saying why.

    >>> import tempfile
    >>> open_directory(tempfile.mkdtemp() + "/new/dir").location.endswith("/new/dir/cowconv.db")
    True
    """
    directory = local_path(location, what)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StoreError(f"cannot make the directory {directory} of {what}: {error}") from None
    store: Store = __getattr__("SQLiteStore")(directory)  # sqlite3 loads now
    return store


def is_store_url(location: object) -> bool:
    """Whether ``location`` is a database URL (``postgresql://...``), not a path.

    >>> is_store_url("postgresql://db.internal/cowconv"), is_store_url("data")
    (True, False)
    """
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def open_store(location: "str | os.PathLike[str]") -> Store:
    """The store at ``location``: a ``postgresql://`` URL, else a SQLite file or directory.

    A PostgreSQL URL needs the ``postgres`` extra (``pip install "cowconv[postgres]"``).
    """
    if is_store_url(location):
        try:
            postgres = __getattr__("PostgresStore")
        except ImportError as error:
            raise StoreError(
                f"a PostgreSQL store needs psycopg: pip install 'cowconv[postgres]' ({error})"
            ) from None
        store: Store = postgres(str(location))
        return store
    sqlite: Store = __getattr__("SQLiteStore")(location)
    return sqlite
