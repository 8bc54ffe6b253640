"""Conversation ids: ``uuid.UUID`` as OpenHands' SDK has them, any other string as cowconv allows.

Inside cowconv (snapshots, stores, URLs) an id is its text. Where an id is
taken, a ``uuid.UUID`` and its text are the same id; where a conversation
hands its id out (``conversation.id``), a UUID id comes back as a
``uuid.UUID``, like OpenHands' SDK's ``ConversationID``, and any other id as
the string it was given.

>>> import uuid
>>> u = uuid.UUID("12345678-1234-5678-1234-567812345678")
>>> id_text(u) == id_text(str(u)) == "12345678-1234-5678-1234-567812345678"
True
>>> public_id("12345678-1234-5678-1234-567812345678") == u, public_id("my-fork-1")
(True, 'my-fork-1')
"""

from __future__ import annotations

import itertools
import os
import threading
import uuid
from typing import Annotated, TypeAlias
from urllib.parse import quote

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

from cowconv._exceptions import InvalidValueError
from cowconv.core.frozen import check_text

__all__ = [
    "ConversationID",
    "ConversationIDField",
    "id_dir_name",
    "id_text",
    "new_uuid",
    "new_uuid_int",
    "public_id",
]

ConversationID: TypeAlias = uuid.UUID | str
"""What a conversation id may be given as: a ``uuid.UUID`` or a non-empty string."""


def id_text(conversation_id: object, *, name: str = "conversation_id") -> str:
    """The text of an id: a UUID in its canonical form, a non-empty string as it is.

    The JSON-safe form of any id (a ``uuid.UUID`` is not JSON, a name is): write
    ``id_text(id)``, read it back with :func:`public_id`, and get an equal id.

    >>> import json
    >>> ids = [uuid.UUID(int=7), "my-fork-1"]
    >>> text = json.dumps([id_text(i) for i in ids])
    >>> text
    '["00000000-0000-0000-0000-000000000007", "my-fork-1"]'
    >>> [public_id(t) for t in json.loads(text)] == ids
    True
    >>> id_text("")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: conversation_id must be ... got ''
    """
    if isinstance(conversation_id, uuid.UUID):
        return str(conversation_id)
    if isinstance(conversation_id, str) and conversation_id.strip():
        return check_text(conversation_id, name)
    # InvalidValueError (a ValueError) so the server answers 422, not 500, to a blank id in a path.
    message = f"{name} must be a uuid.UUID or a non-empty string, got {conversation_id!r}"
    raise InvalidValueError(message)


def id_dir_name(conversation_id: ConversationID) -> str:
    """The one path component naming a conversation's directory (OpenHands' ``<id hex>``).

    A UUID (or its canonical text) is its hex; any other id is percent-encoded,
    dots and slashes too, so no id can name another directory (``..``, ``a/b``).

    >>> id_dir_name(uuid.UUID(int=1)), id_dir_name("../x"), id_dir_name("run-1")
    ('00000000000000000000000000000001', '%2E%2E%2Fx', 'run-1')
    """
    public = public_id(id_text(conversation_id))
    if isinstance(public, uuid.UUID):
        return public.hex
    return quote(public, safe="").replace(".", "%2E")


def public_id(text: ConversationID) -> ConversationID:
    """The id a conversation hands out: a ``uuid.UUID`` if ``text`` is one's canonical form.

    The inverse of :func:`id_text` for the ids conversations hand out.

    >>> public_id("00000000-0000-0000-0000-000000000007"), public_id("my-fork-1")
    (UUID('00000000-0000-0000-0000-000000000007'), 'my-fork-1')
    """
    if isinstance(text, uuid.UUID):
        return text
    if len(text) == 36:
        try:
            parsed = uuid.UUID(text)
        except ValueError:
            return text
        if str(parsed) == text:
            return parsed
    return text


def _validate(value: object) -> ConversationID:
    return public_id(id_text(value, name="id"))


ConversationIDField: TypeAlias = Annotated[
    ConversationID,
    PlainValidator(_validate),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "minLength": 1}),
]
"""A snapshot's id field: a ``uuid.UUID`` or a string in Python, always a string in JSON."""


# New ids: a random 122-bit base drawn once per process (again in a forked child) and a
# counter in its low 48 bits. Unique within the process by the counter, across processes by
# the base; every id has the version-4 layout. One draw of os.urandom per process instead of
# one per id: a fork needs an id, and uuid.uuid4() alone costs more than the rest of a fork.
_COUNTER_BITS = 48
_VERSION_4 = (0x4000 << 64) | (0x8000 << 48)
_LAYOUT = ~((0xF000 << 64) | (0xC000 << 48) | ((1 << _COUNTER_BITS) - 1)) & ((1 << 128) - 1)
_ids_lock = threading.Lock()


def _draw() -> tuple[int, itertools.count[int]]:
    return (int.from_bytes(os.urandom(16), "big") & _LAYOUT) | _VERSION_4, itertools.count()


_base, _counter = _draw()


def _reseed() -> None:
    global _base, _counter
    _base, _counter = _draw()


if hasattr(os, "register_at_fork"):  # POSIX: a forked child must not repeat its parent's ids
    os.register_at_fork(after_in_child=_reseed)


def new_uuid_int() -> int:
    """A new id as the 128-bit integer of a version-4 UUID, unique across processes.

    >>> uuid.UUID(int=new_uuid_int()).version, new_uuid_int() != new_uuid_int()
    (4, True)
    """
    number = next(_counter)
    if number >> _COUNTER_BITS:  # 2**48 ids in one process: draw a new base
        with _ids_lock:
            _reseed()
        number = next(_counter)
    return _base | number


def new_uuid() -> uuid.UUID:
    """A new ``uuid.UUID`` (version 4), from :func:`new_uuid_int`.

    >>> new_uuid().version
    4
    """
    return uuid.UUID(int=new_uuid_int())
