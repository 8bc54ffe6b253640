"""Ids as JSON: ``id_text`` writes any id as text, ``public_id`` reads it back as an equal id."""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cowconv
from cowconv import LLM, Agent, Conversation, InvalidValueError, id_text, public_id

AGENT = Agent(llm=LLM(model="openai/gpt-4o", api_key="sk-ids"))

# A name a user chooses: any valid, non-blank text (a canonical UUID's text is a UUID id).
names = st.text(min_size=1).filter(str.strip)  # hypothesis leaves out lone surrogates
handed_out = st.one_of(st.uuids(), names.map(public_id))


@given(st.lists(handed_out, max_size=8))
def test_ids_round_trip_through_json(ids: list[uuid.UUID | str]) -> None:
    """A list mixing generated (UUID) and chosen (str) ids dumps to JSON and loads equal."""
    text = json.dumps([id_text(conversation_id) for conversation_id in ids])
    assert [public_id(item) for item in json.loads(text)] == ids


@given(st.uuids())
def test_uuid_and_its_text_are_one_id(value: uuid.UUID) -> None:
    """Either form of a UUID id writes the same JSON text and reads back as the UUID."""
    assert id_text(value) == id_text(str(value)) == str(value)
    assert public_id(json.loads(json.dumps(id_text(str(value))))) == value


def test_plain_json_dump_of_mixed_ids_needs_id_text() -> None:
    """The reason the helper exists: json.dump refuses a uuid.UUID, id_text makes it text."""
    with tempfile.TemporaryDirectory() as directory:
        named = Conversation(AGENT, Path(directory), conversation_id="sales-report")
        generated = Conversation(AGENT, Path(directory))
        ids = [named.id, generated.id]
        assert isinstance(ids[0], str) and isinstance(ids[1], uuid.UUID)
        with pytest.raises(TypeError):
            json.dumps(ids)
        loaded = [public_id(item) for item in json.loads(json.dumps([id_text(i) for i in ids]))]
        assert loaded == ids
        named.close()
        generated.close()


@pytest.mark.parametrize("value", ["", "  ", "\t\n", "bad \ud800", 7, None])
def test_invalid_ids_are_refused(value: object) -> None:
    """A blank id, one that is not valid Unicode, or no text at all: InvalidValueError."""
    with pytest.raises(InvalidValueError):
        id_text(value)


def test_exported_at_the_root() -> None:
    """Both helpers are cowconv's public names."""
    assert {"id_text", "public_id"} <= set(cowconv.__all__)
