"""Build (once) a Python >= 3.12 environment with OpenHands' SDK 1.58.2 in it.

OpenHands' packages need Python 3.12 or later; cowconv's test suite and CI may
run on 3.11. :func:`openhands_python` finds a Python >= 3.12 on the machine,
creates a virtual environment with ``openhands-sdk``, ``openhands-tools`` and
``openhands-agent-server`` 1.58.2 (plus pytest and what OpenHands' tests use),
caches it under a directory keyed by the Python version and the package list,
and returns the path of its ``python``. A second call returns at once; two
processes calling it together build it once (an exclusive file lock), and a
build that died half-way is thrown away and done again.

    from tests.openhands.venv import openhands_python
    python = openhands_python()      # 2-3 min cold (101-165 s measured), then instant

or from a shell (prints the path): ``python tests/openhands/venv.py``.

The cache directory is ``$COWCONV_OPENHANDS_VENV_CACHE`` or
``~/.cache/cowconv/openhands-venvs``; ``$COWCONV_OPENHANDS_PYTHON`` names the
base interpreter to use instead of searching.

>>> key = venv_key((3, 12), ("openhands-sdk==1.58.2", "pytest"))
>>> key.startswith("py312-openhands-1.58.2-") and len(key) == len("py312-openhands-1.58.2-") + 10
True
>>> venv_key((3, 12), ("pytest", "openhands-sdk==1.58.2")) == key
True
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "OPENHANDS_PACKAGES",
    "OPENHANDS_VERSION",
    "TEST_PACKAGES",
    "cache_root",
    "find_python",
    "openhands_python",
    "venv_key",
]

OPENHANDS_VERSION = "1.58.2"
OPENHANDS_PACKAGES: tuple[str, ...] = (
    f"openhands-sdk=={OPENHANDS_VERSION}",
    f"openhands-tools=={OPENHANDS_VERSION}",
    f"openhands-agent-server=={OPENHANDS_VERSION}",
)
#: What OpenHands' own tests need on top of the packages (tests/openhands/port.py).
TEST_PACKAGES: tuple[str, ...] = ("pytest", "pytest-asyncio", "pytest-timeout", "psutil")
MINIMUM = (3, 12)
_READY = "cowconv-ready.json"


def _version_of(python: str | Path) -> tuple[int, int] | None:
    """The (major, minor) of an interpreter, or None when it does not run."""
    try:
        result = subprocess.run(
            [str(python), "-I", "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    major, minor = result.stdout.split()
    return int(major), int(minor)


def _candidates() -> Iterable[str]:
    explicit = os.environ.get("COWCONV_OPENHANDS_PYTHON")
    if explicit:
        yield explicit
    yield sys.executable
    # 3.12 first: the version OpenHands' 1.58.2 baseline was measured on.
    for name in ("python3.12", "python3.13", "python3.14"):
        found = shutil.which(name)
        if found:
            yield found
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    versions = pyenv_root / "versions"
    if versions.is_dir():
        for prefix in ("3.12", "3.13", "3.14"):
            for version in sorted(versions.glob(prefix + "*"), reverse=True):
                yield str(version / "bin" / "python")
    for prefix in ("/usr/local/bin", "/usr/bin"):
        for name in ("python3.12", "python3.13", "python3.14", "python3"):
            yield f"{prefix}/{name}"
    # Pythons uv manages (`uv python install 3.12`), found without downloading anything.
    uv = shutil.which("uv")
    if uv:
        try:
            found = subprocess.run(
                [uv, "python", "find", "--no-python-downloads", ">=3.12"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return
        if found.returncode == 0 and found.stdout.strip():
            yield found.stdout.strip()


def find_python(minimum: tuple[int, int] = MINIMUM) -> tuple[Path, tuple[int, int]]:
    """A Python >= ``minimum`` on this machine and its version.

    Looks at ``$COWCONV_OPENHANDS_PYTHON``, the running interpreter,
    ``python3.12``/``python3.13``/``python3.14`` on PATH, pyenv's 3.12/3.13/3.14
    versions (``$PYENV_ROOT/versions`` or ``~/.pyenv/versions``), then
    /usr/local/bin and /usr/bin, then the Pythons ``uv`` manages. A pyenv shim
    that cannot run its version is skipped. None found: a ``RuntimeError``
    that says where it looked and how to install one.
    """
    seen: set[str] = set()
    for candidate in _candidates():
        if candidate in seen or not Path(candidate).exists():
            continue
        seen.add(candidate)
        version = _version_of(candidate)
        if version is not None and version >= minimum:
            return Path(candidate), version
    raise RuntimeError(
        f"no Python >= {minimum[0]}.{minimum[1]} found: OpenHands' SDK 1.58.2 needs one, and "
        "tests/test_openhands_wire.py and the ported OpenHands tests run it. Looked at "
        "$COWCONV_OPENHANDS_PYTHON, this interpreter, python3.12/3.13/3.14 on PATH, pyenv's "
        "versions, /usr/local/bin, /usr/bin and uv's Pythons. Install one (`uv python install "
        "3.12`, `pyenv install 3.12`, or the system package `python3.12`) or point "
        "COWCONV_OPENHANDS_PYTHON at one"
    )


def venv_key(version: tuple[int, int], packages: Sequence[str]) -> str:
    """The cache directory name for a Python version and a package list."""
    digest = hashlib.sha256("\n".join(sorted(packages)).encode()).hexdigest()[:10]
    return f"py{version[0]}{version[1]}-openhands-{OPENHANDS_VERSION}-{digest}"


def cache_root() -> Path:
    """Where the environments are kept."""
    configured = os.environ.get("COWCONV_OPENHANDS_VENV_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "cowconv" / "openhands-venvs"


def _venv_python(directory: Path) -> Path:
    return directory / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _ready(directory: Path, packages: Sequence[str]) -> bool:
    marker = directory / _READY
    if not marker.exists() or not _venv_python(directory).exists():
        return False
    try:
        return sorted(json.loads(marker.read_text())["packages"]) == sorted(packages)
    except (ValueError, KeyError):
        return False


class _FileLock:
    """An exclusive lock on a file, held across processes (fcntl; O_EXCL elsewhere)."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._handle: int | None = None

    def __enter__(self) -> _FileLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.timeout
        try:
            import fcntl
        except ImportError:  # not POSIX: spin on an exclusively created file
            while True:
                try:
                    self._handle = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                    return self
                except FileExistsError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{self.path} is held by another build") from None
                    time.sleep(1)
        self._handle = os.open(self.path, os.O_CREAT | os.O_RDWR)
        while True:
            try:
                fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self._handle)
                    raise TimeoutError(f"{self.path} is held by another build") from None
                time.sleep(0.5)

    def __exit__(self, *exc_info: object) -> None:
        assert self._handle is not None
        try:
            import fcntl

            fcntl.flock(self._handle, fcntl.LOCK_UN)
            os.close(self._handle)
        except ImportError:
            os.close(self._handle)
            self.path.unlink(missing_ok=True)


def openhands_python(
    packages: Sequence[str] = OPENHANDS_PACKAGES + TEST_PACKAGES,
    *,
    cache: Path | None = None,
    base_python: Path | None = None,
    timeout: float = 1800,
    quiet: bool = True,
) -> Path:
    """The ``python`` of a cached environment with ``packages``, built if needed.

    Safe to call from several processes at once: the first builds under an
    exclusive lock, the others wait for it and reuse the result.
    """
    if base_python is None:
        base_python, version = find_python()
    else:
        found = _version_of(base_python)
        if found is None or found < MINIMUM:
            raise RuntimeError(f"{base_python} is not a Python >= 3.12")
        version = found
    root = cache if cache is not None else cache_root()
    directory = root / venv_key(version, packages)
    if _ready(directory, packages):
        return _venv_python(directory)
    with _FileLock(root / (directory.name + ".lock"), timeout):
        if _ready(directory, packages):  # another process built it while we waited
            return _venv_python(directory)
        if directory.exists():  # a build that died half-way
            shutil.rmtree(directory)
        started = time.monotonic()
        # -I: the working directory must not shadow the stdlib's venv (this file is venv.py).
        subprocess.run([str(base_python), "-I", "-m", "venv", str(directory)], check=True)
        python = _venv_python(directory)
        pip = [str(python), "-I", "-m", "pip", "--disable-pip-version-check"]
        if quiet:
            pip.append("-q")
        subprocess.run([*pip, "install", *packages], check=True, timeout=timeout)
        (directory / _READY).write_text(
            json.dumps(
                {
                    "packages": sorted(packages),
                    "base_python": str(base_python),
                    "python_version": list(version),
                    "build_seconds": round(time.monotonic() - started, 1),
                },
                indent=2,
            )
        )
        return python


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, help="cache directory")
    parser.add_argument("--base-python", type=Path, help="interpreter to build from")
    parser.add_argument(
        "--no-test-packages", action="store_true", help="only the three OpenHands packages"
    )
    args = parser.parse_args(argv)
    packages = OPENHANDS_PACKAGES if args.no_test_packages else OPENHANDS_PACKAGES + TEST_PACKAGES
    print(openhands_python(packages, cache=args.cache, base_python=args.base_python, quiet=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
