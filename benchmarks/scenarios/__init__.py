"""The scenarios, in the order they run and are reported.

To add one: write a module here with a :class:`~benchmarks._scenario.Scenario`
subclass (a ``name`` for ``--scenario``, a ``title``, ``run`` and ``markdown``;
see ``fork_latency.py``), and add an instance to ``SCENARIOS`` below. Its
number in the report is its position in this tuple.
"""

from benchmarks._scenario import Scenario
from benchmarks.scenarios.branch_runtime import BranchRuntime
from benchmarks.scenarios.distributed_suite import DistributedSuite
from benchmarks.scenarios.fanout import FanOut
from benchmarks.scenarios.fork_from_event import ForkFromEvent
from benchmarks.scenarios.fork_latency import ForkLatency
from benchmarks.scenarios.fork_memory import ForkMemory
from benchmarks.scenarios.history_ops import HistoryOps
from benchmarks.scenarios.import_time import ImportTime
from benchmarks.scenarios.openhands_fork import OpenHandsFork
from benchmarks.scenarios.persisted_fork import PersistedFork
from benchmarks.scenarios.remote_latency import RemoteLatency
from benchmarks.scenarios.rest_fork import RestFork
from benchmarks.scenarios.store_bytes import StoreBytes
from benchmarks.scenarios.vector_implementation import VectorImplementation
from benchmarks.scenarios.workspace_fork import WorkspaceFork

SCENARIOS: tuple[Scenario, ...] = (
    ForkLatency(),
    OpenHandsFork(),
    ForkMemory(),
    ForkFromEvent(),
    HistoryOps(),
    VectorImplementation(),
    PersistedFork(),
    FanOut(),
    RestFork(),
    RemoteLatency(),
    ImportTime(),
    DistributedSuite(),
    BranchRuntime(),
    StoreBytes(),
    WorkspaceFork(),
)

for _number, _scenario in enumerate(SCENARIOS, start=1):
    _scenario.number = _number

__all__ = ["SCENARIOS"]
