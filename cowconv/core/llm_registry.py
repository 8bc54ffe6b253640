"""``LLMRegistry``: the LLMs of an application, each under its usage id.

As OpenHands' SDK's ``LLMRegistry``: ``add`` an :class:`~cowconv.LLM`,
``get`` it back by its ``usage_id`` (the same object), list the ids, and
``subscribe`` to hear of each LLM added (a :class:`RegistryEvent`).

>>> from cowconv import LLM
>>> registry = LLMRegistry()
>>> agent_llm = LLM(model="openai/gpt-4o", usage_id="agent")
>>> registry.add(agent_llm)
>>> registry.get("agent") is agent_llm, registry.list_usage_ids()
(True, ['agent'])
"""

import logging
import threading
import uuid
from collections.abc import Callable
from types import MappingProxyType

from pydantic import ConfigDict

from cowconv._exceptions import InvalidTypeError, InvalidValueError, LLMNotFoundError
from cowconv.core.frozen import CheckedModel
from cowconv.core.llm import LLM

__all__ = ["LLMRegistry", "RegistryEvent"]

logger = logging.getLogger("cowconv.llm")


class RegistryEvent(CheckedModel):
    """What an :class:`LLMRegistry` tells its subscriber: this LLM was added.

    >>> from cowconv import LLM
    >>> RegistryEvent(llm=LLM(model="openai/gpt-4o")).llm.model
    'openai/gpt-4o'
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    llm: LLM


class LLMRegistry:
    """LLMs by usage id, each counting its calls in metrics of its own.

    ``add`` refuses a usage id that is taken (an
    :class:`~cowconv.InvalidValueError`, a ``ValueError``); ``get`` of an
    unknown id is an :class:`~cowconv.LLMNotFoundError` (a ``KeyError``).
    An LLM whose metrics are shared with one already registered (a
    ``model_copy`` of it) gets fresh metrics when added, so each usage id
    counts only its own calls. The subscriber (one, as in OpenHands' SDK) is
    called with a :class:`RegistryEvent` for each LLM added; an error it
    raises is logged, not raised.

    >>> from cowconv import LLM
    >>> registry = LLMRegistry()
    >>> heard = []
    >>> registry.subscribe(lambda event: heard.append(event.llm.usage_id))
    >>> main = LLM(model="openai/gpt-4o", usage_id="agent")
    >>> registry.add(main)
    >>> registry.add(main.model_copy(update={"usage_id": "condenser"}))
    >>> heard, registry.get("condenser").metrics is main.metrics
    (['agent', 'condenser'], False)
    """

    def __init__(self, retry_listener: Callable[[int, int], None] | None = None) -> None:
        self.registry_id = str(uuid.uuid4())
        self.retry_listener = retry_listener
        """Kept for OpenHands' SDK's signature: cowconv's LLM logs its retries instead."""
        self.subscriber: Callable[[RegistryEvent], None] | None = None
        self._lock = threading.Lock()
        self._usage_to_llm: dict[str, LLM] = {}
        self._metrics_ids: set[int] = set()

    def subscribe(self, callback: Callable[[RegistryEvent], None]) -> None:
        """Call ``callback`` with a :class:`RegistryEvent` for each LLM added from now on.

        >>> registry = LLMRegistry()
        >>> registry.subscribe(print)
        >>> registry.subscriber is print
        True
        """
        if not callable(callback):
            raise InvalidTypeError(f"a subscriber is callable, got {type(callback).__name__}")
        self.subscriber = callback

    def notify(self, event: RegistryEvent) -> None:
        """Pass ``event`` to the subscriber, if any; an error it raises is logged.

        >>> from cowconv import LLM
        >>> LLMRegistry().notify(RegistryEvent(llm=LLM(model="openai/gpt-4o")))
        """
        subscriber = self.subscriber
        if subscriber is None:
            return
        try:
            subscriber(event)
        except Exception as error:
            logger.warning("an LLM registry subscriber failed: %s: %s", type(error).__name__, error)

    @property
    def usage_to_llm(self) -> MappingProxyType[str, LLM]:
        """The registered LLMs by usage id (a read-only view).

        >>> dict(LLMRegistry().usage_to_llm)
        {}
        """
        return MappingProxyType(self._usage_to_llm)

    def add(self, llm: LLM) -> None:
        """Register ``llm`` under its ``usage_id``.

        >>> from cowconv import LLM
        >>> registry = LLMRegistry()
        >>> registry.add(LLM(model="openai/gpt-4o", usage_id="agent"))
        >>> registry.add(LLM(model="openai/gpt-4o-mini", usage_id="agent"))
        Traceback (most recent call last):
        ...
        cowconv._exceptions.InvalidValueError: usage id 'agent' is already in the registry; ...
        """
        if not isinstance(llm, LLM):
            raise InvalidTypeError(f"an LLMRegistry holds cowconv.LLM, got {type(llm).__name__}")
        with self._lock:
            if llm.usage_id in self._usage_to_llm:
                raise InvalidValueError(
                    f"usage id {llm.usage_id!r} is already in the registry; give the LLM"
                    " another usage_id, or get() the one registered"
                )
            if id(llm.metrics) in self._metrics_ids:
                llm.reset_metrics()  # a copy of a registered LLM counts on its own
            self._metrics_ids.add(id(llm.metrics))
            self._usage_to_llm[llm.usage_id] = llm
        self.notify(RegistryEvent(llm=llm))

    def get(self, usage_id: str) -> LLM:
        """The LLM registered under ``usage_id``.

        >>> LLMRegistry().get("agent")
        Traceback (most recent call last):
        ...
        cowconv._exceptions.LLMNotFoundError: usage id 'agent' is not in the registry; ...
        """
        llm = self._usage_to_llm.get(usage_id)
        if llm is None:
            raise LLMNotFoundError(
                f"usage id {usage_id!r} is not in the registry; add() an LLM with that"
                f" usage_id first (registered: {', '.join(self._usage_to_llm) or 'none'})"
            )
        return llm

    def remove(self, usage_id: str) -> None:
        """Forget the LLM under ``usage_id``; nothing happens if there is none.

        >>> registry = LLMRegistry()
        >>> registry.remove("agent")
        >>> registry.list_usage_ids()
        []
        """
        with self._lock:
            llm = self._usage_to_llm.pop(usage_id, None)
            if llm is not None:
                self._metrics_ids.discard(id(llm.metrics))

    def list_usage_ids(self) -> list[str]:
        """The usage ids registered, in the order they were added.

        >>> LLMRegistry().list_usage_ids()
        []
        """
        return list(self._usage_to_llm)
