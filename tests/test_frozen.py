"""Tests for cowconv._frozen: deeply immutable JSON values."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from cowconv import freeze, thaw
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

    @pytest.mark.parametrize(
        "bad", [{1: "x"}, {"a": object()}, {1, 2}, b"bytes", float("nan"), [float("inf")]]
    )
    def test_rejects_non_json(self, bad):
        """Non-JSON values are a TypeError naming the problem."""
        with pytest.raises(TypeError):
            freeze(bad)


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
