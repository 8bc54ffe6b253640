"""Deeply immutable JSON-like values and the pydantic types that hold them.

Every container a cowconv value can reach is immutable: JSON objects become
:class:`pyrsistent.PMap`, JSON arrays become tuples. That is what lets a fork
share them instead of copying them.

Every value is also checked at the door, so nothing is saved that cannot be
loaded back unchanged: no NaN or infinity, no nesting deeper than
:data:`MAX_DEPTH`, no invalid Unicode (lone surrogates). A value that breaks
one of these is an :class:`~cowconv.InvalidValueError` (a ``ValueError``).

>>> value = freeze({"paths": ["a.py", "b.py"], "limits": {"lines": 10}})
>>> value["paths"]
('a.py', 'b.py')
>>> value["limits"]["lines"] = 20
Traceback (most recent call last):
...
TypeError: 'PMap' object does not support item assignment
>>> thaw(value)
{'limits': {'lines': 10}, 'paths': ['a.py', 'b.py']}
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Self, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
    SecretStr,
    ValidationInfo,
    WithJsonSchema,
    WrapSerializer,
    model_validator,
)
from pyrsistent import PMap, pmap

from cowconv._exceptions import InvalidTypeError, InvalidValueError

__all__ = [
    "MAX_DEPTH",
    "CheckedModel",
    "FrozenJSON",
    "FrozenJSONMap",
    "FrozenMap",
    "FrozenStrMap",
    "check_str_map",
    "check_text",
    "decode_json",
    "freeze",
    "thaw",
]

MAX_DEPTH = 64
"""How deeply JSON arrays and objects may nest in a stored value (the top level is depth 1).

Far beyond any real agent state or tool argument, and far inside what the
JSON parsers that read a store back accept (pydantic's stops at 200).
"""

# The deepest nesting decode_json() lets json.loads() decode. json's decoder recurses once per
# level and stops only at the interpreter's recursion limit; a garbage collection that happens
# down there runs other objects' finalizers with no stack left, and they fail (their cleanup is
# lost). Text nested deeper is refused before it is parsed.
_DECODE_DEPTH = 512
# A JSON string (skipped whole, escapes included) or one bracket.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def decode_json(text: str | bytes) -> Any:
    """``json.loads(text)`` for text from outside (an LLM, a client, a socket, a file): JSON
    nested deeper than 512 levels is an :class:`~cowconv.InvalidValueError` (a ``ValueError``)
    found without recursing, like any invalid JSON. Bytes are decoded as ``json.loads`` does
    (UTF-8, -16 or -32, told by the first bytes); anything else is an
    :class:`~cowconv.InvalidTypeError` (a ``TypeError``, as ``json.loads`` raises).

    >>> decode_json('{"command": "ls", "args": [1, [2]]}')
    {'command': 'ls', 'args': [1, [2]]}
    >>> decode_json('["café"]'.encode("utf-16"))
    ['café']
    >>> decode_json("[" * 100_000 + "]" * 100_000)
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: JSON nested deeper than 512 levels
    """
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
    elif not isinstance(text, str):
        raise InvalidTypeError(f"JSON is text or bytes, not {type(text).__name__}")
    if text.count("[") + text.count("{") > _DECODE_DEPTH:  # else it cannot be that deep
        depth = 0
        for match in _STRING_OR_BRACKET.finditer(text):
            token = match.group()
            if token == "[" or token == "{":
                depth += 1
                if depth > _DECODE_DEPTH:
                    raise InvalidValueError(f"JSON nested deeper than {_DECODE_DEPTH} levels")
            elif token == "]" or token == "}":
                depth -= 1
    return json.loads(text)


_SCALARS = (str, int, float, bool, type(None))
V = TypeVar("V")


def check_text(text: str, what: str = "text") -> str:
    """Return ``text`` if it is valid Unicode, else raise :class:`~cowconv.InvalidValueError`.

    A lone surrogate (``"\\ud800"``, which JSON's ``\\u`` escapes can carry)
    cannot be written as UTF-8, so it could be neither stored nor sent.

    >>> check_text("naïve ✓")
    'naïve ✓'
    >>> check_text("bad \\ud800", "tag")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: tag is not valid Unicode (lone surrogate at position 4)
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidValueError(
            f"{what} is not valid Unicode (lone surrogate at position {error.start})"
        ) from None
    return text


def freeze(value: Any) -> Any:
    """Return a deeply immutable copy of a JSON-like value.

    Mappings become ``PMap`` (keys must be strings), lists and tuples become
    tuples, scalars stay as they are. Anything else is a ``TypeError``; NaN,
    infinity, invalid Unicode and nesting deeper than :data:`MAX_DEPTH` are an
    :class:`~cowconv.InvalidValueError` (a ``ValueError``).

    >>> freeze([1, {"a": [2]}])
    (1, pmap({'a': (2,)}))
    >>> freeze({"wait": float("inf")})
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: inf is not a JSON value (JSON has no NaN or infinity)
    """
    return _freeze(value, 0)


def _freeze(value: Any, depth: int) -> Any:
    if isinstance(value, _SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidValueError(f"{value!r} is not a JSON value (JSON has no NaN or infinity)")
        if isinstance(value, str):
            check_text(value, "a JSON string")
        return value
    if depth >= MAX_DEPTH:
        raise InvalidValueError(f"JSON value nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        items = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidTypeError(
                    f"JSON object keys must be str, got {type(key).__name__}: {key!r}"
                )
            items[check_text(key, "a JSON object key")] = _freeze(item, depth + 1)
        return pmap(items)
    if isinstance(value, list | tuple):
        return tuple(_freeze(item, depth + 1) for item in value)
    raise InvalidTypeError(f"{type(value).__name__} is not a JSON value: {value!r}")


def thaw(value: Any) -> Any:
    """Return a plain mutable ``dict``/``list`` copy of a frozen value, keys sorted.

    >>> thaw((1, freeze({"a": (2,)})))
    [1, {'a': [2]}]
    """
    if isinstance(value, Mapping):
        # PMap iterates in hash order, which changes between processes: sort for stable JSON.
        return {key: thaw(value[key]) for key in sorted(value)}
    if isinstance(value, tuple | list):
        return [thaw(item) for item in value]
    return value


# The validators below raise ValueError: pydantic turns that into a ValidationError, but lets
# a TypeError escape (an agent server would answer a malformed body with a 500).


def _freeze_json(value: Any) -> Any:
    try:
        return freeze(value)
    except TypeError as error:
        raise InvalidValueError(str(error)) from None
    except RecursionError:  # a value nested so deep Python gave up before MAX_DEPTH could
        raise InvalidValueError(f"JSON value nested deeper than {MAX_DEPTH} levels") from None


def _freeze_object(value: Any) -> PMap[str, Any]:
    frozen = _freeze_json(value)
    if not isinstance(frozen, PMap):
        raise InvalidValueError(f"expected a JSON object, got {type(value).__name__}")
    return frozen


def check_str_map(
    value: object, error: type[InvalidTypeError | InvalidValueError], what: str = ""
) -> Mapping[str, str]:
    """``value`` if it maps str to str (texts a history can hold), else ``error``.

    ``what`` names it in the message (``"tags"``); the one check for tags
    and every other map of strings.

    >>> check_str_map({"owner": "ci"}, InvalidValueError)
    {'owner': 'ci'}
    >>> check_str_map({"retries": 3}, InvalidTypeError, "tags")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidTypeError: tags must map str to str, got 'retries': 3
    """
    if not isinstance(value, Mapping):
        start = f"{what} must be" if what else "expected"
        raise error(f"{start} a mapping of str to str, got {type(value).__name__}")
    label = "a tag" if what == "tags" else "a"
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            if what:
                raise error(f"{what} must map str to str, got {key!r}: {item!r}")
            raise error(f"expected str keys and str values, got {key!r}: {item!r}")
        check_text(key, f"{label} key")
        check_text(item, f"{label} value")
    return value


def _freeze_str_map(value: Any) -> PMap[str, str]:
    checked = check_str_map(value, InvalidValueError)
    return checked if isinstance(checked, PMap) else pmap(checked)


def _check_field(name: str, value: Any) -> None:
    if isinstance(value, str):
        check_text(value, name)
    elif isinstance(value, SecretStr):
        check_text(value.get_secret_value(), name)
    elif isinstance(value, tuple):
        for item in value:
            _check_field(name, item)
    elif isinstance(value, Mapping):  # models among the values check themselves
        for key, item in value.items():
            if isinstance(key, str):
                check_text(key, f"a key of {name}")
            _check_field(name, item)


class CheckedModel(BaseModel):
    """Base of every model cowconv stores: what it accepts, it can save and load back.

    Floats must be finite (``allow_inf_nan=False``) and every text field
    valid Unicode; JSON-valued fields are checked by :func:`freeze`. Values
    parsed from JSON need no text check: the parser refuses lone surrogates.

    >>> class Note(CheckedModel):
    ...     text: str
    ...     weight: float = 1.0
    >>> Note(text="ok").text
    'ok'
    >>> Note(text="ok", weight=float("nan"))
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for Note
    weight
      Input should be a finite number [type=finite_number, input_value=nan, input_type=float]
    ...
    """

    model_config = ConfigDict(allow_inf_nan=False, defer_build=True)

    @model_validator(mode="after")
    def _valid_text(self, info: ValidationInfo) -> Self:
        if info.mode == "python":
            for name, value in self.__dict__.items():
                _check_field(name, value)
        return self


FrozenJSON: TypeAlias = Annotated[
    Any,
    PlainValidator(_freeze_json),
    PlainSerializer(thaw),
    WithJsonSchema({}),
]
"""Any JSON value, held deeply frozen; dumps as plain JSON."""

FrozenJSONMap: TypeAlias = Annotated[
    PMap[str, Any],
    PlainValidator(_freeze_object),
    PlainSerializer(thaw),
    WithJsonSchema({"type": "object"}),
]
"""A JSON object, held as a deeply frozen ``PMap``."""

FrozenStrMap: TypeAlias = Annotated[
    PMap[str, str],
    PlainValidator(_freeze_str_map),
    PlainSerializer(thaw),
    WithJsonSchema({"type": "object", "additionalProperties": {"type": "string"}}),
]
"""A ``str`` to ``str`` mapping (tags), held as a ``PMap``."""

FrozenMap: TypeAlias = Annotated[
    Mapping[str, V],
    AfterValidator(pmap),
    WrapSerializer(lambda value, handler: handler({key: value[key] for key in sorted(value)})),
]
"""A ``str`` keyed mapping of validated (frozen) values, held as a ``PMap``."""
