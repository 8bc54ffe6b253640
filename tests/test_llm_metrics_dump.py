"""``llm.metrics.model_dump()`` answers OpenHands' SDK's ``Metrics`` shape."""

from __future__ import annotations

import copy
import json
import pickle

from hypothesis import given
from hypothesis import strategies as st

from cowconv import LLM
from cowconv.core.llm import LLMMetrics

_TOKEN_USAGE_KEYS = {
    "model",
    "prompt_tokens",
    "completion_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "context_window",
    "per_turn_token",
    "response_id",
}


def test_a_fresh_llm_dumps_empty_metrics() -> None:
    dump = LLM(model="openai/gpt-4o", api_key="sk-x").metrics.model_dump()
    assert set(dump) == {
        "model_name",
        "accumulated_cost",
        "max_budget_per_task",
        "accumulated_token_usage",
        "costs",
        "response_latencies",
        "token_usages",
    }
    assert dump["accumulated_cost"] == 0.0
    assert (dump["costs"], dump["response_latencies"], dump["token_usages"]) == ([], [], [])
    assert set(dump["accumulated_token_usage"]) == _TOKEN_USAGE_KEYS


calls = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=10, allow_nan=False),
        st.integers(min_value=0, max_value=10**6),
        st.integers(min_value=0, max_value=10**6),
        st.floats(min_value=0, max_value=100, allow_nan=False),
    ),
    max_size=8,
)


@given(calls=calls)
def test_the_dump_holds_every_call_and_the_totals(
    calls: list[tuple[float, int, int, float]],
) -> None:
    metrics = LLMMetrics()
    for number, (cost, prompt, completion, latency) in enumerate(calls):
        metrics.add(
            cost=cost,
            prompt_tokens=prompt,
            completion_tokens=completion,
            latency=latency,
            model="openai/m",
            response_id=f"r{number}",
        )
    dump = metrics.model_dump()
    assert dump["accumulated_cost"] == metrics.accumulated_cost
    total = dump["accumulated_token_usage"]
    assert total["prompt_tokens"] == sum(call[1] for call in calls)
    assert total["completion_tokens"] == sum(call[2] for call in calls)
    assert [entry["cost"] for entry in dump["costs"]] == [call[0] for call in calls]
    assert [entry["latency"] for entry in dump["response_latencies"]] == [c[3] for c in calls]
    assert [entry["response_id"] for entry in dump["token_usages"]] == [
        f"r{number}" for number in range(len(calls))
    ]
    assert all(set(usage) == _TOKEN_USAGE_KEYS for usage in dump["token_usages"])
    assert dump["model_name"] == ("openai/m" if calls else "default")
    assert json.loads(json.dumps(dump)) == dump
    # Copies and pickles keep the per-call costs.
    for again in (copy.deepcopy(metrics), pickle.loads(pickle.dumps(metrics))):
        assert again.model_dump()["costs"] == dump["costs"]


def test_metrics_pickled_before_costs_still_load() -> None:
    metrics = LLMMetrics()
    metrics.add(cost=0.5, prompt_tokens=3, completion_tokens=1, latency=0.1, model="m")
    old = LLMMetrics.__new__(LLMMetrics)
    totals, latencies, usages, _costs = metrics.__getstate__()
    old.__setstate__((totals, latencies, usages))
    assert old.model_dump()["costs"] == []
    assert old.model_dump()["accumulated_cost"] == 0.5
