"""The store boundary's one check: whatever a store accepts loads again, unchanged.

Constructors validate every value (:class:`~cowconv.core.frozen.CheckedModel`),
but ``model_copy(update=...)``, ``model_construct`` and objects built in
another process (a branch worker, a custom executor) skip validation. So
every store calls :func:`check_storable` on its save path, before it writes
anything: the snapshot's fields and each event the store has not seen are
written to JSON and read back, and must come back equal. NaN, infinity,
nesting deeper than the reader accepts, lone surrogates, a value of the
wrong type, an event id that would break an event stream: each is an
:class:`~cowconv.InvalidValueError` naming the field, and nothing is stored.

>>> from cowconv import LLM, Agent, Workspace
>>> from cowconv.core.events import ObservationEvent
>>> from cowconv.core.state import ConversationState
>>> state = ConversationState(id="c1", agent=Agent(llm=LLM(model="openai/gpt-4o")),
...                           workspace=Workspace(working_dir="."))
>>> check_storable(state)
>>> event = ObservationEvent(tool_name="t", tool_call_id="c1", output="ok")
>>> bad = event.model_copy(update={"extra": {"wait": float("nan")}})
>>> check_storable(state._replace(events=state.events.append(bad)))
Traceback (most recent call last):
...
cowconv._exceptions.InvalidValueError: event ... would not load back unchanged: field 'extra' ...

Events are checked once: a history whose prefix was checked (or is the
``previous`` snapshot the store holds) is not read again, so saving a fork
or one more event costs the new events only.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from cowconv._exceptions import InvalidValueError
from cowconv.core.events import Event
from cowconv.core.history import EventLog, PrefixCache
from cowconv.core.state import ConversationState, _dump_options, dump_state_json

__all__ = ["check_storable", "check_storable_event", "check_storable_state", "loaded_history"]

# Lines of histories whose first n events were checked (see cowconv.core.history).
_checked: PrefixCache[bool] = PrefixCache()
_EMPTY = EventLog()


def _difference(original: BaseModel, loaded: BaseModel) -> str:
    """Which field of ``original`` did not come back from JSON as it was."""
    if type(original) is not type(loaded):
        return f"it loads as {type(loaded).__name__}"
    for name in type(original).model_fields:
        try:
            same = bool(getattr(original, name) == getattr(loaded, name))
        except (RecursionError, TypeError, ValueError):
            same = False
        if not same:
            inner_original, inner_loaded = getattr(original, name), getattr(loaded, name)
            if isinstance(inner_original, BaseModel) and isinstance(inner_loaded, BaseModel):
                inner = _difference(inner_original, inner_loaded)
                if inner.startswith("field "):  # the nested field that differs, by its path
                    return f"field '{name}.{inner.removeprefix('field ').lstrip(chr(39))}"
            return f"field {name!r} holds {inner_original!r:.80}"
    return "its fields differ"


def _refusal(what: str, why: str) -> InvalidValueError:
    return InvalidValueError(
        f"{what} would not load back unchanged: {why} (a value built with model_copy(update=...) "
        "or model_construct skips validation; NaN, infinity, nesting deeper than 64, lone "
        "surrogates and control characters in ids cannot be stored); nothing was stored"
    )


def _round_trip(what: str, value: BaseModel, dump: Any, load: Any, compare: Any) -> None:
    try:
        text = dump(value)
        loaded = load(text)
        same = compare(value, loaded, text)
    except (ValidationError, PydanticSerializationError, ValueError, TypeError) as error:
        first = str(error).splitlines()
        raise _refusal(what, " ".join(first[:3]) if first else type(error).__name__) from None
    except RecursionError:
        raise _refusal(what, "it is nested too deeply") from None
    if not same:
        raise _refusal(what, _difference(value, loaded) if isinstance(loaded, BaseModel) else "")


def check_storable_event(event: Event) -> None:
    """Raise :class:`~cowconv.InvalidValueError` unless ``event`` reloads from its JSON unchanged.

    >>> from cowconv.core.events import PauseEvent
    >>> check_storable_event(PauseEvent())
    >>> check_storable_event(PauseEvent.model_construct(id="a\\nb", source="user",
    ...                                                 timestamp="2025-01-01T00:00:00Z"))
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: event 'a\\nb' (PauseEvent) would not load back ...
    """
    if not isinstance(event, Event):
        raise InvalidValueError(f"a history holds events, got {type(event).__name__}")
    what = f"event {getattr(event, 'id', None)!r} ({type(event).__name__})"
    _round_trip(
        what,
        event,
        # warnings=False: a value of the wrong type (model_construct) is refused when it is
        # read back; pydantic's warning while writing it would only be noise (or, under
        # warnings-as-errors, a raw exception).
        lambda value: value.model_dump_json(warnings=False),
        Event.model_validate_json,
        lambda value, loaded, _text: type(loaded) is type(value) and loaded == value,
    )


def check_storable_state(state: ConversationState) -> None:
    """Raise :class:`~cowconv.InvalidValueError` unless the snapshot's fields (not its
    events) reload from the JSON a store writes unchanged."""
    _round_trip(
        f"the state of conversation {getattr(state, 'id', None)!r}",
        # What a store's state row holds: everything but the histories.
        state._replace(branch=_EMPTY, other_branches=()),
        lambda value: value.model_dump_json(warnings=False, **_dump_options("clear", False)),
        ConversationState.model_validate_json,
        _same_state,
    )


def _same_state(state: ConversationState, loaded: Any, text: str) -> bool:
    # Field by field, not only text against text: NaN is written as null, which loads as None.
    return (
        isinstance(loaded, ConversationState)
        and bool(state == loaded)
        and dump_state_json(loaded) == text
    )


def _check_log(log: EventLog, trusted: int) -> None:
    if not isinstance(log, EventLog):
        raise InvalidValueError(f"a history is an EventLog, got {type(log).__name__}")
    checked, _ = _checked.find(log)
    for position in range(max(checked, trusted), len(log)):
        check_storable_event(log[position])
    _checked.keep(log, True)


def check_storable(current: ConversationState, previous: ConversationState | None = None) -> None:
    """Raise :class:`~cowconv.InvalidValueError` unless ``current`` loads again unchanged.

    Every store calls it first thing on its save path (``previous``, the
    snapshot the store holds, as the store was given it): the snapshot's
    fields are checked, and every event of every branch that is neither in
    ``previous`` nor in a history checked before.
    """
    if not isinstance(current, ConversationState):
        raise InvalidValueError(f"a store saves ConversationState, got {type(current).__name__}")
    check_storable_state(current)
    held = () if previous is None else previous.branches
    for log in current.branches:
        trusted = max((log.common_prefix_length(old) for old in held), default=0)
        _check_log(log, trusted)


def loaded_history(log: EventLog) -> EventLog:
    """``log``, a history a store read back from its own JSON, remembered as checked.

    Its events load by construction, so saving it again, or a fork of it,
    does not read them (a store's load path calls it; without it the first
    save of a fork taken right after a load reads every loaded event once).

    >>> loaded_history(EventLog()) == EventLog()
    True
    """
    _checked.keep(log, True)
    return log
