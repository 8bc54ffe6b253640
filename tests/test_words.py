"""Words: the project names OpenHands' SDK as such, never by an insider's nickname.

The nickname is the four letters s-e-e-d (written apart here so that this file passes its
own check). Every file git tracks is read, code, messages, docs, the benchmark report and
tests alike. Left out: this file, and ``tests/test_seed_compat.py`` and mentions of that
file name, which another change renames. The CHANGELOG is checked too: its history says
"OpenHands' SDK" as well. Seeding a random generator (``random.seed(...)``,
``_reseed``) is another word and is allowed.

Nor does the project point at its tracker's numbered threads: code, docs, tests and the
CHANGELOG say what the code does, not which thread asked for it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NICKNAME = "s" + "eed"
PATTERN = re.compile(rf"(?<![a-z]){NICKNAME}(?!\()", re.IGNORECASE)
EXCLUDED = {"tests/test_words.py", f"tests/test_{NICKNAME}_compat.py"}
PENDING_RENAME = f"test_{NICKNAME}_compat"
INSIDER_PHRASES = (
    "the agent SDK our users know",
    "the first sketch",
    "the reported cases",
    "faheemcode",  # a package that does not exist; OpenHands imports are openhands.sdk
)
# The word, an optional "s", space or "#", then a number; spelt in parts to pass itself.
ISSUE_NUMBER = re.compile("iss" + r"ues? ?#?[0-9]+", re.IGNORECASE)
ISSUE_TREES = ("cowconv", "docs", "benchmarks", "tests", "examples")
ISSUE_FILES = ("pyproject.toml", "README.md", "CHANGELOG.md")


def _tracked() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    paths = [ROOT / name for name in names if name not in EXCLUDED]
    return [path for path in paths if path.is_file()]


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        return None  # images, databases


def test_no_nickname_for_openhands_sdk() -> None:
    """No tracked file (or file name) calls OpenHands' SDK by the nickname."""
    found = []
    for path in _tracked():
        name = str(path.relative_to(ROOT))
        if PATTERN.search(name.replace(PENDING_RENAME, "")):
            found.append(name)
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if PATTERN.search(line.replace(PENDING_RENAME, "")):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert found == [], "say OpenHands' SDK (or OpenHands' software-agent-sdk)"


def test_no_insider_phrases() -> None:
    """Phrases only the team understood stay out of the tracked files."""
    found = [
        f"{path.relative_to(ROOT)}: {phrase}"
        for path in _tracked()
        if (text := _text(path)) is not None
        for phrase in INSIDER_PHRASES
        if phrase in text and path.name != "test_words.py"
    ]
    assert found == []


def _in_issue_scope(name: str) -> bool:
    return name in ISSUE_FILES or name.split("/", 1)[0] in ISSUE_TREES


def test_issue_number_pattern() -> None:
    """The pattern finds each spelling of a numbered thread, and ordinary use of the word."""
    word = "iss" + "ue"
    for text in (f"{word} 12", f"{word.title()}s 3", f"{word} #40", f"{word}7"):
        assert ISSUE_NUMBER.search(text), text
    for text in (f"a known {word}", f"{word}s with 2 forks", "tissue"):
        assert not ISSUE_NUMBER.search(text), text


def test_no_issue_numbers() -> None:
    """Code, docs, tests and the CHANGELOG say what the code does, never "issue N"."""
    found = []
    for path in _tracked():
        name = str(path.relative_to(ROOT))
        if not _in_issue_scope(name):
            continue
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if ISSUE_NUMBER.search(line):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert found == [], "say what the code does instead of naming a tracker thread"
