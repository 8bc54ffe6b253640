"""The ``cowconv`` command line: ``serve``, ``bench`` and ``tree``.

>>> build_parser().parse_args(["tree", "store.db"]).command
'tree'

``cowconv serve`` starts the agent server (needs the ``server`` extra),
``cowconv bench`` runs the benchmark suite of a cowconv checkout (run it from
the repository root), ``cowconv tree STORE [ID]`` prints the fork tree of a
store's conversations.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cowconv._ids import ConversationID
from cowconv._state import ConversationInfo

if TYPE_CHECKING:
    pass

__all__ = ["build_parser", "fork_forest", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``cowconv`` command."""
    parser = argparse.ArgumentParser(
        prog="cowconv", description="Fork agent conversations in O(1)."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve", help="start the agent server", add_help=False, prefix_chars="\0"
    )
    serve.add_argument("args", nargs=argparse.REMAINDER, help="agent server options (--help)")
    bench = commands.add_parser(
        "bench", help="run the benchmark suite", add_help=False, prefix_chars="\0"
    )
    bench.add_argument("args", nargs=argparse.REMAINDER, help="benchmark options (--help)")
    tree = commands.add_parser("tree", help="print the fork tree of a store's conversations")
    tree.add_argument("store", type=Path, help="a cowconv SQLite store (file or persistence dir)")
    tree.add_argument("id", nargs="?", help="show only the tree containing this conversation")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``cowconv`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args.args)
    if args.command == "bench":
        return _bench(args.args)
    return _tree(args.store, args.id)


def _serve(argv: list[str]) -> int:
    try:
        server = importlib.import_module("cowconv.agent_server.__main__")
    except ImportError as error:
        print(f"cowconv serve needs the server extra: pip install 'cowconv[server]' ({error})")
        return 2
    status: int | None = server.main(argv)
    return status or 0


def _bench(argv: list[str]) -> int:
    # The suite lives in the repository (benchmarks/), not in the installed package.
    sys.path.insert(0, os.getcwd())
    try:
        suite = importlib.import_module("benchmarks")
    except ImportError:
        print("cowconv bench runs the suite of a cowconv checkout: run it from the repository root")
        return 2
    status: int | None = suite.main(argv)
    return status or 0


def fork_forest(
    infos: Sequence[ConversationInfo],
) -> tuple[list[ConversationInfo], dict[ConversationID, list[ConversationInfo]]]:
    """Roots and children of the fork forest that ``infos`` form.

    A conversation whose source is not among ``infos`` is a root.

    >>> from datetime import UTC, datetime
    >>> now = datetime.now(UTC)
    >>> def info(id, parent=None):
    ...     return ConversationInfo(id=id, execution_status="idle", created_at=now,
    ...                             updated_at=now, event_count=0,
    ...                             forked_from_conversation_id=parent)
    >>> roots, children = fork_forest([info("a"), info("b", "a"), info("c", "b")])
    >>> [r.id for r in roots], [c.id for c in children["a"]]
    (['a'], ['b'])
    """
    known = {info.id for info in infos}
    roots: list[ConversationInfo] = []
    children: dict[ConversationID, list[ConversationInfo]] = {}
    for info in sorted(infos, key=lambda i: i.created_at):
        parent = info.forked_from_conversation_id
        if parent is not None and parent in known:
            children.setdefault(parent, []).append(info)
        else:
            roots.append(info)
    return roots, children


def _tree(path: Path, conversation_id: str | None) -> int:
    from rich.console import Console
    from rich.tree import Tree

    from cowconv._exceptions import CowconvError
    from cowconv._store import SQLiteStore

    database = path / "cowconv.db" if path.is_dir() else path
    if not database.exists():
        print(f"no cowconv store at {path}")
        return 2
    try:
        store = SQLiteStore(database)
        try:
            infos = store.list()
            # How many events each fork inherited (None for a conversation that is no fork).
            positions = {info.id: info.forked_from_event_count for info in infos}
        finally:
            store.close()
    except CowconvError as error:
        print(f"cannot read {path}: {error}")
        return 2
    roots, children = fork_forest(infos)
    if conversation_id is not None:
        by_id = {info.id: info for info in infos}
        if conversation_id not in by_id:
            print(f"no conversation {conversation_id!r} in {path}")
            return 2
        root = by_id[conversation_id]
        while root.forked_from_conversation_id in by_id:
            root = by_id[root.forked_from_conversation_id]
        roots = [root]

    def label(info: ConversationInfo) -> str:
        title = f"[bold]{info.title}[/bold]  " if info.title else ""
        where = positions.get(info.id)
        fork_point = f"  forked after {where} events" if where is not None else ""
        return (
            f"{title}[dim]{info.id}[/dim]  {info.event_count} events  "
            f"{info.execution_status.value}{fork_point}"
        )

    console = Console()
    forest = Tree(f"[bold]{path}[/bold]  {len(infos)} conversations")

    def grow(node: Tree, info: ConversationInfo) -> None:
        branch = node.add(label(info))
        for child in children.get(info.id, []):
            grow(branch, child)

    for root in roots:
        grow(forest, root)
    console.print(forest)
    return 0
