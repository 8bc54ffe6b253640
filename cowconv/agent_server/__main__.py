"""``python -m cowconv.agent_server``: serve conversations over HTTP.

>>> _parser().parse_args(["--port", "8001"]).host
'127.0.0.1'
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]

SESSION_API_KEY_ENV = "COWCONV_SESSION_API_KEY"
DATA_DIR_ENV = "COWCONV_DATA_DIR"
# Relative to the working directory, like the seed's server: a server started in a project
# keeps its conversations there, and a run in a scratch directory leaves nothing elsewhere.
DEFAULT_DATA_DIR = Path(".cowconv/agent_server")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cowconv.agent_server",
        description="Serve cowconv conversations over a JSON REST API (docs/server.md).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"where the conversation store lives (default ${DATA_DIR_ENV} or {DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--session-api-key",
        default=None,
        help=f"require this X-Session-API-Key on every /api route (default ${SESSION_API_KEY_ENV});"
        " prefer the environment variable, since arguments show in process listings",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="log level (default info)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and serve until interrupted."""
    args = _parser().parse_args(argv)
    try:
        import uvicorn

        from cowconv.agent_server import create_app
    except ImportError as error:
        raise SystemExit(f"{error}: pip install 'cowconv[server]'") from None
    data_dir = args.data_dir or Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)
    session_api_key = args.session_api_key or os.environ.get(SESSION_API_KEY_ENV) or None
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    app = create_app(data_dir=data_dir.expanduser(), session_api_key=session_api_key)
    logging.getLogger("cowconv.agent_server").info(
        "serving on http://%s:%d, data in %s, session API key %s",
        args.host,
        args.port,
        data_dir,
        "required" if session_api_key else "not required",
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=5,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
