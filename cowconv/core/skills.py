"""Skills: knowledge an agent gets always (repo skills) or when a message asks for it.

OpenHands' SDK's skill model, with its names and JSON: a :class:`Skill` with
no trigger is a *repo skill* (its content goes into the system prompt); one
with a :class:`KeywordTrigger` or :class:`TaskTrigger` is a *knowledge
skill* (its content is added to a user message that names one of its
keywords, once per conversation); one loaded from a ``SKILL.md`` file is an
*AgentSkills* skill (listed by name and description). Skills load from
markdown files with YAML front matter (:meth:`Skill.load`,
:func:`load_skills_from_dir`, :func:`load_project_skills`,
:func:`load_user_skills`) as OpenHands' SDK lays them out:
``.agents/skills``, ``.openhands/skills``, ``.openhands/microagents`` and the
third-party files ``AGENTS.md``, ``CLAUDE.md``, ``GEMINI.md``, ``.cursorrules``.

>>> skill = Skill(name="git", content="Use rebase.", trigger=KeywordTrigger(keywords=["git"]))
>>> skill.match_trigger("How do I use Git here?"), skill.match_trigger("see github")
('git', None)
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from cowconv._exceptions import InvalidValueError, SkillValidationError
from cowconv.core.front_matter import split_front_matter
from cowconv.core.frozen import CheckedModel, FrozenJSON
from cowconv.core.logger import get_logger

__all__ = [
    "BaseTrigger",
    "InputMetadata",
    "KeywordTrigger",
    "PathTrigger",
    "Skill",
    "SkillKnowledge",
    "SkillResources",
    "SkillValidationError",
    "TaskTrigger",
    "load_project_skills",
    "load_skills_from_dir",
    "load_user_skills",
    "merge_skills_by_name",
    "to_prompt",
    "user_persistence_dir",
]

logger = get_logger(__name__)

_MODEL = ConfigDict(frozen=True, extra="forbid", defer_build=True)


def _type_required(schema: dict[str, Any]) -> None:
    # A trigger is told apart by its "type" (the skill's union is discriminated on it), so
    # JSON without it is refused: the published schema says it is required.
    schema["required"] = ["type", *(name for name in schema.get("required", ()) if name != "type")]


class BaseTrigger(CheckedModel):
    """What the three kinds of trigger have in common (OpenHands' ``BaseTrigger``).

    >>> isinstance(KeywordTrigger(keywords=["x"]), BaseTrigger)
    True
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True, json_schema_extra=_type_required
    )


class KeywordTrigger(BaseTrigger):
    """Activates a skill when one of ``keywords`` appears in a user message.

    >>> KeywordTrigger(keywords=["deploy"]).model_dump()
    {'type': 'keyword', 'keywords': ('deploy',)}
    """

    type: Literal["keyword"] = "keyword"
    keywords: tuple[str, ...]


class TaskTrigger(BaseTrigger):
    """Activates a task skill (one that may ask for inputs) by one of ``triggers``.

    >>> TaskTrigger(triggers=["/release"]).type
    'task'
    """

    type: Literal["task"] = "task"
    triggers: tuple[str, ...]


class PathTrigger(BaseTrigger):
    """Scopes a skill ("rule") to files matching ``paths`` (gitignore-style globs).

    cowconv keeps and round-trips it; the rule is not injected when a tool
    touches a matching file (see the migration guide).

    >>> PathTrigger(paths=["src/**/*.py"]).type
    'path'
    """

    type: Literal["path"] = "path"
    paths: tuple[str, ...]


Trigger = Annotated[KeywordTrigger | TaskTrigger | PathTrigger, Field(discriminator="type")]


class InputMetadata(CheckedModel):
    """An input a task skill asks the user for (``inputs:`` in its front matter).

    >>> InputMetadata(name="version", description="The version to release").name
    'version'
    """

    model_config = _MODEL

    name: str
    description: str


class SkillResources(CheckedModel):
    """The ``scripts/``, ``references/`` and ``assets/`` files beside a ``SKILL.md``.

    >>> SkillResources(skill_root="/skills/pdf", scripts=["run.sh"]).has_resources()
    True
    """

    model_config = _MODEL

    skill_root: str
    scripts: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    assets: tuple[str, ...] = ()

    def has_resources(self) -> bool:
        """Whether any resource file was found."""
        return bool(self.scripts or self.references or self.assets)


def _keyword_matches(keyword: str, message_lower: str) -> bool:
    # Whole-token, case-insensitive: "git" does not fire on "github", "/linear" still matches.
    keyword_lower = keyword.lower()
    if not keyword_lower:
        return False
    pattern = rf"(?<![a-z0-9]){re.escape(keyword_lower)}(?![a-z0-9])"
    return re.search(pattern, message_lower) is not None


_MISSING_VARIABLES_PROMPT = (
    "\n\nIf the user didn't provide any of these variables, ask the user to "
    "provide them first before the agent can proceed with the task."
)
_VARIABLE = re.compile(r"\$\{([a-zA-Z_][a-zA-Z0-9_]*)\}")


class Skill(CheckedModel):
    """A named piece of knowledge for the agent, always active or activated by a trigger.

    ``trigger=None``: a repo skill, in the system prompt's ``<REPO_CONTEXT>``.
    A :class:`KeywordTrigger` or :class:`TaskTrigger`: a knowledge skill,
    listed in the system prompt's ``<SKILLS>`` and added to the first user
    message that matches it. ``source`` is where it was loaded from. The
    other fields are the AgentSkills standard's, kept and round-tripped.

    >>> repo = Skill(name="style", content="Use tabs.")
    >>> repo.get_skill_type(), Skill.model_validate_json(repo.model_dump_json()) == repo
    ('repo', True)
    """

    model_config = _MODEL

    name: str
    content: str
    trigger: Trigger | None = None
    source: str | None = None
    mcp_tools: FrozenJSON = None
    inputs: tuple[InputMetadata, ...] = ()
    is_agentskills_format: bool = False
    version: str = "1.0.0"
    description: str | None = None
    license: str | None = None
    compatibility: str | None = None
    metadata: FrozenJSON = None
    allowed_tools: tuple[str, ...] | None = None
    disable_model_invocation: bool = False
    resources: SkillResources | None = None

    PATH_TO_THIRD_PARTY_SKILL_NAME: ClassVar[dict[str, str]] = {
        ".cursorrules": "cursorrules",
        "agents.md": "agents",
        "agent.md": "agents",
        "claude.md": "claude",
        "gemini.md": "gemini",
    }

    @field_validator("allowed_tools", mode="before")
    @classmethod
    def _allowed_tools(cls, value: Any) -> Any:
        # The AgentSkills standard writes them space-delimited.
        return value.split() if isinstance(value, str) else value

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_text(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(key): str(item) for key, item in value.items()}
        return value

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        trigger = data.get("trigger")
        kind = trigger.get("type") if isinstance(trigger, dict) else getattr(trigger, "type", None)
        if kind == "path":
            # A path rule is injected on file touch only, never offered to the model.
            data = {**data, "disable_model_invocation": True}
        content = data.get("content")
        if kind == "task" and isinstance(content, str):
            # A task skill that needs inputs tells the agent to ask for them (OpenHands' text).
            if (_VARIABLE.search(content) or data.get("inputs")) and (
                _MISSING_VARIABLES_PROMPT not in content
            ):
                data = {**data, "content": content + _MISSING_VARIABLES_PROMPT}
        return data

    def match_trigger(self, message: str) -> str | None:
        """The first keyword (or task trigger) of this skill that ``message`` names, else None.

        Matching is case-insensitive and whole-token: ``git`` does not match
        ``github``.

        >>> Skill(name="t", content="x", trigger=TaskTrigger(triggers=["/ship"])).match_trigger(
        ...     "please /SHIP it")
        '/ship'
        """
        if isinstance(self.trigger, KeywordTrigger):
            keywords = self.trigger.keywords
        elif isinstance(self.trigger, TaskTrigger):
            keywords = self.trigger.triggers
        else:
            return None
        lowered = message.lower()
        return next((word for word in keywords if _keyword_matches(word, lowered)), None)

    def extract_variables(self, content: str) -> list[str]:
        """The ``${name}`` variables in ``content``.

        >>> Skill(name="s", content="").extract_variables("deploy ${env} at ${time}")
        ['env', 'time']
        """
        return _VARIABLE.findall(content)

    def requires_user_input(self) -> bool:
        """Whether the content has ``${name}`` variables for the user to fill.

        >>> Skill(name="s", content="to ${env}").requires_user_input()
        True
        """
        return bool(self.extract_variables(self.content))

    def get_skill_type(self) -> Literal["repo", "knowledge", "agentskills"]:
        """``"agentskills"`` (from a SKILL.md), ``"repo"`` (no trigger) or ``"knowledge"``.

        >>> Skill(name="s", content="x", trigger=KeywordTrigger(keywords=["a"])).get_skill_type()
        'knowledge'
        """
        if self.is_agentskills_format:
            return "agentskills"
        return "repo" if self.trigger is None else "knowledge"

    def get_triggers(self) -> list[str]:
        """The skill's keywords or task triggers (``[]`` for a repo skill).

        >>> Skill(name="s", content="x", trigger=KeywordTrigger(keywords=["a", "b"])).get_triggers()
        ['a', 'b']
        """
        if isinstance(self.trigger, KeywordTrigger):
            return list(self.trigger.keywords)
        if isinstance(self.trigger, TaskTrigger):
            return list(self.trigger.triggers)
        return []

    @classmethod
    def load(
        cls,
        path: str | Path,
        skill_base_dir: Path | None = None,
        strict: bool = True,
        skip_mcp: bool = False,
    ) -> Skill:
        """The skill in a markdown file: YAML front matter, then its content.

        A ``SKILL.md`` is an AgentSkills skill named by its directory (or its
        ``name:``; with ``strict``, lowercase words joined by hyphens, as the
        directory). Another file is named by its path below
        ``skill_base_dir`` (else its stem) or its ``name:``; its ``triggers:``
        make a keyword skill, ``inputs:`` a task skill, ``paths:`` a path
        rule, none a repo skill. ``AGENTS.md``, ``CLAUDE.md``, ``GEMINI.md``
        and ``.cursorrules`` are repo skills of their whole text. ``skip_mcp``
        is accepted for OpenHands' signature (cowconv does not read ``.mcp.json``).

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder, "deploy.md")
        ...     _ = path.write_text("---\\ntriggers: [deploy]\\n---\\nRun make release.\\n")
        ...     skill = Skill.load(path)
        >>> skill.name, skill.get_triggers(), skill.content
        ('deploy', ['deploy'], 'Run make release.')
        """
        del skip_mcp
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise SkillValidationError(f"{path}: not UTF-8 text ({error})") from None
        if path.name.lower() == "skill.md":
            return cls._load_agentskills(path, text, strict)
        third_party = cls.PATH_TO_THIRD_PARTY_SKILL_NAME.get(path.name.lower())
        if third_party is not None:
            return cls(name=third_party, content=text, source=path.as_posix())
        if skill_base_dir is not None:
            derived = path.relative_to(skill_base_dir).with_suffix("").as_posix()
        else:
            derived = path.stem
        metadata, content = split_front_matter(text, str(path), SkillValidationError)
        return cls._from_metadata(str(metadata.get("name", derived)), content, path, metadata)

    @classmethod
    def _load_agentskills(cls, path: Path, text: str, strict: bool) -> Skill:
        directory = path.parent.name
        metadata, content = split_front_matter(text, str(path), SkillValidationError)
        name = str(metadata.get("name", directory))
        if strict:
            problems = _name_problems(name, directory)
            if problems:
                raise SkillValidationError(f"Invalid skill name '{name}': {'; '.join(problems)}")
        resources = _resources(path.parent)
        return cls._from_metadata(
            name,
            content,
            path,
            metadata,
            resources=resources if resources.has_resources() else None,
            is_agentskills_format=True,
        )

    @classmethod
    def _from_metadata(
        cls,
        name: str,
        content: str,
        path: Path,
        metadata: Mapping[str, Any],
        resources: SkillResources | None = None,
        is_agentskills_format: bool = False,
    ) -> Skill:
        fields: dict[str, Any] = {
            "description": metadata.get("description"),
            "license": metadata.get("license"),
            "compatibility": metadata.get("compatibility"),
            "metadata": metadata.get("metadata"),
            "allowed_tools": metadata.get("allowed-tools", metadata.get("allowed_tools")),
            "disable_model_invocation": metadata.get(
                "disable-model-invocation", metadata.get("disable_model_invocation")
            ),
            "mcp_tools": None if is_agentskills_format else metadata.get("mcp_tools"),
        }
        fields = {key: value for key, value in fields.items() if value is not None}
        keywords = metadata.get("triggers", [])
        if not isinstance(keywords, list):
            raise SkillValidationError("Triggers must be a list of strings")
        keywords = [str(word) for word in keywords]
        paths = metadata.get("paths")
        if isinstance(paths, str):
            paths = paths.split(",")
        if paths is not None and not isinstance(paths, list):
            raise SkillValidationError("paths must be a string or list")
        paths = [text for item in paths or () if (text := str(item).strip())]
        trigger: BaseTrigger | None = None
        inputs: list[InputMetadata] = []
        if paths:
            trigger = PathTrigger(paths=tuple(paths))
        elif "inputs" in metadata:
            if f"/{name}" not in keywords:
                keywords.append(f"/{name}")
            raw = metadata.get("inputs") or []
            if not isinstance(raw, list):
                raise SkillValidationError("inputs must be a list")
            inputs = [InputMetadata.model_validate(item) for item in raw]
            trigger = TaskTrigger(triggers=tuple(keywords))
        elif keywords:
            trigger = KeywordTrigger(keywords=tuple(keywords))
        return cls(
            name=name,
            content=content,
            source=path.as_posix(),
            trigger=trigger,
            inputs=tuple(inputs),
            resources=resources,
            is_agentskills_format=is_agentskills_format,
            **fields,
        )


class SkillKnowledge(CheckedModel):
    """A knowledge skill a message activated: its name, the keyword that matched, its text.

    >>> SkillKnowledge(name="git", trigger="git", content="Use rebase.").location is None
    True
    """

    model_config = _MODEL

    name: str
    trigger: str
    content: str
    location: str | None = None


_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def _name_problems(name: str, directory: str | None) -> list[str]:
    if not name:
        return ["Name cannot be empty"]
    problems = []
    if len(name) > 64:
        problems.append(f"Name exceeds 64 characters: {len(name)}")
    if not _NAME.match(name):
        problems.append(
            "Name must be lowercase alphanumeric with single hyphens "
            "(e.g., 'my-skill', 'pdf-tools')"
        )
    if directory and name != directory:
        problems.append(f"Name '{name}' does not match directory '{directory}'")
    return problems


def _resources(skill_root: Path) -> SkillResources:
    found: dict[str, tuple[str, ...]] = {}
    for kind in ("scripts", "references", "assets"):
        directory = skill_root / kind
        if directory.is_dir():
            found[kind] = tuple(
                sorted(
                    item.relative_to(directory).as_posix()
                    for item in directory.rglob("*")
                    if item.is_file()
                )
            )
    return SkillResources(skill_root=skill_root.resolve().as_posix(), **found)


def _skill_md(directory: Path) -> Path | None:
    if not directory.is_dir():
        return None
    return next(
        (
            item
            for item in sorted(directory.iterdir())
            if item.is_file() and item.name.lower() == "skill.md"
        ),
        None,
    )


def load_skills_from_dir(
    skill_dir: str | Path,
    strict: bool = True,
    recursive: bool = True,
) -> tuple[dict[str, Skill], dict[str, Skill], dict[str, Skill]]:
    """The skills of a directory: ``(repo_skills, knowledge_skills, agent_skills)`` by name.

    ``*/SKILL.md`` directories are AgentSkills skills (other markdown below
    them is their reference material); every other ``.md`` file but
    ``README.md`` is a repo or knowledge skill named by its path below
    ``skill_dir`` (only the directory's own files unless ``recursive``).
    A file that fails to load is logged and skipped; a missing directory
    has no skills.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = Path(folder, "style.md").write_text("Use tabs.")
    ...     _ = Path(folder, "pdf").mkdir()
    ...     _ = Path(folder, "pdf", "SKILL.md").write_text("---\\ndescription: PDFs\\n---\\nRead.")
    ...     repo, knowledge, agent = load_skills_from_dir(folder)
    >>> sorted(repo), sorted(knowledge), sorted(agent)
    (['style'], [], ['pdf'])
    """
    skill_dir = Path(skill_dir)
    repo: dict[str, Skill] = {}
    knowledge: dict[str, Skill] = {}
    agent: dict[str, Skill] = {}
    if not skill_dir.is_dir():
        return repo, knowledge, agent
    skill_files = [
        found for sub in sorted(skill_dir.iterdir()) if (found := _skill_md(sub)) is not None
    ]
    skill_dirs = {found.parent for found in skill_files}
    if recursive:
        regular = [
            item
            for item in sorted(skill_dir.rglob("*.md"))
            if item.is_file()
            and item.name != "README.md"
            and item.name.lower() != "skill.md"
            and not any(item.is_relative_to(directory) for directory in skill_dirs)
        ]
    else:
        regular = [
            item
            for item in sorted(skill_dir.glob("*.md"))
            if item.is_file() and item.name.lower() != "readme.md"
        ]
    for path in (*skill_files, *regular):
        try:
            skill = Skill.load(path, skill_dir, strict=strict)
        except (InvalidValueError, OSError, ValueError) as error:
            logger.warning("Failed to load skill from %s: %s", path, error)
            continue
        if path.name.lower() == "skill.md":
            agent[skill.name] = skill
        elif skill.trigger is None:
            repo[skill.name] = skill
        else:
            knowledge[skill.name] = skill
    return repo, knowledge, agent


def user_persistence_dir() -> Path:
    """OpenHands' per-user directory: ``OH_PERSISTENCE_DIR``, else ``~/.openhands``.

    >>> user_persistence_dir().name in {".openhands", os.environ.get("OH_PERSISTENCE_DIR", "")}
    True
    """
    configured = os.environ.get("OH_PERSISTENCE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".openhands"


def _merge_dirs(directories: Iterable[Path], seen: set[str], skills: list[Skill]) -> None:
    for directory in directories:
        for group in load_skills_from_dir(directory):
            for name, skill in group.items():
                if name not in seen:
                    seen.add(name)
                    skills.append(skill)
                else:
                    logger.debug("Skipping duplicate skill %r from %s", name, directory)


def load_user_skills() -> list[Skill]:
    """The user's skills, from ``~/.agents/skills`` and ``~/.openhands/skills``.

    Also from ``~/.openhands/microagents`` (the older place); the first
    directory wins for a name found in several.

    >>> isinstance(load_user_skills(), list)
    True
    """
    home = user_persistence_dir()
    skills: list[Skill] = []
    _merge_dirs(
        (Path.home() / ".agents" / "skills", home / "skills", home / "microagents"), set(), skills
    )
    return skills


def load_project_skills(work_dir: str | Path) -> list[Skill]:
    """The skills of a project, as OpenHands' SDK finds them in its working directory.

    First the third-party files (``AGENTS.md``, ``CLAUDE.md``, ``GEMINI.md``,
    ``.cursorrules``; any case) in ``work_dir`` and, when it is inside a git
    repository, the repository's root; then ``.agents/skills``,
    ``.openhands/skills`` and ``.openhands/microagents`` of each. The
    working directory wins over the repository root, and earlier places
    over later ones, for a name found twice.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = Path(folder, "AGENTS.md").write_text("Run the tests with make test.")
    ...     [(skill.name, skill.content) for skill in load_project_skills(folder)]
    [('agents', 'Run the tests with make test.')]
    """
    work_dir = Path(work_dir)
    roots = [work_dir]
    git_root = next((c for c in (work_dir, *work_dir.parents) if (c / ".git").exists()), None)
    if git_root is not None and git_root != work_dir:
        roots.append(git_root)
    skills: list[Skill] = []
    seen: set[str] = set()
    for root in roots:
        if not root.is_dir():
            continue
        found_names: set[str] = set()
        found_real: set[Path] = set()
        for item in sorted(root.iterdir()):
            lowered = item.name.lower()
            if not item.is_file() or lowered not in Skill.PATH_TO_THIRD_PARTY_SKILL_NAME:
                continue
            real = item.resolve()
            if lowered in found_names or real in found_real:
                continue  # agents.md beside AGENTS.md, or CLAUDE.md -> AGENTS.md
            found_names.add(lowered)
            found_real.add(real)
            try:
                skill = Skill.load(item)
            except (InvalidValueError, OSError) as error:
                logger.warning("Failed to load third-party skill from %s: %s", item, error)
                continue
            if skill.name not in seen:
                seen.add(skill.name)
                skills.append(skill)
    for root in roots:
        _merge_dirs(
            (
                root / ".agents" / "skills",
                root / ".openhands" / "skills",
                root / ".openhands" / "microagents",
            ),
            seen,
            skills,
        )
    return skills


def merge_skills_by_name(first: Iterable[Skill], second: Iterable[Skill]) -> list[Skill]:
    """``first`` then the skills of ``second`` whose names ``first`` does not have.

    >>> a, b = Skill(name="x", content="1"), Skill(name="x", content="2")
    >>> [skill.content for skill in merge_skills_by_name([a], [b, Skill(name="y", content="3")])]
    ['1', '3']
    """
    merged = list(first)
    names = {skill.name for skill in merged}
    for skill in second:
        if skill.name not in names:
            names.add(skill.name)
            merged.append(skill)
    return merged


def _xml_text(text: str) -> str:
    """``text`` inside an XML element: ``&``, ``<`` and ``>`` escaped (``xml.sax.saxutils.escape``
    does the same, but importing it loads ``urllib.request`` and ``ssl``)."""
    return html.escape(text, quote=False)


def to_prompt(skills: Iterable[Skill], max_description_length: int = 1024) -> str:
    """The ``<available_skills>`` block listing ``skills`` by name and description.

    A skill without a description is described by its first line of text
    that is not a heading; a cut description says how many characters
    were left out.

    >>> print(to_prompt([Skill(name="pdf-tools", content="x", description="Read PDFs.")]))
    <available_skills>
      <skill>
        <name>pdf-tools</name>
        <description>Read PDFs.</description>
      </skill>
    </available_skills>
    """
    skills = list(skills)
    if not skills:
        return "<available_skills>\n  no available skills\n</available_skills>"
    lines = ["<available_skills>"]
    for skill in skills:
        description = skill.description
        truncated = 0
        if not description:
            before = 0
            for line in skill.content.split("\n"):
                stripped = line.strip()
                if not stripped or stripped.startswith("#"):
                    before += len(line) + 1
                    continue
                description = stripped
                truncated = max(0, len(skill.content) - (before + len(line)))
                break
        description = description or ""
        if len(description) > max_description_length:
            truncated += len(description) - max_description_length
            description = description[:max_description_length]
        if truncated > 0:
            description += (
                f"... [{truncated} characters truncated. "
                f'Call invoke_skill(name="{skill.name}") to load the full skill]'
            )
        lines += [
            "  <skill>",
            f"    <name>{_xml_text(skill.name.strip())}</name>",
            f"    <description>{_xml_text(description.strip())}</description>",
            "  </skill>",
        ]
    lines.append("</available_skills>")
    return "\n".join(lines)
