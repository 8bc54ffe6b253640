"""``LLM``: the model configuration an agent calls.

>>> llm = LLM(model="openai/gpt-4o", api_key="sk-secret", usage_id="main")
>>> llm
LLM(model='openai/gpt-4o', api_key=SecretStr('**********'), base_url=None, usage_id='main', ...)
>>> "sk-secret" in llm.model_dump_json()
False
>>> llm.metrics.accumulated_cost, llm.metrics.latencies
(0.0, ())

``LLM.completion`` calls the model through litellm, retries transient
failures with exponential backoff (tenacity), marks the stable prefix of the
prompt for the provider's prompt cache where the provider needs marks, and
adds every answer's cost, tokens (cached ones apart) and latency to
``llm.metrics``.

litellm takes seconds to import. Neither ``import cowconv`` nor making an
``LLM`` imports it: the first completion does, or :meth:`LLM.preload` for
an application that wants it early. That import says so in one line on
stderr (on a terminal, the line ends with how long it took), so a first
run that waits is not a silent one; ``COWCONV_QUIET=1`` leaves it out.
"""

import atexit
import contextlib
import contextvars
import inspect
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    SerializationInfo,
    field_serializer,
)

from cowconv._exceptions import FileMissingError, InvalidTypeError, InvalidValueError, LLMError
from cowconv.core.framing import representable
from cowconv.core.frozen import CheckedModel
from cowconv.core.message import Message, MessageToolCall, chat_content
from cowconv.core.usage import TokenUsage, Usage

__all__ = [
    "LLM",
    "FallbackStrategy",
    "LLMMetrics",
    "LLMResponse",
    "LLMToolCall",
    "TokenCallbackType",
    "streaming_to",
]

TokenCallbackType = Callable[[Any], None]
"""Called with each chunk of a streamed answer (litellm's ``ModelResponseStream``)."""

_token_callbacks: contextvars.ContextVar[tuple[TokenCallbackType, ...]] = contextvars.ContextVar(
    "cowconv_token_callbacks", default=()
)


@contextlib.contextmanager
def streaming_to(callbacks: Sequence[TokenCallbackType]) -> Iterator[None]:
    """Within this block (this thread or task), streamed LLM calls pass each chunk to ``callbacks``.

    A conversation's ``token_callbacks`` are set this way around its
    ``run()``; a call's own ``on_token`` takes their place.

    >>> with streaming_to([print]):
    ...     pass
    """
    for callback in callbacks:
        if not callable(callback):
            raise InvalidTypeError(f"a token callback is callable, got {callback!r}")
    token = _token_callbacks.set(tuple(callbacks))
    try:
        yield
    finally:
        _token_callbacks.reset(token)


def _context_on_token() -> TokenCallbackType | None:
    callbacks = _token_callbacks.get()
    if not callbacks:
        return None

    def on_token(chunk: Any) -> None:
        for callback in callbacks:
            callback(chunk)

    return on_token


logger = logging.getLogger("cowconv.llm")

# HTTP statuses worth another try: timeouts, conflicts, rate limits and server errors.
_TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
_MASK = "**********"


def dump_secret(secret: SecretStr | None, info: SerializationInfo) -> Any:
    """A secret as a serializer writes it: masked, unless the context says ``expose_secrets``.

    A context with ``drop_secrets`` writes ``None`` instead (an export without secrets).
    """
    if secret is None:
        return None
    if isinstance(info.context, dict) and info.context.get("expose_secrets"):
        return secret.get_secret_value()
    if isinstance(info.context, dict) and info.context.get("drop_secrets"):
        return None
    return _MASK if info.mode == "json" else secret


_import_lock = threading.Lock()
_module: ModuleType | None = None


def _litellm() -> ModuleType:
    """litellm, imported on first use (once: threads asking meanwhile wait for that import)."""
    global _module
    module = _module
    if module is not None:
        return module
    with _import_lock:
        if _module is None:
            # Without this, importing litellm fetches its price list from the internet.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            with _loading_notice("litellm" not in sys.modules):
                import litellm

            # litellm prints "Give Feedback / Get Help" banners to stdout on every error.
            litellm.suppress_debug_info = True
            atexit.register(_close_at_exit, litellm)
            _module = litellm
        return _module


# The event loop litellm's timing hook leaves on the main thread: a completion made there
# outside an event loop calls ``asyncio.get_event_loop()``, which (Python 3.11-3.13) makes
# the thread a loop and keeps it, and nobody closes it.
_main_thread_loop: Any = None


def _close_at_exit(litellm: ModuleType) -> None:
    """Close what litellm keeps open for the process's life, when the interpreter exits.

    litellm caches one HTTP client per endpoint and key and closes it only on eviction:
    each left an open socket, a ``ResourceWarning: unclosed socket`` at exit. Synchronous
    clients (the ones :meth:`LLM.completion` uses) close here; asynchronous ones are closed
    by litellm's own exit handler, on a loop of its own. So does the event loop litellm
    left on the main thread.
    """
    cache = getattr(litellm, "in_memory_llm_clients_cache", None)
    clients = getattr(cache, "cache_dict", None)
    if isinstance(clients, dict):
        for client in list(clients.values()):
            close = getattr(client, "close", None)
            if callable(close) and not inspect.iscoroutinefunction(close):
                with contextlib.suppress(Exception):
                    close()
    loop = _main_thread_loop
    if loop is not None and not loop.is_running() and not loop.is_closed():
        loop.close()


def _keep_main_thread_loop() -> None:
    """After a completion on the main thread outside a loop: keep the loop litellm left there.

    litellm's own exit handler replaces the thread's loop with one of its own; the one left
    by the completion would then be collected unclosed, so a reference is kept to close it.
    """
    global _main_thread_loop
    if _main_thread_loop is not None or threading.current_thread() is not threading.main_thread():
        return
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return  # inside a running loop (a coroutine's synchronous call): litellm made none
    with warnings.catch_warnings():
        # Asking the policy is deprecated on 3.14 (where litellm makes no loop: it raises).
        warnings.simplefilter("ignore", DeprecationWarning)
        with contextlib.suppress(RuntimeError):
            _main_thread_loop = asyncio.get_event_loop_policy().get_event_loop()


class _loading_notice:  # noqa: N801 (used as a statement: ``with _loading_notice(...)``)
    """One line on stderr while litellm loads. On a terminal a spinner turns at its end
    and, once loaded, the line ends with the time taken; elsewhere (a log, a pipe) it is a
    plain line. Nothing when ``COWCONV_QUIET`` is set."""

    _TEXT = "cowconv: loading litellm for the first LLM call (a few seconds, once per process)"
    _FRAMES = "|/-\\"

    def __init__(self, needed: bool) -> None:
        self.shown = needed and os.environ.get("COWCONV_QUIET", "") in ("", "0")
        self.started = 0.0
        self.interactive = False
        self.done = threading.Event()
        self.spinner: threading.Thread | None = None

    def __enter__(self) -> None:
        if not self.shown:
            return
        self.started = time.perf_counter()
        stream = sys.stderr
        self.interactive = stream.isatty()
        if not self.interactive:
            stream.write(self._TEXT + "\n")
            stream.flush()
            return
        self.spinner = threading.Thread(
            target=self._spin, args=(stream,), name="cowconv-loading-litellm", daemon=True
        )
        self.spinner.start()

    def _spin(self, stream: Any) -> None:
        frame = 0
        while not self.done.is_set():
            stream.write(f"\r{self._TEXT} {self._FRAMES[frame % len(self._FRAMES)]}")
            stream.flush()
            frame += 1
            self.done.wait(0.1)

    def __exit__(self, *exc_info: object) -> None:
        if not self.shown or not self.interactive:
            return
        self.done.set()
        if self.spinner is not None:
            self.spinner.join()
        took = time.perf_counter() - self.started
        sys.stderr.write(f"\r{self._TEXT}... done in {took:.1f} s\n")
        sys.stderr.flush()


def _usage(
    cost: float,
    prompt_tokens: int,
    completion_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> Usage:
    return Usage(
        accumulated_cost=cost,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
    )


class LLMMetrics:
    """Running totals of one :class:`LLM`'s calls; safe to update from many threads.

    ``prompt_tokens`` counts every prompt token; ``cache_read_tokens`` of
    them were served from the provider's prompt cache, and
    ``cache_write_tokens`` were written to it (providers that bill writes).

    >>> metrics = LLMMetrics()
    >>> metrics.add(cost=0.5, prompt_tokens=10, completion_tokens=2, latency=0.25,
    ...             cache_read_tokens=8)
    >>> metrics.accumulated_cost, metrics.prompt_tokens, metrics.cache_read_tokens
    (0.5, 10, 8)
    >>> metrics.latencies
    (0.25,)
    """

    __slots__ = ("_lock", "_totals", "_latencies", "_token_usages", "_costs")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # cost, prompt, completion, cache read, cache write
        self._totals: tuple[float, int, int, int, int] = (0.0, 0, 0, 0, 0)
        self._latencies: list[float] = []
        self._token_usages: list[TokenUsage] = []
        self._costs: list[tuple[str, float, float]] = []  # model, cost, unix time

    @classmethod
    def of(cls, usage: Usage) -> "LLMMetrics":
        """Metrics holding the totals of ``usage`` (and no latencies).

        >>> LLMMetrics.of(Usage(accumulated_cost=0.5, prompt_tokens=7)).prompt_tokens
        7
        """
        metrics = cls()
        metrics._totals = (
            usage.accumulated_cost,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        )
        return metrics

    def add(
        self,
        *,
        cost: float,
        prompt_tokens: int,
        completion_tokens: int,
        latency: float,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        model: str = "",
        response_id: str = "",
    ) -> None:
        """Count one answered call (``model`` answered it; it is kept in ``token_usages``)."""
        record = TokenUsage(
            model=model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            response_id=response_id,
        )
        with self._lock:
            self._token_usages.append(record)
            self._costs.append((model, cost, time.time()))
            total_cost, prompt, completion, read, write = self._totals
            self._totals = (
                total_cost + cost,
                prompt + prompt_tokens,
                completion + completion_tokens,
                read + cache_read_tokens,
                write + cache_write_tokens,
            )
            self._latencies.append(latency)

    @property
    def accumulated_cost(self) -> float:
        """Total cost in USD, from litellm's price list (0 for models it does not know)."""
        return self._totals[0]

    @property
    def prompt_tokens(self) -> int:
        """Total prompt tokens (cached ones included)."""
        return self._totals[1]

    @property
    def completion_tokens(self) -> int:
        """Total completion tokens."""
        return self._totals[2]

    @property
    def cache_read_tokens(self) -> int:
        """Prompt tokens served from the provider's prompt cache."""
        return self._totals[3]

    @property
    def cache_write_tokens(self) -> int:
        """Prompt tokens written to the provider's prompt cache."""
        return self._totals[4]

    @property
    def latencies(self) -> tuple[float, ...]:
        """Seconds each answered call took (the attempt that answered), in order."""
        with self._lock:
            return tuple(self._latencies)

    @property
    def token_usages(self) -> tuple[TokenUsage, ...]:
        """One record per answered call, in order: which model answered and its tokens.

        >>> metrics = LLMMetrics()
        >>> metrics.add(cost=0.0, prompt_tokens=3, completion_tokens=1, latency=0.1, model="m")
        >>> [(u.model, u.prompt_tokens) for u in metrics.token_usages]
        [('m', 3)]
        """
        with self._lock:
            return tuple(self._token_usages)

    @property
    def usage(self) -> Usage:
        """The totals as a :class:`~cowconv.Usage`."""
        return _usage(*self._totals)

    def model_dump(self, **_: Any) -> dict[str, Any]:
        """These metrics as a dict shaped like OpenHands' SDK's ``Metrics.model_dump()``.

        Code written for OpenHands' SDK prints ``llm.metrics.model_dump()``; the
        keys are its (``accumulated_token_usage``, ``costs``,
        ``response_latencies``, ``token_usages``); keyword arguments are accepted
        and ignored, as the dump is already plain JSON data.

        >>> metrics = LLMMetrics()
        >>> metrics.add(cost=0.5, prompt_tokens=10, completion_tokens=2, latency=0.25,
        ...             model="m", response_id="r1")
        >>> dump = metrics.model_dump()
        >>> dump["accumulated_cost"], dump["accumulated_token_usage"]["prompt_tokens"]
        (0.5, 10)
        >>> dump["response_latencies"]
        [{'model': 'm', 'latency': 0.25, 'response_id': 'r1'}]
        """
        with self._lock:
            totals, usages = self._totals, list(self._token_usages)
            latencies, costs = list(self._latencies), list(self._costs)
        cost, prompt, completion, read, write = totals
        models = {usage.model for usage in usages}
        model_name = models.pop() if len(models) == 1 else "default"

        def token_usage(usage: TokenUsage) -> dict[str, Any]:
            return {
                "model": usage.model,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "reasoning_tokens": 0,
                "context_window": 0,
                "per_turn_token": usage.prompt_tokens + usage.completion_tokens,
                "response_id": usage.response_id,
            }

        total = TokenUsage(
            model=model_name,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cache_read_tokens=read,
            cache_write_tokens=write,
        )
        return {
            "model_name": model_name,
            "accumulated_cost": cost,
            "max_budget_per_task": None,
            "accumulated_token_usage": token_usage(total),
            "costs": [
                {"model": model, "cost": amount, "timestamp": stamp}
                for model, amount, stamp in costs
            ],
            "response_latencies": [
                {"model": usage.model, "latency": latency, "response_id": usage.response_id}
                for usage, latency in zip(usages, latencies, strict=False)
            ],
            "token_usages": [token_usage(usage) for usage in usages],
        }

    def __repr__(self) -> str:
        cost, prompt, completion, read, write = self._totals
        return (
            f"LLMMetrics(accumulated_cost={cost!r}, prompt_tokens={prompt}, "
            f"completion_tokens={completion}, cache_read_tokens={read}, "
            f"cache_write_tokens={write}, calls={len(self._latencies)})"
        )

    def __getstate__(self) -> tuple[Any, ...]:
        with self._lock:
            return (
                self._totals,
                list(self._latencies),
                list(self._token_usages),
                list(self._costs),
            )

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self._lock = threading.Lock()
        totals, latencies, *rest = state  # a state pickled before token_usages has two parts
        self._totals = tuple(totals)
        self._latencies = list(latencies)
        self._token_usages = list(rest[0]) if rest else []
        self._costs = list(rest[1]) if len(rest) > 1 else []  # and before costs, three

    def __deepcopy__(self, memo: dict[int, Any]) -> "LLMMetrics":
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
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_content: str | None = None
    """The model's reasoning, where the provider returns it (``reasoning_content``)."""
    model: str = ""
    """The model that answered: the LLM's own, or the fallback profile's that took over."""

    @property
    def message(self) -> Message:
        """The answer as an assistant :class:`~cowconv.Message` (as OpenHands' LLMResponse has).

        >>> response = LLMResponse(id="r1", content="Hi.", tool_calls=(), cost=0.0,
        ...                        prompt_tokens=1, completion_tokens=1, latency=0.0)
        >>> response.message.content[0].text
        'Hi.'
        """
        calls = tuple(
            MessageToolCall(id=call.id, name=call.name, arguments=call.arguments)
            for call in self.tool_calls
        )
        return Message(
            role="assistant",
            content=self.content or None,
            tool_calls=calls or None,
            reasoning_content=self.reasoning_content,
        )

    @property
    def usage(self) -> Usage:
        """Cost and tokens of this answer as a :class:`~cowconv.Usage`."""
        return _usage(
            self.cost,
            self.prompt_tokens,
            self.completion_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
        )


# Profile names: 1-64 characters, a letter or digit first, then letters, digits, '.', '_', '-'
# (no path separators, no hidden files), as OpenHands' SDK allows.
PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
DEFAULT_PROFILE_DIR = Path("~/.cowconv/profiles")


def profile_path(base_dir: str | os.PathLike[str] | None, name: str) -> Path:
    """The JSON file of profile ``name`` under ``base_dir`` (``foo.json`` names profile ``foo``).

    >>> profile_path("/tmp/profiles", "fast.json").name
    'fast.json'
    >>> profile_path("/tmp/profiles", "../etc")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: invalid profile name '../etc': ...
    """
    if not isinstance(name, str):
        raise InvalidTypeError(f"a profile name is a str, got {type(name).__name__}")
    clean = name.removesuffix(".json")
    if not PROFILE_NAME.match(clean):
        raise InvalidValueError(
            f"invalid profile name {name!r}: profile names are 1-64 characters, start with a"
            " letter or digit, and contain only letters, digits, '.', '_' or '-'"
        )
    base = Path(base_dir) if base_dir is not None else DEFAULT_PROFILE_DIR
    return base.expanduser() / f"{clean}.json"


def load_profile(base_dir: str | os.PathLike[str] | None, name: str) -> "LLM":
    """The :class:`LLM` saved as profile ``name`` under ``base_dir``.

    A masked key (``"**********"``, what a save without secrets writes) loads
    as no key, as in OpenHands' SDK. Settings of OpenHands' ``LLM`` that
    cowconv's has no field for (``drop_params``, ``reasoning_effort``, ...)
    are left out, with a warning naming them, so OpenHands' profiles load.
    A missing profile is a :class:`~cowconv.FileMissingError`
    (``FileNotFoundError``); a file that is not a profile an
    :class:`~cowconv.InvalidValueError`.
    """
    path = profile_path(base_dir, name)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        existing = (
            sorted(p.name for p in path.parent.glob("*.json")) if path.parent.is_dir() else []
        )
        raise FileMissingError(
            f"profile {name!r} not found in {path.parent}; profiles there:"
            f" {', '.join(existing) or 'none'}"
        ) from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise InvalidValueError(f"profile {name!r} ({path}) is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise InvalidValueError(f"profile {name!r} ({path}) does not hold a JSON object")
    known = {key: value for key, value in data.items() if key in LLM.model_fields}
    dropped = sorted(set(data) - set(known))
    if dropped:
        logger.warning(
            "profile %r: cowconv's LLM has no setting %s; left out", name, ", ".join(dropped)
        )
    if known.get("api_key") == _MASK or known.get("api_key") == "":
        known["api_key"] = None
    try:
        return LLM.model_validate(known)
    except ValueError as error:
        raise InvalidValueError(f"profile {name!r} ({path}) is not a valid LLM: {error}") from None


# One lock for every strategy: loading a profile is rare, and a lock per strategy would make
# the LLM holding it impossible to pickle or deep-copy (branch workers do both).
_FALLBACK_LOADING = threading.Lock()


class FallbackStrategy(CheckedModel):
    """Other LLM profiles to try, in order, when an LLM call fails for a passing reason.

    Set it as ``LLM(fallback_strategy=...)``: when a call still fails after its
    retries with a rate limit, a timeout, a 5xx answer or a connection error,
    each profile of ``fallback_llms`` (saved with :class:`~cowconv.LLMProfileStore`
    under ``profile_store_dir``) is asked in turn, and the first answer is the
    call's. Fallback is per call: the next call starts with the primary model
    again. The fallback's cost and tokens are counted in the primary LLM's
    ``metrics``, and ``LLMResponse.model`` (and ``metrics.token_usages``) say
    which model answered. An error that another model cannot fix (a bad key, a
    bad request) is raised at once; if every fallback fails, the primary's error is.

    >>> strategy = FallbackStrategy(fallback_llms=["backup"], profile_store_dir="/tmp/p")
    >>> LLM(model="openai/gpt-4o", fallback_strategy=strategy).fallback_strategy.fallback_llms
    ('backup',)
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    fallback_llms: tuple[str, ...]
    """Names of the profiles to try, in order (a list is taken; kept as a tuple)."""
    profile_store_dir: str | None = None
    """The profiles' directory (default ``~/.cowconv/profiles``)."""

    # Profiles loaded so far, by name (a copy, a pickle or a fork of the LLM keeps them).
    _resolved: dict[str, "LLM"] = PrivateAttr(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        directory = data.get("profile_store_dir")
        if isinstance(directory, os.PathLike):
            data["profile_store_dir"] = os.fspath(directory)
        super().__init__(**data)

    def __eq__(self, other: object) -> bool:
        # The same profiles in the same place, whichever of them were loaded so far.
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.values()))

    def should_fallback(self, error: BaseException) -> bool:
        """Whether ``error`` (or the provider error under an :class:`~cowconv.LLMError`) is
        one another model may not have: a rate limit, a timeout, a 5xx, a lost connection.

        >>> FallbackStrategy(fallback_llms=[]).should_fallback(TimeoutError())
        True
        >>> FallbackStrategy(fallback_llms=[]).should_fallback(KeyError("x"))
        False
        """
        return any(
            _is_transient(cause) or _connection_failure(cause) is not None
            for cause in _error_chain(error)
        )

    def fallbacks(self) -> Iterator["LLM"]:
        """The fallback LLMs, loaded from their profiles on first use (and kept).

        A profile that cannot be loaded is logged and skipped.
        """
        for name in self.fallback_llms:
            with _FALLBACK_LOADING:
                llm = self._resolved.get(name)
                if llm is None:
                    try:
                        llm = load_profile(self.profile_store_dir, name)
                    except (FileMissingError, InvalidValueError, InvalidTypeError) as error:
                        logger.error("fallback profile %r cannot be loaded: %s", name, error)
                        continue
                    self._resolved[name] = llm
            yield llm

    def try_fallback(
        self,
        primary_model: str,
        primary_error: BaseException,
        primary_metrics: LLMMetrics,
        call_fn: Callable[["LLM"], "LLMResponse"],
    ) -> "LLMResponse | None":
        """Ask each fallback with ``call_fn`` until one answers; ``None`` if none does.

        Each fallback runs without a fallback strategy of its own (no chains of
        chains) and counts into ``primary_metrics``.
        """
        total = len(self.fallback_llms)
        for index, llm in enumerate(self.fallbacks(), start=1):
            logger.warning(
                "primary LLM %r failed (%s); trying fallback %d/%d (%r)",
                primary_model,
                type(primary_error).__name__,
                index,
                total,
                llm.model,
            )
            standby = llm.model_copy(update={"fallback_strategy": None}).with_metrics(
                primary_metrics
            )
            try:
                return call_fn(standby)
            except LLMError as error:
                logger.warning("fallback %r failed: %s", llm.model, error)
        if total:
            logger.error("every fallback LLM failed; raising the primary LLM's error")
        return None


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
    max_input_tokens: int | None = Field(default=None, gt=0)
    """The model's context window, if you know better than litellm's price list (routers use it)."""
    timeout: float | None = Field(default=120.0, gt=0)
    num_retries: int = Field(default=3, ge=0)
    retry_min_wait: float = Field(default=1.0, ge=0)
    retry_max_wait: float = Field(default=20.0, ge=0)
    caching_prompt: bool = True
    """Mark the prompt's stable prefix for the provider's prompt cache (see ``completion``)."""
    log_completions: bool = False
    """Write each answered call (request without the key, response, cost) to a JSON file."""
    log_completions_folder: str = os.path.join("logs", "completions")
    """Where ``log_completions`` writes (created when needed; relative to the working directory)."""
    stream: bool = False
    """Ask for the answer as a stream; each chunk goes to the call's ``on_token`` callback
    (a conversation's ``token_callbacks``) as it arrives."""
    fallback_strategy: FallbackStrategy | None = None
    """Other profiles to ask when a call fails for a passing reason (see FallbackStrategy)."""

    @staticmethod
    def preload() -> None:
        """Import litellm now, so that the first completion does not wait for it.

        litellm takes seconds to import and is otherwise imported by the
        first completion. Call this early, or in a thread to overlap the
        import with other work (``threading.Thread(target=LLM.preload).start()``);
        a completion made meanwhile waits for that import, not a second one.

        >>> import sys
        >>> LLM.preload()
        >>> "litellm" in sys.modules
        True
        """
        _litellm()

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

    @property
    def effective_max_input_tokens(self) -> int | None:
        """``max_input_tokens``, else the context window litellm's price list gives the model.

        >>> LLM(model="openai/unknown-model", max_input_tokens=1000).effective_max_input_tokens
        1000
        """
        if self.max_input_tokens is not None:
            return self.max_input_tokens
        try:
            info = _litellm().get_model_info(self.model)
        except Exception:  # a model litellm does not know: no limit known
            return None
        limit = info.get("max_input_tokens") if isinstance(info, Mapping) else None
        return limit if isinstance(limit, int) and limit > 0 else None

    def get_token_count(self, messages: Sequence[Mapping[str, Any] | Message]) -> int:
        """How many tokens ``messages`` take for this model (litellm's count).

        >>> LLM(model="openai/gpt-4o").get_token_count([{"role": "user", "content": "Hi"}]) > 0
        True
        """
        chat = [dict(_chat_message(message)) for message in messages]
        return int(_litellm().token_counter(model=self.model, messages=chat))

    def reset_metrics(self) -> None:
        """Count this object's next calls in fresh, empty metrics.

        >>> llm = LLM(model="openai/gpt-4o")
        >>> llm.metrics.add(cost=1.0, prompt_tokens=1, completion_tokens=1, latency=0.0)
        >>> llm.reset_metrics()
        >>> llm.metrics.accumulated_cost
        0.0
        """
        self._metrics = LLMMetrics()

    def with_metrics(self, metrics: LLMMetrics) -> "LLM":
        """A copy of this LLM (equal to it) whose calls are counted in ``metrics``.

        >>> llm = LLM(model="openai/gpt-4o")
        >>> fresh = llm.with_metrics(LLMMetrics())
        >>> fresh == llm, fresh.metrics is llm.metrics
        (True, False)
        """
        copy = self.model_copy()
        copy._metrics = metrics
        return copy

    @classmethod
    def from_env(cls, prefix: str = "LLM_", **settings: Any) -> "LLM":
        """An LLM configured from ``LLM_*`` environment variables; ``settings`` win over them.

        Each field is read from ``{prefix}{FIELD}`` (``LLM_MODEL``,
        ``LLM_API_KEY``, ``LLM_BASE_URL``, ``LLM_USAGE_ID``, ``LLM_TIMEOUT``,
        ...); unset or empty variables leave the field's default. Only this
        constructor reads the environment: ``LLM(...)`` never does, so
        explicit arguments are never overridden behind your back.
        ``LLM.load_from_env`` is OpenHands' SDK's name for it.

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
            raise InvalidValueError(
                f"invalid LLM setting in the environment ({names}): {error}"
            ) from None

    @classmethod
    def load_from_env(cls, prefix: str = "LLM_", **settings: Any) -> "LLM":
        """OpenHands' SDK's name for :meth:`from_env` (the same call).

        >>> LLM.load_from_env(model="openai/gpt-4o").model
        'openai/gpt-4o'
        """
        return cls.from_env(prefix, **settings)

    def completion(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        on_token: TokenCallbackType | None = None,
    ) -> LLMResponse:
        """Ask the model; return its answer and add what it cost to ``metrics``.

        ``messages`` are in OpenAI chat format or :class:`~cowconv.Message`
        values, ``tools`` in OpenAI chat format. With ``stream=True`` the answer
        is asked for as a stream and each chunk (litellm's
        ``ModelResponseStream``) is passed to ``on_token`` as it arrives; the
        chunks are then assembled into the answer returned. A call that fails
        for a passing reason goes to ``fallback_strategy``'s profiles, if set.

        Rate limits,
        timeouts, connection errors and 5xx answers are retried up to
        ``num_retries`` times, waiting ``retry_min_wait`` seconds and doubling
        up to ``retry_max_wait``. Anything else (a bad or missing key, a bad
        request) and the last failed retry raise :class:`~cowconv.LLMError` at
        once.

        With ``caching_prompt`` (the default), providers that cache only
        marked prefixes (Anthropic's models, direct or through Bedrock and
        Vertex) get ``cache_control`` marks on the system message and on the
        last message, through litellm's ``cache_control_injection_points``:
        the next step, and every fork of this conversation, reads the prefix
        from the cache. Others (OpenAI, DeepSeek, Gemini) cache on their own.
        Cached prompt tokens are counted apart in ``metrics`` and ``usage``,
        and litellm prices them at the provider's cache rates.
        """
        chat = [_chat_message(message) for message in messages]
        if on_token is None:
            on_token = _context_on_token()
        try:
            return self._complete(chat, tools, on_token)
        except LLMError as error:
            strategy = self.fallback_strategy
            if strategy is None or not strategy.should_fallback(error):
                raise
            answer = strategy.try_fallback(
                self.model,
                error,
                self._metrics,
                lambda standby: standby.completion(chat, tools, on_token=on_token),
            )
            if answer is None:
                raise
            return answer

    def _complete(
        self,
        messages: list[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        on_token: TokenCallbackType | None,
    ) -> LLMResponse:
        import tenacity

        litellm = _litellm()
        arguments: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "timeout": self.timeout,
            # litellm's OpenAI client retries on its own unless told not to; tenacity does it.
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
        if self.caching_prompt and needs_cache_marks(self.model):
            arguments["cache_control_injection_points"] = _CACHE_POINTS
        if self.stream:
            arguments["stream"] = True
            arguments["stream_options"] = {"include_usage": True}
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.num_retries + 1),
            wait=tenacity.wait_exponential(
                multiplier=self.retry_min_wait, min=self.retry_min_wait, max=self.retry_max_wait
            ),
            retry=tenacity.retry_if_exception(_is_transient),
            before_sleep=self._log_retry,
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    started = time.perf_counter()
                    try:
                        raw = litellm.completion(**arguments)
                    finally:
                        _keep_main_thread_loop()
                    if self.stream:
                        raw = _gather_stream(litellm, raw, messages, on_token)
                    latency = time.perf_counter() - started
        except Exception as error:
            attempts = int(retrying.statistics.get("attempt_number", 1))
            raise LLMError(self._describe(error, attempts)) from error
        response = _response(litellm, raw, latency, self.model)
        self._metrics.add(
            cost=response.cost,
            prompt_tokens=response.prompt_tokens,
            completion_tokens=response.completion_tokens,
            latency=latency,
            cache_read_tokens=response.cache_read_tokens,
            cache_write_tokens=response.cache_write_tokens,
            model=self.model,
            response_id=response.id,
        )
        if self.log_completions:
            self._log_completion(arguments, raw, response)
        return response

    def _log_completion(
        self, arguments: Mapping[str, Any], raw: Any, response: LLMResponse
    ) -> None:
        """Write one answered call to a UTF-8 JSON file in ``log_completions_folder``.

        The API key is left out. A file that cannot be written is a warning:
        the call was answered (and paid for), so its answer is not lost.
        """
        request = {key: value for key, value in arguments.items() if key != "api_key"}
        dump = getattr(raw, "model_dump", None)
        record = {
            "request": request,
            "response": dump() if callable(dump) else str(raw),
            "cost": response.cost,
            "latency": response.latency,
            "usage_id": self.usage_id,
            "timestamp": time.time(),
        }
        name = f"{self.model.replace('/', '__')}-{time.time():.6f}-{uuid.uuid4().hex[:8]}.json"
        try:
            os.makedirs(self.log_completions_folder, exist_ok=True)
            path = os.path.join(self.log_completions_folder, name)
            with open(path, "w", encoding="utf-8") as file:
                json.dump(record, file, ensure_ascii=False, default=str)
        except OSError as error:
            logger.warning(
                "could not log the completion to %s: %s", self.log_completions_folder, error
            )

    def _log_retry(self, state: Any) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        logger.warning("%s Retrying in %.1f s.", self._describe(error, None), wait)

    def _describe(self, error: BaseException | None, attempts: int | None) -> str:
        status = getattr(error, "status_code", None)
        unreachable = _connection_failure(error)
        if unreachable is not None:
            # litellm reports a refused or broken connection as an HTTP 500 that never came.
            where = self.base_url or "the provider"
            tries = "" if attempts is None else f" after {attempts} attempt(s)"
            return (
                f"LLM call to {self.model!r} failed{tries}: cannot connect to {where}:"
                f" {unreachable} (no response: check the address and the network)."
            )
        what = type(error).__name__ + (f" (HTTP {status})" if isinstance(status, int) else "")
        message = str(error)
        if self.api_key is not None and self.api_key.get_secret_value():
            message = message.replace(self.api_key.get_secret_value(), _MASK)
        tries = "" if attempts is None else f" after {attempts} attempt(s)"
        hint = ""
        if status in (401, 403):
            hint = " Check the API key (LLM(api_key=...)) and that it may use this model."
        return f"LLM call to {self.model!r} failed{tries}: {what}: {message}.{hint}"


# Where litellm puts cache_control marks: the system message and the last message.
_CACHE_POINTS = (
    {"location": "message", "role": "system"},
    {"location": "message", "index": -1},
)
# Providers that cache only prefixes marked with cache_control (for Anthropic's models).
_MARKED_PROVIDERS = frozenset({"bedrock", "vertex_ai", "vertex_ai_beta", "openrouter"})


def needs_cache_marks(model: str) -> bool:
    """Whether ``model``'s provider caches prompts only where ``cache_control`` marks them.

    >>> needs_cache_marks("anthropic/claude-sonnet-4-5-20250929")
    True
    >>> needs_cache_marks("openai/gpt-4o")  # OpenAI caches long prefixes without marks
    False
    """
    provider, _, name = model.partition("/")
    if provider == "anthropic" or (not name and model.startswith("claude")):
        return True
    return provider in _MARKED_PROVIDERS and "claude" in name


def _error_chain(error: BaseException | None) -> Iterator[BaseException]:
    """``error``, then each error it was raised from or during, once each, nearest first.

    >>> try:
    ...     try:
    ...         raise KeyError("inner")
    ...     except KeyError as inner:
    ...         raise ValueError("outer") from inner
    ... except ValueError as outer:
    ...     [type(e).__name__ for e in _error_chain(outer)]
    ['ValueError', 'KeyError']
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


# What the OpenAI client (and litellm, passing its message on as an HTTP 500) says when no key
# was given or found in the environment: nothing was sent, and trying again cannot help.
_MISSING_CREDENTIALS = ("Missing credentials", "api_key client option must be set")


def _is_missing_credentials(error: BaseException) -> bool:
    """Whether ``error`` (or one it was raised from) says that no API key was configured.

    >>> _is_missing_credentials(RuntimeError("Missing credentials. Please pass an `api_key`"))
    True
    >>> _is_missing_credentials(RuntimeError("Internal server error"))
    False
    """
    return any(text in str(cause) for cause in _error_chain(error) for text in _MISSING_CREDENTIALS)


_CONNECTION_ERRORS = frozenset({"APIConnectionError", "ConnectError", "ConnectTimeout"})


def _connection_failure(error: BaseException | None) -> str | None:
    """What broke, if ``error`` (or one it came from) is a connection that never got an answer.

    >>> _connection_failure(ConnectionRefusedError(111, "Connection refused"))
    'ConnectionRefusedError: [Errno 111] Connection refused'
    >>> _connection_failure(ValueError("bad request")) is None
    True
    """
    found: str | None = None
    for cause in _error_chain(error):
        name = type(cause).__name__
        # An unknown host is socket.gaierror; one can only exist once socket is imported, so
        # the core does not import it (first use stays light).
        socket = sys.modules.get("socket")
        unknown_host = socket is not None and isinstance(cause, socket.gaierror)
        if isinstance(cause, ConnectionError) or unknown_host:
            return f"{name}: {cause}"  # the root cause: refused, reset, unknown host
        if name in _CONNECTION_ERRORS and found is None:
            found = f"{name}: {cause}"
    return found


def _is_transient(error: BaseException) -> bool:
    if _is_missing_credentials(error):
        return False  # litellm reports it as a 500, but it was never sent: no retry
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        return status in _TRANSIENT_STATUSES or status >= 500
    # Errors without a status: a socket that broke or timed out is worth another try.
    return isinstance(error, OSError | TimeoutError)


def _gather_stream(
    litellm: ModuleType,
    stream: Any,
    messages: Sequence[Mapping[str, Any]],
    on_token: TokenCallbackType | None,
) -> Any:
    """The whole answer of a streamed call, each chunk passed to ``on_token`` on its way.

    A callback that raises stops the call (its error is the call's); an
    empty stream is an :class:`~cowconv.LLMError`.
    """
    chunks = []
    for chunk in stream:
        chunks.append(chunk)
        if on_token is not None:
            on_token(chunk)
    built = litellm.stream_chunk_builder(chunks, messages=list(messages)) if chunks else None
    if built is None:
        raise LLMError("the model's stream ended without an answer")
    return built


def _chat_message(message: Mapping[str, Any] | Message) -> Mapping[str, Any]:
    """One message in OpenAI chat format: a :class:`Message` is converted, a mapping kept."""
    if not isinstance(message, Message):
        if not isinstance(message, Mapping):
            raise InvalidTypeError(
                f"a message is a cowconv.Message or a chat dict, got {type(message).__name__}"
            )
        return message
    chat: dict[str, Any] = {"role": message.role, "content": chat_content(message.content)}
    if message.tool_calls:
        chat["tool_calls"] = [call.to_chat_dict() for call in message.tool_calls]
    if message.tool_call_id is not None:
        chat["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        chat["name"] = message.name
    return chat


def _response(litellm: ModuleType, raw: Any, latency: float, model: str = "") -> LLMResponse:
    message = raw.choices[0].message
    calls = tuple(
        LLMToolCall(
            # A model's answer is data: lone surrogates in it are recorded as U+FFFD.
            id=representable(call.id or f"call_{uuid.uuid4().hex}"),
            name=representable(call.function.name or ""),
            arguments=representable(_arguments_text(call.function.arguments)),
        )
        for call in (message.tool_calls or ())
    )
    usage = getattr(raw, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = _count(getattr(details, "cached_tokens", None))
    # Anthropic's names for the same (litellm keeps them on its Usage).
    cache_read = max(cached, _count(getattr(usage, "cache_read_input_tokens", None)))
    cache_write = _count(getattr(usage, "cache_creation_input_tokens", None))
    try:
        cost = float(litellm.completion_cost(completion_response=raw))
    except Exception:
        # Models litellm has no price for (ModelNotMappedError, local and stub models) cost 0.
        cost = 0.0
    return LLMResponse(
        id=representable(raw.id or f"response_{uuid.uuid4().hex}"),
        content=representable(message.content or ""),
        tool_calls=calls,
        cost=cost,
        prompt_tokens=_count(getattr(usage, "prompt_tokens", 0)),
        completion_tokens=_count(getattr(usage, "completion_tokens", 0)),
        latency=latency,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        reasoning_content=_reasoning(message),
        model=model,
    )


def _reasoning(message: Any) -> str | None:
    reasoning = getattr(message, "reasoning_content", None)
    return representable(reasoning) if isinstance(reasoning, str) and reasoning else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)
