"""Frozen values, and families of them discriminated by class name (OpenHands' ``kind``).

Every event, message, action and observation is a :class:`FrozenValue`: a
pydantic model that refuses assignment with a :class:`~cowconv.FrozenInstanceError`
and holds only immutable values (tuples, frozen models, ``PMap``). That is
what lets a fork share them with its source instead of copying them.

A :class:`Kinded` family (``Event``, ``Action``, ``Observation``,
``ToolDefinition``, ...) dumps a ``kind`` key naming each object's class,
and validating through any class of the family returns an instance of the
subclass that ``kind`` names, as OpenHands' ``DiscriminatedUnionMixin`` does.
A subclass is registered when it is defined, under its class name:

>>> class Shape(Kinded):
...     __kind_family__ = True
>>> class Square(Shape):
...     side: int
>>> Square(side=2).model_dump()
{'side': 2, 'kind': 'Square'}
>>> Shape.model_validate({"kind": "Square", "side": 3})
Square(side=3, kind='Square')
>>> Square(side=2).side = 5
Traceback (most recent call last):
...
cowconv._exceptions.FrozenInstanceError: Square is immutable (it may be shared by forks): ...
"""

import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    ValidationInfo,
    computed_field,
    model_validator,
)

from cowconv._exceptions import FrozenInstanceError, InvalidValueError
from cowconv.core.frozen import CheckedModel

__all__ = [
    "FrozenValue",
    "Kinded",
    "LazyJsonSchema",
    "inlined_json_schema",
    "kind_names",
    "kinds_json_schema",
]


class FrozenValue(CheckedModel):
    """A frozen, checked pydantic model whose assignment says why it is refused.

    >>> class Point(FrozenValue):
    ...     x: int
    >>> Point(x=1).model_copy(update={"x": 2}).x
    2
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):  # pydantic's private attributes
            super().__setattr__(name, value)
            return
        raise FrozenInstanceError(
            f"{type(self).__name__} is immutable (it may be shared by forks): use "
            f"model_copy(update={{{name!r}: ...}}) for a changed copy"
        )

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"{type(self).__name__} is immutable: cannot delete {name!r}")


# family root -> kind name -> classes defined under that name (one per module and qualname)
_families: dict[type, dict[str, list[type]]] = {}
_lock = threading.Lock()


def _family_of(cls: type) -> type | None:
    for base in cls.__mro__:
        if base.__dict__.get("__kind_family__"):
            return base
    return None


def kind_names(cls: "type[Kinded]") -> "dict[str, type[Kinded]]":
    """The unambiguous kinds registered in the family of ``cls``: name -> class.

    >>> from cowconv.core.events import Event
    >>> kind_names(Event)["MessageEvent"].__name__
    'MessageEvent'
    """
    family = _family_of(cls)
    with _lock:
        table = dict(_families.get(family, {})) if family is not None else {}
    return {name: classes[-1] for name, classes in table.items() if len(classes) == 1}


class Kinded(FrozenValue):
    """A frozen model of a family discriminated by class name (see the module docstring).

    A family's root class sets ``__kind_family__ = True``. A subclass
    defined again (same module and qualified name: a reloaded module, a
    class defined in a function) replaces the earlier definition; two
    different classes of one name make that name ambiguous, and validating
    it is an error naming both (as in OpenHands).

    A root may override :meth:`_unknown_kind` to accept kinds no class is
    registered for (events of older versions, tools of other programs).
    """

    __kind_family__: ClassVar[bool] = False

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        family = _family_of(cls)
        if family is None or family is cls:
            return
        name = cls.__name__
        with _lock:
            table = _families.setdefault(family, {})
            known = [
                other
                for other in table.get(name, [])
                if (other.__module__, other.__qualname__) != (cls.__module__, cls.__qualname__)
                and not other.__dict__.get("__opaque_kind__")
            ]
            table[name] = [*known, cls]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def kind(self) -> str:
        """The name of this object's class: the ``kind`` its JSON carries."""
        return type(self).__name__

    @classmethod
    def _resolve_kind(cls, kind: str) -> "type[Kinded] | None":
        family = _family_of(cls)
        with _lock:
            classes = list(_families.get(family, {}).get(kind, ())) if family else []
        if len(classes) > 1:
            names = ", ".join(f"{c.__module__}.{c.__qualname__}" for c in classes)
            raise InvalidValueError(
                f"kind {kind!r} is ambiguous: several classes are named so ({names})"
            )
        return classes[0] if classes else None

    @classmethod
    def _unknown_kind(
        cls, kind: str, data: dict[str, Any]
    ) -> "tuple[type[Kinded], dict[str, Any]]":
        """The class (and data) for a ``kind`` no class is registered for (default: an error)."""
        family = _family_of(cls)
        known = sorted(kind_names(cls)) if family is not None else []
        raise InvalidValueError(f"unknown kind {kind!r} for {cls.__name__}; known kinds: {known}")

    @model_validator(mode="wrap")
    @classmethod
    def _dispatch_kind(
        cls, data: Any, handler: ModelWrapValidatorHandler[Any], info: ValidationInfo
    ) -> Any:
        if not isinstance(data, Mapping) or "kind" not in data:
            return handler(data)
        kind = data["kind"]
        rest = {key: value for key, value in data.items() if key != "kind"}
        if kind == cls.__name__:
            return handler(rest)
        if not isinstance(kind, str):
            raise InvalidValueError(f"kind must be a string, got {type(kind).__name__}")
        target = cls._resolve_kind(kind)
        if target is None:
            target, rest = cls._unknown_kind(kind, rest)
        if target is cls:
            return handler(rest)
        if not issubclass(target, cls):
            raise InvalidValueError(f"kind {kind!r} is not a {cls.__name__}")
        return target.model_validate(rest, context=info.context)


def inlined_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with its ``$defs`` references replaced by what they name.

    Titles, descriptions and defaults are left out: the result is what a published
    schema embeds where pydantic's own definitions are not in scope.

    >>> from pydantic import BaseModel
    >>> class Inner(BaseModel):
    ...     n: int
    >>> class Outer(BaseModel):
    ...     inner: Inner
    >>> inlined_json_schema(Outer)["properties"]["inner"]["properties"]
    {'n': {'type': 'integer'}}
    """
    schema = model.model_json_schema()
    inlined: dict[str, Any] = _inlined(schema, schema.get("$defs", {}))
    return inlined


class LazyJsonSchema:
    """An ``Annotated`` marker: the field's JSON schema is ``make()``, made when asked for.

    ``WithJsonSchema`` takes a finished schema, so a schema built from other models would
    be built when the module is imported (milliseconds of every first use, for a schema
    only a server or a tool asks for).

    >>> from typing import Annotated
    >>> from pydantic import TypeAdapter
    >>> Port = Annotated[int, LazyJsonSchema(lambda: {"maximum": 65535, "type": "integer"})]
    >>> TypeAdapter(Port).json_schema()
    {'maximum': 65535, 'type': 'integer'}
    """

    def __init__(self, make: Callable[[], dict[str, Any]]) -> None:
        self._make = make

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        return self._make()


def kinds_json_schema(kinds: Mapping[str, type[BaseModel]]) -> dict[str, Any]:
    """A published schema for JSON told apart by ``kind``: one object per name in ``kinds``.

    Each is the class's own schema (inlined) with ``kind`` required and naming it.

    >>> from pydantic import BaseModel
    >>> class Ping(BaseModel):
    ...     host: str
    >>> kinds_json_schema({"Ping": Ping})["oneOf"][0]["required"]
    ['kind', 'host']
    """
    options = []
    for name in sorted(kinds):
        schema = inlined_json_schema(kinds[name])
        schema["properties"] = {"kind": {"const": name}, **schema.get("properties", {})}
        schema["required"] = ["kind", *schema.get("required", [])]
        options.append(schema)
    return {"oneOf": options}


def _inlined(schema: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inlined(defs[ref.removeprefix("#/$defs/")], defs)
        return {
            key: _inlined(value, defs)
            for key, value in schema.items()
            if key not in ("title", "description", "$defs", "default", "discriminator")
        }
    if isinstance(schema, list):
        return [_inlined(item, defs) for item in schema]
    return schema
