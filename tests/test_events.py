"""Tests for cowconv.core.events: frozen events in OpenHands' shapes and JSON."""

from __future__ import annotations

import copy
import json
import pickle
import uuid
from datetime import datetime
from pathlib import Path

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowconv import (
    ROOT_PARENT_ID,
    ActionEvent,
    Event,
    FrozenInstanceError,
    Message,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    TextContent,
)
from cowconv.core.events import Condensation, EventIDSet, upgrade_legacy_event
from tests.strategies import events

DATA = Path(__file__).parent / "data"


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

    @given(events)
    def test_kind_is_the_class_name(self, event):
        """The JSON's kind names the class, as OpenHands' discriminator does."""
        assert json.loads(event.model_dump_json())["kind"] == type(event).__name__ == event.kind

    def test_subclass_validate_still_works(self):
        """Validating through a concrete class behaves like pydantic's own."""
        event = PauseEvent()
        assert PauseEvent.model_validate(event.model_dump()) == event

    def test_unknown_kind_is_rejected(self):
        """A dump with an unknown kind is a validation error naming it."""
        with pytest.raises(pydantic.ValidationError, match="unknown kind 'nope'"):
            Event.model_validate({"kind": "nope", "source": "user"})

    def test_kind_of_another_class_is_rejected_by_a_concrete_class(self):
        """PauseEvent.model_validate of a MessageEvent's dump is an error, not a MessageEvent."""
        data = MessageEvent(role="user", content="hi").model_dump()
        with pytest.raises(pydantic.ValidationError, match="not a PauseEvent"):
            PauseEvent.model_validate(data)


class TestCondensationForgottenIds:
    @given(st.lists(st.text(min_size=1, max_size=6), max_size=8))
    def test_a_set_that_dumps_sorted_and_round_trips(self, ids):
        """forgotten_event_ids equals the set of the ids given; its JSON is them sorted."""
        condensation = Condensation(forgotten_event_ids=ids, summary="s", summary_offset=0)
        assert condensation.forgotten_event_ids == set(ids)
        assert json.loads(condensation.model_dump_json())["forgotten_event_ids"] == sorted(set(ids))
        assert Event.model_validate_json(condensation.model_dump_json()) == condensation

    @given(st.permutations(["e3", "e1", "e2"]))
    def test_the_same_ids_in_any_order_give_the_same_json(self, ids):
        """Two condensations of one set serialize to the same text, whatever the order given."""
        first = Condensation(id="c", timestamp="2026-01-01T00:00:00", forgotten_event_ids=ids)
        second = Condensation(
            id="c", timestamp="2026-01-01T00:00:00", forgotten_event_ids=["e1", "e2", "e3"]
        )
        assert first.model_dump_json() == second.model_dump_json()

    @pytest.mark.parametrize(
        "change",
        [
            lambda ids: ids.add("x"),
            lambda ids: ids.discard("e1"),
            lambda ids: ids.remove("e1"),
            lambda ids: ids.pop(),
            lambda ids: ids.clear(),
            lambda ids: ids.update({"x"}),
            lambda ids: ids.intersection_update({"x"}),
            lambda ids: ids.difference_update({"e1"}),
            lambda ids: ids.symmetric_difference_update({"x"}),
            lambda ids: ids.__ior__({"x"}),
            lambda ids: ids.__iand__({"x"}),
            lambda ids: ids.__isub__({"e1"}),
            lambda ids: ids.__ixor__({"x"}),
            lambda ids: ids.__init__(["x"]),
        ],
    )
    def test_a_set_that_refuses_every_change(self, change):
        """forgotten_event_ids is a set (OpenHands' type) that no method can change."""
        condensation = Condensation(forgotten_event_ids=["e1"])
        ids = condensation.forgotten_event_ids
        assert isinstance(ids, set)
        try:
            change(ids)
        except FrozenInstanceError:
            pass
        assert ids == {"e1"}

    def test_hashable_picklable_and_copied_as_itself(self):
        """It hashes like its frozenset, and pickle and deepcopy give an equal EventIDSet."""
        condensation = Condensation(forgotten_event_ids=["e2", "e1"])
        ids = condensation.forgotten_event_ids
        assert hash(ids) == hash(frozenset({"e1", "e2"}))
        assert hash(condensation) == hash(Condensation.model_validate(condensation.model_dump()))
        for copied in (pickle.loads(pickle.dumps(ids)), copy.deepcopy(ids)):
            assert type(copied) is EventIDSet and copied == ids
        assert pickle.loads(pickle.dumps(condensation)) == condensation

    def test_not_ids_is_a_validation_error(self):
        """A string or a list holding a non-string is refused (pydantic's ValidationError)."""
        for bad in ("e1", [1], None):
            with pytest.raises(pydantic.ValidationError):
                Condensation(forgotten_event_ids=bad)


class TestIdentityAndTree:
    def test_id_is_uuid4_and_unique(self):
        """Every event gets its own uuid4 id and an ISO-8601 UTC timestamp."""
        a, b = PauseEvent(), PauseEvent()
        assert a.id != b.id
        assert uuid.UUID(a.id).version == 4
        assert datetime.fromisoformat(a.timestamp).utcoffset().total_seconds() == 0

    def test_timestamps_sort_as_text(self):
        """Fixed-width timestamps: text order is time order."""
        stamps = [PauseEvent().timestamp for _ in range(50)]
        assert stamps == sorted(stamps)
        assert len({len(stamp) for stamp in stamps}) == 1

    def test_datetime_timestamp_becomes_text(self):
        """A datetime given as timestamp (cowconv 0.1 took one) is stored as ISO text."""
        moment = datetime(2025, 1, 2, 3, 4, 5)
        assert PauseEvent(timestamp=moment).timestamp == "2025-01-02T03:04:05"

    def test_source_is_checked(self):
        """source must be agent, user, environment or hook."""
        with pytest.raises(pydantic.ValidationError):
            MessageEvent(source="robot", role="user", content="x")
        assert PauseEvent(source="hook").source == "hook"

    def test_parent_id_omitted_when_none(self):
        """A root's JSON has no parent_id key; a child's carries it (OpenHands' additive JSON)."""
        root = PauseEvent()
        child = PauseEvent(parent_id=root.id)
        assert "parent_id" not in json.loads(root.model_dump_json())
        assert "parent_id" not in root.model_dump()
        assert json.loads(child.model_dump_json())["parent_id"] == root.id
        assert Event.model_validate_json(child.model_dump_json()).parent_id == root.id

    def test_root_sentinel_is_not_an_id(self):
        """An event id may not equal ROOT_PARENT_ID; a parent_id may."""
        with pytest.raises(pydantic.ValidationError, match="reserved sentinel"):
            PauseEvent(id=ROOT_PARENT_ID)
        assert PauseEvent(parent_id=ROOT_PARENT_ID).parent_id == "__root__"


class TestImmutability:
    @given(events)
    def test_every_event_is_hashable(self, event):
        """Events are hashable: nothing mutable is reachable from them."""
        hash(event)

    def test_top_level_fields_refuse_assignment(self):
        """Assigning a field of an event raises FrozenInstanceError (an AttributeError)."""
        event = MessageEvent(source="user", role="user", content="hi")
        with pytest.raises(FrozenInstanceError, match="model_copy"):
            event.source = "agent"
        with pytest.raises(AttributeError):
            del event.source

    def test_nested_content_refuses_mutation(self):
        """The LLM message, its content parts and the content tuple refuse mutation.

        OpenHands' nested models are mutable (its fork test mutates
        llm_message.content[0].text); ours are shared by forks, so they refuse.
        """
        event = MessageEvent(source="user", llm_message=Message(role="user", content="hi"))
        with pytest.raises(FrozenInstanceError, match="shared by forks"):
            event.llm_message.content[0].text = "changed"
        with pytest.raises(FrozenInstanceError):
            event.llm_message.role = "assistant"
        with pytest.raises(TypeError):
            event.llm_message.content[0] = TextContent(text="changed")  # type: ignore[index]
        changed = event.model_copy(update={"llm_message": Message(role="user", content="changed")})
        assert (event.text, changed.text) == ("hi", "changed")

    def test_arguments_refuse_mutation(self):
        """Tool arguments are frozen all the way down, and copied from the input."""
        arguments = {"command": "ls", "env": {"A": ["1"]}}
        event = ActionEvent(tool_name="terminal", tool_call_id="c1", arguments=arguments)
        arguments["env"]["A"].append("2")
        assert event.arguments["env"]["A"] == ("1",)
        with pytest.raises(TypeError):
            event.arguments["command"] = "rm -rf /"

    def test_extra_fields_rejected(self):
        """Unknown fields are an error, not silently dropped."""
        with pytest.raises(pydantic.ValidationError, match="extra_forbidden"):
            ObservationEvent(tool_name="t", tool_call_id="c", output="", bogus=1)


# Module level, as OpenHands' own tests define them (test_event_serialization.py).
class EventsTestNoteEvent(Event):
    note: str = "remember"


class TestCustomSubclasses:
    def test_subclass_without_kind_registers_and_round_trips(self):
        """class X(Event) with plain fields registers under its class name (like OpenHands)."""
        event = EventsTestNoteEvent(source="agent", note="custom")
        data = event.model_dump_json()
        assert json.loads(data)["kind"] == "EventsTestNoteEvent"
        back = Event.model_validate_json(data)
        assert type(back) is EventsTestNoteEvent and back == event
        assert EventsTestNoteEvent.model_validate_json(data) == event

    def test_local_subclass_defined_again_replaces_the_earlier(self):
        """A class defined in a function (again on every call) resolves to its latest version."""

        def define() -> type[Event]:
            class LocalNote(Event):
                text: str

            return LocalNote

        first, second = define(), define()
        back = Event.model_validate(second(source="user", text="x").model_dump())
        assert type(back) is second and type(back) is not first

    def test_two_classes_of_one_name_are_ambiguous(self):
        """Two different classes named alike: defining works, validating the name fails clearly."""

        def make(module: str) -> type[Event]:
            return type(
                "TwinEvent", (Event,), {"__module__": module, "__annotations__": {"a": int}}
            )

        make("tests.twin_one")
        make("tests.twin_two")
        with pytest.raises(pydantic.ValidationError, match="ambiguous"):
            Event.model_validate({"kind": "TwinEvent", "source": "user", "a": 1})


class TestMessageEvent:
    def test_llm_message_is_the_openhands_shape(self):
        """MessageEvent(source, llm_message=Message(...)) dumps OpenHands' JSON."""
        event = MessageEvent(
            source="user", llm_message=Message(role="user", content=[TextContent(text="Hi")])
        )
        data = json.loads(event.model_dump_json())
        assert data["llm_message"]["content"] == [
            {"cache_prompt": False, "type": "text", "text": "Hi"}
        ]
        assert data["llm_message"]["role"] == "user"
        assert data["activated_skills"] == [] and data["extended_content"] == []

    def test_text_shorthand(self):
        """role=/content= build llm_message; a str content becomes one TextContent."""
        event = MessageEvent(source="user", role="user", content="hello")
        assert event.llm_message == Message(role="user", content=[TextContent(text="hello")])
        assert event.content == (TextContent(text="hello"),)
        assert (event.text, event.role) == ("hello", "user")
        assert "role" not in json.loads(event.model_dump_json())

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

    def test_extended_content_reaches_the_llm_message(self):
        """to_llm_message() appends extended_content; str() shows the text."""
        event = MessageEvent(
            role="user", content="Do it.", extended_content=[TextContent(text="Context.")]
        )
        assert [part.text for part in event.to_llm_message().content] == ["Do it.", "Context."]
        assert "Do it." in str(event)


class TestLegacyEvents:
    """Events written by cowconv 0.1 (tests/data/make_legacy_0_1.py) still load."""

    def test_every_old_kind_loads(self):
        """Each 0.1 dump validates, as the class that replaced its kind."""
        old = json.loads((DATA / "events-0.1.json").read_text())
        loaded = [Event.model_validate(item) for item in old]
        assert [type(event).__name__ for event in loaded] == [
            {
                "system_prompt": "SystemPromptEvent",
                "message": "MessageEvent",
                "action": "ActionEvent",
                "observation": "ObservationEvent",
                "agent_error": "AgentErrorEvent",
                "pause": "PauseEvent",
                "condensation": "Condensation",
            }[item["kind"]]
            for item in old
        ]
        assert [event.id for event in loaded] == [item["id"] for item in old]
        assert [event.timestamp for event in loaded] == [item["timestamp"] for item in old]

    def test_old_message_keeps_its_content(self):
        """A 0.1 message becomes a MessageEvent whose llm_message has its role and content."""
        old = json.loads((DATA / "events-0.1.json").read_text())
        messages = [Event.model_validate(item) for item in old if item["kind"] == "message"]
        assert [(m.role, m.source) for m in messages] == [
            ("user", "user"),
            ("user", "user"),
            ("assistant", "agent"),
        ]
        assert messages[0].text == "List files."
        assert messages[1].content[1].image_urls == ("https://example.com/a.png",)

    def test_json_round_trip_of_loaded_old_events(self):
        """A loaded old event dumps today's JSON, which loads again as itself."""
        old = json.loads((DATA / "events-0.1.json").read_text())
        for item in old:
            event = Event.model_validate_json(json.dumps(item))
            assert Event.model_validate_json(event.model_dump_json()) == event

    def test_condensation_keeps_old_name(self):
        """CondensationEvent (0.1's class name) is Condensation."""
        from cowconv import CondensationEvent

        assert CondensationEvent is Condensation

    def test_upgrade_leaves_new_kinds_alone(self):
        """upgrade_legacy_event answers None for today's kinds."""
        assert upgrade_legacy_event(PauseEvent().model_dump()) is None
