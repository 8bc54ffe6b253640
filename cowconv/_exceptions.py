"""The exceptions cowconv raises.

Every cowconv error derives from :class:`CowconvError`, so one ``except``
catches them all. Errors about bad arguments stay ``ValueError``/``TypeError``
(the Python convention); the classes below add what is specific to us::

    CowconvError
    ├── ConversationNotFoundError (also KeyError)
    ├── EventNotFoundError (also ValueError and KeyError)
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
    "EventNotFoundError",
    "LLMError",
    "RemoteError",
    "SchemaVersionError",
    "StoreError",
    "StoreLockedError",
]


class CowconvError(Exception):
    """Base class of every cowconv error.

    >>> from cowconv import SQLiteStore
    >>> try:
    ...     SQLiteStore(":memory:").load("nope")
    ... except CowconvError as error:
    ...     print(type(error).__name__)
    ConversationNotFoundError
    """


class ConversationNotFoundError(CowconvError, KeyError):
    """No conversation has the given id.

    >>> from cowconv import SQLiteStore
    >>> try:
    ...     SQLiteStore(":memory:").info("ci-42")
    ... except ConversationNotFoundError as error:
    ...     print(error.conversation_id, "|", error)
    ci-42 | no conversation with id 'ci-42'
    """

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"no conversation with id {conversation_id!r}")
        self.conversation_id = conversation_id

    def __str__(self) -> str:
        return str(self.args[0])


class EventNotFoundError(CowconvError, ValueError, KeyError):
    """No branch of the conversation has the event (``navigate_to``, ``fork(from_event_id=)``).

    A ``ValueError`` as the seed SDK raises, and a ``KeyError`` as a lookup.

    >>> from cowconv import LLM, Agent, Conversation
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> try:
    ...     conversation.navigate_to("nope")
    ... except ValueError as error:
    ...     print(error)
    no branch of conversation ... has an event with id 'nope'
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class LLMError(CowconvError):
    """An LLM call failed (after retries, where retrying made sense).

    A run records it as an :class:`~cowconv.AgentErrorEvent` instead of
    raising; ``LLM.completion`` raises it.

    >>> issubclass(LLMError, CowconvError)
    True
    """


class StoreError(CowconvError):
    """The persistent store cannot do what was asked.

    >>> from cowconv import SQLiteStore
    >>> store = SQLiteStore(":memory:")
    >>> store.close()
    >>> try:
    ...     store.list()
    ... except StoreError as error:
    ...     print(type(error).__name__)
    StoreError
    """


class CorruptStoreError(StoreError):
    """The store file is damaged or is not a cowconv store. It was left untouched.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "notes.db"
    >>> _ = path.write_text("not a database")
    >>> from cowconv import SQLiteStore
    >>> try:
    ...     SQLiteStore(path)
    ... except CorruptStoreError:
    ...     print(path.read_text())
    not a database
    """


class SchemaVersionError(StoreError):
    """The store was written by a schema version this cowconv cannot read.

    >>> issubclass(SchemaVersionError, StoreError)
    True
    """


class StoreLockedError(StoreError):
    """Another process held the store's write lock for longer than the wait allowed.

    ``SQLiteStore(path, lock_timeout=...)`` sets the wait.

    >>> issubclass(StoreLockedError, StoreError)
    True
    """


class RemoteError(CowconvError):
    """The agent server answered with an error status.

    >>> error = RemoteError(404, "no conversation with id 'x'")
    >>> error.status_code, str(error)
    (404, "agent server answered 404: no conversation with id 'x'")
    """

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"agent server answered {status_code}: {message}")
        self.status_code = status_code
        self.message = message
