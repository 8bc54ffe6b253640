"""The ``cowconv`` command line: ``serve``, ``bench``, ``tree`` and ``diff`` (built on Typer).

>>> main(["--version"])
cowconv ...
0

``cowconv serve`` starts the agent server (needs the ``server`` extra),
``cowconv bench`` runs the benchmark suite of a cowconv checkout,
``cowconv tree STORE [ID]`` prints the fork tree of a store's conversations,
``cowconv diff STORE A B`` what two of them did past their common prefix.
``python -m cowconv.agent_server`` is ``cowconv serve`` under another name.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import json
import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core

from cowconv import __version__, stores
from cowconv._exceptions import ConversationNotFoundError, CowconvError, StartError
from cowconv.core.compare import compare
from cowconv.core.history import VECTOR_IMPLEMENTATION
from cowconv.core.ids import ConversationID, public_id
from cowconv.core.state import ConversationInfo
from cowconv.workspaces.recording import file_changes

if TYPE_CHECKING:
    from types import ModuleType

    from rich.text import Text


__all__ = ["fork_forest", "main", "serve_main"]

_CONTEXT = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    name="cowconv",
    help="Fork agent conversations in O(1).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings=_CONTEXT,
)


def _version(value: bool) -> None:
    if value:
        import platform

        python = platform.python_version()
        typer.echo(f"cowconv {__version__} (Python {python}, pyrsistent {VECTOR_IMPLEMENTATION})")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Fork agent conversations in O(1)."""


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` to stderr; returns the ``typer.Exit`` to raise.

    >>> fail("no such store", 2).exit_code
    2
    """
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _run(application: typer.Typer, argv: Sequence[str] | None, prog_name: str) -> int:
    try:
        application(args=None if argv is None else list(argv), prog_name=prog_name)
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        typer.echo(done.code, err=True)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``cowconv`` command on ``argv`` (default ``sys.argv[1:]``); returns the status."""
    return _run(app, argv, "cowconv")


# -- serve -------------------------------------------------------------------------------------


class LogLevel(StrEnum):
    """Log levels of ``cowconv serve``."""

    critical = "critical"
    error = "error"
    warning = "warning"
    info = "info"
    debug = "debug"


def serve(
    host: Annotated[
        str | None,
        typer.Option(
            help="Address to bind (else $COWCONV_HOST, else 127.0.0.1).", show_default=False
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(help="Port to bind (else $COWCONV_PORT, else 8000).", show_default=False),
    ] = None,
    data_dir: Annotated[
        str | None,
        typer.Option(
            help="Where the conversation store lives, created on start"
            " (else $COWCONV_DATA_DIR, else .cowconv/agent_server).",
            show_default=False,
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            help="Serve this store instead of --data-dir's: a postgresql://user:pw@host/db URL"
            " (several servers may share it) or a SQLite file (else $COWCONV_STORE).",
            show_default=False,
        ),
    ] = None,
    session_api_key: Annotated[
        str | None,
        typer.Option(
            help="Require this X-Session-API-Key header on every /api route (else"
            " $COWCONV_SESSION_API_KEY, better: arguments show in process listings).",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[
        LogLevel | None,
        typer.Option(help="Log level (else $COWCONV_LOG_LEVEL, else info).", show_default=False),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            help="A host name clients may use besides the bound address and loopback names;"
            " repeatable (else $COWCONV_ALLOWED_HOSTS, comma separated).",
            show_default=False,
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            help="A browser origin allowed to change state, e.g. https://app.example;"
            " repeatable (else $COWCONV_ALLOWED_ORIGINS).",
            show_default=False,
        ),
    ] = None,
    allow_unauthenticated: Annotated[
        bool | None,
        typer.Option(
            "--allow-unauthenticated",
            help="Serve a non-loopback address without a session key (refused otherwise;"
            " else $COWCONV_ALLOW_UNAUTHENTICATED).",
            show_default=False,
        ),
    ] = None,
    max_body_size: Annotated[
        int | None,
        typer.Option(
            help="Largest request body in bytes, larger ones get 413"
            " (else $COWCONV_MAX_BODY_SIZE, else 8 MiB).",
            show_default=False,
        ),
    ] = None,
    max_live_conversations: Annotated[
        int | None,
        typer.Option(
            help="Conversations kept in memory at most; idle ones beyond are evicted and"
            " reloaded from the store when asked for (else $COWCONV_MAX_LIVE_CONVERSATIONS,"
            " else 256).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve conversations over a JSON REST API (see docs/server.md)."""
    try:
        from cowconv.agent_server.serve import ServerSettings, run_server
    except ImportError as error:
        raise fail(
            f"cowconv serve needs the server extra: pip install 'cowconv[server]' ({error})"
        ) from None
    given = {
        "host": host,
        "port": port,
        "data_dir": data_dir,
        "store": store,
        "session_api_key": session_api_key,
        "log_level": None if log_level is None else log_level.value,
        "allowed_hosts": allowed_host,
        "allowed_origins": allowed_origin,
        "allow_unauthenticated": allow_unauthenticated or None,
        "max_body_size": max_body_size,
        "max_live_conversations": max_live_conversations,
    }
    if store is not None and data_dir is not None:
        raise fail("give --data-dir or --store, not both")
    try:
        settings = ServerSettings.from_options(**given)
        run_server(settings)
    except StartError as error:
        raise fail(str(error)) from None


class _PlainHelp(typer.core.TyperCommand):
    """Click's own help layout: it wraps between words, where rich's narrow columns cut
    ``$COWCONV_...`` variable names short."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.rich_markup_mode = None
        super().format_help(ctx, formatter)


app.command(context_settings=_CONTEXT, cls=_PlainHelp)(serve)
_serve_app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=_CONTEXT,
)
_serve_app.command(cls=_PlainHelp)(serve)


def serve_main(argv: Sequence[str] | None = None) -> int:
    """``python -m cowconv.agent_server``: ``cowconv serve`` under the module's name.

    >>> serve_main(["--port", "99999"])
    2
    """
    return _run(_serve_app, argv, "python -m cowconv.agent_server")


# -- bench -------------------------------------------------------------------------------------


@app.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
def bench(ctx: typer.Context) -> None:
    """Run the benchmark suite of a cowconv checkout (cowconv bench --help for its options)."""
    suite = _benchmarks()
    status: int | None = suite.main(ctx.args, prog="cowconv bench")
    raise typer.Exit(status or 0)


def _benchmarks() -> "ModuleType":
    # The suite lives in a checkout (benchmarks/ beside cowconv/), not in the installed package.
    import importlib

    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / "benchmarks" / "_cli.py").is_file():
        raise fail(
            "cowconv bench runs the benchmark suite of a cowconv source checkout, which this"
            " install does not have: git clone the repository, pip install -e '.[dev]' there,"
            " then run cowconv bench (results go to the directory you run it from)"
        )
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    return importlib.import_module("benchmarks")


# -- tree --------------------------------------------------------------------------------------


@app.command(context_settings=_CONTEXT)
def tree(
    store: Annotated[
        Path,
        typer.Argument(
            metavar="STORE", help="A cowconv SQLite store: the file, or the directory holding it."
        ),
    ],
    conversation_id: Annotated[
        str | None,
        typer.Argument(metavar="[ID]", help="Show only the tree containing this conversation."),
    ] = None,
) -> None:
    """Print the fork tree of a store's conversations."""
    raise typer.Exit(_tree(store, conversation_id))


def fork_forest(
    infos: Sequence[ConversationInfo],
) -> tuple[list[ConversationInfo], dict[ConversationID, list[ConversationInfo]]]:
    """Roots and children of the fork forest that ``infos`` form.

    A conversation whose source is not among ``infos`` is a root. Ids can be
    reused (delete ``a``, then fork ``b`` back as ``a``), so parent links can
    form a cycle: the oldest conversation of a cycle becomes a root, so every
    conversation appears exactly once.

    >>> from datetime import UTC, datetime, timedelta
    >>> now = datetime.now(UTC)
    >>> def info(id, parent=None, age=0):
    ...     return ConversationInfo(id=id, execution_status="idle",
    ...                             created_at=now + timedelta(seconds=age),
    ...                             updated_at=now, event_count=0,
    ...                             forked_from_conversation_id=parent)
    >>> roots, children = fork_forest([info("a"), info("b", "a", 1), info("c", "b", 2)])
    >>> [r.id for r in roots], [c.id for c in children["a"]]
    (['a'], ['b'])
    >>> roots, children = fork_forest([info("b", "a", 1), info("a", "b", 2)])
    >>> [r.id for r in roots], [c.id for c in children["b"]]
    (['b'], ['a'])
    """
    by_id = {info.id: info for info in infos}
    ordered = sorted(by_id.values(), key=lambda i: i.created_at)
    cut: set[ConversationID] = set()  # conversations whose parent link is ignored (cycles)
    settled: set[ConversationID] = set()
    for start in ordered:
        path: list[ConversationID] = []
        current: ConversationID | None = start.id
        while current is not None and current in by_id and current not in settled:
            if current in path:
                cycle = path[path.index(current) :]
                cut.add(min(cycle, key=lambda i: by_id[i].created_at))
                break
            path.append(current)
            current = by_id[current].forked_from_conversation_id
        settled.update(path)
    roots: list[ConversationInfo] = []
    children: dict[ConversationID, list[ConversationInfo]] = {}
    for info in ordered:
        parent = info.forked_from_conversation_id
        if parent is not None and parent in by_id and info.id not in cut:
            children.setdefault(parent, []).append(info)
        else:
            roots.append(info)
    return roots, children


def _tree(path: Path, conversation_id: str | None) -> int:
    from rich.console import Console
    from rich.tree import Tree

    try:
        database = stores.store_file(path)  # a directory's cowconv.db, as persistence_dir writes it
    except CowconvError as error:
        print(f"cannot read {path}: {error}")
        return 2
    if not database.exists():
        raise fail(f"no cowconv store at {path}")
    try:
        store = stores.SQLiteStore(database)
        try:
            infos = store.list()
            # How many events each fork inherited (None for a conversation that is no fork).
            positions = {info.id: info.forked_from_event_count for info in infos}
            # The branches inside each conversation (navigate_to), beside the active one.
            inside = {info.id: store._other_branches(info.id) for info in infos}
        finally:
            store.close()
    except (CowconvError, OSError) as error:
        raise fail(f"cannot read {path}: {error}") from None
    roots, children = fork_forest(infos)
    if conversation_id is not None:
        parents = {
            child.id: parent for parent, kids in children.items() for child in kids
        }  # links of the forest, so the walk to the root ends even where ids formed a cycle
        if public_id(conversation_id) not in {info.id for info in infos}:
            raise fail(f"no conversation {conversation_id!r} in {path}")
        root_id = public_id(conversation_id)
        while root_id in parents:
            root_id = parents[root_id]
        roots = [info for info in roots if info.id == root_id]

    forest = Tree(_text((str(path), "bold"), f"  {len(infos)} conversations"))

    def grow(node: Tree, info: ConversationInfo) -> None:
        branch = node.add(_label(info, positions.get(info.id)))
        others = inside.get(info.id)
        if others:
            for leaf, count in others:
                branch.add(_text(("branch", "italic"), f"  {count} events  leaf ", (leaf, "dim")))
            leaf = info.leaf_event_id or "-"
            active = f"  {info.event_count} events  leaf "
            branch.add(_text(("active branch", "italic"), active, (leaf, "dim")))
        for child in children.get(info.id, []):
            grow(branch, child)

    for root in roots:
        grow(forest, root)
    # A terminal wraps at its width; piped output keeps whole lines (rich would assume 80
    # columns), and Tree neither pads nor draws past its text, so a wide console costs nothing.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 1 << 16)
    console.print(forest)
    return 0


# -- diff --------------------------------------------------------------------------------------


@app.command(context_settings=_CONTEXT)
def diff(
    store: Annotated[
        Path,
        typer.Argument(
            metavar="STORE", help="A cowconv SQLite store: the file, or the directory holding it."
        ),
    ],
    a: Annotated[str, typer.Argument(metavar="A", help="A conversation id.")],
    b: Annotated[str, typer.Argument(metavar="B", help="Another conversation id.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the comparison as JSON (events in full).")
    ] = False,
    width: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Cut lines to this many columns, 0 for whole lines (default: the terminal's"
            " width, whole lines when piped).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Show what two conversations did past their common prefix, and how their status, cost
    and tokens differ (lines with - are A's events, + are B's)."""
    raise typer.Exit(_diff(store, a, b, as_json, width))


def _diff(path: Path, a: str, b: str, as_json: bool, width: int | None) -> int:
    try:
        database = stores.store_file(path)
    except CowconvError as error:
        raise fail(f"cannot read {path}: {error}") from None
    if not database.exists():
        raise fail(f"no cowconv store at {path}")
    try:
        store = stores.SQLiteStore(database)
        try:
            states = []
            for given in (a, b):
                try:
                    states.append(store.load(public_id(given)))
                except ConversationNotFoundError:
                    raise fail(f"no conversation {given!r} in {path}") from None
            comparison = compare(*states)
            files = file_changes(*states)  # each side's file changes, where snapshots say
            if as_json:
                typer.echo(json.dumps({**comparison.to_dict(), "files": files}, indent=2))
            else:
                if width is None:
                    width = _terminal_width()
                typer.echo(comparison.text(width or None))
                for name, changed in files.items():
                    for changed_path, how in sorted((changed or {}).items()):
                        typer.echo(f"{name} {how} {changed_path}")
        finally:
            store.close()
    except (CowconvError, OSError) as error:
        raise fail(f"cannot read {path}: {error}") from None
    return 0


def _terminal_width() -> int:
    """The terminal's columns, or 0 (whole lines) when the output is not a terminal."""
    import shutil

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else 0


def _text(*parts: "str | tuple[str, str]") -> "Text":
    # rich.text.Text, never markup: titles and ids are user text and may contain "[/bold]".
    from rich.text import Text

    return Text.assemble(*parts)


def _label(info: ConversationInfo, fork_point: int | None) -> "Text":
    parts: list[str | tuple[str, str]] = []
    if info.title:
        parts += [(info.title, "bold"), "  "]
    parts += [(str(info.id), "dim"), f"  {info.event_count} events  {info.execution_status.value}"]
    if fork_point is not None:
        parts.append(f"  forked after {fork_point} events")
    return _text(*parts)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
