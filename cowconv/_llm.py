"""``LLM``: the model configuration an agent calls.

>>> llm = LLM(model="openai/gpt-4o", api_key="sk-secret", usage_id="main")
>>> llm
LLM(model='openai/gpt-4o', api_key=SecretStr('**********'), base_url=None, usage_id='main', ...)
>>> "sk-secret" in llm.model_dump_json()
False
>>> llm.metrics.accumulated_cost, llm.metrics.latencies
(0.0, ())

``LLM.completion`` calls the model through litellm (imported on the first
call, never by ``import cowconv``), retries transient failures with
exponential backoff, and adds every answer's cost, tokens and latency to
``llm.metrics``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    SerializationInfo,
    field_serializer,
)

from cowconv._exceptions import LLMError
from cowconv._frozen import CheckedModel

if TYPE_CHECKING:
    from cowconv._state import Usage

__all__ = ["LLM", "LLMMetrics", "LLMResponse", "LLMToolCall"]

logger = logging.getLogger("cowconv.llm")

# HTTP statuses worth another try: timeouts, conflicts, rate limits and server errors.
_TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
_MASK = "**********"


def dump_secret(secret: SecretStr | None, info: SerializationInfo) -> Any:
    """A secret as a serializer writes it: masked, unless the context says ``expose_secrets``."""
    if secret is None:
        return None
    if isinstance(info.context, dict) and info.context.get("expose_secrets"):
        return secret.get_secret_value()
    return _MASK if info.mode == "json" else secret


def _litellm() -> ModuleType:
    """litellm, imported on first use (it takes seconds to import)."""
    # Without this, importing litellm fetches its price list from the internet.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    # litellm prints "Give Feedback / Get Help" banners to stdout on every error.
    litellm.suppress_debug_info = True
    return litellm


def _usage(cost: float, prompt_tokens: int, completion_tokens: int) -> Usage:
    from cowconv._state import Usage  # _state imports this module: import at call time

    return Usage(
        accumulated_cost=cost, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )


class LLMMetrics:
    """Running totals of one :class:`LLM`'s calls; safe to update from many threads.

    >>> metrics = LLMMetrics()
    >>> metrics.add(cost=0.5, prompt_tokens=10, completion_tokens=2, latency=0.25)
    >>> metrics.accumulated_cost, metrics.prompt_tokens, metrics.latencies
    (0.5, 10, (0.25,))
    """

    __slots__ = ("_lock", "_cost", "_prompt_tokens", "_completion_tokens", "_latencies")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cost = 0.0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._latencies: list[float] = []

    def add(
        self, *, cost: float, prompt_tokens: int, completion_tokens: int, latency: float
    ) -> None:
        """Count one answered call."""
        with self._lock:
            self._cost += cost
            self._prompt_tokens += prompt_tokens
            self._completion_tokens += completion_tokens
            self._latencies.append(latency)

    @property
    def accumulated_cost(self) -> float:
        """Total cost in USD, from litellm's price list (0 for models it does not know)."""
        return self._cost

    @property
    def prompt_tokens(self) -> int:
        """Total prompt tokens."""
        return self._prompt_tokens

    @property
    def completion_tokens(self) -> int:
        """Total completion tokens."""
        return self._completion_tokens

    @property
    def latencies(self) -> tuple[float, ...]:
        """Seconds each answered call took (the attempt that answered), in order."""
        with self._lock:
            return tuple(self._latencies)

    @property
    def usage(self) -> Usage:
        """The totals as a :class:`~cowconv.Usage`."""
        with self._lock:
            return _usage(self._cost, self._prompt_tokens, self._completion_tokens)

    def __repr__(self) -> str:
        return (
            f"LLMMetrics(accumulated_cost={self._cost!r}, prompt_tokens={self._prompt_tokens}, "
            f"completion_tokens={self._completion_tokens}, calls={len(self._latencies)})"
        )

    def __getstate__(self) -> tuple[float, int, int, list[float]]:
        with self._lock:
            return (self._cost, self._prompt_tokens, self._completion_tokens, list(self._latencies))

    def __setstate__(self, state: tuple[float, int, int, list[float]]) -> None:
        self._lock = threading.Lock()
        self._cost, self._prompt_tokens, self._completion_tokens, latencies = state
        self._latencies = list(latencies)

    def __deepcopy__(self, memo: dict[int, Any]) -> LLMMetrics:
        copied = LLMMetrics.__new__(LLMMetrics)
        copied.__setstate__(self.__getstate__())
        return copied


@dataclass(frozen=True)
class LLMToolCall:
    """A tool call in a model's answer; ``arguments`` is the JSON text the model wrote.

    >>> LLMToolCall(id="c1", name="terminal", arguments='{"command": "ls"}').name
    'terminal'
    """

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class LLMResponse:
    """One answer of a model: text and/or tool calls, with what it cost.

    >>> response = LLMResponse(id="r1", content="Done.", tool_calls=(), cost=0.0,
    ...                        prompt_tokens=5, completion_tokens=1, latency=0.1)
    >>> response.usage.prompt_tokens
    5
    """

    id: str
    content: str
    tool_calls: tuple[LLMToolCall, ...]
    cost: float
    prompt_tokens: int
    completion_tokens: int
    latency: float

    @property
    def usage(self) -> Usage:
        """Cost and tokens of this answer as a :class:`~cowconv.Usage`."""
        return _usage(self.cost, self.prompt_tokens, self.completion_tokens)


class LLM(CheckedModel):
    """An LLM reached through litellm, named ``provider/model``.

    The API key is a ``SecretStr``: it never appears in reprs or in default
    dumps. ``model_dump(context={"expose_secrets": True})`` writes it out
    (the store uses this so a resumed or forked conversation can still run).

    ``metrics`` belongs to this object, not to its configuration: copies and
    equal configurations count separately, and equality ignores it.

    >>> llm = LLM(model="anthropic/claude-sonnet-4-5-20250929", api_key="sk-secret")
    >>> llm.api_key, llm.usage_id, llm.metrics.accumulated_cost
    (SecretStr('**********'), 'default', 0.0)
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    _metrics: LLMMetrics = PrivateAttr(default_factory=LLMMetrics)

    model: str
    api_key: SecretStr | None = None
    base_url: str | None = None
    usage_id: str = "default"
    temperature: float | None = None
    max_output_tokens: int | None = Field(default=None, gt=0)
    timeout: float | None = Field(default=120.0, gt=0)
    num_retries: int = Field(default=3, ge=0)
    retry_min_wait: float = Field(default=1.0, ge=0)
    retry_max_wait: float = Field(default=20.0, ge=0)

    def __repr_args__(self) -> Any:
        shown = ("model", "api_key", "base_url", "usage_id")
        return [(name, getattr(self, name)) for name in shown]

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + ", ...)"

    @field_serializer("api_key")
    def _dump_api_key(self, key: SecretStr | None, info: SerializationInfo) -> Any:
        return dump_secret(key, info)

    def __eq__(self, other: object) -> bool:
        # Equal configuration, whatever each object has spent so far.
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.values()))

    @property
    def metrics(self) -> LLMMetrics:
        """Cost, tokens and latencies of every call made through this object."""
        return self._metrics

    @classmethod
    def from_env(cls, prefix: str = "LLM_", **settings: Any) -> LLM:
        """An LLM configured from ``LLM_*`` environment variables; ``settings`` win over them.

        Each field is read from ``{prefix}{FIELD}`` (``LLM_MODEL``,
        ``LLM_API_KEY``, ``LLM_BASE_URL``, ``LLM_USAGE_ID``, ``LLM_TIMEOUT``,
        ...); unset or empty variables leave the field's default. Only this
        constructor reads the environment: ``LLM(...)`` never does, so
        explicit arguments are never overridden behind your back.
        ``LLM.load_from_env`` is the seed SDK's name for it.

        >>> import os
        >>> os.environ.update(LLM_MODEL="openai/gpt-4o", LLM_API_KEY="sk-env")
        >>> llm = LLM.from_env(usage_id="alt")
        >>> llm.model, llm.api_key.get_secret_value(), llm.usage_id
        ('openai/gpt-4o', 'sk-env', 'alt')
        >>> del os.environ["LLM_MODEL"], os.environ["LLM_API_KEY"]

        A value that does not fit its field is a ``ValueError`` naming the variable.
        """
        from pydantic import ValidationError

        from_environment: dict[str, str] = {}
        for name in cls.model_fields:
            value = os.environ.get(f"{prefix}{name.upper()}", "")
            if value and name not in settings:
                from_environment[name] = value
        try:
            return cls.model_validate({**from_environment, **settings})
        except ValidationError as error:
            bad = sorted(
                f"{prefix}{str(item['loc'][0]).upper()}"
                for item in error.errors()
                if item["loc"] and item["loc"][0] in from_environment
            )
            if not bad:
                raise
            names = ", ".join(bad)
            raise ValueError(f"invalid LLM setting in the environment ({names}): {error}") from None

    @classmethod
    def load_from_env(cls, prefix: str = "LLM_", **settings: Any) -> LLM:
        """The seed SDK's name for :meth:`from_env` (the same call).

        >>> LLM.load_from_env(model="openai/gpt-4o").model
        'openai/gpt-4o'
        """
        return cls.from_env(prefix, **settings)

    def completion(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> LLMResponse:
        """Ask the model; return its answer and add what it cost to ``metrics``.

        ``messages`` and ``tools`` are in OpenAI chat format. Rate limits,
        timeouts, connection errors and 5xx answers are retried up to
        ``num_retries`` times, waiting ``retry_min_wait`` seconds and doubling
        up to ``retry_max_wait``. Anything else (a bad key, a bad request) and
        the last failed retry raise :class:`~cowconv.LLMError` at once.
        """
        litellm = _litellm()
        arguments: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "timeout": self.timeout,
            # litellm's OpenAI client retries on its own unless told not to; we count retries.
            "max_retries": 0,
        }
        if tools:
            arguments["tools"] = list(tools)
        if self.api_key is not None:
            arguments["api_key"] = self.api_key.get_secret_value()
        if self.base_url is not None:
            arguments["base_url"] = self.base_url
        if self.temperature is not None:
            arguments["temperature"] = self.temperature
        if self.max_output_tokens is not None:
            arguments["max_tokens"] = self.max_output_tokens
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                raw = litellm.completion(**arguments)
            except Exception as error:
                if attempt >= self.num_retries or not _is_transient(error):
                    raise LLMError(self._describe(error, attempt + 1)) from error
                wait = min(self.retry_max_wait, self.retry_min_wait * 2**attempt)
                logger.warning("%s Retrying in %.1f s.", self._describe(error, None), wait)
                time.sleep(wait)
                attempt += 1
                continue
            latency = time.perf_counter() - started
            response = _response(litellm, raw, latency)
            self._metrics.add(
                cost=response.cost,
                prompt_tokens=response.prompt_tokens,
                completion_tokens=response.completion_tokens,
                latency=latency,
            )
            return response

    def _describe(self, error: BaseException, attempts: int | None) -> str:
        status = getattr(error, "status_code", None)
        what = type(error).__name__ + (f" (HTTP {status})" if isinstance(status, int) else "")
        message = str(error)
        if self.api_key is not None and self.api_key.get_secret_value():
            message = message.replace(self.api_key.get_secret_value(), _MASK)
        tries = "" if attempts is None else f" after {attempts} attempt(s)"
        hint = ""
        if status in (401, 403):
            hint = " Check the API key (LLM(api_key=...)) and that it may use this model."
        return f"LLM call to {self.model!r} failed{tries}: {what}: {message}.{hint}"


def _is_transient(error: BaseException) -> bool:
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        return status in _TRANSIENT_STATUSES or status >= 500
    # Errors without a status: a socket that broke or timed out is worth another try.
    return isinstance(error, OSError | TimeoutError)


def _response(litellm: ModuleType, raw: Any, latency: float) -> LLMResponse:
    message = raw.choices[0].message
    calls = tuple(
        LLMToolCall(
            id=call.id or f"call_{uuid.uuid4().hex}",
            name=call.function.name or "",
            arguments=_arguments_text(call.function.arguments),
        )
        for call in (message.tool_calls or ())
    )
    usage = getattr(raw, "usage", None)
    try:
        cost = float(litellm.completion_cost(completion_response=raw))
    except Exception:
        # Models litellm has no price for (ModelNotMappedError, local and stub models) cost 0.
        cost = 0.0
    return LLMResponse(
        id=raw.id or f"response_{uuid.uuid4().hex}",
        content=message.content or "",
        tool_calls=calls,
        cost=cost,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        latency=latency,
    )


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)
