"""Routers: one :class:`~cowconv.LLM` in front of several, picking one for each call.

As OpenHands' SDK's ``openhands.sdk.llm.router``: :class:`RouterLLM` is an
LLM whose ``completion`` asks the LLM that :meth:`RouterLLM.select_llm`
names; :class:`MultimodalRouter` sends a call with an image, or one too long
for the secondary model's context window, to ``"primary"`` and every other
call to ``"secondary"``; :class:`RandomRouter` picks at random.

>>> from cowconv import LLM
>>> router = MultimodalRouter(
...     usage_id="router",
...     llms_for_routing={"primary": LLM(model="openai/gpt-4o"),
...                       "secondary": LLM(model="openai/gpt-4o-mini")},
... )
>>> router.select_llm([{"role": "user", "content": "Hi"}])
'secondary'
>>> image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
>>> router.select_llm([{"role": "user", "content": [image]}])
'primary'
"""

import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pydantic import Field, PrivateAttr, field_validator, model_validator

from cowconv._exceptions import InvalidValueError
from cowconv.core.frozen import FrozenMap
from cowconv.core.llm import LLM, LLMResponse, TokenCallbackType
from cowconv.core.message import Message

__all__ = ["MultimodalRouter", "RandomRouter", "RouterLLM"]

logger = logging.getLogger("cowconv.llm")


def _has_image(message: Mapping[str, Any] | Message) -> bool:
    if isinstance(message, Message):
        return message.contains_image
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(part, Mapping) and part.get("type") in ("image_url", "image") for part in content
    )


class RouterLLM(LLM):
    """An LLM that passes each call to one of ``llms_for_routing``, chosen by ``select_llm``.

    Subclass it and write :meth:`select_llm`. The answer's cost and tokens
    count in the chosen LLM's metrics and in the router's own (a
    conversation records them under the router's ``usage_id``).
    ``active_llm`` is the LLM chosen last (``None`` before the first call).
    ``model`` need not be given: it defaults to ``router_name``.

    >>> from cowconv import LLM
    >>> class FirstRouter(RouterLLM):
    ...     def select_llm(self, messages):
    ...         return "first"
    >>> router = FirstRouter(llms_for_routing={"first": LLM(model="openai/gpt-4o")})
    >>> router.model, router.active_llm
    ('base_router', None)
    """

    router_name: str = "base_router"
    llms_for_routing: FrozenMap[LLM] = Field(default_factory=dict, validate_default=True)

    _active: LLM | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _placeholder_model(cls, data: Any) -> Any:
        # A router calls no model itself: its name stands in for one, as in OpenHands' SDK.
        if isinstance(data, dict) and not data.get("model"):
            default = cls.model_fields["router_name"].default
            data = {**data, "model": data.get("router_name") or default}
        return data

    @field_validator("llms_for_routing")
    @classmethod
    def _not_empty(cls, llms: Mapping[str, LLM]) -> Mapping[str, LLM]:
        if not llms:
            raise InvalidValueError("llms_for_routing needs at least one LLM to route to")
        return llms

    @property
    def active_llm(self) -> LLM | None:
        """The LLM the last call went to (``None`` before the first call)."""
        return self._active

    def select_llm(self, messages: Sequence[Mapping[str, Any] | Message]) -> str:
        """The key in ``llms_for_routing`` of the LLM to ask with ``messages``.

        >>> from cowconv import LLM
        >>> RouterLLM(llms_for_routing={"a": LLM(model="openai/gpt-4o")}).select_llm([])
        Traceback (most recent call last):
        ...
        NotImplementedError: RouterLLM.select_llm: a router subclass chooses the LLM
        """
        raise NotImplementedError(
            f"{type(self).__name__}.select_llm: a router subclass chooses the LLM"
        )

    def completion(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        on_token: TokenCallbackType | None = None,
    ) -> LLMResponse:
        """Ask the LLM :meth:`select_llm` names, and count its answer here too."""
        key = self.select_llm(messages)
        chosen = self.llms_for_routing.get(key)
        if chosen is None:
            raise InvalidValueError(
                f"{type(self).__name__} chose {key!r}, which is not in llms_for_routing"
                f" ({', '.join(sorted(self.llms_for_routing))})"
            )
        self._active = chosen
        logger.info("%s routes this call to %r (%s)", type(self).__name__, key, chosen.model)
        response = chosen.completion(messages, tools, on_token=on_token)
        self.metrics.add(
            cost=response.cost,
            prompt_tokens=response.prompt_tokens,
            completion_tokens=response.completion_tokens,
            latency=response.latency,
            cache_read_tokens=response.cache_read_tokens,
            cache_write_tokens=response.cache_write_tokens,
            model=response.model,
            response_id=response.id,
        )
        return response

    def __str__(self) -> str:
        return f"{type(self).__name__}(llms={list(self.llms_for_routing)})"


class MultimodalRouter(RouterLLM):
    """Images, or more tokens than the secondary model takes, to ``"primary"``; the rest not.

    ``llms_for_routing`` must have both keys. The secondary model's limit is
    its ``max_input_tokens``, else what litellm's price list says of it
    (no limit known: only images decide).

    >>> from cowconv import LLM
    >>> router = MultimodalRouter(llms_for_routing={
    ...     "primary": LLM(model="openai/gpt-4o"),
    ...     "secondary": LLM(model="openai/gpt-4o-mini", max_input_tokens=20)})
    >>> router.select_llm([{"role": "user", "content": "Hi"}])
    'secondary'
    >>> router.select_llm([{"role": "user", "content": "a long text " * 50}])
    'primary'
    """

    router_name: str = "multimodal_router"

    PRIMARY_MODEL_KEY: ClassVar[str] = "primary"
    SECONDARY_MODEL_KEY: ClassVar[str] = "secondary"

    @model_validator(mode="after")
    def _both_keys(self) -> "MultimodalRouter":
        for key in (self.PRIMARY_MODEL_KEY, self.SECONDARY_MODEL_KEY):
            if key not in self.llms_for_routing:
                raise InvalidValueError(f"MultimodalRouter needs an LLM under {key!r}")
        return self

    def select_llm(self, messages: Sequence[Mapping[str, Any] | Message]) -> str:
        """``"primary"`` for images or an overlong prompt, ``"secondary"`` otherwise."""
        if any(_has_image(message) for message in messages):
            logger.info("an image in the messages: routing to the primary model")
            return self.PRIMARY_MODEL_KEY
        secondary = self.llms_for_routing[self.SECONDARY_MODEL_KEY]
        limit = secondary.effective_max_input_tokens
        if limit is not None:
            count = secondary.get_token_count(messages)
            if count > limit:
                logger.warning(
                    "%d tokens exceed the secondary model's %d: routing to the primary model",
                    count,
                    limit,
                )
                return self.PRIMARY_MODEL_KEY
        return self.SECONDARY_MODEL_KEY


class RandomRouter(RouterLLM):
    """Each call to an LLM of ``llms_for_routing`` picked at random.

    >>> from cowconv import LLM
    >>> router = RandomRouter(llms_for_routing={"only": LLM(model="openai/gpt-4o")})
    >>> router.select_llm([])
    'only'
    """

    router_name: str = "random_router"

    def select_llm(self, messages: Sequence[Mapping[str, Any] | Message]) -> str:
        """A key of ``llms_for_routing``, uniformly at random."""
        return random.choice(sorted(self.llms_for_routing))
