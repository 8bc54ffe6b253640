"""The cowconv benchmark suite: ``python -m benchmarks`` (or ``cowconv bench``) in a checkout.

It measures forking a cowconv conversation against forking by copying (a
``copy.deepcopy`` of the events, the JSON round trip of every event, and the
OpenHands' SDK's own ``fork()`` when ``openhands-sdk`` is installed), plus memory,
history operations, persistence, an A/B fan-out and the REST API, and checks
each promise cowconv makes against the measured data. See
``python -m benchmarks --help``; ``main(argv, prog)`` is the entry point of
both commands.
"""

from benchmarks._cli import main

__all__ = ["main"]
