"""Secret sources: where the value of a secret comes from when a tool needs it.

OpenHands' SDK's ``openhands.sdk.secret``: a :class:`SecretSource` gives a
value on demand (:meth:`SecretSource.get_value`); :class:`StaticSecret`
holds one, :class:`LookupSecret` fetches one from a URL. Subclass
:class:`SecretSource` for your own. In JSON each carries its class name
under ``kind`` and its secret values masked (``**********``) unless dumped
with ``context={"expose_secrets": True}``.

>>> from pydantic import SecretStr
>>> secret = StaticSecret(value=SecretStr("s3cret"), description="The API token")
>>> secret.get_value(), secret.model_dump(mode="json")
('s3cret', {'description': 'The API token', 'value': '**********', 'kind': 'StaticSecret'})
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from typing import Annotated, Any, ClassVar

from pydantic import (
    SecretStr,
    SerializationInfo,
    field_serializer,
    model_serializer,
    model_validator,
)

from cowconv._exceptions import InvalidValueError
from cowconv.core.frozen import CheckedModel
from cowconv.core.kinds import LazyJsonSchema, kinds_json_schema
from cowconv.core.llm import dump_secret

__all__ = [
    "LookupSecret",
    "SecretSource",
    "SecretSourceJSON",
    "SecretValue",
    "StaticSecret",
    "secret_source_json_schema",
]

_SECRET_HEADER_WORDS = ("authorization", "key", "secret", "token", "password", "cookie")


class SecretSource(CheckedModel):
    """A secret whose value is produced when it is needed; subclass it with ``get_value``.

    ``SecretSource.model_validate`` of JSON with a ``kind`` builds that
    subclass (any subclass defined in the process).

    >>> class FromEnvironment(SecretSource):
    ...     def get_value(self) -> str:
    ...         return "from-environment"
    >>> FromEnvironment(description="demo").get_value()
    'from-environment'
    >>> type(SecretSource.model_validate({"kind": "StaticSecret", "value": "v"})).__name__
    'StaticSecret'
    """

    _kinds: ClassVar[dict[str, type[SecretSource]]] = {}

    description: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        SecretSource._kinds[cls.__name__] = cls

    @model_validator(mode="wrap")
    @classmethod
    def _by_kind(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, dict) and "kind" in data:
            kind = data["kind"]
            target = SecretSource._kinds.get(kind) if isinstance(kind, str) else None
            if target is None or not issubclass(target, cls):
                raise InvalidValueError(f"no secret source of kind {kind!r}")
            data = {key: value for key, value in data.items() if key != "kind"}
            if target is not cls:
                return target.model_validate(data)
        if inspect.isabstract(cls) and not isinstance(data, cls):
            # The base names no way to get a value: JSON must say which kind it is.
            kinds = sorted(
                name for name, kind in SecretSource._kinds.items() if not inspect.isabstract(kind)
            )
            raise InvalidValueError(f"a secret source needs a 'kind', one of {kinds}")
        return handler(data)

    @model_serializer(mode="wrap")
    def _with_kind(self, handler: Any) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        data["kind"] = type(self).__name__
        return data

    @abstractmethod
    def get_value(self) -> str | None:
        """The secret's value now (``None`` when it has none)."""


class StaticSecret(SecretSource):
    """A secret whose value is given.

    >>> from pydantic import SecretStr
    >>> StaticSecret(value=SecretStr("x")).get_value()
    'x'
    """

    value: SecretStr | None = None

    @field_serializer("value")
    def _dump_value(self, value: SecretStr | None, info: SerializationInfo) -> Any:
        return dump_secret(value, info)

    def get_value(self) -> str | None:
        """The value given."""
        return None if self.value is None else self.value.get_secret_value()


class LookupSecret(SecretSource):
    """A secret fetched (HTTP GET) from ``url`` each time it is needed, with ``headers``.

    Headers whose names look secret (authorization, key, token, ...) are
    masked in dumps like any secret.

    >>> LookupSecret(url="https://vault.example/token",
    ...              headers={"Authorization": "Bearer x"}).model_dump(mode="json")["headers"]
    {'Authorization': '**********'}
    """

    url: str
    headers: dict[str, str] = {}

    @field_serializer("headers")
    def _dump_headers(self, headers: dict[str, str], info: SerializationInfo) -> Any:
        return {
            key: (
                dump_secret(SecretStr(value), info)
                if any(word in key.lower() for word in _SECRET_HEADER_WORDS)
                else value
            )
            for key, value in headers.items()
        }

    def get_value(self) -> str:
        """The body of a GET of ``url`` (30 s timeout)."""
        # Loaded here: urllib.request (http.client, email) costs every first use ~10 ms.
        import urllib.request

        request = urllib.request.Request(self.url, headers=self.headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            body: bytes = response.read()
        return body.decode("utf-8")


SecretValue = str | SecretSource
"""A secret as OpenHands' SDK takes it: its value, or a source of it."""


def secret_source_json_schema() -> dict[str, Any]:
    """The published schema of a secret source's JSON: one object per kind defined so far.

    >>> kinds = {option["properties"]["kind"]["const"] for option in
    ...          secret_source_json_schema()["oneOf"]}
    >>> {"LookupSecret", "StaticSecret"} <= kinds
    True
    """
    concrete = {
        name: kind for name, kind in SecretSource._kinds.items() if not inspect.isabstract(kind)
    }
    return kinds_json_schema(concrete)


#: A :class:`SecretSource` in a model's fields, published as the kinds it can be.
SecretSourceJSON = Annotated[SecretSource, LazyJsonSchema(secret_source_json_schema)]
