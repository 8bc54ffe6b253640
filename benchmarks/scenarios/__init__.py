"""The scenarios, in the order they run and are reported."""

from benchmarks._scenario import Scenario
from benchmarks.scenarios.fork_latency import ForkLatency

SCENARIOS: tuple[Scenario, ...] = (ForkLatency(),)

__all__ = ["SCENARIOS"]
