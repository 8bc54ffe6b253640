"""``Usage``: cost and tokens spent, what an LLM answer reports and a conversation sums.

It sits below both the LLM client and the conversation state, so neither
imports the other for it.

>>> (Usage(prompt_tokens=3) + Usage(prompt_tokens=4)).prompt_tokens
7
"""

import time

from pydantic import ConfigDict, Field

from cowconv._exceptions import InvalidValueError
from cowconv.core.frozen import CheckedModel

__all__ = ["Cost", "Metrics", "ResponseLatency", "TokenUsage", "Usage"]


class TokenUsage(CheckedModel):
    """Tokens spent, shaped like ``TokenUsage`` of OpenHands' SDK
    (``Usage.accumulated_token_usage``).

    >>> TokenUsage(prompt_tokens=10, completion_tokens=3).completion_tokens
    3
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    model: str = ""
    """The model that spent them (one answer's record in ``LLMMetrics.token_usages``)."""
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)
    response_id: str = ""


class Usage(CheckedModel):
    """Cost and tokens spent.

    ``prompt_tokens`` counts every prompt token; ``cache_read_tokens`` of
    them were served from the provider's prompt cache (billed at its cache
    rate), ``cache_write_tokens`` were written to it.

    >>> total = Usage(accumulated_cost=0.5, prompt_tokens=10) + Usage(completion_tokens=3)
    >>> total.accumulated_cost, total.prompt_tokens, total.completion_tokens
    (0.5, 10, 3)
    >>> (Usage(prompt_tokens=10, cache_read_tokens=8) + total).cache_read_tokens
    8
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    accumulated_cost: float = Field(default=0.0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)

    @property
    def accumulated_token_usage(self) -> TokenUsage:
        """The token counts, under OpenHands' SDK's name for them.

        >>> Usage(prompt_tokens=10, completion_tokens=3).accumulated_token_usage.prompt_tokens
        10
        """
        return TokenUsage(
            prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens
        )

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            accumulated_cost=self.accumulated_cost + other.accumulated_cost,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


class Cost(CheckedModel):
    """One cost added to :class:`Metrics` (OpenHands' ``Cost``).

    >>> Cost(model="gpt-4o", cost=0.25, timestamp=0.0).cost
    0.25
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    model: str
    cost: float = Field(ge=0)
    timestamp: float = Field(default_factory=time.time)


class ResponseLatency(CheckedModel):
    """How long one answer took, in seconds (OpenHands' ``ResponseLatency``).

    >>> ResponseLatency(model="gpt-4o", latency=1.5, response_id="r1").latency
    1.5
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    model: str
    latency: float = Field(ge=0)
    response_id: str


class Metrics(CheckedModel):
    """A running account of one model's cost and tokens, as OpenHands' SDK's ``Metrics``.

    It is an accumulator (OpenHands' code adds to it in place), like
    :class:`~cowconv.LLMMetrics`; :attr:`usage` is its value as a frozen
    :class:`Usage`, which is what a conversation's stats keep.
    ``ConversationStats(usage_to_metrics={"agent": metrics})`` reads it.

    >>> metrics = Metrics(model_name="gpt-4o-mini")
    >>> metrics.add_cost(0.5)
    >>> metrics.add_token_usage(prompt_tokens=10, completion_tokens=3)
    >>> metrics.add_cost(0.25)
    >>> metrics.accumulated_cost, metrics.usage.prompt_tokens, len(metrics.costs)
    (0.75, 10, 2)
    >>> metrics.add_cost(-1)
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: a cost must be a finite number >= 0, got -1
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)

    model_name: str = "default"
    accumulated_cost: float = Field(default=0.0, ge=0)
    max_budget_per_task: float | None = None
    accumulated_token_usage: TokenUsage | None = None
    costs: list[Cost] = Field(default_factory=list)
    response_latencies: list[ResponseLatency] = Field(default_factory=list)

    def add_cost(self, value: float) -> None:
        """Add ``value`` (USD, >= 0) to ``accumulated_cost`` and record it in ``costs``."""
        if not isinstance(value, int | float) or not 0 <= value < float("inf"):
            raise InvalidValueError(f"a cost must be a finite number >= 0, got {value!r}")
        self.accumulated_cost += value
        self.costs.append(Cost(model=self.model_name, cost=value))

    def add_response_latency(self, value: float, response_id: str) -> None:
        """Record that the answer ``response_id`` took ``value`` seconds (negative counts as 0)."""
        latency = max(0.0, float(value))
        self.response_latencies.append(
            ResponseLatency(model=self.model_name, latency=latency, response_id=response_id)
        )

    def add_token_usage(self, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        """Add tokens to ``accumulated_token_usage``."""
        before = self.accumulated_token_usage or TokenUsage()
        self.accumulated_token_usage = TokenUsage(
            prompt_tokens=before.prompt_tokens + prompt_tokens,
            completion_tokens=before.completion_tokens + completion_tokens,
        )

    def merge(self, other: "Metrics") -> None:
        """Add ``other``'s cost, tokens and records to this account.

        >>> a, b = Metrics(accumulated_cost=1.0), Metrics(accumulated_cost=0.5)
        >>> a.merge(b)
        >>> a.accumulated_cost
        1.5
        """
        self.accumulated_cost += other.accumulated_cost
        if other.accumulated_token_usage is not None:
            tokens = other.accumulated_token_usage
            self.add_token_usage(tokens.prompt_tokens, tokens.completion_tokens)
        self.costs.extend(other.costs)
        self.response_latencies.extend(other.response_latencies)

    def deep_copy(self) -> "Metrics":
        """An independent copy (adding to one leaves the other as it was)."""
        return self.model_copy(deep=True)

    @property
    def usage(self) -> Usage:
        """The account's cost and tokens now, as a frozen :class:`Usage`.

        >>> Metrics(accumulated_cost=0.5).usage.accumulated_cost
        0.5
        """
        tokens = self.accumulated_token_usage or TokenUsage()
        return Usage(
            accumulated_cost=self.accumulated_cost,
            prompt_tokens=tokens.prompt_tokens,
            completion_tokens=tokens.completion_tokens,
        )
