"""The cowconv benchmark suite: ``python -m benchmarks`` from the repository root.

It measures forking a cowconv conversation against forking by copying (a
``copy.deepcopy`` of the events, and the JSON round trip of every event the
seed SDK does), plus memory, history operations, persistence, an A/B fan-out
and the REST API, and checks the targets of issues 2 and 6. See
``python -m benchmarks --help``; ``main(argv)`` is the same entry point for a
``cowconv bench`` command.
"""

from benchmarks._cli import main

__all__ = ["main"]
