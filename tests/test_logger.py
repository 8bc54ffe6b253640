"""cowconv.logger: OpenHands' SDK's per-module loggers, environment settings and root setup."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cowconv
from cowconv import InvalidTypeError, InvalidValueError
from cowconv.core.logger import JsonLogFormatter, get_logger, rolling_log_view, setup_logging
from tests.strategies import keys, texts


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with ``env`` added (the logger reads it at import)."""
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in {"LOG_LEVEL", "LOG_JSON", "DEBUG", "CI", "GITHUB_ACTIONS", "LOG_TO_FILE"}
        and not key.startswith("LOG_")
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.fixture
def root_state() -> Iterator[logging.Logger]:
    """The root logger, with its level and handlers put back after the test."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield root
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


class TestGetLogger:
    def test_one_logger_per_name_that_propagates(self):
        """The same name gives the same standard logger, which hands records to the root."""
        logger = get_logger("tests.logger.a")
        assert logger is logging.getLogger("tests.logger.a")
        assert logger is cowconv.get_logger("tests.logger.a")
        assert logger.propagate is True

    def test_a_name_that_is_not_text_is_refused(self):
        """A logger's name must be a str."""
        with pytest.raises(InvalidTypeError):
            get_logger(3)  # type: ignore[arg-type]


class TestEnvironment:
    def test_import_cowconv_configures_nothing(self):
        """``import cowconv`` (even using the core) leaves the root logger alone."""
        out = _run(
            "import logging, cowconv, cowconv.core.logger\n"
            "print(len(logging.getLogger().handlers), logging.getLogger().level)"
        )
        assert out.stdout.split() == ["0", str(logging.WARNING)]

    def test_get_logger_from_the_root_prints_info_as_openhands_does(self):
        """Using ``cowconv.get_logger`` configures the root: an info line reaches stderr."""
        out = _run(
            "import cowconv\ncowconv.get_logger('example').info('hello from the example')",
            COLUMNS="200",
        )
        assert "hello from the example" in out.stderr

    def test_auto_config_can_be_turned_off(self):
        """``LOG_AUTO_CONFIG=false``: importing cowconv.logger adds no handler."""
        out = _run(
            "import logging, cowconv.logger\nprint(len(logging.getLogger().handlers))\n"
            "cowconv.logger.get_logger('x').info('not shown')",
            LOG_AUTO_CONFIG="false",
        )
        assert out.stdout.strip() == "0"
        assert "not shown" not in out.stderr

    @pytest.mark.parametrize(
        ("env", "level"),
        [
            ({}, logging.INFO),
            ({"LOG_LEVEL": "warning"}, logging.WARNING),
            ({"LOG_LEVEL": "nonsense"}, logging.INFO),
            ({"LOG_LEVEL": "ERROR", "DEBUG": "1"}, logging.DEBUG),
        ],
    )
    def test_level_from_log_level_and_debug(self, env: dict[str, str], level: int):
        """LOG_LEVEL names the level (INFO when unknown); DEBUG=1 overrides it."""
        out = _run(
            "import logging, cowconv.logger as l\n"
            "print(l.ENV_LOG_LEVEL, logging.getLogger().level, l.DEBUG)",
            **env,
        )
        assert out.stdout.split()[:2] == [str(level), str(level)]
        assert out.stdout.split()[2] == str("DEBUG" in env)

    def test_log_json_writes_json_lines_with_openhands_keys(self):
        """LOG_JSON=1: each record is one JSON object with OpenHands' keys and the extras."""
        out = _run(
            "import cowconv.logger as l\n"
            "l.get_logger('svc').warning('disk %s', 'full', extra={'conversation': 'c1'})",
            LOG_JSON="1",
        )
        record = json.loads(out.stderr.strip().splitlines()[-1])
        assert {"asctime", "levelname", "name", "filename", "lineno", "message"} <= set(record)
        assert (record["name"], record["levelname"], record["message"]) == (
            "svc",
            "WARNING",
            "disk full",
        )
        assert record["conversation"] == "c1"

    def test_ci_means_json_on_the_console(self):
        """In CI (CI=true or GITHUB_ACTIONS set) the console gets JSON lines."""
        out = _run(
            "import cowconv.logger as l\nprint(l.IN_CI, l.ENV_JSON)\nl.get_logger('ci').info('x')",
            GITHUB_ACTIONS="true",
        )
        assert out.stdout.split() == ["True", "False"]
        assert json.loads(out.stderr.strip().splitlines()[-1])["message"] == "x"

    def test_log_to_file_and_log_dir(self, tmp_path: Path):
        """LOG_TO_FILE with LOG_DIR writes LOG_DIR/app.log in the plain file format."""
        _run(
            "import cowconv.logger as l\nl.get_logger('filed').error('kept on disk')",
            LOG_TO_FILE="yes",
            LOG_DIR=str(tmp_path / "logs"),
        )
        line = (tmp_path / "logs" / "app.log").read_text().strip()
        assert line.split(" - ")[1:3] == ["ERROR", "filed"]
        assert line.endswith(" - kept on disk")


class TestSetupLogging:
    def test_level_reaches_the_root_and_loggers_at_the_old_level(self, root_state: logging.Logger):
        """The root takes the level, and so does a logger that had the root's old level."""
        root_state.setLevel(logging.WARNING)
        same = logging.getLogger("tests.logger.same")
        same.setLevel(logging.WARNING)
        other = logging.getLogger("tests.logger.other")
        other.setLevel(logging.CRITICAL)
        setup_logging(level=logging.DEBUG)
        assert (root_state.level, same.level, other.level) == (
            logging.DEBUG,
            logging.DEBUG,
            logging.CRITICAL,
        )

    def test_a_stream_handler_present_is_kept_and_none_added(self, root_state: logging.Logger):
        """A root that has a stream handler (uvicorn's) gets no second console handler."""
        mine = logging.StreamHandler()
        root_state.addHandler(mine)
        count = len(root_state.handlers)
        setup_logging(level=logging.INFO)
        assert len(root_state.handlers) == count and mine in root_state.handlers

    def test_a_root_without_one_gets_a_console_handler(self, root_state: logging.Logger):
        """With no stream handler, one console handler is added at the level: JSON lines under
        ``LOG_JSON`` or in CI (``CI`` set, as CI runs this suite), Rich otherwise."""
        import cowconv.core.logger as logger_module

        root_state.handlers[:] = []
        setup_logging(level=logging.ERROR)
        json_lines = logger_module.ENV_JSON or logger_module.IN_CI
        expected = "StreamHandler" if json_lines else "RichHandler"
        assert [type(h).__name__ for h in root_state.handlers] == [expected]
        assert root_state.handlers[0].level == logging.ERROR

    def test_file_with_format_and_directory(self, root_state: logging.Logger, tmp_path: Path):
        """log_to_file writes log_dir/app.log (created) in the ``fmt`` given."""
        setup_logging(
            level=logging.INFO,
            log_to_file=True,
            log_dir=str(tmp_path / "new"),
            fmt="%(levelname)s|%(name)s|%(message)s",
            backup_count=2,
        )
        get_logger("tests.logger.file").info("line one")
        for handler in root_state.handlers:
            handler.flush()
        text = (tmp_path / "new" / "app.log").read_text()
        assert "INFO|tests.logger.file|line one" in text.splitlines()

    def test_bad_arguments_are_refused_before_anything_changes(
        self, root_state: logging.Logger, tmp_path: Path
    ):
        """A bad level, count or rotation leaves the root as it was."""
        root_state.setLevel(logging.WARNING)
        before = list(root_state.handlers)
        with pytest.raises(InvalidTypeError):
            setup_logging(level="INFO")  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError):
            setup_logging(backup_count=-1)
        with pytest.raises(InvalidValueError):
            setup_logging(log_to_file=True, log_dir=str(tmp_path), when="fortnightly")
        assert root_state.level == logging.WARNING and root_state.handlers == before

    def test_chatty_libraries_are_quieted(self, root_state: logging.Logger):
        """litellm's and httpx's loggers are raised to ERROR / WARNING and kept to themselves."""
        setup_logging(level=logging.DEBUG)
        assert logging.getLogger("LiteLLM").level == logging.ERROR
        assert logging.getLogger("httpx").level == logging.WARNING
        assert logging.getLogger("httpx").propagate is False


class TestJsonLogFormatter:
    @given(message=texts, extra=st.dictionaries(keys.map(lambda key: f"x_{key}"), texts))
    def test_any_message_and_extras_round_trip(self, message: str, extra: dict[str, str]):
        """Whatever the text and the extra fields, one line of JSON gives them back."""
        record = logging.makeLogRecord({"name": "p", "msg": message, "levelname": "INFO", **extra})
        line = JsonLogFormatter().format(record)
        assert "\n" not in line
        data = json.loads(line)
        assert data["message"] == message
        assert {key: data[key] for key in extra} == extra

    def test_an_exception_is_kept_as_text(self):
        """A record with exc_info carries the traceback under ``exc_info``."""
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            record = logging.makeLogRecord({"msg": "failed", "exc_info": sys.exc_info()})
        data = json.loads(JsonLogFormatter().format(record))
        assert "RuntimeError: boom" in data["exc_info"]


class TestRollingLogView:
    def test_keeps_the_last_lines_and_restores_the_logger(self, capsys: pytest.CaptureFixture[str]):
        """Off a terminal each line is printed; the view keeps the last max_lines of them."""
        logger = get_logger("tests.logger.rolling")
        logger.setLevel(logging.INFO)
        with rolling_log_view(logger, max_lines=3, header="HEAD", footer="FOOT") as view:
            for step in range(5):
                logger.info("step %d", step)
            assert logger.propagate is False
        assert view.snapshot == "step 2\nstep 3\nstep 4"
        assert capsys.readouterr().out.splitlines() == [f"step {n}" for n in range(5)]
        assert logger.propagate is True and view not in logger.handlers

    def test_max_lines_must_be_positive(self):
        """A view of no lines is refused."""
        with pytest.raises(InvalidValueError):
            with rolling_log_view(get_logger("tests.logger.rolling"), max_lines=0):
                pass
