"""Conversation stores: the :class:`Store` protocol, :class:`MemoryStore`, :class:`SQLiteStore`.

The implementations load on first use: a conversation that never persists
never imports ``sqlite3``.
"""

from typing import TYPE_CHECKING

import cowconv._lazy as _lazy
from cowconv.stores.base import Store

if TYPE_CHECKING:
    from cowconv.stores.memory import MemoryStore
    from cowconv.stores.sqlite import STORE_FILE_NAME, SQLiteStore, store_file

__all__ = ["STORE_FILE_NAME", "MemoryStore", "SQLiteStore", "Store", "store_file"]

_LAZY = {
    "MemoryStore": "cowconv.stores.memory",
    "SQLiteStore": "cowconv.stores.sqlite",
    "STORE_FILE_NAME": "cowconv.stores.sqlite",
    "store_file": "cowconv.stores.sqlite",
}


__getattr__, __dir__ = _lazy.lazy_attributes(__name__, _LAZY, globals())
