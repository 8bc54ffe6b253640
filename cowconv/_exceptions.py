"""The exceptions cowconv raises.

Every cowconv error derives from :class:`CowconvError`, so one ``except``
catches them all. Errors about bad arguments stay ``ValueError``/``TypeError``
(the Python convention); the classes below add what is specific to us::

    CowconvError
    ├── ConversationNotFoundError (also KeyError)
    ├── LLMError
    ├── StoreError
    │   ├── CorruptStoreError
    │   ├── SchemaVersionError
    │   └── StoreLockedError
    └── RemoteError (status_code, message)

>>> issubclass(ConversationNotFoundError, KeyError)
True
"""

from __future__ import annotations

__all__ = [
    "ConversationNotFoundError",
    "CorruptStoreError",
    "CowconvError",
    "LLMError",
    "RemoteError",
    "SchemaVersionError",
    "StoreError",
    "StoreLockedError",
]


class CowconvError(Exception):
    """Base class of every cowconv error."""


class ConversationNotFoundError(CowconvError, KeyError):
    """No conversation has the given id."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"no conversation with id {conversation_id!r}")
        self.conversation_id = conversation_id

    def __str__(self) -> str:
        return str(self.args[0])


class LLMError(CowconvError):
    """An LLM call failed (after retries, where retrying made sense)."""


class StoreError(CowconvError):
    """The persistent store cannot do what was asked."""


class CorruptStoreError(StoreError):
    """The store file is damaged or is not a cowconv store. It was left untouched."""


class SchemaVersionError(StoreError):
    """The store was written by a schema version this cowconv cannot read."""


class StoreLockedError(StoreError):
    """Another process held the store's write lock for longer than the wait allowed."""


class RemoteError(CowconvError):
    """The agent server answered with an error status."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"agent server answered {status_code}: {message}")
        self.status_code = status_code
        self.message = message
