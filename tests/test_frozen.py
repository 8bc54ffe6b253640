"""Tests for cowconv.core.frozen: deeply immutable JSON values."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cowconv import (
    MAX_DEPTH,
    ActionEvent,
    InvalidTypeError,
    InvalidValueError,
    MessageToolCall,
    freeze,
    thaw,
)
from cowconv.core.frozen import decode_json
from tests.strategies import json_values


class TestFreeze:
    @given(json_values)
    def test_round_trip(self, value):
        """thaw(freeze(v)) is equal to v as JSON."""
        assert json.dumps(thaw(freeze(value)), sort_keys=True) == json.dumps(value, sort_keys=True)

    @given(json_values)
    def test_result_is_hashable(self, value):
        """A frozen value is hashable, so it holds no mutable container."""
        hash(freeze(value))

    def test_nested_containers_refuse_mutation(self):
        """Every container reachable from a frozen value refuses mutation."""
        value = freeze({"a": [1, {"b": [2]}]})
        with pytest.raises(TypeError):
            value["a"] = 1
        with pytest.raises(TypeError):
            value["a"][1]["b"] = 3
        with pytest.raises(AttributeError):
            value["a"][1]["b"].append(3)

    def test_input_is_copied(self):
        """Changing the input afterwards does not change the frozen value."""
        source = {"a": [1]}
        value = freeze(source)
        source["a"].append(2)
        assert value["a"] == (1,)

    @pytest.mark.parametrize("bad", [{1: "x"}, {"a": object()}, {1, 2}, b"bytes"])
    def test_rejects_non_json(self, bad):
        """Non-JSON types are a TypeError naming the problem."""
        with pytest.raises(TypeError):
            freeze(bad)

    @pytest.mark.parametrize(
        "bad",
        [
            float("nan"),
            [float("inf")],
            {"a": {"b": -float("inf")}},
            "\ud800",
            {"\udfff": 1},
            ["ok", {"k": "x\udc80y"}],
        ],
    )
    def test_rejects_what_cannot_be_stored(self, bad):
        """Non-finite numbers and lone surrogates are an InvalidValueError (a ValueError)."""
        with pytest.raises(InvalidValueError):
            freeze(bad)

    @given(st.integers(min_value=0, max_value=MAX_DEPTH + 5), st.booleans())
    def test_depth_limit(self, depth, as_object):
        """Containers nest up to MAX_DEPTH levels; one more is an InvalidValueError."""
        value: object = 1
        for _ in range(depth):
            value = {"k": value} if as_object else [value]
        if depth <= MAX_DEPTH:
            assert thaw(freeze(value)) == value
        else:
            with pytest.raises(InvalidValueError, match="deeper than"):
                freeze(value)

    def test_far_too_deep_is_still_a_value_error(self):
        """A value deeper than Python's recursion limit is refused the same way."""
        value: object = 1
        for _ in range(100_000):
            value = [value]
        with pytest.raises(InvalidValueError):
            freeze(value)


class TestThaw:
    def test_keys_sorted(self):
        """Thawed mappings list their keys sorted, for stable JSON across processes."""
        assert list(thaw(freeze({"b": 1, "a": 2, "c": 3}))) == ["a", "b", "c"]

    def test_result_is_mutable_copy(self):
        """Thawing gives plain dicts and lists the caller may change freely."""
        frozen = freeze({"a": [1]})
        plain = thaw(frozen)
        plain["a"].append(2)
        assert frozen["a"] == (1,)


class TestDecodeJson:
    """decode_json(): json.loads() for text from outside, refusing deep nesting unrecursed."""

    @given(json_values)
    def test_it_decodes_what_json_loads_decodes(self, value):
        text = json.dumps(value)
        assert decode_json(text) == json.loads(text)

    @given(st.integers(1, 3000), st.sampled_from(["[]", "{}"]), st.booleans())
    def test_nesting_deeper_than_512_is_a_value_error_never_a_recursion_error(
        self, depth, brackets, quoted
    ):
        """Nested arrays or objects: at most 512 levels decode as json.loads does, deeper
        ones are a ValueError; brackets inside a string are text, not nesting."""
        opening, closing = brackets
        inner = '"[{\\"]}"' if not quoted else '"' + "[" * depth + '"'
        if opening == "[":
            text = "[" * depth + inner + "]" * depth
        else:
            text = '{"k": ' * depth + inner + "}" * depth
        if depth <= 512:
            assert decode_json(text) == json.loads(text)
        else:
            with pytest.raises(InvalidValueError, match="nested deeper than 512"):
                decode_json(text)

    @given(json_values.filter(lambda value: not isinstance(value, str)))
    def test_what_is_not_text_or_bytes_is_a_type_error(self, value):
        """As json.loads: JSON comes as text or bytes; an int, a dict or None is a TypeError
        (an InvalidTypeError naming the type), not an AttributeError from inside."""
        with pytest.raises(InvalidTypeError, match=f"not {type(value).__name__}"):
            decode_json(value)

    def test_deep_tool_call_arguments_do_not_break_an_action_event(self):
        """OpenHands' ActionEvent(tool_call=...) decodes the call's arguments: nested 100,000
        deep they are not arguments (as invalid JSON is not), and no RecursionError escapes."""
        deep = "[" * 100_000 + "]" * 100_000
        call = MessageToolCall(id="c1", name="terminal", arguments=deep)
        event = ActionEvent(tool_name="terminal", tool_call_id="c1", tool_call=call)
        assert event.arguments == {} and event.tool_call == call
