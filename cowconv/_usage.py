"""``Usage``: cost and tokens spent, what an LLM answer reports and a conversation sums.

It sits below both the LLM client and the conversation state, so neither
imports the other for it.

>>> Usage(prompt_tokens=3) + Usage(prompt_tokens=4)
Usage(accumulated_cost=0.0, prompt_tokens=7, completion_tokens=0)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Usage"]


class Usage(BaseModel):
    """Cost and tokens spent.

    >>> Usage(accumulated_cost=0.5, prompt_tokens=10) + Usage(completion_tokens=3)
    Usage(accumulated_cost=0.5, prompt_tokens=10, completion_tokens=3)
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    accumulated_cost: float = Field(default=0.0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            accumulated_cost=self.accumulated_cost + other.accumulated_cost,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )
