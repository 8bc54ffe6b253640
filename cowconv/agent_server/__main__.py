"""``python -m cowconv.agent_server`` (or ``cowconv serve``): serve conversations over HTTP.

Each option falls back to an environment variable named for it
(``--data-dir`` → ``COWCONV_DATA_DIR``, lists comma separated), then to its
default; :class:`ServerSettings` reads
them (pydantic-settings) and validates all of them before anything starts.

>>> ServerSettings.from_options(port=8001).host
'127.0.0.1'
"""

from __future__ import annotations

from collections.abc import Sequence

from cowconv._cli import serve_main
from cowconv._exceptions import StartError
from cowconv.agent_server.serve import DEFAULT_DATA_DIR, ENV_PREFIX, ServerSettings, run_server

__all__ = ["DEFAULT_DATA_DIR", "ENV_PREFIX", "ServerSettings", "StartError", "main", "run_server"]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and serve until interrupted; returns the exit status."""
    return serve_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
