"""Deeply immutable JSON-like values and the pydantic types that hold them.

Every container a cowconv value can reach is immutable: JSON objects become
:class:`pyrsistent.PMap`, JSON arrays become tuples. That is what lets a fork
share them instead of copying them.

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

import math
from collections.abc import Mapping
from typing import Annotated, Any, TypeAlias, TypeVar

from pydantic import AfterValidator, PlainSerializer, PlainValidator, WithJsonSchema, WrapSerializer
from pyrsistent import PMap, pmap

__all__ = ["FrozenJSON", "FrozenJSONMap", "FrozenMap", "FrozenStrMap", "freeze", "thaw"]

_SCALARS = (str, int, float, bool, type(None))
V = TypeVar("V")


def freeze(value: Any) -> Any:
    """Return a deeply immutable copy of a JSON-like value.

    Mappings become ``PMap`` (keys must be strings), lists and tuples become
    tuples, scalars stay as they are. Anything else is a ``TypeError``.

    >>> freeze([1, {"a": [2]}])
    (1, pmap({'a': (2,)}))
    """
    if isinstance(value, _SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            raise TypeError(f"{value!r} is not a JSON value (JSON has no NaN or infinity)")
        return value
    if isinstance(value, Mapping):
        items = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be str, got {type(key).__name__}: {key!r}")
            items[key] = freeze(item)
        return pmap(items)
    if isinstance(value, list | tuple):
        return tuple(freeze(item) for item in value)
    raise TypeError(f"{type(value).__name__} is not a JSON value: {value!r}")


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
        raise ValueError(str(error)) from None


def _freeze_object(value: Any) -> PMap[str, Any]:
    frozen = _freeze_json(value)
    if not isinstance(frozen, PMap):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return frozen


def _freeze_str_map(value: Any) -> PMap[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of str to str, got {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ValueError(f"expected str keys and str values, got {key!r}: {item!r}")
    return value if isinstance(value, PMap) else pmap(value)


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
