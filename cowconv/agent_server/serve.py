"""Serving the agent server from the command line: settings, socket, uvicorn.

``python -m cowconv.agent_server`` and ``cowconv serve`` both run :func:`run_server`.

Each option falls back to an environment variable named for it
(``--data-dir`` → ``COWCONV_DATA_DIR``, lists comma separated), then to its
default; :class:`ServerSettings` reads
them (pydantic-settings) and validates all of them before anything starts.

>>> ServerSettings.from_options(port=8001).host
'127.0.0.1'
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from cowconv._exceptions import CowconvError, InvalidValueError, StartError, UnsafeExposureError
from cowconv.agent_server.app import create_app
from cowconv.agent_server.background import listening_socket
from cowconv.agent_server.registry import DEFAULT_MAX_LIVE
from cowconv.agent_server.security import DEFAULT_MAX_BODY_SIZE, check_exposure
from cowconv.stores import Store, open_store

__all__ = ["DEFAULT_DATA_DIR", "ENV_PREFIX", "ServerSettings", "run_server"]

# Relative to the working directory, like OpenHands' agent server: a server started in a project
# keeps its conversations there, and a run in a scratch directory leaves nothing elsewhere.
DEFAULT_DATA_DIR = Path(".cowconv/agent_server")
ENV_PREFIX = "COWCONV_"


class ServerSettings(BaseSettings):
    """The server's settings: options first, then ``COWCONV_*`` variables, then defaults.

    >>> ServerSettings(port=8001, data_dir="data").data_dir
    PosixPath('data')
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    data_dir: Path = DEFAULT_DATA_DIR
    store: str | None = Field(default=None, min_length=1)
    """A store to serve instead of ``data_dir``'s: a ``postgresql://`` URL (replicas share it)
    or a SQLite file."""
    session_api_key: str | None = Field(default=None, min_length=1)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    allowed_hosts: Annotated[list[str], NoDecode] = []
    """Host names requests may use besides the bound address and loopback names."""
    allowed_origins: Annotated[list[str], NoDecode] = []
    """Browser origins (``https://app.example``) allowed to change state."""
    allow_unauthenticated: bool = False
    """Serve a non-loopback address without a session key (refused otherwise)."""
    max_body_size: int = Field(default=DEFAULT_MAX_BODY_SIZE, ge=1)
    max_live_conversations: int = Field(default=DEFAULT_MAX_LIVE, ge=1)
    """Conversations kept in memory at most (idle ones beyond are evicted, reloaded on use)."""

    @field_validator("data_dir", mode="before")
    @classmethod
    def _not_blank(cls, value: Any) -> Any:
        # Path("") is ".": an empty --data-dir would silently put the store in the working
        # directory.
        if isinstance(value, str) and not value.strip():
            raise InvalidValueError("must not be empty")
        return value

    @field_validator("allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        # $COWCONV_ALLOWED_HOSTS="a.example,b.example"; options arrive as lists already.
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @classmethod
    def from_options(cls, **options: Any) -> ServerSettings:
        """Settings from command line options; ``None`` means "not given" (use the fallback).

        An invalid value raises :class:`StartError` naming the option or variable.

        >>> ServerSettings.from_options(port=None, log_level="debug").log_level
        'debug'
        """
        given = {name: value for name, value in options.items() if value not in (None, [], ())}
        try:
            return cls(**given)
        except ValidationError as error:
            raise StartError(_one_line(error, given)) from None


def _one_line(error: ValidationError, given: dict[str, Any]) -> str:
    problems = []
    for problem in error.errors(include_url=False):
        field = str(problem["loc"][0]) if problem["loc"] else "settings"
        name = "--" + field.replace("_", "-") if field in given else f"${ENV_PREFIX}{field.upper()}"
        shown = "<hidden>" if field == "session_api_key" else repr(problem.get("input"))
        problems.append(f"{name}: {problem['msg'].lower()} (got {shown})")
    return "; ".join(problems)


def _bind(host: str, port: int) -> socket.socket:
    try:
        return listening_socket(host, port)  # TCP_NODELAY: no 40 ms stall per request
    except OSError as error:
        raise StartError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None


def _missing_parents(directory: Path) -> Path | None:
    """The outermost directory of ``directory``'s path that does not exist yet (or None)."""
    outermost = None
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            break
        outermost = candidate
    return outermost


def _configure_logging(level: str) -> None:
    # One handler, on cowconv's own logger: a handler on the root logger would print a second
    # copy of every line of libraries with their own handler (litellm logs each call at INFO).
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("cowconv")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False


def run_server(settings: ServerSettings) -> None:
    """Start the server and serve until interrupted.

    Everything that can fail is checked first (the port is bound, the data
    directory must be a directory, the store must open): a failed start
    raises :class:`StartError` and leaves no directory or file behind.
    """
    try:
        import uvicorn
    except ImportError as error:
        raise StartError(f"{error}: pip install 'cowconv[server]'") from None
    # Absolute and normalised: "a/../data" must not leave "a" behind, and the log names it.
    data_dir = Path(os.path.abspath(settings.data_dir.expanduser()))
    if data_dir.exists() and not data_dir.is_dir():
        raise StartError(f"data directory {data_dir} exists and is not a directory")
    try:
        check_exposure(
            settings.host,
            session_api_key=settings.session_api_key,
            allowed_hosts=settings.allowed_hosts,
            allow_unauthenticated=settings.allow_unauthenticated,
        )
    except UnsafeExposureError as error:
        raise StartError(str(error)) from None
    listener = _bind(settings.host, settings.port)
    created = None if settings.store is not None else _missing_parents(data_dir)
    store: Store | None = None
    try:
        if settings.store is not None:
            store = open_store(settings.store)
        app = create_app(
            data_dir=None if store is not None else data_dir,
            store=store,
            session_api_key=settings.session_api_key,
            host=settings.host,
            allowed_hosts=settings.allowed_hosts,
            allowed_origins=settings.allowed_origins,
            allow_unauthenticated=settings.allow_unauthenticated,
            max_body_size=settings.max_body_size,
            max_live_conversations=settings.max_live_conversations,
        )
    except (CowconvError, OSError) as error:
        listener.close()
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        if store is not None:
            store.close()
        # Not the URL itself: it may hold a password.
        where = "the --store store" if settings.store else f"the store in {data_dir}"
        raise StartError(f"cannot open {where}: {error}") from None
    _configure_logging(settings.log_level)
    host, port = listener.getsockname()[:2]
    logging.getLogger("cowconv.agent_server").info(
        "serving on http://%s:%d, data in %s, session API key %s",
        f"[{host}]" if ":" in host else host,
        port,
        data_dir if store is None else store,
        "required" if settings.session_api_key else "not required",
    )
    config = uvicorn.Config(app, log_level=settings.log_level, timeout_graceful_shutdown=5)
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        if store is not None:
            store.close()
