"""Conversation stores: the :class:`Store` protocol, :class:`MemoryStore`, :class:`SQLiteStore`.

The implementations load on first use: a conversation that never persists
never imports ``sqlite3``.
"""

from typing import TYPE_CHECKING, Any

from cowconv._store._base import Store

if TYPE_CHECKING:
    from cowconv._store._memory import MemoryStore
    from cowconv._store._sqlite import STORE_FILE_NAME, SQLiteStore, store_file

__all__ = ["STORE_FILE_NAME", "MemoryStore", "SQLiteStore", "Store", "store_file"]

_LAZY = {
    "MemoryStore": "cowconv._store._memory",
    "SQLiteStore": "cowconv._store._sqlite",
    "STORE_FILE_NAME": "cowconv._store._sqlite",
    "store_file": "cowconv._store._sqlite",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cowconv._store' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
