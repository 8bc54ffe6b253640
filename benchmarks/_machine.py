"""Where and with what a run happened: machine, interpreter, package versions."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = (
    "cowconv",
    "pydantic",
    "pydantic-core",
    "pyrsistent",
    "immutables",
    "litellm",
    "fastapi",
    "uvicorn",
    "httpx",
    "rich",
    "matplotlib",
)

_ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_bytes": _memory_total(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "load_average": load_average(),
    }


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    # pyrsistent falls back to pure Python (several times slower) without its C extension.
    try:
        import pvectorc  # type: ignore[import-not-found]  # noqa: F401

        found["pyrsistent C extension"] = "yes"
    except ImportError:
        found["pyrsistent C extension"] = "no"
    return found


def git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "cowconv"],
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return f"{commit} (cowconv/ modified)" if dirty.stdout.strip() else commit


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages: other work on the machine adds noise."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
