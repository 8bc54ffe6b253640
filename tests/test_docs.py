"""The documentation: every page reachable from the nav exactly once, and every code block in
README.md and docs/ either run here as written or marked as a fragment.

A block is marked by the line ``<!-- fragment: why -->`` just before its fence (Markdown
does not show it). Every other block is Python and runs as a script of its own: in a new
namespace, in an empty temporary directory (which is also ``$HOME``), with ``LLM_MODEL``,
``LLM_BASE_URL`` and ``LLM_API_KEY`` pointing at a stub LLM from :mod:`cowconv.testing`, as
``python -m cowconv.testing -- python block.py`` would run it.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cowconv import Conversation, ExecutionStatus, RemoteConversation
from cowconv.testing import StubLLMServer

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


# -- code blocks ---------------------------------------------------------------------------------

FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)\s*$")
FRAGMENT = re.compile(r"^\s*<!-- fragment: .+ -->\s*$")
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int  # of the opening fence, 1-based, in the page with its snippets inlined
    lang: str
    code: str
    fragment: bool

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path) -> Iterator[Block]:
    """The fenced code blocks of ``path`` (snippets inlined), each with its marking."""
    lines = _expanded(path)
    position = 0
    while position < len(lines):
        opened = FENCE.match(lines[position])
        if not opened:
            position += 1
            continue
        indent = opened["indent"]
        end = position + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        before = next((line for line in reversed(lines[:position]) if line.strip()), "")
        code = "\n".join(line.removeprefix(indent) for line in lines[position + 1 : end])
        page = str(path.relative_to(ROOT))
        yield Block(page, position + 1, opened["lang"], code + "\n", bool(FRAGMENT.match(before)))
        position = end + 1


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]
RUN = [block for block in ALL_BLOCKS if not block.fragment]


@pytest.fixture(scope="module")
def docs_stub() -> Iterator[StubLLMServer]:
    """One stub LLM for every block (its default brain runs commands given in backticks)."""
    with StubLLMServer() as server:
        yield server


class TestCodeBlocks:
    def test_every_block_runs_or_is_a_fragment(self) -> None:
        """A block that is not marked as a fragment is Python (so that it can run here)."""
        unmarked = [block.name for block in RUN if block.lang != "python"]
        assert unmarked == [], "mark these with <!-- fragment: why --> or make them Python"

    def test_blocks_are_found(self) -> None:
        """The pages hold runnable blocks (a parser that finds none would pass everything)."""
        assert len(RUN) >= 15
        assert any(block.page == "README.md" for block in RUN)

    @pytest.mark.slow
    @pytest.mark.parametrize("block", RUN, ids=[block.name for block in RUN])
    def test_block_runs(
        self,
        block: Block,
        docs_stub: StubLLMServer,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The block runs as a script: in an empty directory, against the stub LLM."""
        home = tmp_path / "home"
        home.mkdir()
        work = tmp_path / "work"
        work.mkdir()
        monkeypatch.chdir(work)
        monkeypatch.setenv("HOME", str(home))
        for name, value in docs_stub.environment().items():
            monkeypatch.setenv(name, value)
        script = work / "block.py"
        script.write_text(block.code)
        namespace: dict[str, Any] = {"__name__": "__main__", "__file__": str(script)}
        monkeypatch.setattr(sys, "argv", [str(script)])
        exec(compile(block.code, f"{block.name}", "exec"), namespace)  # noqa: S102
        # A run that failed records it rather than raising: no conversation ended in error.
        for value in list(namespace.values()):
            for conversation in value if isinstance(value, list) else [value]:
                # (Remote ones are left out: their server stopped with the block.)
                if isinstance(conversation, Conversation) and not isinstance(
                    conversation, RemoteConversation
                ):
                    status = conversation.state.execution_status
                    assert status is not ExecutionStatus.ERROR, conversation.state.events[-1]
        # Nothing written outside the temporary directory's home: no ~/.cowconv.
        assert not (home / ".cowconv").exists()
        assert os.getcwd() == str(work)


# -- figures quoted against the committed benchmark report --------------------------------------

UNIT = r"(ns|µs|ms|KiB|MiB|GiB|B|×)"
NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
FIGURE = re.compile(rf"(?<![\w.,]){NUMBER}(?:\s?{UNIT}?\s?[–-]\s?{NUMBER})?\s?{UNIT}(?!\w)")


def figures(text: str) -> set[str]:
    """Every figure with a unit of time, memory or ratio in ``text``; a range counts as both
    ends ("5.62–5.83 µs" is 5.62 µs and 5.83 µs, "996 B–1 KiB" is 996 B and 1 KiB)."""
    found = set()
    for match in FIGURE.finditer(text):
        first, first_unit, second, unit = match.groups()
        found.add(f"{first} {first_unit or unit}")
        if second:
            found.add(f"{second} {unit}")
    return found


def prose(path: Path) -> str:
    """A page without its code blocks (their numbers are code, not claims)."""
    return re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)


class TestQuotedFigures:
    REPORT = DOCS / "benchmarks.md"

    def test_figures_are_read(self) -> None:
        """The parser reads figures, ranges and ratios the way the report writes them."""
        assert figures("takes 5.62–5.83 µs, 996 B–1 KiB, 20,212× and 1/64×.") == {
            "5.62 µs",
            "5.83 µs",
            "996 B",
            "1 KiB",
            "20,212 ×",
            "64 ×",
        }

    @pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
    def test_every_figure_is_in_the_report(self, page: str) -> None:
        """Each figure README.md and the docs' home page quote is one the committed
        docs/benchmarks.md measured, written the same way (no rounding, no older run)."""
        quoted = figures(prose(ROOT / page))
        assert quoted, f"{page} quotes no figure: is the parser broken?"
        measured = figures(self.REPORT.read_text())
        assert quoted - measured == set()

    @pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
    def test_no_claim_the_report_contradicts(self, page: str) -> None:
        """Words that once contradicted the report stay out."""
        text = prose(ROOT / page).lower()
        assert "under a kilobyte" not in text and "microseconds and" not in text
