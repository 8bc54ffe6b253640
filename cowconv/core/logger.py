"""Per-module loggers and one root setup: Rich for people, JSON for machines.

OpenHands' SDK's logging, with the same names and environment variables:
:func:`get_logger` gives the standard library's logger for a module name (it
propagates to the root), and :func:`setup_logging` configures the root once
(a Rich console handler, or JSON lines when ``LOG_JSON`` or ``CI`` is set,
and optionally a daily rotating file). The environment is read when this
module is imported:

- ``LOG_LEVEL`` (``INFO``): the level name; ``DEBUG=1`` forces ``DEBUG``.
- ``LOG_JSON`` (false): JSON lines instead of Rich (also when ``CI`` or
  ``GITHUB_ACTIONS`` is set, on the console).
- ``LOG_TO_FILE`` (false), ``LOG_DIR`` (``logs``), ``LOG_ROTATE_WHEN``
  (``midnight``), ``LOG_BACKUP_COUNT`` (7): the file ``LOG_DIR/app.log``.
- ``LOG_RICH_TRACEBACKS`` (true): Rich renders exceptions.

This module configures nothing when imported (``cowconv.core`` stays free of
side effects); :mod:`cowconv.logger`, the module users import, calls
:func:`setup_logging` on import unless ``LOG_AUTO_CONFIG`` is false, as
OpenHands' SDK does. Rich is imported only when a Rich handler is built.

>>> logger = get_logger("my_app.module")
>>> logger.name, logger.propagate
('my_app.module', True)
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cowconv._exceptions import InvalidTypeError, InvalidValueError

if TYPE_CHECKING:
    from rich.live import Live

__all__ = [
    "DEBUG",
    "ENV_JSON",
    "ENV_LOG_DIR",
    "ENV_LOG_LEVEL",
    "IN_CI",
    "JsonLogFormatter",
    "get_logger",
    "rolling_log_view",
    "setup_logging",
]

_TRUE = {"1", "true", "yes"}


def _flag(name: str, default: str = "false") -> bool:
    return os.environ.get(name, default).lower() in _TRUE


#: True when the ``DEBUG`` environment variable is 1, true or yes.
DEBUG: bool = _flag("DEBUG")
_LEVEL_NAME = os.environ.get("LOG_LEVEL", "INFO").upper()
#: The level ``setup_logging`` uses by default: ``LOG_LEVEL``, or DEBUG when ``DEBUG`` is set.
ENV_LOG_LEVEL: int = (
    logging.DEBUG if DEBUG else logging.getLevelNamesMapping().get(_LEVEL_NAME, logging.INFO)
)
_ENV_LOG_TO_FILE = _flag("LOG_TO_FILE")
#: The directory of the log file (``LOG_DIR``, default ``logs``).
ENV_LOG_DIR: str = os.environ.get("LOG_DIR", "logs")
_ENV_ROTATE_WHEN = os.environ.get("LOG_ROTATE_WHEN", "midnight")
try:
    _ENV_BACKUP_COUNT = int(os.environ.get("LOG_BACKUP_COUNT", "7"))
except ValueError:
    _ENV_BACKUP_COUNT = 7
#: True when ``LOG_JSON`` asks for JSON lines.
ENV_JSON: bool = _flag("LOG_JSON")
#: True when running in CI (``CI`` is true, or ``GITHUB_ACTIONS`` is set).
IN_CI: bool = _flag("CI") or bool(os.environ.get("GITHUB_ACTIONS"))
_ENV_RICH_TRACEBACKS = _flag("LOG_RICH_TRACEBACKS", "true")

_JSON_FIELDS = ("asctime", "levelname", "name", "filename", "lineno", "message")
# The attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
# What TimedRotatingFileHandler takes for ``when`` (any case).
_ROTATIONS = frozenset({"S", "M", "H", "D", "MIDNIGHT", *(f"W{day}" for day in range(7))})
_FILE_FORMAT = "%(asctime)s - %(levelname)s - %(name)s - %(filename)s:%(lineno)d - %(message)s"


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, file, line, message and extras.

    The keys are those of OpenHands' SDK's JSON logs (``asctime``,
    ``levelname``, ``name``, ``filename``, ``lineno``, ``message``), then any
    ``extra=`` fields, then ``exc_info`` with the formatted traceback.

    >>> record = logging.makeLogRecord(
    ...     {"name": "app", "levelname": "INFO", "msg": "hi %s", "args": ("you",), "lineno": 3}
    ... )
    >>> data = json.loads(JsonLogFormatter().format(record))
    >>> data["name"], data["levelname"], data["lineno"], data["message"]
    ('app', 'INFO', 3, 'hi you')
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        record.message = record.getMessage()
        record.asctime = self.formatTime(record, self.datefmt)
        data: dict[str, Any] = {field: getattr(record, field) for field in _JSON_FIELDS}
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and key not in data:
                data[key] = value
        if record.exc_info:
            data["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            data["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(data, default=str, ensure_ascii=False)


def _quiet(name: str, level: int) -> None:
    logger = logging.getLogger(name)
    logger.setLevel(level)
    logger.propagate = False


def _rich_handler(level: int) -> logging.Handler:
    # Rich is imported here so that importing the logger stays cheap.
    from rich.console import Console
    from rich.logging import RichHandler

    handler = RichHandler(
        console=Console(stderr=True),
        omit_repeated_times=False,
        rich_tracebacks=_ENV_RICH_TRACEBACKS,
    )
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(level)
    return handler


def setup_logging(
    level: int | None = None,
    log_to_file: bool | None = None,
    log_dir: str | None = None,
    fmt: str | None = None,
    when: str | None = None,
    backup_count: int | None = None,
) -> None:
    """Configure the root logger (every logger from :func:`get_logger` inherits it).

    Each argument left ``None`` takes its environment default (see the
    module). The root gets ``level``, and so does every existing logger that
    had the root's old level. A console handler (Rich on stderr, or JSON
    lines when ``LOG_JSON``/``CI``) is added only when the root has no
    stream handler yet, so a server's own handlers (uvicorn's) stay as they
    are. With ``log_to_file``, ``log_dir/app.log`` rotates ``when`` (as
    :class:`logging.handlers.TimedRotatingFileHandler` reads it) keeping
    ``backup_count`` old files, formatted with ``fmt`` (or JSON lines).
    The LLM and HTTP libraries' chatty loggers are quieted.

    >>> import tempfile
    >>> from pathlib import Path
    >>> root = logging.getLogger()
    >>> before = (root.level, list(root.handlers))
    >>> with tempfile.TemporaryDirectory() as directory:
    ...     setup_logging(level=logging.WARNING, log_to_file=True, log_dir=directory)
    ...     get_logger("doc.example").warning("written to the file")
    ...     added = [h for h in root.handlers if h not in before[1]]
    ...     for handler in added:
    ...         handler.close()
    ...         root.removeHandler(handler)
    ...     print(Path(directory, "app.log").read_text().split(" - ")[1:3])
    ['WARNING', 'doc.example']
    >>> root.setLevel(before[0])
    """
    if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
        raise InvalidTypeError(f"level is a logging level number, not {type(level).__name__}")
    if backup_count is not None and (
        isinstance(backup_count, bool) or not isinstance(backup_count, int) or backup_count < 0
    ):
        raise InvalidValueError(f"backup_count is a count of files, not {backup_count!r}")
    lvl = ENV_LOG_LEVEL if level is None else level
    to_file = _ENV_LOG_TO_FILE if log_to_file is None else log_to_file
    directory = ENV_LOG_DIR if log_dir is None else log_dir
    rotate_when = _ENV_ROTATE_WHEN if when is None else when
    keep = _ENV_BACKUP_COUNT if backup_count is None else backup_count

    file_handler: logging.Handler | None = None
    if to_file:
        # Built first: a bad ``when`` or an unwritable directory fails before the root changes.
        if not isinstance(rotate_when, str) or rotate_when.upper() not in _ROTATIONS:
            raise InvalidValueError(
                f"when is one of {', '.join(sorted(_ROTATIONS))}, not {rotate_when!r}"
            )
        os.makedirs(directory, exist_ok=True)
        # Here, not at import: logging.handlers loads socket (a first use does without it).
        from logging.handlers import TimedRotatingFileHandler

        file_handler = TimedRotatingFileHandler(
            os.path.join(directory, "app.log"),
            when=rotate_when,
            backupCount=keep,
            encoding="utf-8",
        )
        file_handler.setLevel(lvl)
        file_handler.setFormatter(
            JsonLogFormatter() if ENV_JSON else logging.Formatter(fmt or _FILE_FORMAT)
        )

    root = logging.getLogger()
    old_level = root.level
    root.setLevel(lvl)
    for logger in list(logging.root.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger) and logger.level == old_level:
            logger.setLevel(lvl)

    if not any(isinstance(handler, logging.StreamHandler) for handler in root.handlers):
        if ENV_JSON or IN_CI:
            console: logging.Handler = logging.StreamHandler()
            console.setLevel(lvl)
            console.setFormatter(JsonLogFormatter())
        else:
            console = _rich_handler(lvl)
        root.addHandler(console)
    if file_handler is not None:
        root.addHandler(file_handler)

    for name in ("litellm", "LiteLLM", "openai"):
        _quiet(name, logging.ERROR)
    for name in ("httpcore", "httpx", "libtmux"):
        _quiet(name, logging.WARNING)


def get_logger(name: str) -> logging.Logger:
    """The logger for ``name`` (usually ``__name__``); it hands its records to the root.

    It is :func:`logging.getLogger`'s logger, so the same name gives the
    same logger, and :func:`setup_logging` decides where records go.

    >>> logger = get_logger(__name__)
    >>> logger is get_logger(__name__) and logger.propagate
    True
    """
    if not isinstance(name, str):
        raise InvalidTypeError(f"a logger's name is a str, not {type(name).__name__}")
    logger = logging.getLogger(name)
    logger.propagate = True
    return logger


class _RollingViewHandler(logging.Handler):
    """Keeps the last lines; repaints a Rich Live view or prints each line."""

    def __init__(self, max_lines: int, use_live: bool) -> None:
        super().__init__()
        self._buf: deque[str] = deque(maxlen=max_lines)
        self._use_live = use_live
        self._live: Live | None = None
        self.render_fn: Callable[[], str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = self.format(record)
        self._buf.append(message)
        if self._use_live and self._live is not None:
            self._live.update(self.render_fn() if self.render_fn else "\n".join(self._buf))
            return
        if ENV_JSON:
            return  # JSON: one record with the whole view when the view closes
        sys.stdout.write(message + "\n")
        sys.stdout.flush()

    @property
    def snapshot(self) -> str:
        """The lines kept, oldest first."""
        return "\n".join(self._buf)


@contextmanager
def rolling_log_view(
    logger: logging.Logger,
    max_lines: int = 60,
    level: int = logging.INFO,
    propagate: bool = False,
    header: str | None = None,
    footer: str | None = None,
    *,
    json_flush_level: int | None = None,
) -> Iterator[_RollingViewHandler]:
    """Show ``logger``'s last ``max_lines`` lines while the block runs.

    On a terminal (not CI, not JSON) a Rich live view repaints them between
    ``header`` and ``footer``; elsewhere each line is printed as it comes;
    with ``LOG_JSON`` the lines are kept and logged as one record when the
    block ends (at ``json_flush_level``, else ``level``). The handler it
    yields has ``snapshot``, the lines kept. The logger's ``propagate`` is
    ``propagate`` (or true with JSON) inside, and restored after.

    >>> demo = get_logger("doc.rolling")
    >>> demo.setLevel(logging.INFO)
    >>> with rolling_log_view(demo, max_lines=2) as view:
    ...     for step in range(3):
    ...         demo.info("step %d", step)
    step 0
    step 1
    step 2
    >>> view.snapshot
    'step 1\\nstep 2'
    """
    if isinstance(max_lines, bool) or not isinstance(max_lines, int) or max_lines < 1:
        raise InvalidValueError(f"max_lines is a positive count of lines, not {max_lines!r}")
    use_live = not IN_CI and sys.stdout.isatty() and not ENV_JSON
    handler = _RollingViewHandler(max_lines=max_lines, use_live=use_live)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("%(message)s"))
    previous_propagate = logger.propagate
    logger.propagate = bool(propagate or ENV_JSON)
    logger.addHandler(handler)

    def render() -> str:
        parts = [header.rstrip()] if header else []
        parts.append(handler.snapshot)
        if footer:
            parts.append(footer.rstrip())
        return "\n".join(parts)

    try:
        if use_live:
            from rich.live import Live

            with Live(render(), refresh_per_second=8) as live:
                handler._live = live
                handler.render_fn = render
                yield handler
        else:
            yield handler
    finally:
        final = render()
        if handler._live is not None:
            handler._live.update(final)
        logger.removeHandler(handler)
        logger.propagate = previous_propagate
        if ENV_JSON:
            logger.log(json_flush_level if json_flush_level is not None else level, final)
