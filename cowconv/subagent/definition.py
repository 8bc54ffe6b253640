"""``AgentDefinition``: a sub-agent described as data, in Python or in a Markdown file.

>>> definition = AgentDefinition(name="grammar-checker", tools=["terminal"],
...                              system_prompt="Find grammatical errors.")
>>> definition.model, definition.tools
('inherit', ['terminal'])

A Markdown file holds the same: YAML front matter for the settings, the
body for the system prompt (OpenHands' SDK's format, see
:meth:`AgentDefinition.load`). :func:`load_agents_from_dir` reads every
``*.md`` of a directory.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, Field

from cowconv._exceptions import CowconvError, InvalidTypeError, InvalidValueError
from cowconv.core.front_matter import split_front_matter

__all__ = ["AgentDefinition", "AgentDefinitionLevel", "load_agents_from_dir"]

AgentDefinitionLevel = Literal["project", "user", "builtin", "plugin", "programmatic"]
"""Where an agent definition was found (set by discovery, never by the file itself)."""

# Front matter keys that are settings; any other key goes to ``metadata``.
_SETTINGS: Final = frozenset(
    {
        "name",
        "description",
        "model",
        "color",
        "tools",
        "skills",
        "max_iteration_per_run",
        "max_budget_per_run",
        "hooks",
        "profile_store_dir",
        "mcp_config",
        "mcp_servers",
        "permission_mode",
        "condenser",
    }
)
_PERMISSION_MODES: Final = frozenset({"always_confirm", "never_confirm", "confirm_risky"})
logger = logging.getLogger("cowconv.subagent")
_EXAMPLE = re.compile(r"<example>(.*?)</example>", re.DOTALL | re.IGNORECASE)


class AgentDefinition(BaseModel):
    """A sub-agent's settings: its name, what it is for, its tools and system prompt.

    OpenHands' SDK's fields and defaults. ``model="inherit"`` runs the
    sub-agent on its parent's LLM; ``system_prompt`` is added to the
    default system prompt; ``tools`` names registered tools.

    >>> AgentDefinition(name="explorer", description="Reads code.").description
    'Reads code.'
    >>> AgentDefinition(name="x", max_iteration_per_run=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for AgentDefinition
    ...
    """

    name: str = Field(description="Agent name (from frontmatter or filename)")
    description: str = Field(default="", description="Agent description")
    model: str = Field(default="inherit", description="Model to use ('inherit' uses parent model)")
    color: str | None = Field(default=None, description="Display color for the agent")
    tools: list[str] = Field(
        default_factory=list, description="List of allowed tools for this agent"
    )
    skills: list[str] = Field(
        default_factory=list,
        description="List of skill names for this agent. Resolved from project/user directories.",
    )
    system_prompt: str = Field(default="", description="System prompt content")
    source: str | None = Field(default=None, description="Source file path for this agent")
    level: AgentDefinitionLevel | None = Field(
        default=None,
        description="Scope where the agent was discovered. "
        "Set during discovery; None when loaded directly from a file.",
    )
    when_to_use_examples: list[str] = Field(
        default_factory=list,
        description="Examples of when to use this agent (for triggering)",
    )
    hooks: Any = Field(default=None, description="Hook configuration for this agent")
    permission_mode: str | None = Field(
        default=None,
        description="How the subagent handles permissions. "
        "None inherits the parent policy, 'always_confirm' requires "
        "confirmation for every action, 'never_confirm' skips all confirmations, "
        "'confirm_risky' only confirms actions above a risk threshold.",
    )
    max_iteration_per_run: int | None = Field(
        default=None,
        description="Maximum iterations per run. "
        "It must be strictly positive, or None for default.",
        gt=0,
    )
    max_budget_per_run: float | None = Field(
        default=None,
        description="Maximum accumulated cost (USD) per run for this sub-agent. "
        "Must be strictly positive, or None for no budget.",
        gt=0,
    )
    mcp_config: dict[str, Any] | None = Field(
        default=None,
        description="MCP servers for this agent. Ignored when it runs as a delegated "
        "sub-agent, which always inherits its parent's MCP servers.",
    )
    profile_store_dir: str | None = Field(
        default=None,
        description="Path to the directory where LLM profiles are stored. "
        "If None, the default profile store directory is used.",
    )
    condenser: Any = Field(
        default=None,
        description="Context condenser for the sub-agent. None applies a default "
        "summarizing condenser.",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Additional metadata from frontmatter"
    )

    @classmethod
    def load(cls, agent_path: str | Path) -> AgentDefinition:
        """The definition in a Markdown file: YAML front matter, then the system prompt.

        The name defaults to the file's stem; ``tools`` and ``skills`` take
        a list or one comma-separated string; ``<example>...</example>``
        parts of the description become ``when_to_use_examples``; keys that
        are not settings are kept in ``metadata``.

        >>> import tempfile
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "bash-runner.md"
        >>> _ = path.write_text("---\\ntools: terminal\\ncolor: blue\\nteam: qa\\n---\\n"
        ...                     "Run commands and report.\\n")
        >>> loaded = AgentDefinition.load(path)
        >>> loaded.name, loaded.tools, loaded.system_prompt, loaded.metadata
        ('bash-runner', ['terminal'], 'Run commands and report.', {'team': 'qa'})
        """
        path = Path(agent_path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise InvalidValueError(f"agent file {path} is not UTF-8 text: {error}") from None
        front, body = split_front_matter(text, f"agent file {path}")
        description = str(front.get("description", "") or "")
        return cls(
            name=str(front.get("name", path.stem)),
            description=description,
            model=str(front.get("model", "inherit")),
            color=None if front.get("color") is None else str(front["color"]),
            tools=_names(front.get("tools"), split=False),
            skills=_names(front.get("skills"), split=True),
            permission_mode=_permission_mode(front.get("permission_mode"), path),
            max_iteration_per_run=_number(front, "max_iteration_per_run", int, path),
            max_budget_per_run=_number(front, "max_budget_per_run", float, path),
            mcp_config=_mcp_config(front, path),
            hooks=front.get("hooks"),
            profile_store_dir=_optional_text(front, "profile_store_dir", path),
            condenser=front.get("condenser"),
            system_prompt=body.strip(),
            source=path.as_posix(),
            when_to_use_examples=[
                found.strip() for found in _EXAMPLE.findall(description) if found.strip()
            ],
            metadata={key: value for key, value in front.items() if key not in _SETTINGS},
        )


def _names(value: Any, *, split: bool) -> list[str]:
    # OpenHands reads one tool name from a string, and skills as comma-separated names.
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()] if split else [value]
    if isinstance(value, list):
        return [str(item) for item in value]
    return []


def _permission_mode(value: Any, path: Path) -> str | None:
    if value is None:
        return None
    mode = str(value).strip().lower()
    if mode not in _PERMISSION_MODES:
        raise InvalidValueError(
            f"agent file {path}: invalid permission_mode {value!r}; it must be one of: "
            f"{', '.join(sorted(_PERMISSION_MODES))}"
        )
    return mode


def _number(front: dict[str, Any], key: str, kind: type[int] | type[float], path: Path) -> Any:
    value = front.get(key)
    if value is None or isinstance(value, bool):
        return None
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise InvalidValueError(
            f"agent file {path}: {key} must be a number, got {value!r}"
        ) from None


def _optional_text(front: dict[str, Any], key: str, path: Path) -> str | None:
    value = front.get(key)
    if value is None or isinstance(value, str):
        return value
    raise InvalidTypeError(f"agent file {path}: {key} must be text, got {type(value).__name__}")


def _mcp_config(front: dict[str, Any], path: Path) -> dict[str, Any] | None:
    value = front.get("mcp_config", front.get("mcp_servers"))
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidTypeError(
            f"agent file {path}: mcp_config must be a mapping of server names to configs, "
            f"got {type(value).__name__}"
        )
    return {str(name): config for name, config in value.items()}


def load_agents_from_dir(
    agents_dir: str | Path, root: str | Path | None = None
) -> list[AgentDefinition]:
    """Every agent definition of a directory's ``*.md`` files (``README.md`` left out), by name.

    A directory that does not exist holds none. A file that does not load
    is skipped with a warning, as are files resolving outside ``root``
    (through a symlink) when it is given.

    >>> import tempfile
    >>> from pathlib import Path
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "reviewer.md").write_text("---\\ndescription: Reviews.\\n---\\nReview.\\n")
    >>> _ = (folder / "broken.md").write_text("---\\n[unclosed\\n---\\nBody.\\n")
    >>> [definition.name for definition in load_agents_from_dir(folder)]
    ['reviewer']
    """
    folder = Path(agents_dir)
    if not folder.is_dir():
        return []
    inside = None if root is None else Path(root).resolve()
    found = []
    for path in sorted(folder.iterdir()):
        if path.is_dir() or path.suffix.lower() != ".md" or path.name.lower() == "readme.md":
            continue
        if inside is not None and not path.resolve().is_relative_to(inside):
            continue
        try:
            found.append(AgentDefinition.load(path))
        except (CowconvError, ValueError, OSError) as error:
            logger.warning("skipping agent file %s: %s", path, error)
    return found
