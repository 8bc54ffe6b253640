"""The YAML front matter of a Markdown file: the one reader of skill and agent files.

>>> split_front_matter("---\\nname: fork\\n---\\n# Forking\\n", "SKILL.md")
({'name': 'fork'}, '# Forking')

The front matter is the YAML between a first line ``---`` and the next line
``---`` (or ``...``), as python-frontmatter (OpenHands' reader of both
kinds of file) takes it; the body after it comes back stripped, as there.
"""

from __future__ import annotations

from typing import Any

from cowconv._exceptions import InvalidValueError

__all__ = ["split_front_matter"]


def split_front_matter(
    text: str, source: str, error: type[InvalidValueError] = InvalidValueError
) -> tuple[dict[str, Any], str]:
    """The front matter of ``text`` (``{}`` without one, keys as text) and the body after it.

    YAML that does not parse, or that is not a mapping, is an ``error`` (an
    :class:`~cowconv.InvalidValueError`) whose message starts with ``source``.

    >>> split_front_matter("No front matter.", "notes.md")
    ({}, 'No front matter.')
    >>> split_front_matter("---\\n- a list\\n---\\nbody", "a.md")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: a.md: its front matter must be a mapping, got list
    """
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return {}, text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        return {}, text
    import yaml  # only when a skill or agent file is read: ``import cowconv`` stays light

    try:
        front = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as problem:
        raise error(f"{source}: its front matter is not valid YAML ({problem})") from None
    if front is None:
        front = {}
    if not isinstance(front, dict):
        raise error(f"{source}: its front matter must be a mapping, got {type(front).__name__}")
    return {str(key): value for key, value in front.items()}, "\n".join(lines[end + 1 :]).strip()
