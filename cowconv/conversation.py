"""``Conversation``: one conversation, whatever backend holds it.

>>> from cowconv import LLM, Agent, Conversation
>>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
>>> _ = source.send_message("Analyse the sales report.")
>>> fork = source.fork(title="Follow-up exploration", tags={"variant": "B"})
>>> _ = fork.send_message("Now focus on the EMEA region.")
>>> len(source.state.events), len(fork.state.events), sorted(fork.state.tags.items())
(2, 3, [('title', 'Follow-up exploration'), ('variant', 'B')])

A conversation checks its arguments and hands the work to its
:class:`~cowconv.Backend`: in memory or a :class:`~cowconv.Store` in this
process (:class:`~cowconv.backends.local.LocalBackend`), or an agent server
(:class:`~cowconv.backends.remote.RemoteBackend`, for a
``Workspace(host=...)``). Every method behaves the same on each; the few
differences an agent server brings are listed in ``docs/remote.md``.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Self, cast, overload

from pydantic import SecretStr

from cowconv import backends, stores
from cowconv._exceptions import (
    ConversationExistsError,
    ConversationRunError,
    InvalidTypeError,
    InvalidValueError,
    LLMError,
    MessageRoleError,
    RemoteError,
)
from cowconv.agent.messages import build_messages
from cowconv.backends.local import LocalBackend
from cowconv.core.agent import Agent
from cowconv.core.analyzers import SecurityAnalyzerBase
from cowconv.core.changes import (
    ActivateSkill,
    AppendEvent,
    Change,
    NavigateTo,
    SetTag,
    UpdateAgentState,
)
from cowconv.core.confirmation import (
    RejectPendingActions,
    SetConfirmationPolicy,
    SetSecurityAnalyzer,
)
from cowconv.core.context import AgentContext
from cowconv.core.events import (
    ROOT_PARENT_ID,
    ConversationErrorEvent,
    ConversationStateUpdateEvent,
    Event,
    Message,
    MessageEvent,
    run_failure,
)
from cowconv.core.frozen import check_text, freeze
from cowconv.core.history import EventLog
from cowconv.core.hooks import HookConfig
from cowconv.core.ids import ConversationID, id_dir_name, id_text, public_id
from cowconv.core.llm import LLM, LLMMetrics, TokenCallbackType, streaming_to
from cowconv.core.llm_profiles import LLMProfileStore
from cowconv.core.secrets import SecretSource
from cowconv.core.security import ConfirmationPolicyBase, NeverConfirm
from cowconv.core.state import DEFAULT_MAX_ITERATION_PER_RUN, ConversationState, check_tags
from cowconv.core.tree import history_to, recorded
from cowconv.core.usage import Metrics, Usage
from cowconv.core.workspace import RemoteWorkspace, Workspace
from cowconv.guards import guarded
from cowconv.ports import Backend, EventCallback, ForkSpec, StateSink
from cowconv.visualizer import (
    DEFAULT_VISUALIZER,
    ConversationVisualizerBase,
    VisualizerSetting,
    make_visualizer,
)
from cowconv.workspaces.recording import fork_workspace, materialize_workspace, restore_snapshot

if TYPE_CHECKING:
    import asyncio

    import httpx

__all__ = [
    "BaseConversation",
    "Conversation",
    "LocalConversation",
    "RemoteConversation",
    "check_conversation_id",
]

DEFAULT_WORKSPACE = "workspace/project"
"""The working directory of a conversation given none (OpenHands' SDK's default)."""


def check_conversation_id(conversation_id: ConversationID | None) -> ConversationID:
    """``conversation_id`` as the id a conversation hands out, or a new UUID for ``None``.

    >>> check_conversation_id("c1"), check_conversation_id(None).version
    ('c1', 4)
    """
    if conversation_id is None:
        return uuid.uuid4()  # a UUID is its own public form: no text round trip
    return public_id(id_text(conversation_id))


logger = logging.getLogger("cowconv.conversation")

_AGENT_FORKS_ON_SERVER: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "cowconv_agent_forks_on_server", default=False
)
"""Set by a branch suite (cowconv.branches.remote): a remote fork may take another agent."""

_NO_TAGS: Mapping[str, str] = MappingProxyType({})
_new_conversation = object.__new__
# What a fork() without arguments asks for: a new id (the backend draws it), no tags.
_PLAIN_FORK = ForkSpec(tags=_NO_TAGS)


def _open_store(location: object, what: str) -> StateSink:
    """The store at ``location``: a ``postgresql://`` URL, else a directory (made if missing)
    holding the SQLite file."""
    if stores.is_store_url(location):  # postgresql://...: psycopg loads now
        return stores.open_store(str(location))
    return stores.open_directory(location, what)


def _store_for(
    persistence_dir: str | os.PathLike[str] | None, store: StateSink | str | None
) -> StateSink | None:
    if persistence_dir is not None and store is not None:
        raise InvalidValueError("pass persistence_dir or store, not both")
    if persistence_dir is not None:
        return _open_store(persistence_dir, "persistence_dir")
    return None if store is None else _sink(store)


def _sink(store: object) -> StateSink:
    """``store`` itself if it saves states (a :class:`~cowconv.Store`), else the store at the
    directory or URL it names; anything else is refused."""
    if callable(getattr(store, "save", None)):
        return cast(StateSink, store)
    if not isinstance(store, str | os.PathLike):
        raise InvalidTypeError(
            "store must be a store (with save()), a directory or a postgresql:// URL, not "
            f"{type(store).__name__}"
        )
    return _open_store(store, "store")


class Conversation:
    """A conversation between a user and an agent, forkable in O(1).

    >>> from cowconv import LLM, Agent
    >>> conversation = Conversation(
    ...     agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".", tags={"owner": "ci"}
    ... )
    >>> _ = conversation.send_message("Analyse the sales report.")
    >>> state = conversation.state
    >>> [event.kind for event in state.events], state.execution_status.value
    (['SystemPromptEvent', 'MessageEvent'], 'idle')

    ``Conversation(agent=..., workspace=...)`` starts an empty conversation
    in ``workspace`` (a path or a :class:`Workspace`). ``state`` is the
    current immutable snapshot.

    With ``persistence_dir`` (a directory; the store is its ``cowconv.db``)
    or a ``store`` (a :class:`~cowconv.Store`, or a ``postgresql://`` URL
    opened as a :class:`~cowconv.stores.postgres.PostgresStore`), every
    change is durable before it is seen, and forks go to the same store.
    If that store holds ``conversation_id``, the conversation resumes from
    it with the ``agent`` and ``workspace`` given here; ``tags`` only apply
    to a new conversation.

    With a :class:`~cowconv.RemoteWorkspace` (or any ``Workspace(host=url,
    ...)``) the conversation lives on the agent server at ``url`` (which
    stores it), and is a :class:`RemoteConversation`; given the id of a
    conversation the server has, it attaches to it. ``transport`` (an
    ``httpx.BaseTransport``, as ``httpx.Client(transport=...)`` takes) carries
    its requests instead of HTTP: an
    :class:`~cowconv.agent_server.InProcessTransport` reaches an app in this
    process.

    ``delete_on_close`` is OpenHands' setting, accepted and kept on the
    conversation (and its forks); as in OpenHands' SDK for a conversation in
    this process, closing deletes nothing. On an agent server, as there,
    ``True`` deletes the conversation on the server when it is closed.

    ``token_callbacks`` (as in OpenHands' SDK) receive each chunk of the
    answer while an LLM with ``stream=True`` answers during ``run()``
    (litellm's ``ModelResponseStream``); they are this conversation's own
    (a fork has none), and only for a conversation in this process.

    This constructor is the one way to make a conversation:
    :meth:`resume` reopens a stored one through the same path
    (:meth:`LocalBackend.open <cowconv.backends.local.LocalBackend.open>`),
    and :meth:`fork` makes one from another.
    """

    _delete_on_close: bool = True  # OpenHands' default in this process
    _background: _BackgroundRun | None = None  # a run(blocking=False) in progress or ended
    _token_callbacks: tuple[TokenCallbackType, ...] = ()  # a streaming LLM's chunks go there
    # What fork() passes on besides the backend: (the visualiser, delete_on_close if it was
    # set). None, the class default, when there is neither: then fork() reads one attribute.
    _fork_extras: tuple[ConversationVisualizerBase | None, bool | None] | None = None
    # Whether fork() must go through _fork_as (a class that overrides it says so): otherwise
    # fork() makes the plain fork itself, one call fewer on the path the benchmark times.
    _forks_its_own_way: bool = False
    # Caches of what state and agent last read, and the visualiser; None until set, so a
    # fork (_holding) sets only its backend.
    _view: tuple[ConversationState, ConversationState] | None = None
    _agent_view: tuple[ConversationState, Agent] | None = None
    _visualizer: ConversationVisualizerBase | None = None

    @property
    def delete_on_close(self) -> bool:
        """OpenHands' setting, accepted and kept (forks inherit it); see :meth:`close`.

        OpenHands' defaults: ``True`` in this process, ``False`` on an agent server.

        >>> from cowconv import LLM, Agent, Conversation
        >>> agent = Agent(llm=LLM(model="openai/gpt-4o"))
        >>> Conversation(agent=agent, workspace=".", delete_on_close=False).fork().delete_on_close
        False
        """
        return self._delete_on_close

    @delete_on_close.setter
    def delete_on_close(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise InvalidTypeError(f"delete_on_close must be a bool, got {value!r}")
        self._delete_on_close = value
        self._fork_extras = (self._visualizer, value)

    @overload
    def __new__(
        cls,
        agent: Agent,
        workspace: RemoteWorkspace,
        *,
        conversation_id: ConversationID | None = ...,
        tags: Mapping[str, str] | None = ...,
        callbacks: Iterable[EventCallback] = ...,
        max_iteration_per_run: int = ...,
        visualizer: VisualizerSetting = ...,
        stuck_detection: bool = ...,
        delete_on_close: bool | None = ...,
        transport: httpx.BaseTransport | None = ...,
    ) -> RemoteConversation: ...

    @overload
    def __new__(
        cls,
        agent: Agent,
        workspace: Workspace | str | os.PathLike[str] = ...,
        *,
        conversation_id: ConversationID | None = ...,
        tags: Mapping[str, str] | None = ...,
        callbacks: Iterable[EventCallback] = ...,
        max_iteration_per_run: int = ...,
        persistence_dir: str | os.PathLike[str] | None = ...,
        store: StateSink | str | None = ...,
        visualizer: VisualizerSetting = ...,
        stuck_detection: bool = ...,
        delete_on_close: bool | None = ...,
        token_callbacks: Iterable[TokenCallbackType] = ...,
        hook_config: HookConfig | None = ...,
    ) -> Conversation: ...

    def __new__(cls, *args: Any, **kwargs: Any) -> Conversation:
        # As OpenHands' SDK: Conversation(...) with a remote workspace is a RemoteConversation
        # (the same class underneath, a subclass that only adds attach()); __init__ still runs.
        workspace = kwargs.get("workspace", args[1] if len(args) > 1 else None)
        if cls is Conversation and isinstance(workspace, Workspace) and workspace.is_remote:
            cls = RemoteConversation
        return object.__new__(cls)

    def _initialise(
        self,
        agent: Agent,
        workspace: Workspace | str | os.PathLike[str] = DEFAULT_WORKSPACE,
        *,
        conversation_id: ConversationID | None = None,
        tags: Mapping[str, str] | None = None,
        callbacks: Iterable[EventCallback] = (),
        max_iteration_per_run: int = DEFAULT_MAX_ITERATION_PER_RUN,
        persistence_dir: str | os.PathLike[str] | None = None,
        store: StateSink | str | None = None,
        visualizer: VisualizerSetting = DEFAULT_VISUALIZER,
        stuck_detection: bool = True,
        delete_on_close: bool | None = None,
        transport: httpx.BaseTransport | None = None,
        request_extras: Mapping[str, Any] | None = None,
        token_callbacks: Iterable[TokenCallbackType] = (),
        hook_config: HookConfig | None = None,
    ) -> None:
        token_callbacks = tuple(token_callbacks)
        if any(not callable(callback) for callback in token_callbacks):
            raise InvalidTypeError("token_callbacks must be callables (each takes a chunk)")
        if not isinstance(stuck_detection, bool):
            raise InvalidTypeError(f"stuck_detection must be a bool, got {stuck_detection!r}")
        if delete_on_close is not None and not isinstance(delete_on_close, bool):
            raise InvalidTypeError(f"delete_on_close must be a bool, got {delete_on_close!r}")
        if not isinstance(agent, Agent):
            raise InvalidTypeError(f"agent must be a cowconv.Agent, got {type(agent).__name__}")
        if hook_config is not None and not isinstance(hook_config, HookConfig):
            raise InvalidTypeError(
                f"hook_config must be a cowconv.HookConfig, got {type(hook_config).__name__}"
            )
        if workspace is DEFAULT_WORKSPACE:
            # No workspace given: OpenHands' SDK's default, made if missing (a workspace that
            # is given must exist).
            os.makedirs(DEFAULT_WORKSPACE, exist_ok=True)
        workspace = Workspace.coerce(workspace)
        tags = check_tags(tags)
        shown = make_visualizer(visualizer)
        if shown is not None:
            callbacks = (shown, *callbacks)
        backend: Backend
        if workspace.is_remote:
            if token_callbacks:
                raise InvalidValueError(
                    "token_callbacks stream the LLM's answer in this process: a conversation"
                    " on an agent server calls its LLM on the server"
                )
            if persistence_dir is not None or store is not None:
                raise InvalidValueError(
                    "a conversation on an agent server is stored by the server: leave out "
                    "persistence_dir and store (start the server with --data-dir instead)"
                )
            backend = backends.RemoteBackend.create(  # httpx loads when a server is used
                agent,
                workspace,
                conversation_id=None if conversation_id is None else id_text(conversation_id),
                tags=tags,
                callbacks=callbacks,
                max_iteration_per_run=max_iteration_per_run,
                transport=transport,
                request_extras=request_extras,
            )
        else:
            if transport is not None or request_extras is not None:
                raise InvalidValueError("transport= is for a conversation on an agent server")
            state = ConversationState(
                id=check_conversation_id(conversation_id),
                agent=agent,
                workspace=workspace.require_directory(),
                tags=tags,
                hook_config=hook_config,
            )
            backend = LocalBackend.open(
                state,
                store=_store_for(persistence_dir, store),
                callbacks=callbacks,
                max_iteration_per_run=max_iteration_per_run,
            )
        self._hold(backend, shown)
        self._token_callbacks = token_callbacks
        if delete_on_close is not None:
            self.delete_on_close = delete_on_close

    def _hold(self, backend: Backend, visualizer: ConversationVisualizerBase | None) -> None:
        self._backend: Backend = backend
        self._view = None
        self._agent_view = None
        self._visualizer = visualizer
        if visualizer is not None:
            self._fork_extras = (visualizer, None)
            visualizer.initialize(self)

    if not TYPE_CHECKING:
        # Bound for Python only: mypy types a call from __init__ when a class defines both
        # __new__ and __init__, and the __new__ overloads above say which class a call makes.
        __init__ = _initialise

    @classmethod
    def _holding(
        cls, backend: Backend, visualizer: ConversationVisualizerBase | None = None
    ) -> Self:
        # A conversation over a backend made by fork() or resume() (never a public path).
        conversation = _new_conversation(cls)
        conversation._backend = backend  # the caches keep their class default, None
        if visualizer is not None:
            conversation._visualizer = visualizer
            conversation._fork_extras = (visualizer, None)
            visualizer.initialize(conversation)
        return conversation

    @classmethod
    def resume(
        cls,
        store: StateSink | str | os.PathLike[str],
        conversation_id: ConversationID,
        *,
        callbacks: Iterable[EventCallback] = (),
    ) -> Conversation:
        """Reopen a stored conversation with the agent and workspace it was stored with.

        ``store`` is a :class:`~cowconv.Store`, the directory given as
        ``persistence_dir``, or a ``postgresql://`` URL.
        ``ConversationNotFoundError`` if it has no such conversation. A
        conversation stored while ``running`` comes back ``paused``.

        >>> from cowconv import LLM, Agent, SQLiteStore
        >>> store = SQLiteStore(":memory:")
        >>> agent = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-kept"))
        >>> _ = Conversation(agent=agent, workspace=".", store=store, conversation_id="c1")
        >>> resumed = Conversation.resume(store, "c1")
        >>> resumed.agent.llm.api_key.get_secret_value()
        'sk-kept'
        """
        backend = LocalBackend.open(
            id_text(conversation_id), store=_sink(store), callbacks=callbacks
        )
        return cls._holding(backend)

    # -- reading -------------------------------------------------------------

    @property
    def backend(self) -> Backend:
        """What holds this conversation: memory, a store, or an agent server."""
        return self._backend

    @property
    def max_iteration_per_run(self) -> int:
        """How many steps one ``run()`` may take (forks inherit it)."""
        return self._backend.max_iteration_per_run

    @property
    def state(self) -> ConversationState:
        """The current snapshot. It never changes; read it again for news.

        OpenHands' SDK idioms that would change it in place do not get lost:
        ``state.events.append(event)`` records the event on this
        conversation (as given: OpenHands' raw log append, which stamps no
        ``parent_id``; :meth:`append_event` stamps it), and writes to
        ``state.tags`` or ``state.agent_state`` raise ``TypeError`` naming
        the method to call.
        """
        state = self._backend.snapshot()
        view = self._view
        if view is None or view[0] is not state:
            view = self._view = (state, guarded(state, self))
        return view[1]

    @property
    def id(self) -> ConversationID:
        """The conversation id: a ``uuid.UUID`` (as in OpenHands' SDK) or the string it was given.

        Auto-generated ids are UUIDs. ``str(conversation.id)`` is its text
        form everywhere (``state.id``, stores, URLs).
        """
        return public_id(id_text(self._backend.id))

    @property
    def agent(self) -> Agent:
        """The agent that runs this conversation (api key redacted if read from a server).

        Its ``llm.metrics`` are this conversation's own usage of that LLM
        (``state.stats`` under the LLM's ``usage_id``; no latencies): a fork
        reports what it spent, wherever it ran, not the running totals of
        the LLM object its source shares with it.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.agent.llm.metrics.accumulated_cost
        0.0
        """
        state = self._backend.snapshot()
        view = self._agent_view
        if view is None or view[0] is not state:
            agent = state.agent
            usage = state.stats.by_usage_id.get(agent.llm.usage_id) or Usage()
            llm = agent.llm.with_metrics(LLMMetrics.of(usage))
            view = self._agent_view = (state, agent.model_copy(update={"llm": llm}))
        return view[1]

    @property
    def workspace(self) -> Workspace:
        """The workspace the agent's tools act in (a copy fork's files written on first use)."""
        return materialize_workspace(self.state.workspace)

    @property
    def persistence_dir(self) -> str | None:
        """The directory for this conversation's own files, as OpenHands' SDK names it.

        For a conversation stored with ``persistence_dir=base`` (or in any
        :class:`~cowconv.SQLiteStore` file), ``base/<id hex>`` (another id
        percent-encoded into one path component), as in OpenHands' SDK, so a fork's is a
        sibling of its source's; ``None`` otherwise. cowconv keeps the events
        and state themselves in ``base/cowconv.db``; the directory is for
        files code writes beside them, and is made by whoever writes there.

        >>> import tempfile
        >>> from pathlib import Path
        >>> from cowconv import LLM, Agent, Conversation
        >>> base = tempfile.mkdtemp()
        >>> agent = Agent(llm=LLM(model="openai/gpt-4o"))
        >>> stored = Conversation(agent=agent, workspace=base, persistence_dir=base)
        >>> Path(stored.persistence_dir) == Path(base) / stored.id.hex
        True
        >>> Conversation(agent=agent, workspace=base).persistence_dir is None
        True
        """
        backend = self._backend
        if not isinstance(backend, LocalBackend) or not isinstance(
            backend.sink, stores.SQLiteStore
        ):
            return None
        database = backend.sink.path
        if str(database) == ":memory:":
            return None
        return str(database.parent / id_dir_name(self.id))

    def __repr__(self) -> str:
        state = self.state
        return (
            f"<{type(self).__name__} {state.id} events={len(state.events)} "
            f"status={state.execution_status.value}>"
        )

    # -- changing ------------------------------------------------------------

    def _commit(self, change: Change) -> ConversationState:
        # For tests and benchmarks that need a change no method makes; the library never
        # writes through it.
        self._backend.commit(change)
        return self._backend.snapshot()

    def append_event(self, event: Event) -> Event:
        """Record ``event`` at the end of the active branch and return it as recorded.

        The recorded event is ``event`` with its ``parent_id`` set to the
        event before it on the branch (OpenHands' SDK stamps it so too): a
        copy with the same id, unless ``event`` already named that parent.
        An event naming another parent is refused
        (:class:`~cowconv.InvalidValueError`; ``navigate_to`` it first).

        >>> from cowconv import LLM, Agent, PauseEvent
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> first = conversation.append_event(PauseEvent())
        >>> second = conversation.append_event(PauseEvent())
        >>> second == conversation.state.events[-1], second.parent_id == first.id
        (True, True)
        """
        if not isinstance(event, Event):
            raise InvalidTypeError(f"expected an Event, got {type(event).__name__}")
        self._backend.commit(AppendEvent(event))
        return recorded(self._backend.snapshot(), event)

    def _append_as_given(self, event: Event) -> None:
        # OpenHands' raw log append (`state.events.append`): see _AppendAsGiven. An agent server
        # records what it is sent with its own append (stamped).
        if not isinstance(event, Event):
            raise InvalidTypeError(f"expected an Event, got {type(event).__name__}")
        if isinstance(self._backend, LocalBackend):
            self._backend.commit(_AppendAsGiven(event))
        else:
            self.append_event(event)

    def send_message(self, message: str | Message, sender: str | None = None) -> MessageEvent:
        """Record a user message and return its event (as recorded, with its ``parent_id``).

        ``message`` is the text, or an LLM :class:`~cowconv.Message` of role
        ``user`` (OpenHands' ``send_message(Message(...))``: text and image
        parts); ``sender`` names who sent it (kept on the event, as in
        OpenHands' SDK).

        The first time, the agent's system prompt is recorded just before it
        (a :class:`~cowconv.SystemPromptEvent`, as OpenHands' SDK does; a new
        conversation stays empty until then), and again before the next
        message whenever the agent's prompt or tools changed, e.g. in a
        ``fork(agent=...)``.

        >>> from cowconv import LLM, Agent, Conversation, Message, TextContent
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> _ = conversation.send_message("hi")
        >>> message = Message(role="user", content=[TextContent(text="ok")])
        >>> event = conversation.send_message(message)
        >>> [e.kind for e in conversation.state.events], event.text
        (['SystemPromptEvent', 'MessageEvent', 'MessageEvent'], 'ok')
        """
        if sender is not None and not isinstance(sender, str):
            raise InvalidTypeError(f"sender must be a str or None, got {type(sender).__name__}")
        if isinstance(message, Message):
            if message.role != "user":
                raise MessageRoleError(message.role)
            check_text(message.text, "the message")
            if isinstance(self._backend, LocalBackend):
                return self._backend.send_message(message, sender)
            if sender is not None or any(part.type != "text" for part in message.content):
                raise InvalidValueError(
                    "a conversation on an agent server sends text messages only (no images, "
                    "no sender) for now"
                )
            return self._backend.send_message(message.text)
        if not isinstance(message, str):
            raise InvalidTypeError(
                f"send_message() takes a str or a Message, got {type(message).__name__}"
            )
        check_text(message, "the message")
        if sender is not None:
            if not isinstance(self._backend, LocalBackend):
                raise InvalidValueError("a conversation on an agent server sends no sender for now")
            return self._backend.send_message(message, sender)
        return self._backend.send_message(message)

    def set_tag(self, key: str, value: str | None) -> None:
        """Set tag ``key`` to ``value``; ``None`` removes it."""
        check_tags({key: value if value is not None else ""})
        self._backend.commit(SetTag(key, value))

    def update_agent_state(self, changes: Mapping[str, Any]) -> None:
        """Merge JSON-like ``changes`` into ``state.agent_state``."""
        if not isinstance(changes, Mapping):
            raise InvalidTypeError(
                f"agent state changes must be a mapping, got {type(changes).__name__}"
            )
        self._backend.commit(UpdateAgentState(freeze(changes)))

    def activate_skill(self, name: str) -> None:
        """Add a knowledge skill to ``state.activated_knowledge_skills`` (once)."""
        if not isinstance(name, str) or not name:
            raise InvalidValueError(f"skill name must be a non-empty string, got {name!r}")
        self._backend.commit(ActivateSkill(name))

    def update_secrets(self, secrets: Mapping[str, Any]) -> None:
        """Give the agent's tools secrets by name (OpenHands' SDK's ``update_secrets``).

        A value is a string, a ``SecretStr``, a :class:`~cowconv.SecretSource`
        (asked for its value when a command needs it), or a callable (called
        now). They join the agent context's ``secrets`` (an agent without a
        context gets one holding only them): the prompt lists their names,
        the terminal exports one a command names and hides its value in the
        output. Stored as any change of the agent. On an agent server it is
        the server's ``POST /secrets``.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.update_secrets({"API_TOKEN": "t0k"})
        >>> list(conversation.agent.agent_context.secrets)
        ['API_TOKEN']
        """
        if not isinstance(secrets, Mapping):
            raise InvalidTypeError(f"secrets must be a mapping, got {type(secrets).__name__}")
        values: dict[str, SecretStr | SecretSource] = {}
        for name, value in secrets.items():
            if not isinstance(name, str):
                raise InvalidTypeError(f"a secret's name is a str, not {type(name).__name__}")
            if callable(value) and not isinstance(value, SecretSource):
                value = value()
            if isinstance(value, str):
                value = SecretStr(value)
            if not isinstance(value, SecretStr | SecretSource):
                raise InvalidTypeError(
                    f"secret {name!r}: a str, SecretStr, SecretSource or a callable returning "
                    f"a str, not {type(value).__name__}"
                )
            values[name] = value
        if not isinstance(self._backend, LocalBackend):
            raise NotImplementedError("update_secrets on this backend")
        self._backend.commit(_UpdateSecrets(values))

    def switch_llm(self, llm: LLM) -> None:
        """Run the agent with ``llm`` from now on (OpenHands' SDK's ``switch_llm``).

        The agent is kept, with ``llm`` in place of its LLM, and stored as
        any change (a resumed conversation runs with it). In this process
        only; an agent server's conversation refuses it, as in OpenHands' SDK.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.switch_llm(LLM(model="anthropic/claude-sonnet-4-5", usage_id="alt"))
        >>> conversation.state.agent.llm.model, conversation.agent.llm.usage_id
        ('anthropic/claude-sonnet-4-5', 'alt')
        """
        if not isinstance(llm, LLM):
            raise InvalidTypeError(f"llm must be a cowconv.LLM, got {type(llm).__name__}")
        if not isinstance(self._backend, LocalBackend):
            raise NotImplementedError(
                "switch_llm is for a conversation in this process: on an agent server, "
                "fork(agent=...) with the new LLM"
            )
        self._backend.commit(_SwitchLLM(llm))

    def switch_profile(
        self, profile_name: str, *, profile_store: LLMProfileStore | None = None
    ) -> None:
        """Run the agent with the LLM saved as profile ``profile_name`` from now on.

        As OpenHands' SDK's ``switch_profile``: the profile is loaded from
        ``profile_store`` (default: an :class:`~cowconv.LLMProfileStore` in its
        default directory), its ``usage_id`` becomes ``"profile:<name>"`` (so
        the stats keep its calls apart), and :meth:`switch_llm` installs it.
        A missing profile is a :class:`~cowconv.FileMissingError`
        (``FileNotFoundError``).

        >>> import tempfile
        >>> from cowconv import LLM, Agent, Conversation, LLMProfileStore
        >>> store = LLMProfileStore(tempfile.mkdtemp())
        >>> store.save("mini", LLM(model="openai/gpt-4o-mini"))
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.switch_profile("mini", profile_store=store)
        >>> conversation.agent.llm.model, conversation.agent.llm.usage_id
        ('openai/gpt-4o-mini', 'profile:mini')
        """
        store = profile_store if profile_store is not None else LLMProfileStore()
        loaded = store.load(profile_name)
        self.switch_llm(loaded.model_copy(update={"usage_id": f"profile:{profile_name}"}))

    def navigate_to(self, event_id: str | None) -> None:
        """Move the active branch to end at ``event_id`` (``None``: empty), in O(b log n).

        ``b`` is the number of branches, ``n`` the events of the longest: the
        branches share their prefixes, so no event is copied.

        The next message starts a new branch from there; the branch left
        behind stays in ``state.branches`` and can be navigated back to.
        ``event_id`` may be on any branch. ``ValueError`` (and ``KeyError``)
        if no branch has it.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> first = conversation.send_message("one")
        >>> second = conversation.send_message("two")
        >>> conversation.navigate_to(first.id)
        >>> conversation.state.leaf_event_id == first.id, len(conversation.state.branches)
        (True, 1)
        """
        if event_id is not None and not isinstance(event_id, str):
            raise InvalidTypeError(f"event_id must be a str or None, got {type(event_id).__name__}")

        self._backend.commit(NavigateTo(event_id))

    # -- forking -------------------------------------------------------------

    def fork(
        self,
        *,
        conversation_id: ConversationID | None = None,
        agent: Agent | None = None,
        title: str | None = None,
        tags: Mapping[str, str] | None = None,
        reset_metrics: bool = True,
        from_event_id: str | None = None,
        callbacks: Iterable[EventCallback] = (),
        workspace: str | os.PathLike[str] = "shared",
    ) -> Self:
        """A new, independent conversation with this one's history, in O(1).

        The fork shares the source's events, agent state and skills (all
        immutable), keeps the agent unless ``agent`` replaces it, shares the
        workspace, gets fresh ``tags`` (``title`` becomes ``tags["title"]``),
        starts ``idle``, and starts its stats at zero unless
        ``reset_metrics=False``. ``from_event_id`` forks the history up to and
        including that event (:class:`~cowconv.EventNotFoundError` if there is
        none). Nothing done to either side afterwards is seen by the other.
        ``callbacks`` are the fork's own (the source's are not inherited).
        ``workspace="copy"`` (or a path) gives the fork its own directory with
        the files as they were at the fork point, now or at ``from_event_id``
        (:mod:`cowconv.workspaces`; ``docs/workspaces.md``); ``"shared"``, the
        default, shares the source's directory as OpenHands' SDK does.

        >>> from cowconv import LLM, Agent, Conversation
        >>> source = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> first = source.send_message("one")
        >>> _ = source.send_message("two")
        >>> early = source.fork(from_event_id=first.id)
        >>> [e.kind for e in early.state.events], early.state.forked_from_event_id == first.id
        (['SystemPromptEvent', 'MessageEvent'], True)
        """
        if (
            conversation_id is None
            and agent is None
            and title is None
            and tags is None
            and reset_metrics is True
            and from_event_id is None
            and isinstance(workspace, str)
            and workspace == "shared"
        ):
            spec = _PLAIN_FORK  # the plain fork (the one the benchmark times): nothing to check
        else:
            spec = self._fork_spec(
                conversation_id, agent, title, tags, reset_metrics, from_event_id
            )
            spec = spec._replace(workspace=self._fork_workspace(workspace, from_event_id))
        if self._fork_extras is None and not self._forks_its_own_way:
            return type(self)._holding(self._backend.fork(spec, callbacks))
        return self._fork_as(spec, callbacks)

    def _fork_spec(
        self,
        conversation_id: ConversationID | None,
        agent: Agent | None,
        title: str | None,
        tags: Mapping[str, str] | None,
        reset_metrics: bool,
        from_event_id: str | None,
    ) -> ForkSpec:
        # fork()'s arguments, checked; the id None: the backend draws a new UUID.
        fork_id = None if conversation_id is None else check_conversation_id(conversation_id)
        if fork_id is not None and fork_id == self.id:
            raise ConversationExistsError(id_text(fork_id))
        if agent is not None and not isinstance(agent, Agent):
            raise InvalidTypeError(f"agent must be a cowconv.Agent, got {type(agent).__name__}")
        if title is not None and not isinstance(title, str):
            raise InvalidTypeError(f"title must be a str, got {type(title).__name__}")
        if from_event_id is not None and not isinstance(from_event_id, str):
            raise InvalidTypeError(
                f"from_event_id must be a str, got {type(from_event_id).__name__}"
            )
        fork_tags: Mapping[str, str] = _NO_TAGS
        if tags is not None or title is not None:
            given = check_tags(tags)
            if title is not None:
                given["title"] = title
            fork_tags = given
        return ForkSpec(fork_id, agent, fork_tags, None, bool(reset_metrics), from_event_id)

    def _fork_workspace(
        self, workspace: str | os.PathLike[str], from_event_id: str | None
    ) -> Workspace | str | None:
        # fork(workspace=...): the copy is made here, of the files this process sees.
        return fork_workspace(self._backend.snapshot(), workspace, from_event_id)

    def _fork_as(self, spec: ForkSpec, callbacks: Iterable[EventCallback]) -> Self:
        extras = self._fork_extras
        if extras is None:
            return type(self)._holding(self._backend.fork(spec, callbacks))
        # As OpenHands' SDK: the fork shows its events with a new visualiser of the source's
        # kind, and keeps its delete_on_close.
        visualizer, delete_on_close = extras
        if visualizer is None:
            fork = type(self)._holding(self._backend.fork(spec, callbacks))
        else:
            shown = type(visualizer)()
            fork = type(self)._holding(self._backend.fork(spec, (shown, *callbacks)), shown)
        if delete_on_close is not None:
            fork.delete_on_close = delete_on_close
        return fork

    def restore_workspace(self, event_id: str | None = None) -> str:
        """Put the workspace's files back as they were at ``event_id``; the snapshot id of the
        files just before (``restore_workspace`` of an event after it undoes this).

        Needs a workspace that records snapshots (``Workspace(snapshot_store=...)``);
        ``event_id`` ``None`` is the last snapshot of the active branch. The events do
        not change, and ``navigate_to`` never moves files: this is the one call that does.

        >>> import tempfile
        >>> from cowconv import LLM, Agent, Conversation, Workspace
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="m")), workspace=Workspace(
        ...     working_dir=tempfile.mkdtemp(), snapshot_store=tempfile.mkdtemp()))
        >>> conversation.restore_workspace()
        Traceback (most recent call last):
        ...
        cowconv._exceptions.InvalidValueError: no workspace snapshot is recorded at or before...
        """
        if event_id is not None and not isinstance(event_id, str):
            raise InvalidTypeError(f"event_id must be a str or None, got {type(event_id).__name__}")
        return restore_snapshot(self._backend.snapshot(), event_id)

    # -- running -------------------------------------------------------------

    def run(self, blocking: bool = True) -> None:
        """Run the agent until it answers, is paused, fails, or hits ``max_iteration_per_run``.

        ``execution_status`` is ``running`` meanwhile and ends as
        ``finished`` (the model answered without tool calls), ``paused``,
        ``error`` (an LLM call failed after its retries, or a tool crashed:
        an :class:`~cowconv.AgentErrorEvent` says why) or ``stuck`` (the
        iteration limit; ``run()`` again grants as many more steps). A run
        that ends in ``error`` or ``stuck`` is recorded, then raised as a
        :class:`~cowconv.ConversationRunError` (as OpenHands' SDK), on every
        backend; ``run()`` again continues from the history.
        A run with nothing to answer just finishes.

        ``blocking=False`` returns at once and runs in a background thread,
        as OpenHands' ``RemoteConversation.run(blocking=False)``; a later
        ``run()`` then waits for that run to end instead of starting another
        (and raises what stopped it, if it crashed), and ``run(blocking=False)``
        while it goes does nothing. Otherwise only one ``run()`` at a time per
        conversation (another one is a :class:`~cowconv.ConversationRunningError`).

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.run()  # nothing to answer yet: no LLM call
        >>> conversation.state.execution_status.value
        'finished'
        >>> conversation.run(blocking=False)  # returns at once
        >>> conversation.run()  # waits for the background run
        >>> conversation.state.execution_status.value
        'finished'
        """
        if not isinstance(blocking, bool):
            raise InvalidTypeError(f"blocking must be a bool, got {blocking!r}")
        background = self._background
        if background is not None and background.alive():
            if blocking:
                background.wait()
                self._raise_if_run_failed()
            return
        if background is not None:
            self._background = None
            background.wait()  # already ended: raises what stopped it, once
        with streaming_to(self._token_callbacks):  # the background run's thread inherits it
            if blocking:
                self._backend.run()
            else:
                self._background = _BackgroundRun(self._backend, str(self.id))
                return
        self._raise_if_run_failed()

    async def arun(self) -> None:
        """Run as :meth:`run` does, awaitable: the run goes in a worker thread, the loop stays free.

        As OpenHands' ``arun()``: :meth:`interrupt` (from a callback, another
        task, a signal handler) ends it, and so does cancelling the task that
        awaits it: the run is interrupted, ends ``paused``, and the
        cancellation is absorbed (``arun()`` returns; OpenHands' SDK does the
        same, so the conversation can be resumed with ``run()`` or ``arun()``).
        A run that ends in ``error`` or ``stuck`` raises
        :class:`~cowconv.ConversationRunError`, as :meth:`run`.

        >>> import asyncio
        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> asyncio.run(conversation.arun())  # nothing to answer yet: no LLM call
        >>> conversation.state.execution_status.value
        'finished'
        """
        # A coroutine runs on an event loop, so asyncio is loaded by now; importing it at the
        # top would cost every first use of cowconv ~30 ms for a method few call.
        import asyncio

        # to_thread copies the context, so streaming_to and call contexts reach the run.
        running = asyncio.ensure_future(asyncio.to_thread(self.run))
        while True:
            try:
                # asyncio.wait never cancels what it waits for: a cancelled arun() lets the
                # run end by interrupt() below instead of abandoning its thread.
                await asyncio.wait({running})
                break
            except asyncio.CancelledError:
                await self._interrupt_until_done(running)
                failure = running.exception()
                if failure is None or isinstance(failure, ConversationRunError):
                    return  # the caller cancelled: no result wanted; the status says how it ended
                break
        running.result()

    async def _interrupt_until_done(self, running: asyncio.Future[None]) -> None:
        # The thread may not have started the run yet when the task is cancelled (interrupt()
        # on a conversation that is not running does nothing): ask again until it ends.
        import asyncio  # loaded already: this runs on an event loop (see arun)

        while not running.done():
            self.interrupt()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({running}, timeout=0.05)

    def ask_agent(self, question: str) -> str:
        """The agent's LLM's answer to ``question`` about the history; nothing is recorded.

        As OpenHands' ``ask_agent``: one LLM call over the active branch (the
        messages a step would send) with the question appended, asking for a
        plain answer; no event, status or state changes, so it may be called
        while ``run()`` goes in another thread (it reads the snapshot of the
        moment). The call's cost counts on the agent's LLM's ``metrics``.
        A question that is not a ``str`` is an :class:`~cowconv.InvalidTypeError`;
        a failed call raises :class:`~cowconv.LLMError`.

        >>> from cowconv import Agent, Conversation, Message
        >>> from cowconv.testing import TestLLM
        >>> llm = TestLLM.from_messages([Message(role="assistant", content="Nothing yet.")])
        >>> conversation = Conversation(agent=Agent(llm=llm), workspace=".")
        >>> conversation.ask_agent("What have you done?"), len(conversation.state.events)
        ('Nothing yet.', 0)
        """
        if not isinstance(question, str):
            raise InvalidTypeError(f"question must be a str, got {question!r:.100}")
        check_text(question, "question")
        state = self.state
        prompt = (
            "Answer this question about the work in this conversation so far.\n\n"
            f"Question: {question}\n\n"
            "Only answer in text: do not call any tool."
        )
        messages = [*build_messages(state.branch), {"role": "user", "content": prompt}]
        response = state.agent.llm.completion(messages)
        if not response.content:
            raise LLMError(f"the model gave no text answer to the question {question!r:.100}")
        return response.content

    @property
    def conversation_stats(self) -> Any:
        """``state.stats`` (OpenHands' SDK's name), on every backend.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.conversation_stats.get_combined_metrics().accumulated_cost
        0.0
        """
        return self.state.stats

    def _raise_if_run_failed(self) -> None:
        # One rule for every backend (core.events.run_failure): a run that ended in error or
        # stuck is raised, naming the error it recorded.
        state = self._backend.snapshot()
        failure = run_failure(self.id, state.execution_status, state.branch)
        if failure is not None:
            raise failure

    # -- confirmation mode (OpenHands' SDK's methods) --------------------------------------

    def set_confirmation_policy(self, policy: ConfirmationPolicyBase) -> None:
        """Set the policy deciding which tool calls wait for the user's confirmation.

        ``AlwaysConfirm()``: every step's tool calls wait; ``ConfirmRisky(...)``:
        those the security analyzer rates risky enough; ``NeverConfirm()``
        (the default): none. A run whose step must wait records the calls and
        ends ``waiting_for_confirmation``; ``run()`` again runs them,
        :meth:`reject_pending_actions` refuses them. The policy is state: forks
        and a reopened store keep it.

        >>> from cowconv import LLM, Agent, AlwaysConfirm, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.set_confirmation_policy(AlwaysConfirm())
        >>> conversation.state.confirmation_policy.kind, conversation.confirmation_policy_active
        ('AlwaysConfirm', True)
        """
        self._backend.commit(SetConfirmationPolicy(policy))

    def set_security_analyzer(self, analyzer: SecurityAnalyzerBase | None) -> None:
        """Set (``None``: remove) the analyzer that rates each tool call's risk.

        While one is set, the model is asked for a ``security_risk`` with each
        tool call, and each step's ratings are recorded (a
        :class:`~cowconv.security.SecurityAnalysisEvent`).

        >>> from cowconv import LLM, Agent, Conversation
        >>> from cowconv.security import LLMSecurityAnalyzer
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.set_security_analyzer(LLMSecurityAnalyzer())
        >>> conversation.is_confirmation_mode_active  # the policy is still NeverConfirm
        False
        """
        self._backend.commit(SetSecurityAnalyzer(analyzer))

    def reject_pending_actions(self, reason: str = "User rejected the action") -> None:
        """Refuse the tool calls waiting for confirmation: each is answered by a rejection.

        Each gets a :class:`~cowconv.UserRejectObservation` (the model reads
        ``Action rejected: <reason>``) and a waiting conversation becomes
        ``idle``; the next ``run()`` lets the agent go on from there.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.reject_pending_actions("nothing waits")  # no-op
        >>> len(conversation.state.events)
        0
        """
        self._backend.commit(RejectPendingActions(reason))

    @property
    def confirmation_policy_active(self) -> bool:
        """Whether the confirmation policy is not ``NeverConfirm`` (OpenHands' SDK's name)."""
        return not isinstance(self.state.confirmation_policy, NeverConfirm)

    @property
    def is_confirmation_mode_active(self) -> bool:
        """Whether a security analyzer is set and the policy is active (OpenHands' SDK's name)."""
        return self.state.security_analyzer is not None and self.confirmation_policy_active

    def pause(self) -> None:
        """Stop a run after its current step, from any thread; ``run()`` resumes.

        The run then records a :class:`~cowconv.PauseEvent` and ends with
        status ``paused`` (or ``finished``, if that step was the final
        answer). Pausing a conversation that is not running does nothing.
        """
        self._backend.pause()

    def interrupt(self) -> None:
        """End a run now, from any thread: kill its running command, run no further call.

        The killed command's result is recorded, tool calls not yet run are
        recorded as not run, and the run ends ``paused`` with a
        :class:`~cowconv.PauseEvent`; ``run()`` continues from there. An LLM
        call in flight is not cut off (its answer is recorded, its tool calls
        are not run). Interrupting a conversation that is not running does nothing.

        >>> from cowconv import LLM, Agent, Conversation
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> conversation.interrupt()  # not running: nothing happens
        >>> conversation.state.execution_status.value
        'idle'
        """
        self._backend.interrupt()

    def close(self) -> None:
        """Release what this conversation holds (processes, connections).

        A run in the background is asked to stop after its step and waited
        for. Nothing stored is deleted, whatever ``delete_on_close`` says
        (as in OpenHands' SDK for a conversation in this process):
        ``Conversation.resume`` reopens a stored conversation after ``close()``.
        """
        self._backend.close()
        background = self._background
        if background is not None:
            background.join()

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- OpenHands' private names (docs/migration.md) ---------------------------

    @property
    def _state(self) -> _LiveState:
        """OpenHands' private ``conversation._state``, for code written against it.

        In OpenHands' SDK it is the live, lockable state; here a handle whose
        ``with`` block is a no-op (every change is one atomic snapshot swap),
        whose ``append_event`` is :meth:`append_event`, and which reads every
        other attribute from the current :attr:`state`.

        >>> from cowconv import LLM, Agent, Conversation, PauseEvent
        >>> conversation = Conversation(agent=Agent(llm=LLM(model="openai/gpt-4o")), workspace=".")
        >>> with conversation._state:
        ...     conversation._state.append_event(PauseEvent())
        >>> conversation._state.leaf_event_id == conversation.state.branch[-1].id
        True
        """
        return _LiveState(self)

    def _on_event(self, event: Event) -> None:
        # OpenHands' private event pipeline (stamp, persist, notify): append_event does all three.
        self.append_event(event)


@dataclass(frozen=True)
class _SwitchLLM:
    """The change of :meth:`Conversation.switch_llm`: the same agent with ``llm``."""

    llm: LLM

    def __call__(self, state: ConversationState) -> ConversationState:
        if state.agent.llm is self.llm:
            return state
        return state._replace(agent=state.agent.model_copy(update={"llm": self.llm}))


@dataclass(frozen=True)
class _UpdateSecrets:
    """The change of :meth:`Conversation.update_secrets`: the agent's context with them."""

    secrets: Mapping[str, SecretStr | SecretSource]

    def __call__(self, state: ConversationState) -> ConversationState:
        context = state.agent.agent_context or AgentContext(current_datetime=None)
        merged = {**(context.secrets or {}), **self.secrets}
        context = context.model_copy(update={"secrets": merged})
        return state._replace(agent=state.agent.model_copy(update={"agent_context": context}))


# What OpenHands' SDK writes to a conversation's log that is no node of its tree: an
# agent server's state update, or the error of an interrupted start. Never the leaf.
_NOT_TREE_NODES = (ConversationStateUpdateEvent, ConversationErrorEvent)


@dataclass(frozen=True)
class _AppendAsGiven:
    """OpenHands' SDK's raw log append, ``state.events.append(event)``: ``event`` as given.

    Nothing is stamped and the leaf is not moved to it, as in OpenHands'
    SDK, where only the conversation's own append does both:

    * an event without ``parent_id`` (as written before OpenHands' SDK had
      a tree), or naming the last event of the active branch, ends the
      active branch; without ``parent_id`` it is a "legacy" event, a child
      of the event before it, so ``state.leaf_event_id`` reads ``None``
      until the next stamped event, as OpenHands' SDK's unset leaf;
    * a state update or conversation error, or an event naming another
      parent, starts a branch of its own beside the active one (OpenHands'
      SDK's active branch never ends at such an event it did not append
      itself), so the next event still follows the active branch.
    """

    event: Event

    def __call__(self, state: ConversationState) -> ConversationState:
        event = self.event
        if any(b.position_of(event.id) is not None for b in (state.branch, *state.other_branches)):
            raise InvalidValueError(f"event id {event.id!r} is already in this conversation")
        parent, last = event.parent_id, state.branch.last_id
        if isinstance(event, _NOT_TREE_NODES):
            base = state.branch if parent is None else history_to(state, parent)
        elif parent is None or parent == last:
            return state._replace(branch=state.branch.append(event))
        elif parent == ROOT_PARENT_ID:
            if not state.branch and not state.other_branches:  # the first event: the root
                return state._replace(branch=state.branch.append(event))
            base = EventLog()
        else:
            base = history_to(state, parent)
        return state._replace(other_branches=(*state.other_branches, base.append(event)))


class _LiveState:
    """What ``conversation._state`` gives: OpenHands' live state's calls, on the conversation."""

    __slots__ = ("_conversation",)

    def __init__(self, conversation: Conversation) -> None:
        self._conversation = conversation

    def __enter__(self) -> _LiveState:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def append_event(self, event: Event) -> None:
        """Record ``event`` on the conversation (:meth:`Conversation.append_event`)."""
        self._conversation.append_event(event)

    @property
    def persistence_dir(self) -> str | None:
        """:attr:`Conversation.persistence_dir`."""
        return self._conversation.persistence_dir

    @property
    def stats(self) -> _LiveStats:
        """The conversation's stats; ``usage_to_metrics[usage_id] = metrics`` records an account."""
        return _LiveStats(self._conversation)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conversation.state, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_conversation":
            object.__setattr__(self, name, value)
            return
        if name != "agent_state" or not isinstance(value, Mapping):
            raise InvalidTypeError(
                f"conversation._state.{name} cannot be assigned: cowconv's state is an immutable "
                "snapshot; change it through the conversation's methods"
            )
        # OpenHands code assigns the whole dict, usually {**old, key: value}: merged here.
        # Dropping a key would need a removal cowconv's agent state does not offer.
        dropped = set(self._conversation.state.agent_state) - set(value)
        if dropped:
            raise InvalidValueError(
                f"conversation._state.agent_state = ... would drop {sorted(dropped)}: cowconv's "
                "agent state only grows (conversation.update_agent_state merges)"
            )
        self._conversation.update_agent_state(value)


class _LiveStats:
    """What ``conversation._state.stats`` gives: the current stats, whose accounts can be set."""

    __slots__ = ("_conversation",)

    def __init__(self, conversation: Conversation) -> None:
        self._conversation = conversation

    @property
    def usage_to_metrics(self) -> _LiveAccounts:
        """The accounts per LLM ``usage_id``; setting one records it on the conversation."""
        return _LiveAccounts(self._conversation)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conversation.state.stats, name)


class _LiveAccounts(Mapping[str, Usage]):
    """``conversation._state.stats.usage_to_metrics``: reads the current accounts; an
    assignment records the account (its value then: a later change to the Metrics object
    given is not seen, stats being values)."""

    __slots__ = ("_conversation",)

    def __init__(self, conversation: Conversation) -> None:
        self._conversation = conversation

    def _accounts(self) -> Mapping[str, Usage]:
        return self._conversation.state.stats.by_usage_id

    def __getitem__(self, usage_id: str) -> Usage:
        return self._accounts()[usage_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._accounts())

    def __len__(self) -> int:
        return len(self._accounts())

    def __setitem__(self, usage_id: str, account: Usage | Metrics) -> None:
        if not isinstance(account, Usage | Metrics):
            raise InvalidTypeError(
                f"usage_to_metrics[{usage_id!r}] must be a Metrics or a Usage, "
                f"got {type(account).__name__}"
            )
        usage = account.usage if isinstance(account, Metrics) else account
        self._conversation._backend.commit(_SetAccount(usage_id, usage))

    def __delitem__(self, usage_id: str) -> None:
        raise InvalidTypeError(
            "stats accounts are recorded, not removed: fork(reset_metrics=True) starts at zero"
        )


@dataclass(frozen=True)
class _SetAccount:
    """The change of ``conversation._state.stats.usage_to_metrics[usage_id] = account``."""

    usage_id: str
    account: Usage

    def __call__(self, state: ConversationState) -> ConversationState:
        return state._replace(stats=state.stats.with_account(self.usage_id, self.account))


class _BackgroundRun:
    """A ``run()`` in a daemon thread (``run(blocking=False)``), and what stopped it."""

    __slots__ = ("_thread", "_error")

    def __init__(self, backend: Backend, name: str) -> None:
        self._error: BaseException | None = None
        context = contextvars.copy_context()  # what run() set up (token callbacks) goes along
        self._thread = threading.Thread(
            target=context.run, args=(self._run, backend), name=f"cowconv-run-{name}", daemon=True
        )
        self._thread.start()

    def _run(self, backend: Backend) -> None:
        try:
            backend.run()
        except BaseException as error:  # handed to the run() that waits for this one
            logger.warning("the background run of %r stopped: %r", backend, error)
            self._error = error

    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self) -> None:
        self._thread.join()

    def wait(self) -> None:
        """Wait for the run to end; raise what stopped it, if anything did (once)."""
        self._thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error


LocalConversation = Conversation
"""OpenHands' SDK's name for a conversation run in this process (an alias of
:class:`Conversation`)."""

BaseConversation = Conversation
"""OpenHands' SDK's base class of its local and remote conversations: cowconv has one
class for both, so this is an alias of :class:`Conversation` (annotations and
``isinstance`` checks written for OpenHands' SDK hold)."""


class RemoteConversation(Conversation):
    """A :class:`Conversation` on an agent server (OpenHands' SDK's name for one).

    ``Conversation(agent, Workspace(host=url, ...))`` returns one; it is the
    same class underneath, with :meth:`attach` added. ``workspace.api_key``
    is the server's session API key. HTTP errors raise
    :class:`~cowconv.RemoteError` with the server's status code and message.

    >>> from cowconv import LLM, Agent, Conversation, Workspace
    >>> from cowconv.agent_server import BackgroundServer, create_app
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-kept-on-the-server"))
    >>> with BackgroundServer(create_app()) as server:
    ...     workspace = Workspace(host=server.url, working_dir=".")
    ...     source = Conversation(agent=agent, workspace=workspace)
    ...     _ = source.send_message("Analyse the sales report.")
    ...     fork = source.fork(title="Follow-up fork")
    ...     print(type(source).__name__, len(fork.state.events), fork.state.tags["title"])
    ...     source.close(); fork.close()
    RemoteConversation 2 Follow-up fork
    """

    _delete_on_close = False  # OpenHands' default on an agent server

    def __init__(
        self,
        agent: Agent,
        workspace: Workspace | str | os.PathLike[str],
        **options: Any,
    ) -> None:
        if not isinstance(workspace, Workspace) or not workspace.is_remote:
            raise InvalidValueError(
                "a RemoteConversation needs a Workspace with host= (the server URL)"
            )
        # OpenHands' create request: its further fields, sent as OpenHands' client sends them
        # (the server honours, keeps or refuses each; see docs/migration.md).
        extras: dict[str, Any] = {
            "initial_message": None,
            "stuck_detection": options.get("stuck_detection", True),
            "tool_module_qualnames": {},
            "agent_definitions": [],
            "plugins": _json_list(options.pop("plugins", None)) or None,
            "hook_config": _json_of(options.pop("hook_config", None)),
            "client_tools": _json_list(options.pop("client_tools", None)),
            "observability_metadata": dict(options.pop("observability_metadata", None) or {}),
            "observability_tags": list(options.pop("observability_tags", None) or []),
            "observability_span_name": options.pop("observability_span_name", "conversation"),
            "observability_parent_span_context": options.pop(
                "observability_parent_span_context", None
            ),
            "user_id": options.pop("user_id", None),
        }
        thresholds = options.pop("stuck_detection_thresholds", None)
        if thresholds is not None:
            extras["stuck_detection_thresholds"] = _json_of(thresholds)
        secrets = options.pop("secrets", None)
        self._initialise(agent, workspace, request_extras=extras, **options)
        if secrets:
            self.update_secrets(secrets)

    def _remote(self) -> backends.RemoteBackend:
        backend = self._backend
        assert isinstance(backend, backends.RemoteBackend)
        return backend

    _forks_its_own_way = True  # on OpenHands' server, from the server's answer

    def _fork_as(self, spec: ForkSpec, callbacks: Iterable[EventCallback]) -> Self:
        backend = self._remote()
        if spec.agent is not None and not _AGENT_FORKS_ON_SERVER.get():
            raise NotImplementedError(
                "fork(agent=...) is not supported on an agent server, as in OpenHands' SDK: "
                "run_branches(source, [Branch(message, agent=...)]) forks there with another "
                "agent, or fork a local Conversation"
            )
        if backend.speaks_cowconv:
            return super()._fork_as(spec, callbacks)
        # On an OpenHands agent server, as OpenHands' client: the fork is a new conversation
        # made from the server's answer (its tags are the server's, title merged in), by the
        # class cowconv.backends.remote names (code written for OpenHands may replace it).
        info = backend.fork_on_server(spec)
        made_as = backend.fork_class() or type(self)
        visualizer = self._visualizer
        fork = made_as(
            agent=self.agent if spec.agent is None else spec.agent,
            workspace=self.workspace,
            conversation_id=str(info["id"]),
            max_iteration_per_run=self.max_iteration_per_run,
            delete_on_close=self.delete_on_close,
            tags=info.get("tags") or None,
            callbacks=tuple(callbacks),
            visualizer=None if visualizer is None else type(visualizer),
            transport=backend.transport,
        )
        assert isinstance(fork, type(self))
        return fork

    def _fork_workspace(
        self, workspace: str | os.PathLike[str], from_event_id: str | None
    ) -> Workspace | str | None:
        # The files are on the server: it makes the copy (a path there is its to choose).
        if isinstance(workspace, str) and workspace in ("shared", "copy"):
            return None if workspace == "shared" else workspace
        raise InvalidValueError(
            "a fork on an agent server takes workspace='shared' or 'copy': the server "
            f"chooses where its copy goes, got {workspace!r}"
        )

    @property
    def workspace(self) -> Workspace:
        """The workspace: the server's URL and the working directory there (no request)."""
        return self._remote().workspace

    @property
    def _callbacks(self) -> list[Any]:
        # OpenHands' private name, read by its tests: what events are handed to (the
        # visualiser by its on_event, as OpenHands lists it).
        shown = self._visualizer
        return [
            shown.on_event if shown is not None and callback is shown else callback
            for callback in self._remote().callbacks
        ]

    @property
    def _terminal_status_queue(self) -> Any:
        # OpenHands' private name, read by its tests (see RemoteBackend.run_endings).
        return self._remote().run_endings

    def generate_title(self, llm: LLM | None = None, max_length: int = 50) -> str:
        """A title from the first user message, written by ``llm`` (the agent's by default).

        Nothing is recorded: ``set_title`` it to keep it (OpenHands' SDK's method).
        """
        return self._remote().generate_title(llm, max_length)

    @property
    def stuck_detector(self) -> Any:
        """Not on a remote conversation: the server detects a stuck run (as OpenHands' SDK)."""
        raise NotImplementedError(
            "For remote conversations, stuck detection is not available here: the agent "
            "server detects it (the run then ends with status 'stuck')"
        )

    def run(
        self, blocking: bool = True, poll_interval: float = 1.0, timeout: float = 3600.0
    ) -> None:
        """Run the agent on the server (see :meth:`Conversation.run`).

        On an OpenHands agent server, as OpenHands' client: ``blocking=False``
        starts the run and returns (a later ``run()`` waits for it); a blocking
        run waits for the server's post-run state update, checks the status
        every ``poll_interval`` seconds, and raises
        :class:`~cowconv.ConversationRunError` past ``timeout`` seconds, and
        when the run ends in ``error`` or ``stuck`` (as on every backend).
        """
        if not isinstance(blocking, bool):
            raise InvalidTypeError(f"blocking must be a bool, got {blocking!r}")
        backend = self._remote()
        if backend.speaks_cowconv:
            super().run(blocking)
            return
        # The backend raises a run that ended in error or stuck itself, from the status it
        # waited for (as OpenHands' client: no request more).
        backend.run(blocking=blocking, poll_interval=poll_interval, timeout=timeout)

    # -- OpenHands' server-side settings: each one request, as OpenHands' client sends it -----

    def update_secrets(self, secrets: Mapping[str, Any]) -> None:
        """Give the server secrets for the agent's tools (``POST /secrets``).

        A value is a string, a ``SecretStr``, a callable returning one (called
        now), or a secret source model (sent as its JSON, secrets shown).
        """
        if not isinstance(secrets, Mapping):
            raise InvalidTypeError(f"secrets must be a mapping, got {type(secrets).__name__}")
        self._remote().request("POST", "/secrets", json={"secrets": _secret_values(secrets)})

    def update_state_from_event(self, event: ConversationStateUpdateEvent) -> None:
        """Keep a server's state update in this client's cached conversation info.

        OpenHands' ``RemoteState.update_state_from_event``, also reached as
        ``conversation.state.update_state_from_event(event)``. The events
        socket does it for every update it brings; the cost :meth:`close`
        reports to a :class:`~cowconv.RemoteWorkspace` is read from it.
        """
        self._remote().update_info(event)

    def receive_event(self, event: Event) -> None:
        """Take ``event`` as the server's events socket would bring it; nothing is sent.

        OpenHands' ``state.events.add_event(event)`` (its remote events list), also
        reached that way here: the event joins this client's copy of an OpenHands
        server's history (the same object: events are immutable) and goes to the
        callbacks. On cowconv's server an :class:`~cowconv.InvalidTypeError`.
        """
        self._remote().receive_event(event)

    def set_confirmation_policy(self, policy: Any) -> None:
        """Set OpenHands' confirmation policy on the server (``POST /confirmation_policy``).

        ``policy`` is a :class:`~cowconv.AlwaysConfirm`, :class:`~cowconv.NeverConfirm`
        or :class:`~cowconv.ConfirmRisky` (or its JSON); the server's runs act on it
        (cowconv's as OpenHands').
        """
        self._remote().request("POST", "/confirmation_policy", json={"policy": _json_of(policy)})

    def set_security_analyzer(self, analyzer: Any) -> None:
        """Set (``None``: remove) OpenHands' security analyzer (``POST /security_analyzer``)."""
        body = {"security_analyzer": _json_of(analyzer)}
        self._remote().request("POST", "/security_analyzer", json=body)

    def reject_pending_actions(self, reason: str = "User rejected the action") -> None:
        """Reject the actions waiting for confirmation (``POST .../respond_to_confirmation``)."""
        body = {"accept": False, "reason": reason}
        self._remote().request("POST", "/events/respond_to_confirmation", json=body)

    def ask_agent(self, question: str) -> str:
        """The agent's answer to ``question``, outside the history (``POST /ask_agent``)."""
        answer = self._remote().request_json("POST", "/ask_agent", json={"question": question})
        if not isinstance(answer, dict) or "response" not in answer:
            raise RemoteError(200, f"the answer to ask_agent has no 'response': {answer!r:.200}")
        return str(answer["response"])

    def condense(self) -> None:
        """Ask the server to condense the history now (``POST /condense``)."""
        self._remote().request("POST", "/condense")

    def load_plugin(self, plugin_ref: str) -> None:
        """Load an OpenHands plugin on the server (``POST /load_plugin``)."""
        self._remote().request("POST", "/load_plugin", json={"plugin_ref": plugin_ref})

    def set_title(self, title: str) -> None:
        """Set the conversation's title (``tags["title"]``; OpenHands' ``PATCH {"title"}``)."""
        self.set_tag("title", title)

    def execute_tool(self, tool_name: str, action: Any) -> Any:
        """Not on a remote conversation (as OpenHands' SDK): tools run on the server."""
        raise NotImplementedError(
            "execute_tool is not yet supported for RemoteConversation: tools run on the agent "
            "server during a run; use a local Conversation to run a tool directly"
        )

    def close(self) -> None:
        """Stop following the server; with ``delete_on_close``, delete the conversation there."""
        if self.delete_on_close:
            try:
                self._remote().delete()
            except Exception:  # as OpenHands' client: closing never fails on the server's account
                logger.warning("could not delete %s on the server", self.id, exc_info=True)
        super().close()

    @classmethod
    def attach(
        cls,
        host: str,
        conversation_id: str,
        *,
        api_key: str | None = None,
        working_dir: str | os.PathLike[str] = ".",
        callbacks: Iterable[EventCallback] = (),
        transport: httpx.BaseTransport | None = None,
    ) -> RemoteConversation:
        """Attach to the conversation ``conversation_id`` the server at ``host`` has.

        ``RemoteError`` with status 404 (also a ``ConversationNotFoundError``) if it has none.

        >>> from cowconv import ConversationNotFoundError
        >>> from cowconv.agent_server import BackgroundServer, create_app
        >>> with BackgroundServer(create_app()) as server:
        ...     try:
        ...         RemoteConversation.attach(server.url, "nope")
        ...     except ConversationNotFoundError as error:
        ...         print(error.status_code)
        404
        """
        workspace = Workspace(host=host, working_dir=working_dir, api_key=api_key)
        backend = backends.RemoteBackend.attach(
            workspace, conversation_id, callbacks=callbacks, transport=transport
        )
        return cls._holding(backend)


def _json_of(value: Any) -> Any:
    """JSON of an OpenHands setting given as a model or as JSON already (``None`` stays)."""
    if value is None or isinstance(value, str | int | float | bool | list | dict):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise InvalidTypeError(f"expected a model or JSON, got {type(value).__name__}")


def _json_list(values: Any) -> list[Any]:
    return [_json_of(value) for value in values or ()]


def _secret_values(secrets: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in secrets.items():
        if isinstance(value, SecretStr):
            values[key] = value.get_secret_value()
        elif hasattr(value, "model_dump"):
            values[key] = value.model_dump(mode="json", context={"expose_secrets": True})
        elif callable(value):
            values[key] = value()
        else:
            values[key] = value
    return values
