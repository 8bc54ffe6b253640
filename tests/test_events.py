"""Tests for cowconv.core.events: frozen, polymorphic events."""

from __future__ import annotations

import uuid
from typing import Literal

import pydantic
import pytest
from hypothesis import given

from cowconv import (
    ActionEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    TextContent,
)
from tests.strategies import events


class TestRoundTrip:
    @given(events)
    def test_json_round_trip_gives_equal_event_of_same_class(self, event):
        """Event.model_validate_json(e.model_dump_json()) == e, with e's class."""
        back = Event.model_validate_json(event.model_dump_json())
        assert type(back) is type(event)
        assert back == event

    @given(events)
    def test_python_round_trip(self, event):
        """Event.model_validate(e.model_dump()) == e."""
        assert Event.model_validate(event.model_dump()) == event

    def test_subclass_validate_still_works(self):
        """Validating through a concrete class behaves like pydantic's own."""
        event = PauseEvent()
        assert PauseEvent.model_validate(event.model_dump()) == event

    def test_unknown_kind_is_rejected(self):
        """A dump with an unknown kind is a validation error."""
        with pytest.raises(pydantic.ValidationError):
            Event.model_validate({"kind": "nope", "source": "user"})


class TestIdentity:
    def test_id_is_uuid4_and_unique(self):
        """Every event gets its own uuid4 id and a timezone-aware timestamp."""
        a, b = PauseEvent(), PauseEvent()
        assert a.id != b.id
        assert uuid.UUID(a.id).version == 4
        assert a.timestamp.tzinfo is not None

    def test_source_is_checked(self):
        """source must be user, agent or environment."""
        with pytest.raises(pydantic.ValidationError):
            MessageEvent(source="robot", role="user", content="x")


class TestImmutability:
    @given(events)
    def test_every_event_is_hashable(self, event):
        """Events are hashable: nothing mutable is reachable from them."""
        hash(event)

    def test_top_level_fields_refuse_assignment(self):
        """Assigning a field of an event raises."""
        event = MessageEvent(source="user", role="user", content="hi")
        with pytest.raises(pydantic.ValidationError):
            event.role = "assistant"

    def test_nested_content_refuses_mutation(self):
        """Content parts and the content tuple refuse mutation."""
        event = MessageEvent(source="user", role="user", content="hi")
        with pytest.raises(pydantic.ValidationError):
            event.content[0].text = "changed"
        with pytest.raises(TypeError):
            event.content[0] = TextContent(text="changed")  # type: ignore[index]

    def test_arguments_refuse_mutation(self):
        """Tool arguments are frozen all the way down, and copied from the input."""
        arguments = {"command": "ls", "env": {"A": ["1"]}}
        event = ActionEvent(tool_name="terminal", tool_call_id="c1", arguments=arguments)
        arguments["env"]["A"].append("2")
        assert event.arguments["env"]["A"] == ("1",)
        with pytest.raises(TypeError):
            event.arguments["command"] = "rm -rf /"
        with pytest.raises(TypeError):
            event.arguments["env"]["A"] = ()

    def test_extra_fields_rejected(self):
        """Unknown fields are an error, not silently dropped."""
        with pytest.raises(pydantic.ValidationError):
            ObservationEvent(tool_name="t", tool_call_id="c", output="", bogus=1)


class TestNewKinds:
    def test_subclass_registers_and_round_trips(self):
        """A new Event subclass with its own kind round-trips polymorphically."""

        class NoteEvent(Event):
            kind: Literal["test_note"] = "test_note"
            source: Literal["user", "agent", "environment"] = "user"
            note: str

        event = NoteEvent(note="remember")
        back = Event.model_validate_json(event.model_dump_json())
        assert type(back) is NoteEvent and back == event

    def test_duplicate_kind_rejected(self):
        """Two different classes cannot claim one kind."""
        with pytest.raises(TypeError, match="already used"):

            class Impostor(Event):
                kind: Literal["message"] = "message"

    def test_kind_required(self):
        """A subclass without a kind default is refused."""
        with pytest.raises(TypeError, match="kind"):

            class Kindless(Event):
                pass


class TestMessageEvent:
    def test_text_shorthand(self):
        """A str content becomes one TextContent; .text joins text parts."""
        event = MessageEvent(source="user", role="user", content="hello")
        assert event.content == (TextContent(text="hello"),)
        assert event.text == "hello"

    @pytest.mark.parametrize(
        ("role", "source"),
        [("user", "user"), ("assistant", "agent"), ("system", "agent"), ("tool", "environment")],
    )
    def test_source_defaults_from_role(self, role, source):
        """Without source=, the role decides it; a given source is kept; JSON keeps it."""
        event = MessageEvent(role=role, content="hi")
        assert event.source == source
        assert MessageEvent(role=role, content="hi", source="environment").source == "environment"
        assert MessageEvent.model_validate_json(event.model_dump_json()) == event
