"""Conversation stores: the :class:`Store` protocol, :class:`MemoryStore`, :class:`SQLiteStore`.

The implementations load on first use: a conversation that never persists
never imports ``sqlite3``.
"""

from typing import TYPE_CHECKING, Any

from cowconv.stores.base import Store

if TYPE_CHECKING:
    from cowconv.stores.memory import MemoryStore
    from cowconv.stores.sqlite import STORE_FILE_NAME, SQLiteStore, store_file
    from cowconv.stores.tree import TreeStore

__all__ = ["STORE_FILE_NAME", "MemoryStore", "SQLiteStore", "Store", "TreeStore", "store_file"]

_LAZY = {
    "MemoryStore": "cowconv.stores.memory",
    "SQLiteStore": "cowconv.stores.sqlite",
    "STORE_FILE_NAME": "cowconv.stores.sqlite",
    "store_file": "cowconv.stores.sqlite",
    "TreeStore": "cowconv.stores.tree",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cowconv.stores' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
