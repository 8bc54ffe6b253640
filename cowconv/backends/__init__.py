"""Where a conversation's snapshots live: this process (``local``) or an agent server (``remote``).

Each implements :class:`~cowconv.Backend` (see :mod:`cowconv.ports`) over the
core and the agent runtime; a :class:`~cowconv.Conversation` picks one. The
remote backend (and httpx under it) loads on first use.
"""

from typing import TYPE_CHECKING

import cowconv._lazy as _lazy

if TYPE_CHECKING:
    from cowconv.backends.local import LocalBackend
    from cowconv.backends.remote import RemoteBackend

__all__ = ["LocalBackend", "RemoteBackend"]

_LAZY = {"LocalBackend": "cowconv.backends.local", "RemoteBackend": "cowconv.backends.remote"}


__getattr__, __dir__ = _lazy.lazy_attributes(__name__, _LAZY, globals())
