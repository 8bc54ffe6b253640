"""``SuiteReport``: what a branch suite did, one row per branch, as a table, JSON or a plot.

>>> from cowconv import LLM, Agent, Conversation, run_branches
>>> from cowconv.testing import StubLLMServer, StubReply
>>> with StubLLMServer() as stub:
...     stub.script(StubReply.text("Plan A."), StubReply.text("Plan B."))
...     llm = LLM(model="openai/stub-model", base_url=stub.base_url, api_key="stub-key")
...     source = Conversation(agent=Agent(llm=llm), workspace=".")
...     _ = source.send_message("Propose a plan.")
...     runs = run_branches(source, ["Be bold.", "Be careful."], max_workers=1)
>>> [(row.index, row.status, row.steps, row.final_answer) for row in runs.report().rows]
[(0, 'finished', 1, 'Plan A.'), (1, 'finished', 1, 'Plan B.')]
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cowconv.core.events import ActionEvent, AgentErrorEvent, MessageEvent

if TYPE_CHECKING:
    from rich.table import Table

    from cowconv.conversation import Conversation

__all__ = ["BranchRow", "SuiteReport"]


@dataclass(frozen=True)
class BranchRow:
    """One branch of a suite: who it is and how its run went.

    ``tokens`` holds every token count of the fork's stats (prompt,
    completion and, where recorded, cached). ``steps`` counts the LLM
    answers the run recorded; ``error`` is the last error it recorded.

    >>> row = BranchRow(index=0, conversation_id="c1", title="A", tags={}, status="finished",
    ...                 steps=1, cost=0.0, tokens={"prompt_tokens": 9}, wall_seconds=0.5,
    ...                 final_answer="Done.", error=None)
    >>> row.tokens["prompt_tokens"]
    9
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

    @classmethod
    def of(cls, index: int, fork: Conversation, wall_seconds: float | None) -> BranchRow:
        """The row of one fork of a suite."""
        state = fork.state
        events = state.events
        start = state.forked_from_event_count or 0  # the events the fork inherited
        answers: set[str] = set()
        steps = 0
        final: str | None = None
        error: str | None = None
        for position in range(start, len(events)):
            event = events[position]
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
        )


@dataclass(frozen=True)
class SuiteReport:
    """The rows of a suite, in branch order; ``run_branches(...).report()`` makes one.

    >>> report = SuiteReport(rows=())
    >>> report.to_json(), report.table().row_count
    ('[]', 0)
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

    def to_dicts(self) -> list[dict[str, Any]]:
        """The rows as plain dictionaries."""
        return [
            {**asdict(row), "tags": dict(row.tags), "tokens": dict(row.tokens)} for row in self.rows
        ]

    def to_json(self, **dumps: Any) -> str:
        """The rows as a JSON array (``dumps`` goes to ``json.dumps``, e.g. ``indent=2``)."""
        return json.dumps(self.to_dicts(), **dumps)

    def table(self, *, answer_width: int = 60) -> Table:
        """A rich table of the rows (``rich.print(report.table())``)."""
        from rich.table import Table

        kinds = sorted({kind for row in self.rows for kind in row.tokens})
        table = Table(title=f"{len(self.rows)} branches", show_lines=False)
        for name in ("#", "branch", "tags", "status", "steps", "cost $"):
            table.add_column(name, justify="right" if name in ("#", "steps", "cost $") else "left")
        for kind in kinds:
            table.add_column(
                kind.removesuffix("_tokens").replace("_", " ") + " tok", justify="right"
            )
        table.add_column("wall s", justify="right")
        table.add_column("final answer (or error)")
        for row in self.rows:
            answer = row.final_answer if row.final_answer is not None else (row.error or "")
            if len(answer) > answer_width:
                answer = answer[: answer_width - 1] + "…"
            table.add_row(
                str(row.index),
                row.title or row.conversation_id[:8],
                ", ".join(f"{k}={v}" for k, v in sorted(row.tags.items())),
                row.status,
                str(row.steps),
                f"{row.cost:.4f}",
                *(f"{row.tokens.get(kind, 0):,}" for kind in kinds),
                "" if row.wall_seconds is None else f"{row.wall_seconds:.2f}",
                answer.replace("\n", " "),
            )
        return table

    def plot(self, path: str | Path) -> Path:
        """Save a bar chart of each branch's wall time and cost to ``path`` (needs matplotlib)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        labels = [row.title or str(row.index) for row in self.rows]
        figure, (left, right) = plt.subplots(1, 2, figsize=(10, 0.4 * len(labels) + 1.5))
        left.barh(labels, [row.wall_seconds or 0.0 for row in self.rows])
        left.set_xlabel("wall time (s)")
        right.barh(labels, [sum(row.tokens.values()) for row in self.rows])
        right.set_xlabel("tokens")
        figure.tight_layout()
        target = Path(path)
        figure.savefig(target)
        plt.close(figure)
        return target
