"""Persistent conversation stores: the :class:`Store` protocol and :class:`SQLiteStore`."""

from cowconv._store._base import Store
from cowconv._store._sqlite import SQLiteStore

__all__ = ["SQLiteStore", "Store"]
