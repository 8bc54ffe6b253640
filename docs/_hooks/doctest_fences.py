"""mkdocs hook: show the doctest examples of docstrings as Python code blocks.

cowconv's docstrings carry runnable ``>>>`` examples (the test suite runs them).
Markdown would read ``>>>`` as nested block quotes and ``[...]`` in their output
as links, so each run of doctest lines (from a ``>>>`` line to the next blank
line) is fenced as ``pycon`` before Markdown sees it.
"""

from __future__ import annotations

from typing import Any

from markdown import Extension, Markdown
from markdown.preprocessors import Preprocessor


class _DoctestFences(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        in_fence = False
        in_example = False
        for line in lines:
            stripped = line.lstrip()
            if stripped.startswith("```"):
                in_fence = not in_fence
            if not in_fence and not in_example and stripped.startswith(">>>"):
                indent = line[: len(line) - len(stripped)]
                out.append(f"{indent}```pycon")
                in_example = True
            elif in_example and not stripped:
                out.append(f"{indent}```")
                in_example = False
            out.append(line)
        if in_example:
            out.append(f"{indent}```")
        return out


class DoctestFences(Extension):
    """Register the preprocessor before Markdown's own block parsing."""

    def extendMarkdown(self, md: Markdown) -> None:  # noqa: N802 (Markdown's API)
        md.preprocessors.register(_DoctestFences(md), "cowconv_doctest_fences", 40)


def on_config(config: Any) -> Any:
    config.markdown_extensions.append(DoctestFences())
    return config
