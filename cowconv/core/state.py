"""``ConversationState``: one immutable snapshot of a conversation.

A conversation holds its current snapshot and swaps in a new one on every
change; a fork is a new snapshot that shares the events, the agent and the
agent state with its source.

>>> from cowconv import LLM, Agent, EventLog, Workspace
>>> state = ConversationState(
...     id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=Workspace(working_dir=".")
... )
>>> later = state.evolve(tags={"title": "Draft"})
>>> dict(later.tags), dict(state.tags)
({'title': 'Draft'}, {})
"""

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field, SerializeAsAny, model_validator
from pyrsistent import pmap

from cowconv._exceptions import FrozenInstanceError, InvalidTypeError, InvalidValueError
from cowconv.core.agent import Agent
from cowconv.core.analyzers import SecurityAnalyzerBase
from cowconv.core.events import (
    ActionEvent,
    AgentErrorEvent,
    ConversationStateUpdateEvent,
    Event,
    ObservationEvent,
    utc_now,
)
from cowconv.core.frozen import (
    CheckedModel,
    FrozenJSONMap,
    FrozenMap,
    FrozenStrMap,
    check_str_map,
)
from cowconv.core.history import EventLog
from cowconv.core.hooks import HookConfig
from cowconv.core.ids import ConversationIDField
from cowconv.core.oversight import UserRejectObservation  # noqa: F401  (registers the kinds)
from cowconv.core.security import ConfirmationPolicyBase, NeverConfirm
from cowconv.core.tree import EventTree, active_branch, branches, events_of, head_is_empty
from cowconv.core.usage import Metrics, TokenUsage, Usage
from cowconv.core.view import View, view_of
from cowconv.core.workspace import Workspace

__all__ = [
    "DEFAULT_MAX_ITERATION_PER_RUN",
    "ConversationExecutionStatus",
    "ConversationInfo",
    "ConversationState",
    "ConversationStats",
    "ExecutionStatus",
    "NO_STATS",
    "TokenUsage",
    "Usage",
    "check_max_iteration_per_run",
    "check_tags",
    "dump_state",
    "dump_state_json",
]


def check_tags(tags: Mapping[str, str] | None) -> dict[str, str]:
    """``tags`` as a new dict of str to str (``{}`` for ``None``), or ``TypeError``.

    >>> check_tags({"owner": "ci"}), check_tags(None)
    ({'owner': 'ci'}, {})
    >>> check_tags({"retries": 3})
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidTypeError: tags must map str to str, got 'retries': 3
    """
    if tags is None:
        return {}
    return dict(check_str_map(tags, InvalidTypeError, "tags"))


DEFAULT_MAX_ITERATION_PER_RUN = 500
"""How many steps one ``run()`` may take before it stops as ``stuck``."""


def check_max_iteration_per_run(value: object) -> None:
    """Refuse anything but a positive int as an iteration limit.

    >>> check_max_iteration_per_run(0)
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: max_iteration_per_run must be at least 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"max_iteration_per_run must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidValueError(f"max_iteration_per_run must be at least 1, got {value}")


class ExecutionStatus(StrEnum):
    """Where a conversation's run stands; OpenHands' SDK calls it ``ConversationExecutionStatus``.

    The values are OpenHands' SDK's. ``waiting_for_confirmation`` is where a run
    stops when its confirmation policy holds the step's tool calls back; cowconv
    never sets ``deleting`` (deleting is one step), which exists so that code
    written for OpenHands' SDK naming it, and an OpenHands agent server's answers,
    keep working.

    >>> ExecutionStatus("paused") is ExecutionStatus.PAUSED
    True
    >>> [status.value for status in ExecutionStatus if status.is_terminal()]
    ['finished', 'error', 'stuck']
    """

    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    WAITING_FOR_CONFIRMATION = "waiting_for_confirmation"
    FINISHED = "finished"
    ERROR = "error"
    STUCK = "stuck"
    DELETING = "deleting"

    def is_terminal(self) -> bool:
        """Whether a run ended here (``finished``, ``error``, ``stuck``); ``idle`` is a start."""
        return self in _TERMINAL


_TERMINAL = frozenset({ExecutionStatus.FINISHED, ExecutionStatus.ERROR, ExecutionStatus.STUCK})

ConversationExecutionStatus = ExecutionStatus
"""OpenHands' SDK's name for :class:`ExecutionStatus` (an alias: the same enum)."""


class ConversationStats(Usage):
    """Totals of a conversation, and the same per LLM ``usage_id``.

    >>> stats = ConversationStats().record("main", Usage(accumulated_cost=0.25, prompt_tokens=7))
    >>> stats.accumulated_cost, stats.by_usage_id["main"].prompt_tokens
    (0.25, 7)

    OpenHands' SDK's way to build them, from one :class:`~cowconv.Metrics` per LLM:

    >>> from cowconv import Metrics
    >>> agent = Metrics(model_name="gpt-4o-mini")
    >>> agent.add_cost(0.75)
    >>> ConversationStats(usage_to_metrics={"agent": agent}).accumulated_cost
    0.75
    """

    by_usage_id: FrozenMap[Usage] = pmap()

    @model_validator(mode="before")
    @classmethod
    def _from_usage_to_metrics(cls, data: Any) -> Any:
        # OpenHands' SDK builds stats as ConversationStats(usage_to_metrics={usage_id: Metrics}):
        # each account becomes its Usage under by_usage_id, and the totals are their sum.
        if not isinstance(data, Mapping) or "usage_to_metrics" not in data:
            return data
        given = dict(data)
        per_llm = given.pop("usage_to_metrics")
        if not isinstance(per_llm, Mapping):
            raise InvalidTypeError(
                f"usage_to_metrics must map usage ids to Metrics, got {type(per_llm).__name__}"
            )
        if "by_usage_id" in given:
            raise InvalidValueError("give usage_to_metrics or by_usage_id, not both")
        by_usage_id: dict[str, Usage] = {}
        for usage_id, account in per_llm.items():
            if isinstance(account, Mapping):
                account = Metrics.model_validate(account)
            if isinstance(account, Metrics):
                account = account.usage
            if not isinstance(account, Usage):
                raise InvalidTypeError(
                    f"usage_to_metrics[{usage_id!r}] must be a Metrics or a Usage, "
                    f"got {type(account).__name__}"
                )
            by_usage_id[str(usage_id)] = account
        total = sum(by_usage_id.values(), Usage())
        return {**total.model_dump(), **given, "by_usage_id": by_usage_id}

    def record(self, usage_id: str, usage: Usage) -> "ConversationStats":
        """New stats with ``usage`` added under ``usage_id`` and to the totals."""
        total = (
            Usage.model_construct(
                accumulated_cost=self.accumulated_cost,
                prompt_tokens=self.prompt_tokens,
                completion_tokens=self.completion_tokens,
                cache_read_tokens=self.cache_read_tokens,
                cache_write_tokens=self.cache_write_tokens,
            )
            + usage
        )
        previous = self.by_usage_id.get(usage_id, Usage())
        by_usage_id = {**self.by_usage_id, usage_id: previous + usage}
        return ConversationStats(**total.model_dump(), by_usage_id=by_usage_id)

    def with_account(self, usage_id: str, account: Usage | Metrics) -> "ConversationStats":
        """New stats whose account ``usage_id`` is ``account`` (replaced, not added to).

        The totals are recomputed over the accounts. OpenHands' SDK's
        ``stats.usage_to_metrics[usage_id] = metrics``, as a value.

        >>> stats = ConversationStats().record("a", Usage(accumulated_cost=0.5))
        >>> stats = stats.with_account("a", Usage(accumulated_cost=2.0))
        >>> stats.accumulated_cost, stats.by_usage_id["a"].accumulated_cost
        (2.0, 2.0)
        """
        if not isinstance(usage_id, str):
            raise InvalidTypeError(f"a usage id is a str, got {type(usage_id).__name__}")
        usage = account.usage if isinstance(account, Metrics) else account
        if not isinstance(usage, Usage):
            raise InvalidTypeError(
                f"an account is a Metrics or a Usage, got {type(usage).__name__}"
            )
        accounts = {**self.by_usage_id, usage_id: usage}
        total = sum(accounts.values(), Usage())
        return ConversationStats(**total.model_dump(), by_usage_id=accounts)

    def get_combined_metrics(self) -> Usage:
        """The totals over every LLM, as OpenHands' SDK's ``stats.get_combined_metrics()``.

        >>> stats = ConversationStats().record("a", Usage(accumulated_cost=0.5, prompt_tokens=7))
        >>> stats = stats.record("b", Usage(accumulated_cost=0.25, completion_tokens=2))
        >>> combined = stats.get_combined_metrics()
        >>> combined.accumulated_cost, combined.accumulated_token_usage.completion_tokens
        (0.75, 2)
        """
        return Usage.model_construct(
            accumulated_cost=self.accumulated_cost,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
        )

    @property
    def usage_to_metrics(self) -> Mapping[str, Usage]:
        """``by_usage_id`` under OpenHands' SDK's name (read only: stats are values)."""
        return self.by_usage_id


# Built without validation: validating here would build the model's schema (and load
# pydantic's plugin machinery) on every `import cowconv`, not on first use.
NO_STATS = ConversationStats.model_construct()
"""The stats of a conversation that has spent nothing (shared, immutable)."""


class ConversationState(CheckedModel):
    """An immutable snapshot of a conversation.

    ``evolve(**changes)`` returns a new, validated snapshot; nothing changes
    this one.

    ``branch`` is the active branch of the conversation tree (what the agent
    sees and the next event extends), ``other_branches`` the branches
    ``navigate_to`` left; ``events`` is every event of the tree, as in
    OpenHands' SDK (see :attr:`events`). ``events=`` given to the
    constructor, ``evolve`` or ``_replace`` sets ``branch`` (an
    :class:`~cowconv.core.tree.EventTree` sets both).

    >>> from cowconv import LLM, Agent, Conversation
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> snapshot = conversation.state
    >>> _ = conversation.send_message("hi")
    >>> len(snapshot.events), len(conversation.state.events)  # the system prompt, "hi"
    (0, 2)
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True
    )

    id: ConversationIDField
    agent: Agent
    workspace: Workspace
    branch: EventLog = EventLog()
    agent_state: FrozenJSONMap = pmap()
    activated_knowledge_skills: tuple[str, ...] = ()
    stats: ConversationStats = NO_STATS
    tags: FrozenStrMap = pmap()
    execution_status: ExecutionStatus = ExecutionStatus.IDLE
    forked_from_conversation_id: ConversationIDField | None = None
    forked_from_event_id: str | None = None
    forked_from_event_count: int | None = Field(default=None, ge=0)
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    other_branches: tuple[EventLog, ...] = ()
    # Confirmation mode and hooks (OpenHands' fields): state, so a fork and a reopened store
    # keep them, and a fork made while waiting for confirmation waits too.
    # A factory, not an instance: making one at import would build the policy's validator
    # (and load pydantic's schema machinery) before a state is made. The schema still shows
    # the default, as it did when it was an instance.
    confirmation_policy: SerializeAsAny[ConfirmationPolicyBase] = Field(
        default_factory=NeverConfirm, json_schema_extra={"default": {"kind": "NeverConfirm"}}
    )
    security_analyzer: SerializeAsAny[SecurityAnalyzerBase] | None = None
    hook_config: HookConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _events_as_branch(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "events" in data:
            return _with_branch(dict(data))
        return data

    @property
    def events(self) -> EventLog | EventTree:
        """Every event of the conversation tree, abandoned branches included (OpenHands' SDK's).

        While the conversation has one branch, that is ``state.branch``
        itself (an :class:`~cowconv.EventLog`, O(1)). After ``navigate_to``
        left a branch it is an :class:`~cowconv.core.tree.EventTree` over
        every branch (each event once; O(b² log n) to make for ``b``
        branches, copying nothing). What the agent sees is :attr:`view`,
        the active branch is :attr:`branch` / :meth:`active_branch`.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> first = conversation.send_message("one")
        >>> _ = conversation.send_message("two")
        >>> conversation.navigate_to(first.id)
        >>> len(conversation.state.events), len(conversation.state.branch)  # prompt, one, two
        (3, 2)
        """
        return events_of(self)

    @property
    def title(self) -> str | None:
        """``tags["title"]``, if set."""
        return self.tags.get("title")

    @property
    def leaf_event_id(self) -> str | None:
        """The id of the last event of the active branch (``None`` when it is empty).

        ``Conversation.navigate_to`` moves it back; the next event extends the
        branch from there. (OpenHands' SDK's name.)

        ``None`` too when that event has no ``parent_id`` though events come
        before it: a history written before OpenHands' SDK had a tree (or
        with ``state.events.append``), whose leaf OpenHands' SDK never set.
        The branch is all the same the whole history (:meth:`_resolve_active_leaf`
        is its last event), and the next event follows it.

        >>> from cowconv import LLM, Agent, Conversation, MessageEvent
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> for text in ("one", "two"):
        ...     _ = conversation.state.events.append(MessageEvent(role="user", content=text))
        >>> state = conversation.state
        >>> state.leaf_event_id, state._resolve_active_leaf() == state.branch[-1].id
        (None, True)
        >>> new = conversation.append_event(MessageEvent(role="user", content="three"))
        >>> conversation.state.leaf_event_id == new.id, new.parent_id == state.branch[-1].id
        (True, True)
        """
        branch = self.branch
        if len(branch) > 1:
            last = branch.last
            if last is not None and last.parent_id is None:
                return None
        return branch.last_id

    @property
    def head_is_empty(self) -> bool:
        """Whether ``navigate_to(None)`` emptied the active branch (OpenHands' name).

        Then ``leaf_event_id`` is ``None`` while other branches hold events,
        and the next event starts a new root (its ``parent_id`` is
        :data:`~cowconv.ROOT_PARENT_ID`). Derived from the tree, never stored.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> _ = conversation.send_message("one")
        >>> before = conversation.state.head_is_empty
        >>> conversation.navigate_to(None)
        >>> before, conversation.state.head_is_empty, conversation.state.leaf_event_id
        (False, True, None)
        """
        return head_is_empty(self)

    def active_branch(self, limit: int | None = None) -> list[Event]:
        """The events of the active branch, root first (OpenHands' ``active_branch``).

        The same events as ``state.branch``, as a new list; ``limit`` keeps
        only the last ``limit`` of them, in O(``limit``).

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> _ = conversation.send_message("one")
        >>> [e.kind for e in conversation.state.active_branch(limit=1)]
        ['MessageEvent']
        """
        return active_branch(self, limit)

    def update_state_from_event(self, event: ConversationStateUpdateEvent) -> None:
        """Hand a server's state update to the remote conversation this snapshot came from.

        OpenHands' ``RemoteState.update_state_from_event``: the client keeps
        the update in its cached conversation info (see
        :meth:`~cowconv.RemoteConversation.update_state_from_event`); this
        snapshot itself never changes. A local conversation's snapshot, or one
        no conversation holds, refuses it (:class:`~cowconv.InvalidTypeError`):

        >>> from cowconv import LLM, Agent, Conversation, ConversationStateUpdateEvent
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> update = ConversationStateUpdateEvent(key="execution_status", value="idle")
        >>> try:
        ...     conversation.state.update_state_from_event(update)
        ... except InvalidTypeError as error:
        ...     print(str(error)[:48])
        only a RemoteConversation keeps a server's state
        """
        if not isinstance(event, ConversationStateUpdateEvent):
            raise InvalidTypeError(
                f"expected a ConversationStateUpdateEvent, got {type(event).__name__}"
            )
        hand_over = getattr(self.branch, "state_update_on_conversation", None)
        if hand_over is None:
            raise InvalidTypeError(
                "this snapshot belongs to no conversation: only a RemoteConversation's "
                "state keeps a server's state updates"
            )
        hand_over(event)

    @property
    def persistence_dir(self) -> str | None:
        """The directory for the conversation's own files (OpenHands' SDK's name).

        Read from the conversation this snapshot came from
        (:attr:`~cowconv.Conversation.persistence_dir`); ``None`` for a
        conversation kept in memory or elsewhere, and for a snapshot no
        conversation holds.

        >>> import tempfile
        >>> from cowconv import LLM, Agent, Conversation
        >>> base = tempfile.mkdtemp()
        >>> agent = Agent(llm=LLM(model="openai/gpt-4o"))
        >>> stored = Conversation(agent=agent, workspace=base, persistence_dir=base)
        >>> free = ConversationState(id="c1", agent=agent, workspace=stored.workspace)
        >>> stored.state.persistence_dir == stored.persistence_dir, free.persistence_dir
        (True, None)
        """
        find = getattr(self.branch, "persistence_dir_of_conversation", None)
        directory = None if find is None else find()
        return None if directory is None else str(directory)

    def _resolve_active_leaf(self) -> str | None:
        # OpenHands' private name, for code written against it: the leaf is stored there and
        # derived here (documented in docs/migration.md); a history without parent ids
        # resolves to its last event, as OpenHands' SDK resolves an unset leaf.
        return self.branch.last_id

    @staticmethod
    def get_unmatched_actions(events: Iterable[Event]) -> list[ActionEvent]:
        """The tool calls in ``events`` that nothing answered yet (OpenHands' name), in order.

        An :class:`~cowconv.ObservationEvent` or an :class:`~cowconv.AgentErrorEvent`
        with the same ``tool_call_id`` answers one. Give it
        ``state.active_branch()``: a call left on an abandoned branch is not pending.

        >>> from cowconv import ActionEvent, ObservationEvent
        >>> call = ActionEvent(tool_name="terminal", tool_call_id="c1", arguments={})
        >>> [a.tool_call_id for a in ConversationState.get_unmatched_actions([call])]
        ['c1']
        >>> ConversationState.get_unmatched_actions(
        ...     [call, ObservationEvent(tool_name="terminal", tool_call_id="c1", output="")])
        []
        """
        pending: dict[str, ActionEvent] = {}
        for event in events:
            if isinstance(event, ActionEvent):
                pending[event.tool_call_id] = event
            elif isinstance(event, ObservationEvent | AgentErrorEvent):
                if event.tool_call_id is not None:
                    pending.pop(event.tool_call_id, None)
        return list(pending.values())

    @property
    def view(self) -> View:
        """What the agent sees: the active branch after condensation (OpenHands' ``View``).

        ``state.view.events`` holds the events the model is shown, in order:
        each :class:`~cowconv.Condensation` on the branch replaces the events
        it forgets with its summary, and events the model never sees (a
        :class:`~cowconv.PauseEvent`) are left out. Computed on first read of
        a snapshot from the view of the longest prefix read before, so a
        step that adds ``k`` events costs O(k) (see :mod:`cowconv.core.view`).

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> first = conversation.send_message("one")
        >>> _ = conversation.send_message("two")
        >>> conversation.navigate_to(first.id)
        >>> [e.kind for e in conversation.state.view.events]
        ['SystemPromptEvent', 'MessageEvent']
        """
        return view_of(self.branch)

    @property
    def branches(self) -> tuple[EventLog, ...]:
        """Every branch of the conversation tree, each up to its leaf; the active one last.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> first = conversation.send_message("one")
        >>> _ = conversation.send_message("two")
        >>> conversation.navigate_to(first.id)
        >>> _ = conversation.send_message("three")
        >>> [[e.text for e in branch[1:]] for branch in conversation.state.branches]  # [0]: prompt
        [['one', 'two'], ['one', 'three']]
        """
        return branches(self)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(
            f"ConversationState is an immutable snapshot; cannot set {name!r}. Change a "
            "conversation through its methods (append_event, set_tag, update_agent_state, "
            "activate_skill, navigate_to), or make a new snapshot with state.evolve(...)"
        )

    def evolve(self, **changes: Any) -> "ConversationState":
        """A new snapshot with ``changes`` applied and validated."""
        if "events" in changes:
            changes = _with_branch(changes)
        unknown = changes.keys() - type(self).model_fields.keys()
        if unknown:
            raise InvalidTypeError(f"ConversationState has no field(s) {sorted(unknown)}")
        return type(self).model_validate({**dict(self), **changes})

    def _replace(self, **changes: Any) -> "ConversationState":
        # Trusted, unvalidated copy for values cowconv built itself (hot paths: fork, append):
        # pydantic's public model_copy, which copies the fields and applies ``changes``.
        if "events" in changes:
            changes = _with_branch(changes)
        return self.model_copy(update=changes)


def _with_branch(changes: dict[str, Any]) -> dict[str, Any]:
    # `events=` sets the active branch; an EventTree (a state's `events`) sets the others too.
    events = changes.pop("events")
    if isinstance(events, EventTree):
        changes.setdefault("other_branches", events.others)
        events = events.active
    changes.setdefault("branch", events)
    return changes


SecretsInDump = Literal["clear", "masked", "dropped"]
"""How a state dump writes API keys: in clear, as ``**********``, or as ``null``."""

_SECRETS_CONTEXT: dict[str, dict[str, bool] | None] = {
    "clear": {"expose_secrets": True},
    "masked": None,
    "dropped": {"drop_secrets": True},
}


def _dump_options(secrets: SecretsInDump, branches: bool) -> dict[str, Any]:
    # The one statement of what a state dump holds. Events travel beside it (a store's rows,
    # an export's shared prefixes, an agent server's pages), and so do the other branches of
    # the conversation tree unless `branches`.
    return {
        "exclude": {"branch"} if branches else {"branch", "other_branches"},
        "context": _SECRETS_CONTEXT[secrets],
    }


def dump_state(
    state: ConversationState, *, secrets: SecretsInDump = "clear", branches: bool = False
) -> dict[str, Any]:
    """Everything of ``state`` but its events, as JSON data (what stores and exports keep).

    ``secrets`` says how API keys are written: ``"clear"`` (a store, so a
    resumed conversation can run), ``"masked"`` or ``"dropped"`` (``None``).
    ``branches`` keeps the other branches of the conversation tree in the
    dump (an agent server's state answer); by default they travel beside it.
    ``ConversationState.model_validate`` reads any of them back.

    >>> from cowconv import LLM, Agent, Workspace
    >>> state = ConversationState(id="c1", workspace=Workspace(working_dir="."),
    ...                           agent=Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-1")))
    >>> [dump_state(state, secrets=how)["agent"]["llm"]["api_key"]
    ...  for how in ("clear", "masked", "dropped")]
    ['sk-1', '**********', None]
    >>> "events" in dump_state(state), ConversationState.model_validate(dump_state(state)) == state
    (False, True)
    """
    return state.model_dump(mode="json", **_dump_options(secrets, branches))


def dump_state_json(
    state: ConversationState, *, secrets: SecretsInDump = "clear", branches: bool = False
) -> str:
    """:func:`dump_state` as JSON text: what a :class:`~cowconv.SQLiteStore` row holds.

    Pydantic writes the text (compact, UTF-8), byte for byte as stores have
    written it since 0.1, so a stored row compares equal to its snapshot's dump.

    >>> import json
    >>> from cowconv import LLM, Agent, Workspace
    >>> state = ConversationState(id="c1", workspace=Workspace(working_dir="."),
    ...                           agent=Agent(llm=LLM(model="openai/gpt-4o")))
    >>> json.loads(dump_state_json(state)) == dump_state(state)
    True
    """
    return state.model_dump_json(**_dump_options(secrets, branches))


class ConversationInfo(CheckedModel):
    """A summary of a conversation without its events (listings, the REST API).

    >>> from cowconv import LLM, Agent, Conversation
    >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
    >>> ConversationInfo.of(conversation.state).event_count
    0
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: ConversationIDField
    title: str | None = None
    tags: FrozenStrMap = pmap()
    execution_status: ExecutionStatus
    stats: ConversationStats = NO_STATS
    created_at: datetime
    updated_at: datetime
    forked_from_conversation_id: ConversationIDField | None = None
    forked_from_event_id: str | None = None
    forked_from_event_count: int | None = Field(default=None, ge=0)
    event_count: int | None = Field(default=None, ge=0)
    leaf_event_id: str | None = None

    @classmethod
    def of(cls, state: ConversationState) -> "ConversationInfo":
        """The summary of a snapshot."""
        return cls(
            id=state.id,
            title=state.title,
            tags=state.tags,
            execution_status=state.execution_status,
            stats=state.stats,
            created_at=state.created_at,
            updated_at=state.updated_at,
            forked_from_conversation_id=state.forked_from_conversation_id,
            forked_from_event_id=state.forked_from_event_id,
            forked_from_event_count=state.forked_from_event_count,
            event_count=len(state.branch),
            leaf_event_id=state.leaf_event_id,
        )
