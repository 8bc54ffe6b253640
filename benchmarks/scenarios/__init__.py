"""The scenarios, in the order they run and are reported."""

from benchmarks._scenario import Scenario
from benchmarks.scenarios.distributed_suite import DistributedSuite
from benchmarks.scenarios.fanout import FanOut
from benchmarks.scenarios.fork_from_event import ForkFromEvent
from benchmarks.scenarios.fork_latency import ForkLatency
from benchmarks.scenarios.fork_memory import ForkMemory
from benchmarks.scenarios.history_ops import HistoryOps
from benchmarks.scenarios.import_time import ImportTime
from benchmarks.scenarios.persisted_fork import PersistedFork
from benchmarks.scenarios.rest_fork import RestFork

SCENARIOS: tuple[Scenario, ...] = (
    ForkLatency(),
    ForkMemory(),
    ForkFromEvent(),
    HistoryOps(),
    PersistedFork(),
    FanOut(),
    RestFork(),
    ImportTime(),
    DistributedSuite(),
)

__all__ = ["SCENARIOS"]
