"""Where a conversation's snapshots live: this process (``local``) or an agent server (``remote``).

Each implements :class:`~cowconv.Backend` (see :mod:`cowconv.ports`) over the
core and the agent runtime; a :class:`~cowconv.Conversation` picks one. The
remote backend (and httpx under it) loads on first use.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cowconv.backends.local import LocalBackend
    from cowconv.backends.remote import RemoteBackend

__all__ = ["LocalBackend", "RemoteBackend"]

_LAZY = {"LocalBackend": "cowconv.backends.local", "RemoteBackend": "cowconv.backends.remote"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cowconv.backends' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
