"""Conversation stores: the :class:`Store` protocol, :class:`MemoryStore`, :class:`SQLiteStore`,
:class:`~cowconv.stores.postgres.PostgresStore`, all one :class:`TreeStore` over rows.

The implementations load on first use: a conversation that never persists
never imports ``sqlite3``, and only a PostgreSQL store imports psycopg.

>>> open_store(":memory:")
SQLiteStore(':memory:')
"""

import os
from typing import TYPE_CHECKING

import cowconv._lazy as _lazy
from cowconv._exceptions import StoreError
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
