"""Attributes of a package that load their module on first use (PEP 562).

A package keeps its first import cheap by naming, rather than importing,
what its heavier modules define; the first access imports the module and
caches the value in the package's namespace, so later accesses are plain
lookups.

>>> namespace = {"__name__": "demo"}
>>> getattr_, dir_ = lazy_attributes("demo", {"dumps": "json"}, namespace)
>>> getattr_("dumps").__module__
'json'
>>> "dumps" in namespace
True
>>> getattr_("nothing")
Traceback (most recent call last):
AttributeError: module 'demo' has no attribute 'nothing'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, modules: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``modules`` maps a name to its module.

    ``namespace`` is the package's ``globals()``: a loaded value is stored
    there, so Python finds it without calling ``__getattr__`` again.
    """

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *modules})

    return __getattr__, __dir__
