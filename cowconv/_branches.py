"""A/B branching: fork one conversation into many and run them side by side.

>>> from cowconv import LLM, Agent, Conversation
>>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
>>> _ = source.send_message("Analyse the sales report.")
>>> branches = [Branch("Focus on EMEA.", tags={"variant": "A"}), Branch("Focus on APAC.")]
>>> forks = [source.fork(tags=b.tags) for b in branches]  # what run_branches does first
>>> [f.state.tags.get("variant") for f in forks]
['A', None]

:func:`run_branches` forks (O(1) each), sends each branch its message and
runs every fork's agent concurrently in a thread pool; the source is never
touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from cowconv._agent import Agent
from cowconv._conversation import Conversation

__all__ = ["Branch", "run_branches"]


@dataclass(frozen=True)
class Branch:
    """One arm of an A/B run: the message it gets and, optionally, its own agent.

    >>> Branch("Try the other approach.", title="B").title
    'B'
    """

    message: str
    agent: Agent | None = None
    title: str | None = None
    tags: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.message, str):
            raise TypeError(f"a branch message must be a str, got {type(self.message).__name__}")
        if self.agent is not None and not isinstance(self.agent, Agent):
            raise TypeError(f"a branch agent must be a cowconv.Agent, got {self.agent!r}")


def run_branches(
    source: Conversation,
    branches: Iterable[Branch | str],
    *,
    from_event_id: str | None = None,
    reset_metrics: bool = True,
    max_workers: int | None = None,
) -> list[Conversation]:
    """Fork ``source`` once per branch, send each its message, run them all concurrently.

    A branch is a :class:`Branch` or just its message. Each fork is made
    with the branch's ``agent``, ``title`` and ``tags`` (and
    ``from_event_id``, ``reset_metrics`` as in :meth:`Conversation.fork`).
    Returns the forks, in the order of ``branches``, once every run has
    ended; each one's ``execution_status`` tells how it ended. ``source``
    is left exactly as it was. If runs raise (a failing store, not a failed
    LLM call, which a run records), an exception group carries them after
    all runs have ended.

    ``max_workers`` bounds the runs in flight (default: all of them, up to 32).

    >>> from cowconv import LLM, Agent, Conversation
    >>> from cowconv.testing import StubLLMServer, StubReply
    >>> with StubLLMServer() as stub:
    ...     stub.script(StubReply.text("Plan A."), StubReply.text("Plan B."))
    ...     llm = LLM(model="openai/stub-model", base_url=stub.base_url, api_key="stub-key")
    ...     source = Conversation(agent=Agent(llm=llm), workspace=".")
    ...     _ = source.send_message("Propose a plan.")
    ...     forks = run_branches(source, ["Be bold.", Branch("Be careful.", title="B")])
    >>> [f.state.execution_status.value for f in forks], len(source.state.events)
    (['finished', 'finished'], 1)
    """
    specs = [Branch(b) if isinstance(b, str) else b for b in branches]
    for spec in specs:
        if not isinstance(spec, Branch):
            raise TypeError(f"branches must be Branch values or str, got {type(spec).__name__}")
    if max_workers is not None and max_workers < 1:
        raise ValueError(f"max_workers must be at least 1, got {max_workers}")
    forks = []
    for spec in specs:
        fork = source.fork(
            agent=spec.agent,
            title=spec.title,
            tags=spec.tags,
            reset_metrics=reset_metrics,
            from_event_id=from_event_id,
        )
        fork.send_message(spec.message)
        forks.append(fork)
    if not forks:
        return []
    workers = max_workers or min(32, len(forks))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cowconv-branch") as pool:
        futures = [pool.submit(fork.run) for fork in forks]
    errors = [error for error in (future.exception() for future in futures) if error is not None]
    if errors:
        raise BaseExceptionGroup(f"{len(errors)} of {len(forks)} branch runs raised", errors)
    return forks
