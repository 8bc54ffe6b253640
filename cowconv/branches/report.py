"""``SuiteReport``: what a branch suite did, one row per branch, as a table, JSON, a plot or a
page, with totals per variant (or per model, or per any tag).

>>> from cowconv import LLM, Agent, Conversation, run_branches
>>> from cowconv.testing import StubLLMServer, StubReply
>>> with StubLLMServer() as stub:
...     stub.script(StubReply.text("Plan A."), StubReply.text("Plan B."))
...     llm = LLM(model="openai/stub-model", base_url=stub.base_url, api_key="stub-key")
...     source = Conversation(agent=Agent(llm=llm), workspace=".")
...     _ = source.send_message("Propose a plan.")
...     runs = run_branches(source, ["Be bold.", "Be careful."], max_workers=1)
>>> report = runs.report()
>>> [(row.index, row.status, row.steps, row.final_answer) for row in report.rows]
[(0, 'finished', 1, 'Plan A.'), (1, 'finished', 1, 'Plan B.')]
>>> [(total.group, total.branches, total.finished) for total in report.totals(by="model")]
[('openai/stub-model', 2, 2)]
>>> report.rows[0].added  # what the branch added to the source: the diff against it
('MessageEvent user: Be bold.', 'MessageEvent agent: Plan A.')
"""

from __future__ import annotations

import base64
import html
import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cowconv.core.compare import describe_event
from cowconv.core.events import ActionEvent, AgentErrorEvent, MessageEvent
from cowconv.workspaces.changes import FileChanges, branch_file_changes

if TYPE_CHECKING:
    from rich.table import Table

    from cowconv.conversation import Conversation

__all__ = ["BranchRow", "GroupTotals", "SuiteReport"]

NO_GROUP = "(none)"
"""The group of a branch that has no value for the tag a report is grouped by."""


@dataclass(frozen=True)
class BranchRow:
    """One branch of a suite: who it is and how its run went.

    ``tokens`` holds every token count of the fork's stats (prompt,
    completion and, where recorded, cached). ``steps`` counts the LLM
    answers the run recorded; ``error`` is the last error it recorded.
    ``added`` describes, one line each, the events the branch added to the
    history it was forked from: its diff against the source. ``files`` is
    what it did to its workspace's files against the fork point (the
    snapshots its tool calls recorded; ``None`` where none are), and
    :meth:`patch` the full diff of those files.

    >>> row = BranchRow(index=0, conversation_id="c1", title="A", tags={}, status="finished",
    ...                 steps=1, cost=0.0, tokens={"prompt_tokens": 9}, wall_seconds=0.5,
    ...                 final_answer="Done.", error=None, model="openai/gpt-4o")
    >>> row.tokens["prompt_tokens"], row.total_tokens, row.group("model"), row.group("variant")
    (9, 9, 'openai/gpt-4o', '(none)')
    """

    index: int
    conversation_id: str
    title: str | None
    tags: Mapping[str, str]
    status: str
    steps: int
    cost: float
    tokens: Mapping[str, int]
    wall_seconds: float | None
    final_answer: str | None
    error: str | None
    model: str = ""
    added: tuple[str, ...] = field(default=())
    files: FileChanges | None = None

    @classmethod
    def of(cls, index: int, fork: Conversation, wall_seconds: float | None) -> BranchRow:
        """The row of one fork of a suite."""
        state = fork.state
        events = state.branch
        start = state.forked_from_event_count or 0  # the events the fork inherited
        answers: set[str] = set()
        steps = 0
        final: str | None = None
        error: str | None = None
        added: list[str] = []
        for position in range(start, len(events)):
            event = events[position]
            added.append(describe_event(event))
            if isinstance(event, MessageEvent) and event.role == "assistant":
                steps += 1
                final = event.text
            elif isinstance(event, ActionEvent):
                key = event.llm_response_id or event.id
                if key not in answers:
                    answers.add(key)
                    steps += 1
            elif isinstance(event, AgentErrorEvent) and event.tool_call_id is None:
                error = event.error
        stats = state.stats.model_dump()
        return cls(
            index=index,
            conversation_id=str(state.id),
            title=state.title,
            tags={key: value for key, value in state.tags.items() if key != "title"},
            status=state.execution_status.value,
            steps=steps,
            cost=float(stats["accumulated_cost"]),
            tokens={key: int(value) for key, value in stats.items() if key.endswith("_tokens")},
            wall_seconds=wall_seconds,
            final_answer=final,
            error=error,
            model=state.agent.llm.model,
            added=tuple(added),
            files=branch_file_changes(state, start),
        )

    def patch(self) -> str:
        """The unified diff of the files the branch changed since its fork point ("": none,
        or no snapshots recorded).

        >>> BranchRow(index=0, conversation_id="c1", title=None, tags={}, status="idle",
        ...           steps=0, cost=0.0, tokens={}, wall_seconds=None, final_answer=None,
        ...           error=None).patch()
        ''
        """
        return "" if self.files is None else self.files.patch()

    @property
    def total_tokens(self) -> int:
        """Prompt and completion tokens together (cached ones are part of the prompt's)."""
        return self.tokens.get("prompt_tokens", 0) + self.tokens.get("completion_tokens", 0)

    def group(self, by: str) -> str:
        """The row's group: its model for ``by="model"``, else its value of tag ``by``."""
        if by == "model":
            return self.model
        return self.tags.get(by, NO_GROUP)


@dataclass(frozen=True)
class GroupTotals:
    """The totals of the branches of one group (one variant, one model, ...).

    >>> GroupTotals(group="A", branches=2, finished=1, errors=1, steps=3, cost=0.5,
    ...             tokens={"prompt_tokens": 10}, wall_seconds=1.5).mean_cost
    0.25
    """

    group: str
    branches: int
    finished: int
    errors: int
    steps: int
    cost: float
    tokens: Mapping[str, int]
    wall_seconds: float

    @property
    def mean_cost(self) -> float:
        """Cost per branch, in USD."""
        return self.cost / self.branches if self.branches else 0.0

    @property
    def total_tokens(self) -> int:
        """Prompt and completion tokens of every branch of the group."""
        return self.tokens.get("prompt_tokens", 0) + self.tokens.get("completion_tokens", 0)

    @classmethod
    def of(cls, group: str, rows: Sequence[BranchRow]) -> GroupTotals:
        """The totals of ``rows``."""
        tokens: dict[str, int] = {}
        for row in rows:
            for kind, count in row.tokens.items():
                tokens[kind] = tokens.get(kind, 0) + count
        return cls(
            group=group,
            branches=len(rows),
            finished=sum(row.status == "finished" for row in rows),
            errors=sum(row.status == "error" for row in rows),
            steps=sum(row.steps for row in rows),
            cost=sum(row.cost for row in rows),
            tokens=tokens,
            wall_seconds=sum(row.wall_seconds or 0.0 for row in rows),
        )


_TOTAL_COLUMNS = ("branches", "finished", "errors", "steps", "cost $", "tokens", "wall s")
"""The columns of a group's totals, after the group's name (the table and the HTML page)."""


def _total_cells(total: GroupTotals) -> list[str]:
    """``total`` as the text of :data:`_TOTAL_COLUMNS`, in order."""
    return [
        str(total.branches),
        str(total.finished),
        str(total.errors),
        str(total.steps),
        f"{total.cost:.4f}",
        f"{total.total_tokens:,}",
        f"{total.wall_seconds:.2f}",
    ]


def _short_model(model: str) -> str:
    """The model's name without its provider: the table's column (JSON keeps it whole)."""
    return model.rsplit("/", 1)[-1] or model


@dataclass(frozen=True)
class SuiteReport:
    """The rows of a suite, in branch order; ``run_branches(...).report()`` makes one.

    >>> report = SuiteReport(rows=())
    >>> report.to_json(), report.table().row_count, report.totals()
    ('[]', 0, [])
    """

    rows: tuple[BranchRow, ...]

    @classmethod
    def of(
        cls, forks: Sequence[Conversation], wall_seconds: Iterable[float | None] = ()
    ) -> SuiteReport:
        """The report of ``forks`` (each a fork of the suite's source)."""
        walls = list(wall_seconds)[: len(forks)]
        walls += [None] * (len(forks) - len(walls))
        rows = (BranchRow.of(i, f, w) for i, (f, w) in enumerate(zip(forks, walls, strict=True)))
        return cls(rows=tuple(rows))

    def totals(self, by: str = "variant") -> list[GroupTotals]:
        """Totals per group, in the order groups first appear: ``by`` is a tag name
        (``"variant"`` by default), or ``"model"`` for each branch's model. Branches
        without the tag are the group ``"(none)"``."""
        groups: dict[str, list[BranchRow]] = {}
        for row in self.rows:
            groups.setdefault(row.group(by), []).append(row)
        return [GroupTotals.of(group, rows) for group, rows in groups.items()]

    def to_dicts(self) -> list[dict[str, Any]]:
        """The rows as plain dictionaries."""
        return [
            {
                **asdict(row),
                "tags": dict(row.tags),
                "tokens": dict(row.tokens),
                "added": list(row.added),
                "files": None if row.files is None else row.files.to_dict(),
            }
            for row in self.rows
        ]

    def to_json(self, **dumps: Any) -> str:
        """The rows as a JSON array (``dumps`` goes to ``json.dumps``, e.g. ``indent=2``)."""
        return json.dumps(self.to_dicts(), **dumps)

    def totals_to_json(self, by: str = "variant", **dumps: Any) -> str:
        """:meth:`totals` as a JSON array of objects.

        >>> SuiteReport(rows=()).totals_to_json()
        '[]'
        """
        data = [{**asdict(total), "tokens": dict(total.tokens)} for total in self.totals(by)]
        return json.dumps(data, **dumps)

    def _group_column(self, by: str) -> str | None:
        """The tag shown in a column: ``by`` if any branch has it."""
        return by if by != "model" and any(by in row.tags for row in self.rows) else None

    def table(self, *, by: str = "variant", answer_width: int = 200) -> Table:
        """A rich table of the rows that fits 80 columns (``rich.print(report.table())``).

        One line per branch: its number, its ``by`` tag (when any branch has
        it) or else its title, model (without the provider), status, steps,
        cost, tokens (prompt and completion), wall time, and the final answer
        (or error), which alone wraps, cut at ``answer_width`` characters.
        When any branch recorded workspace snapshots, a ``files`` column
        counts the files it added, modified and deleted (``+A ~M -D``).
        Other tags, token kinds, full model names and the changed paths are
        in :meth:`to_json`.
        """
        column = self._group_column(by)
        with_files = any(row.files is not None for row in self.rows)
        table = _compact_table(f"{len(self.rows)} branches")
        table.add_column("#", justify="right", no_wrap=True)
        table.add_column(column or "branch", no_wrap=True, max_width=10, overflow="ellipsis")
        table.add_column("model", no_wrap=True, max_width=14, overflow="ellipsis")
        table.add_column("status", no_wrap=True, min_width=6)
        for name in ("steps", "cost $", "tokens", "wall s"):
            table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
        if with_files:
            table.add_column("files", justify="right", no_wrap=True)
        table.add_column("answer", overflow="fold", ratio=1, min_width=10)
        for row in self.rows:
            answer = row.final_answer if row.final_answer is not None else (row.error or "")
            answer = " ".join(answer.split())
            if len(answer) > answer_width:
                answer = answer[: answer_width - 1] + "…"
            name = row.tags.get(column, "") if column else (row.title or row.conversation_id[:8])
            files = [("" if row.files is None else row.files.short())] if with_files else []
            table.add_row(
                str(row.index),
                name,
                _short_model(row.model),
                row.status,
                str(row.steps),
                f"{row.cost:.4f}",
                f"{row.total_tokens:,}",
                "" if row.wall_seconds is None else f"{row.wall_seconds:.2f}",
                *files,
                answer,
            )
        return table

    def totals_table(self, by: str = "variant") -> Table:
        """A rich table of :meth:`totals` (fits 80 columns).

        >>> SuiteReport(rows=()).totals_table().row_count
        0
        """
        table = _compact_table(f"totals by {by}")
        table.add_column(by, no_wrap=True, max_width=36, overflow="ellipsis")
        for name in _TOTAL_COLUMNS:
            table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
        for total in self.totals(by):
            table.add_row(total.group, *_total_cells(total))
        return table

    def plot(self, path: str | Path, *, by: str = "variant", title: str | None = None) -> Path:
        """Save a bar chart of each branch's wall time and tokens to ``path`` (PNG, SVG, ...).

        Bars are coloured by group (``by``: a tag, or ``"model"``), with a
        legend; the figure's title is ``title`` or says how many branches
        and what colours them. Needs matplotlib (the ``bench`` extra),
        imported only here.
        """
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch

        groups = list(dict.fromkeys(row.group(by) for row in self.rows))
        palette = plt.get_cmap("tab10")
        colour = {group: palette(i % 10) for i, group in enumerate(groups)}
        labels = [f"{row.index} {row.title or row.group(by)}" for row in self.rows]
        colours = [colour[row.group(by)] for row in self.rows]
        figure, (left, right) = plt.subplots(1, 2, figsize=(10, 0.4 * len(labels) + 2))
        left.barh(labels, [row.wall_seconds or 0.0 for row in self.rows], color=colours)
        left.set_xlabel("wall time (s)")
        left.invert_yaxis()  # branch 0 on top, as in the table
        right.barh(labels, [row.total_tokens for row in self.rows], color=colours)
        right.set_xlabel("tokens (prompt + completion)")
        right.invert_yaxis()
        right.set_yticklabels([])
        figure.suptitle(title or f"{len(self.rows)} branches, coloured by {by}")
        if self.rows:
            figure.legend(
                handles=[Patch(color=colour[group], label=group) for group in groups],
                title=by,
                loc="upper right",
            )
        figure.tight_layout(rect=(0, 0, 0.88, 1))
        target = Path(path)
        figure.savefig(target)
        plt.close(figure)
        return target

    def to_html(self, *, by: str = "variant", title: str | None = None) -> str:
        """A self-contained HTML page: totals, the table, the plot (inline, when matplotlib
        is installed) and each branch's diff against the source (the events it added, and
        the files it changed with their patch, where snapshots are recorded).

        >>> page = SuiteReport(rows=()).to_html(title="empty suite")
        >>> page.startswith("<!DOCTYPE html>"), "<h1>empty suite</h1>" in page
        (True, True)
        """
        heading = html.escape(title or f"{len(self.rows)} branches")
        esc = html.escape
        out = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{heading}</title>",
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:left}"
            "td.n{text-align:right}pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em}"
            "</style></head><body>",
            f"<h1>{heading}</h1>",
            f"<h2>Totals by {esc(by)}</h2>",
            "<table><tr>"
            + "".join(f"<th>{esc(name)}</th>" for name in (by, *_TOTAL_COLUMNS))
            + "</tr>",
        ]
        for total in self.totals(by):
            cells = [esc(total.group), *_total_cells(total)]
            out.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
        out.append("</table>")
        out.append("<h2>Branches</h2><table><tr>")
        names = ("#", "title", "tags", "model", "status", "steps", "cost $", "tokens", "wall s")
        out.append("".join(f"<th>{name}</th>" for name in names) + "<th>answer</th></tr>")
        for row in self.rows:
            answer = row.final_answer if row.final_answer is not None else (row.error or "")
            cells = [
                str(row.index),
                esc(row.title or ""),
                esc(", ".join(f"{k}={v}" for k, v in sorted(row.tags.items()))),
                esc(row.model),
                esc(row.status),
                str(row.steps),
                f"{row.cost:.4f}",
                f"{row.total_tokens:,}",
                "" if row.wall_seconds is None else f"{row.wall_seconds:.2f}",
                esc(answer),
            ]
            out.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
        out.append("</table>")
        picture = self._inline_plot(by)
        if picture is not None:
            out.append(f'<h2>Plot</h2><img alt="wall time and tokens per branch" src="{picture}">')
        out.append("<h2>Each branch against the source</h2>")
        for row in self.rows:
            name = row.title or row.conversation_id
            out.append(
                f"<h3>{row.index} {esc(name)} <small>{esc(row.conversation_id)}</small></h3>"
            )
            lines = "\n".join(f"+ {line}" for line in row.added) or "(nothing added)"
            out.append(f"<pre>{esc(lines)}</pre>")
            if row.files is not None:
                changed = "\n".join(row.files.lines()) or "(no file changed)"
                out.append(f"<p>files: {esc(row.files.summary())}</p><pre>{esc(changed)}</pre>")
                patch = row.files.patch()
                if patch:
                    out.append(
                        f"<details><summary>patch</summary><pre>{esc(patch)}</pre></details>"
                    )
        out.append("</body></html>")
        return "\n".join(out) + "\n"

    def _inline_plot(self, by: str) -> str | None:
        """The plot as a ``data:`` URL, or ``None`` without matplotlib or rows."""
        if not self.rows:
            return None
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return None
        with tempfile.TemporaryDirectory() as directory:
            picture = self.plot(Path(directory) / "suite.png", by=by).read_bytes()
        return "data:image/png;base64," + base64.b64encode(picture).decode("ascii")


def _compact_table(title: str) -> Table:
    # The report's tables (rich is imported when one is drawn, so importing cowconv stays fast).
    # Columns two apart (a space of the box and one of padding), no outer edge: 80 columns hold
    # the branch table's fixed columns and leave its answer (the only column that wraps) 13+.
    from rich import box
    from rich.table import Table

    return Table(
        title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1)
    )
