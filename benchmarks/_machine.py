"""Where and with what a run happened: machine, interpreter, package versions."""

from __future__ import annotations

import platform
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from cowconv.core.history import VECTOR_IMPLEMENTATION

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
        "cpus": psutil.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
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
    found["pyrsistent vector"] = VECTOR_IMPLEMENTATION
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
        return [round(value, 2) for value in psutil.getloadavg()]
    except (OSError, AttributeError):
        return None


BUSY_LOAD_PER_CPU = 0.75
"""A 1-minute load average above this many runnable processes per CPU counts as busy: the
suite itself keeps one CPU busy, so on two CPUs anything past 1.5 means it shared them."""


def busy(load: Sequence[float] | None, cpus: int | None) -> bool:
    """Whether a load average says other work competed with the suite for the CPUs."""
    if not load or not cpus:
        return False
    return load[0] > BUSY_LOAD_PER_CPU * cpus


def _cpu_model() -> str:
    # psutil has no CPU model name; Linux has it in /proc/cpuinfo, other systems in platform.
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
