"""Hook configuration: which shell commands (or prompts) run at which point of a run.

OpenHands' SDK's names and JSON. A :class:`HookConfig` lists, per hook
event, :class:`HookMatcher` entries (a tool-name pattern and its
:class:`HookDefinition` list). It is part of the conversation's immutable
state (``Conversation(hook_config=...)``), so forks run the same hooks and a
stored conversation keeps them. :mod:`cowconv.hooks` runs them.

The JSON of ``.openhands/hooks.json`` (PascalCase event names, optionally
wrapped in ``{"hooks": ...}``) is read as well as the field names:

>>> config = HookConfig.model_validate({"hooks": {"PreToolUse": [
...     {"matcher": "terminal", "hooks": [{"command": "./check.sh"}]}]}})
>>> [hook.command for hook in config.get_hooks_for_event(HookEventType.PRE_TOOL_USE, "terminal")]
['./check.sh']
>>> config.get_hooks_for_event(HookEventType.PRE_TOOL_USE, "file_editor")
[]
"""

from __future__ import annotations

import json
import logging
import re
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ConfigDict, Field, model_validator

from cowconv._exceptions import InvalidValueError
from cowconv.core.kinds import FrozenValue

__all__ = [
    "HOOK_EVENT_FIELDS",
    "HookConfig",
    "HookDecision",
    "HookDefinition",
    "HookEventType",
    "HookMatcher",
    "HookType",
]

logger = logging.getLogger("cowconv.hooks")


class HookEventType(StrEnum):
    """The points of a run where hooks run (OpenHands' ``HookEventType``).

    >>> HookEventType("PreToolUse").field
    'pre_tool_use'
    """

    PRE_TOOL_USE = "PreToolUse"
    POST_TOOL_USE = "PostToolUse"
    USER_PROMPT_SUBMIT = "UserPromptSubmit"
    SESSION_START = "SessionStart"
    SESSION_END = "SessionEnd"
    STOP = "Stop"

    @property
    def field(self) -> str:
        """The :class:`HookConfig` field holding this event's matchers."""
        return _snake(self.value)


class HookDecision(StrEnum):
    """What a hook decided about an operation (``decision`` in its JSON output).

    >>> HookDecision("deny") is HookDecision.DENY
    True
    """

    ALLOW = "allow"
    DENY = "deny"


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


HOOK_EVENT_FIELDS: frozenset[str] = frozenset(event.field for event in HookEventType)
"""The :class:`HookConfig` fields, one per hook event."""


class HookType(StrEnum):
    """How a hook decides: a shell ``command``, one LLM ``prompt``, or an ``agent`` run.

    >>> HookType.COMMAND.value
    'command'
    """

    COMMAND = "command"
    PROMPT = "prompt"
    AGENT = "agent"


def _command_required(schema: dict[str, Any]) -> None:
    schema["properties"]["command"].pop("default", None)
    required = schema.setdefault("required", [])
    if "command" not in required:
        required.append("command")


class HookDefinition(FrozenValue):
    """One hook: a shell command (the default), or a prompt for an LLM.

    A command hook reads the event's JSON on stdin; exit code 0 allows (its
    stdout may be JSON with ``decision``, ``reason``, ``additionalContext``),
    exit code 2 blocks (stderr says why), any other code is an error that
    does not block. ``async`` (``async_``) hooks run in the background.

    >>> HookDefinition(command="./log.sh", timeout=5).display_command
    './log.sh'
    >>> HookDefinition(type="prompt", prompt="Deny any rm -rf.").display_command
    'prompt-hook:Deny any rm -rf.'
    >>> HookDefinition(type="command")
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for HookDefinition
      Value error, 'command' is required when type is 'command' ...
    """

    # "command" is required in the JSON schema (OpenHands' published REST contract), though a
    # prompt or agent hook leaves it "".
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, json_schema_extra=_command_required
    )

    type: HookType = HookType.COMMAND
    name: str | None = None
    command: str = ""
    prompt: str | None = None
    system_prompt: str | None = None
    tools: tuple[str, ...] = ()
    timeout: int = Field(default=60, ge=1)
    max_iterations: int = Field(default=3, ge=1)
    async_: bool = Field(default=False, alias="async")

    @model_validator(mode="after")
    def _fields_of_type(self) -> HookDefinition:
        problem = None
        if self.type is HookType.COMMAND and not self.command:
            problem = "'command' is required when type is 'command'"
        elif self.type is HookType.PROMPT and not self.prompt:
            problem = "'prompt' is required when type is 'prompt'"
        elif self.type is not HookType.COMMAND and self.command:
            problem = f"'command' must not be set when type is {self.type.value!r}"
        elif self.type is not HookType.COMMAND and self.async_:
            problem = f"'async' is not supported for {self.type.value} hooks"
        if problem is not None:
            raise InvalidValueError(problem)
        return self

    @property
    def display_command(self) -> str:
        """What logs and :class:`~cowconv.HookExecutionEvent` call this hook."""
        if self.command:
            return self.command
        prefix = f"{self.type.value}-hook"
        if self.name is not None:
            return f"{prefix}:{self.name}"
        text = self.prompt if self.type is HookType.PROMPT else self.system_prompt
        return f"{prefix}:{(text or self.type.value)[:20]}"


class HookMatcher(FrozenValue):
    """Hooks for the tools whose name ``matcher`` matches.

    ``*`` or empty matches everything; ``/regex/`` is a regular expression,
    and so is a matcher holding regex characters; anything else is a name.

    >>> [HookMatcher(matcher=m).matches("terminal") for m in ("*", "terminal", "term.*", "/x/")]
    [True, True, True, False]
    """

    matcher: str = "*"
    hooks: tuple[HookDefinition, ...] = ()

    _REGEX_CHARACTERS: ClassVar[frozenset[str]] = frozenset("|.*+?[]()^$\\")

    def matches(self, tool_name: str | None) -> bool:
        """Whether this matcher's hooks run for ``tool_name`` (``None``: not a tool event)."""
        if self.matcher in ("*", ""):
            return True
        if tool_name is None:
            return False
        pattern = None
        if len(self.matcher) > 2 and self.matcher.startswith("/") and self.matcher.endswith("/"):
            pattern = self.matcher[1:-1]
        elif any(char in self._REGEX_CHARACTERS for char in self.matcher):
            pattern = self.matcher
        if pattern is not None:
            try:
                return re.fullmatch(pattern, tool_name) is not None
            except re.error:
                if self.matcher.startswith("/"):
                    return False
        return self.matcher == tool_name


class HookConfig(FrozenValue):
    """Every hook of a conversation, by event.

    >>> config = HookConfig(pre_tool_use=[HookMatcher(matcher="terminal",
    ...                                                hooks=[HookDefinition(command="./a.sh")])])
    >>> config.is_empty(), config.has_hooks_for_event(HookEventType.STOP)
    (False, False)
    >>> HookConfig.model_validate({"PreToolUse": [], "Bogus": []})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for HookConfig
      Value error, Unknown event type 'Bogus'. Valid types: ...
    """

    pre_tool_use: tuple[HookMatcher, ...] = ()
    post_tool_use: tuple[HookMatcher, ...] = ()
    user_prompt_submit: tuple[HookMatcher, ...] = ()
    session_start: tuple[HookMatcher, ...] = ()
    session_end: tuple[HookMatcher, ...] = ()
    stop: tuple[HookMatcher, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _hooks_json(cls, data: Any) -> Any:
        # .openhands/hooks.json (and Claude Code's hook files): {"hooks": {...}} and PascalCase.
        if not isinstance(data, dict):
            return data
        if "hooks" in data:
            data = data["hooks"]
            if not isinstance(data, dict):
                return data
        normalized: dict[str, Any] = {}
        for key, value in data.items():
            field = _snake(key)
            if field != key and field not in HOOK_EVENT_FIELDS:
                valid = ", ".join(sorted(HOOK_EVENT_FIELDS))
                raise InvalidValueError(f"Unknown event type '{key}'. Valid types: {valid}")
            if field in normalized:
                raise InvalidValueError(
                    f"Duplicate hook event: both '{key}' and its snake_case equivalent "
                    f"'{field}' were provided"
                )
            normalized[field] = value
        return normalized

    def matchers(self, event_type: HookEventType) -> tuple[HookMatcher, ...]:
        """The matchers of ``event_type``."""
        matchers: tuple[HookMatcher, ...] = getattr(self, HookEventType(event_type).field)
        return matchers

    def is_empty(self) -> bool:
        """Whether no event has a matcher."""
        return not any(self.matchers(event) for event in HookEventType)

    def has_hooks_for_event(self, event_type: HookEventType) -> bool:
        """Whether ``event_type`` has any matcher."""
        return bool(self.matchers(event_type))

    def get_hooks_for_event(
        self, event_type: HookEventType, tool_name: str | None = None
    ) -> list[HookDefinition]:
        """The hooks to run for ``event_type`` (on ``tool_name``), in order."""
        return [
            hook
            for matcher in self.matchers(event_type)
            if matcher.matches(tool_name)
            for hook in matcher.hooks
        ]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HookConfig:
        """The config of ``hooks.json`` data (wrapped in ``"hooks"`` or not)."""
        return cls.model_validate(data)

    @classmethod
    def load(
        cls, path: str | Path | None = None, working_dir: str | Path | None = None
    ) -> HookConfig:
        """The config in ``path``, else ``<working_dir>/.openhands/hooks.json``; empty if none.

        >>> HookConfig.load(working_dir="/nonexistent").is_empty()
        True
        """
        if path is None:
            candidate = Path(working_dir or Path.cwd()) / ".openhands" / "hooks.json"
            if not candidate.exists():
                return cls()
            path = candidate
        path = Path(path)
        if not path.exists():
            return cls()
        return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))

    def save(self, path: str | Path) -> None:
        """Write this config as JSON (field names, defaults left out) to ``path``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.model_dump(mode="json", exclude_defaults=True), indent=2)
        path.write_text(text, encoding="utf-8")

    @classmethod
    def merge(cls, configs: list[HookConfig]) -> HookConfig | None:
        """One config running every hook of ``configs`` in order (``None`` if none has any).

        >>> a = HookConfig(stop=[HookMatcher()])
        >>> len(HookConfig.merge([a, a]).stop)
        2
        """
        merged = cls(
            **{
                field: tuple(m for config in configs for m in getattr(config, field))
                for field in HOOK_EVENT_FIELDS
            }
        )
        return None if merged.is_empty() else merged
