"""``Agent``, ``Tool``, ``LLMSummarizingCondenser``: what runs a conversation, as configuration.

>>> from cowconv import LLM
>>> agent = Agent(llm=LLM(model="openai/gpt-4o"), tools=[Tool(name="terminal")])
>>> agent.tools
(Tool(name='terminal', params=pmap({})),)
>>> Agent.model_validate_json(agent.model_dump_json()) == agent
True
"""

import re
from pathlib import Path

from pydantic import ConfigDict, Field, field_validator, model_validator
from pyrsistent import pmap

from cowconv._exceptions import InvalidValueError
from cowconv.core.context import AgentContext
from cowconv.core.frozen import CheckedModel, FrozenJSONMap
from cowconv.core.llm import LLM
from cowconv.core.mcp import MCPConfig

__all__ = ["DEFAULT_SYSTEM_PROMPT", "Agent", "LLMSummarizingCondenser", "Tool"]

DEFAULT_SECURITY_POLICY = "security_policy.j2"
"""OpenHands' SDK's name for its built-in security policy (not a file cowconv reads)."""

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful software agent. Use the tools you are given to act in the "
    "workspace, then answer the user concisely."
)


class Tool(CheckedModel):
    """A serialisable reference to a registered tool, by name, with its settings.

    >>> Tool(name="terminal", params={"timeout": 30}).params["timeout"]
    30
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    params: FrozenJSONMap = pmap()


class LLMSummarizingCondenser(CheckedModel):
    """Replaces older events by an LLM-written summary once the view exceeds ``max_size``.

    This is the configuration (it travels with the agent in every snapshot);
    :mod:`cowconv.agent.condenser` does the condensing.

    The view keeps the first ``keep_first`` events (the system prompt and
    the task, usually), the summary, and the most recent events; after a
    condensation it holds about ``max_size // 2`` events. Give the condenser
    its own ``usage_id`` to see its cost apart in the conversation's stats.

    >>> from cowconv import LLM
    >>> LLMSummarizingCondenser(llm=LLM(model="openai/gpt-4o", usage_id="condenser")).max_size
    120
    >>> LLMSummarizingCondenser(llm=LLM(model="openai/gpt-4o"), max_size=4, keep_first=3)
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for LLMSummarizingCondenser
    ...
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    llm: LLM
    max_size: int = Field(default=120, ge=4)
    keep_first: int = Field(default=4, ge=0)

    @model_validator(mode="after")
    def _room_for_recent_events(self) -> "LLMSummarizingCondenser":
        if self.keep_first >= self.max_size // 2:
            raise InvalidValueError(
                f"keep_first ({self.keep_first}) must be below max_size // 2 "
                f"({self.max_size // 2}), or nothing recent would stay in view"
            )
        return self


class Agent(CheckedModel):
    """An LLM, the tools it may call, its system prompt, and optionally a condenser.

    With ``condenser`` (an :class:`~cowconv.LLMSummarizingCondenser`), the
    model sees a condensed view of long histories instead of all of it.

    Frozen: a fork shares its source's agent; ``fork(agent=...)`` swaps it.

    >>> from cowconv import LLM
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o"), tools=[Tool(name="terminal")])
    >>> [tool.name for tool in agent.tools], agent.llm.model
    (['terminal'], 'openai/gpt-4o')
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    llm: LLM
    tools: tuple[Tool, ...] = ()
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    condenser: LLMSummarizingCondenser | None = None
    agent_context: AgentContext | None = None
    """Skills and suffixes that extend the prompts (OpenHands' ``AgentContext``)."""
    tool_concurrency_limit: int = Field(default=1, ge=1)
    """At most this many tool calls of one step run at once (OpenHands' SDK's setting).

    Above 1, a step's calls run on that many threads; calls whose tools
    declare a shared resource (``ToolDefinition.declared_resources``; by
    default, calls of one tool) still run one at a time. Results are
    recorded in the order of the calls.
    """
    mcp_config: MCPConfig = Field(default_factory=pmap)
    """MCP servers whose tools the agent may call: name -> :class:`~cowconv.MCPServer`.

    Each conversation connects to them when it first runs (see :mod:`cowconv.mcp`).
    """
    security_policy_filename: str = DEFAULT_SECURITY_POLICY
    """A file whose text is added, verbatim, to the system prompt as its security policy.

    OpenHands' SDK's setting. The default names OpenHands' built-in policy, which
    cowconv's own prompt does not carry; ``""`` (or ``None``) is no policy. A relative
    name is read from the process's working directory (cowconv has no prompt
    directory), when the system message is built.
    """
    filter_tools_regex: str | None = Field(default=None, json_schema_extra={"format": "regex"})
    """Only the tools whose names match this regular expression (MCP tools included).

    Matched from the start of the name (``re.match``), as OpenHands' SDK does.
    """

    @field_validator("security_policy_filename", mode="before")
    @classmethod
    def _none_is_no_policy(cls, value: object) -> object:
        return "" if value is None else value

    @property
    def static_system_message(self) -> str:
        """The system prompt the model is sent before any per-conversation context.

        ``system_prompt``, then the custom security policy file's text if one is set.

        >>> from cowconv import LLM
        >>> agent = Agent(llm=LLM(model="openai/gpt-4o"), system_prompt="Be brief.")
        >>> agent.static_system_message
        'Be brief.'
        """
        name = self.security_policy_filename
        if not name or name == DEFAULT_SECURITY_POLICY:
            return self.system_prompt
        try:
            policy = Path(name).read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidValueError(
                f"security_policy_filename {name!r} cannot be read: {error.strerror or error}"
            ) from None
        return f"{self.system_prompt}\n\n{policy}"

    @field_validator("filter_tools_regex")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as error:
                raise InvalidValueError(
                    f"filter_tools_regex is not a regular expression: {error}"
                ) from None
        return pattern
