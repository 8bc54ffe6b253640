"""``Usage``: cost and tokens spent, what an LLM answer reports and a conversation sums.

It sits below both the LLM client and the conversation state, so neither
imports the other for it.

>>> (Usage(prompt_tokens=3) + Usage(prompt_tokens=4)).prompt_tokens
7
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from cowconv.core.frozen import CheckedModel

__all__ = ["TokenUsage", "Usage"]


class TokenUsage(CheckedModel):
    """Tokens spent, shaped like ``TokenUsage`` of OpenHands' SDK
    (``Usage.accumulated_token_usage``).

    >>> TokenUsage(prompt_tokens=10, completion_tokens=3).completion_tokens
    3
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)


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

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            accumulated_cost=self.accumulated_cost + other.accumulated_cost,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )
