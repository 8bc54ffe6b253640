"""The documentation site's structure: every page reachable from the nav, exactly once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _pages(value)]
    return []


def _nav() -> list[str]:
    # mkdocs.yml may hold !!python tags for plugins: read only the nav.
    text = (ROOT / "mkdocs.yml").read_text()
    loaded = yaml.load(text, Loader=yaml.BaseLoader)  # noqa: S506 - BaseLoader builds no objects
    return _pages(loaded["nav"])


class TestNav:
    def test_each_page_once(self) -> None:
        """No page is listed twice in the nav."""
        repeated = [page for page, count in Counter(_nav()).items() if count > 1]
        assert repeated == []

    def test_every_page_listed(self) -> None:
        """Every Markdown page in docs/ is in the nav, and every nav entry exists."""
        pages = {str(path.relative_to(DOCS)) for path in DOCS.glob("*.md")}
        assert set(_nav()) == pages


def _headings(lines: list[str]) -> list[int]:
    """Positions of H1 lines outside fenced code blocks."""
    found, fenced = [], False
    for position, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("# "):
            found.append(position)
    return found


def _expanded(path: Path) -> list[str]:
    """The page's lines with its ``--8<--`` snippets (and their line ranges) inlined."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith('--8<-- "'):
            lines.append(line)
            continue
        target, *bounds = line.split('"')[1].split(":")
        embedded = (ROOT / target).read_text().splitlines()
        start = int(bounds[0]) - 1 if bounds and bounds[0] else 0
        end = int(bounds[1]) if len(bounds) > 1 and bounds[1] else len(embedded)
        lines += embedded[start:end]
    return lines


class TestPages:
    def test_one_title_per_page(self) -> None:
        """Each page, snippets included, has one H1 and it comes first."""
        for path in DOCS.glob("*.md"):
            lines = _expanded(path)
            assert _headings(lines) == [0], path
