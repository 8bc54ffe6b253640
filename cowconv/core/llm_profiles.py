"""``LLMProfileStore``: named LLM configurations, one JSON file each, in a directory.

As OpenHands' SDK's ``LLMProfileStore``: ``save`` an :class:`~cowconv.LLM`
under a name, ``load`` it back, ``list``, ``rename`` and ``delete``
profiles. A profile is the LLM's JSON (what ``model_dump_json`` writes), in
``<base_dir>/<name>.json``. Its API key is masked (``"**********"``) unless
``save(..., include_secrets=True)`` asks for it in clear, as OpenHands' SDK
does; a masked key loads as no key. Files are written whole (a temporary
file renamed over the old one) and readable by their owner only.

>>> import tempfile
>>> from cowconv import LLM
>>> store = LLMProfileStore(base_dir=tempfile.mkdtemp())
>>> store.save("fast", LLM(model="openai/gpt-4o-mini", api_key="sk-secret", temperature=0.0))
>>> store.list()
['fast.json']
>>> fast = store.load("fast")
>>> fast.model, fast.temperature, fast.api_key
('openai/gpt-4o-mini', 0.0, None)
"""

import builtins
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from cowconv._exceptions import (
    FileMissingError,
    InvalidTypeError,
    InvalidValueError,
    StoreError,
)
from cowconv.core.llm import (
    _MASK,
    DEFAULT_PROFILE_DIR,
    LLM,
    PROFILE_NAME,
    load_profile,
    profile_path,
)

__all__ = ["LLMProfileStore"]

logger = logging.getLogger("cowconv.llm")


class LLMProfileStore:
    """LLM profiles as JSON files under ``base_dir`` (default ``~/.cowconv/profiles``).

    Names are 1-64 characters: a letter or digit, then letters, digits,
    ``.``, ``_`` or ``-`` (``"fast.json"`` also names profile ``fast``);
    another name is an :class:`~cowconv.InvalidValueError`. Loading a
    missing profile is a :class:`~cowconv.FileMissingError` (a
    ``FileNotFoundError``, as in OpenHands' SDK).

    >>> import tempfile
    >>> from cowconv import LLM
    >>> store = LLMProfileStore(tempfile.mkdtemp())
    >>> store.save("main", LLM(model="openai/gpt-4o", api_key="sk-1"), include_secrets=True)
    >>> store.load("main").api_key.get_secret_value()
    'sk-1'
    >>> store.rename("main", "primary")
    >>> store.list()
    ['primary.json']
    >>> store.delete("primary")
    >>> store.list()
    []
    """

    def __init__(self, base_dir: str | os.PathLike[str] | None = None) -> None:
        if base_dir is not None and not isinstance(base_dir, str | os.PathLike):
            raise InvalidTypeError(f"base_dir is a path, got {type(base_dir).__name__}")
        directory = Path(base_dir) if base_dir is not None else DEFAULT_PROFILE_DIR
        self.base_dir = directory.expanduser()
        try:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(
                f"cannot create the profile directory {self.base_dir}: {error}"
            ) from error

    def _path(self, name: str) -> Path:
        return profile_path(self.base_dir, name)

    def list(self) -> list[str]:
        """The profiles' file names (``"fast.json"``), sorted.

        >>> import tempfile
        >>> LLMProfileStore(tempfile.mkdtemp()).list()
        []
        """
        return sorted(path.name for path in self.base_dir.glob("*.json"))

    def save(
        self,
        name: str,
        llm: LLM,
        include_secrets: bool = False,
        *,
        max_profiles: int | None = None,
    ) -> None:
        """Write ``llm`` as profile ``name`` (replacing one of that name).

        The API key is written masked unless ``include_secrets``. With
        ``max_profiles``, saving a new profile when that many exist already is
        an :class:`~cowconv.InvalidValueError` (replacing one is allowed).

        >>> import tempfile
        >>> from cowconv import LLM
        >>> store = LLMProfileStore(tempfile.mkdtemp())
        >>> store.save("one", LLM(model="openai/gpt-4o"))
        >>> store.save("two", LLM(model="openai/gpt-4o"), max_profiles=1)
        Traceback (most recent call last):
        ...
        cowconv._exceptions.InvalidValueError: cannot save profile 'two': ...
        """
        path = self._path(name)
        if not isinstance(llm, LLM):
            raise InvalidTypeError(f"a profile holds a cowconv.LLM, got {type(llm).__name__}")
        if max_profiles is not None and not path.exists():
            count = sum(1 for p in self.base_dir.glob("*.json") if PROFILE_NAME.match(p.stem))
            if count >= max_profiles:
                raise InvalidValueError(
                    f"cannot save profile {name!r}: the store holds {count} profiles,"
                    f" the limit is {max_profiles}"
                )
        context = {"expose_secrets": True} if include_secrets else None
        data = llm.model_dump(mode="json", context=context)
        text = json.dumps(data, indent=2)
        # mkstemp creates the file readable by its owner only: a profile may hold a key.
        handle, temporary = tempfile.mkstemp(dir=self.base_dir, suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(text)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        logger.info("saved LLM profile %r at %s", name, path)

    def load(self, name: str) -> LLM:
        """The LLM saved as profile ``name`` (a masked key loads as no key).

        Settings of OpenHands' ``LLM`` that cowconv's has no field for are
        left out with a warning, so a profile OpenHands' SDK wrote loads.

        >>> import tempfile
        >>> LLMProfileStore(tempfile.mkdtemp()).load("missing")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.FileMissingError: profile 'missing' not found in ...
        """
        return load_profile(self.base_dir, name)

    def delete(self, name: str) -> None:
        """Remove profile ``name``; nothing happens if there is none.

        >>> import tempfile
        >>> LLMProfileStore(tempfile.mkdtemp()).delete("missing")
        """
        path = self._path(name)
        path.unlink(missing_ok=True)

    def rename(self, old_name: str, new_name: str) -> None:
        """Give profile ``old_name`` the name ``new_name`` (which must be free).

        >>> import tempfile
        >>> LLMProfileStore(tempfile.mkdtemp()).rename("missing", "other")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.FileMissingError: profile 'missing' not found
        """
        old_path, new_path = self._path(old_name), self._path(new_name)
        if not old_path.exists():
            raise FileMissingError(f"profile {old_name!r} not found")
        if old_path == new_path:
            return
        if new_path.exists():
            raise InvalidValueError(f"profile {new_name!r} already exists")
        old_path.rename(new_path)

    def list_summaries(self) -> "builtins.list[dict[str, Any]]":
        """Name, model, base URL and whether a key is set, per profile (no LLM is built).

        Files that are not JSON objects, or whose name is not a profile name,
        are skipped with a warning.

        >>> import tempfile
        >>> from cowconv import LLM
        >>> store = LLMProfileStore(tempfile.mkdtemp())
        >>> store.save("fast", LLM(model="openai/gpt-4o-mini", api_key="sk-1"))
        >>> store.list_summaries()[0]["api_key_set"]
        False
        """
        summaries: builtins.list[dict[str, Any]] = []
        for path in sorted(self.base_dir.glob("*.json")):
            if not PROFILE_NAME.match(path.stem):
                logger.warning("skipping profile file with an invalid name: %s", path.name)
                continue
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                logger.warning("skipping unreadable profile %s: %s", path.name, error)
                continue
            if not isinstance(data, dict):
                logger.warning("skipping profile %s: not a JSON object", path.name)
                continue
            key = data.get("api_key")
            summaries.append(
                {
                    "name": path.stem,
                    "model": data.get("model"),
                    "base_url": data.get("base_url"),
                    "api_key_set": isinstance(key, str) and bool(key.strip()) and key != _MASK,
                }
            )
        return summaries
