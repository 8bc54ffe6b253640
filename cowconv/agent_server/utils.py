"""Small helpers of the agent server (OpenHands' ``openhands.agent_server.utils`` names).

>>> utc_now().tzinfo is not None
True
>>> safe_rmtree(None)
True
"""

from __future__ import annotations

import logging
import os
import shutil
from datetime import UTC, datetime

__all__ = ["safe_rmtree", "utc_now"]

logger = logging.getLogger("cowconv.agent_server")


def utc_now() -> datetime:
    """Now, as an aware UTC datetime (the time stamps of conversations)."""
    return datetime.now(UTC)


def safe_rmtree(path: str | os.PathLike[str] | None, description: str = "directory") -> bool:
    """Remove a directory tree; ``True`` when it is gone (or never was), ``False`` (logged)
    when it could not be removed. A symbolic link is unlinked, never followed.

    >>> import tempfile
    >>> from pathlib import Path
    >>> directory = Path(tempfile.mkdtemp())
    >>> (directory / "meta.json").write_text("{}")
    2
    >>> safe_rmtree(directory, "a test directory"), directory.exists()
    (True, False)
    """
    if not path or not os.path.lexists(path):
        return True
    try:
        if os.path.islink(path):
            os.unlink(path)
        else:
            shutil.rmtree(path)
    except OSError as error:
        logger.warning("could not remove %s at %s: %s", description, path, error)
        return False
    return True
