"""Every error cowconv raises is a CowconvError, and the tree in _exceptions draws them all."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

import cowconv
from cowconv import _exceptions

PACKAGE = Path(cowconv.__file__).resolve().parent

# Built-in exceptions that stay plain, each for a protocol Python itself defines.
PROTOCOL = {
    "AttributeError": "a module's __getattr__ for a name it does not have",
    "ImportError": "an optional extra that is not installed",
    "NotImplementedError": "what OpenHands' SDK raises for a remote fork(agent=...)",
    "SystemExit": "the command line's exit status",
    "BaseExceptionGroup": "branch runs that raised KeyboardInterrupt or SystemExit, grouped",
    "ExceptionGroup": "a workflow's failed sub-agents, grouped as OpenHands' map_agents does",
}


def raised_builtins() -> list[tuple[str, int, str]]:
    """(file, line, name) of each ``raise Name(...)`` in cowconv that names a built-in exception."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = target.id if isinstance(target, ast.Name) else None
            kind = getattr(builtins, name, None) if name else None
            if isinstance(kind, type) and issubclass(kind, BaseException):
                found.append((str(path.relative_to(PACKAGE)), node.lineno, name))
    return found


class TestEveryErrorIsACowconvError:
    def test_no_bare_builtin_raised(self):
        """cowconv raises no built-in exception but the few a Python protocol calls for."""
        offenders = [entry for entry in raised_builtins() if entry[2] not in PROTOCOL]
        assert offenders == []

    def test_the_scan_sees_raises(self):
        """The scan finds the protocol exceptions it allows (so it reads the package at all)."""
        assert {name for _, _, name in raised_builtins()} >= {"AttributeError", "ImportError"}

    @pytest.mark.parametrize("name", _exceptions.__all__)
    def test_each_exported_error_derives_from_cowconv_error(self, name):
        """Each class in _exceptions is a CowconvError and is exported from cowconv."""
        kind = getattr(_exceptions, name)
        assert issubclass(kind, cowconv.CowconvError)
        assert getattr(cowconv, name) is kind

    @pytest.mark.parametrize("name", _exceptions.__all__)
    def test_the_tree_draws_each_error(self, name):
        """The module docstring's tree names every error."""
        assert f" {name}" in (_exceptions.__doc__ or "")

    @pytest.mark.parametrize(
        ("kind", "builtin"),
        [
            (cowconv.InvalidValueError, ValueError),
            (cowconv.InvalidTypeError, TypeError),
            (cowconv.EventNotFoundError, KeyError),
            (cowconv.EventIndexError, IndexError),
            (cowconv.ConversationRunningError, RuntimeError),
            (cowconv.ServiceError, RuntimeError),
            (cowconv.FrozenInstanceError, AttributeError),
            (cowconv.ToolArgumentError, ValueError),
            (cowconv.WorkspaceMissingError, FileNotFoundError),
        ],
    )
    def test_keeps_the_builtin_base(self, kind, builtin):
        """``except ValueError`` (and the like) still catches what it caught before."""
        assert issubclass(kind, builtin) and issubclass(kind, cowconv.CowconvError)


class TestRaisedWhereUsersMeetThem:
    def test_bad_argument(self):
        """A bad argument is an InvalidValueError (also a ValueError)."""
        with pytest.raises(cowconv.InvalidValueError):
            cowconv.EventLog().take(-1)

    def test_wrong_type(self):
        """A wrong type is an InvalidTypeError (also a TypeError)."""
        with pytest.raises(cowconv.InvalidTypeError):
            cowconv.EventLog([object()])  # type: ignore[list-item]

    def test_unknown_event_id(self):
        """An unknown event id in a history is an EventNotFoundError (also a KeyError)."""
        with pytest.raises(KeyError) as raised:
            cowconv.EventLog().index_of("nope")
        assert isinstance(raised.value, cowconv.EventNotFoundError)
