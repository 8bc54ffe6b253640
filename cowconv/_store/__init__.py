"""Conversation stores: the :class:`Store` protocol, :class:`MemoryStore`, :class:`SQLiteStore`."""

from cowconv._store._base import Store
from cowconv._store._memory import MemoryStore
from cowconv._store._sqlite import STORE_FILE_NAME, SQLiteStore, store_file

__all__ = ["STORE_FILE_NAME", "MemoryStore", "SQLiteStore", "Store", "store_file"]
