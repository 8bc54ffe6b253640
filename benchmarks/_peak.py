"""``python -m benchmarks._peak MODE N K``: process memory of K forks, in a fresh process.

A fresh process so its high-water mark (``VmHWM``) belongs to this
measurement alone. It builds an ``N``-event conversation, then keeps ``K``
results alive: ``cowconv`` forks, ``cowconv+message`` forks that each got one
new message, or ``deepcopy`` copies of the event list (``none`` keeps
nothing). Prints one JSON object, with the time of one full garbage
collection while they are alive (a pause every program pays now and then;
the fastest of three).
"""

from __future__ import annotations

import copy
import gc
import json
import sys
import time
from collections.abc import Callable

import psutil

from benchmarks._workload import Workload
from cowconv import Conversation

MODES = ("none", "cowconv", "cowconv+message", "deepcopy")


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


def peak() -> int:
    # VmHWM, not ru_maxrss: ru_maxrss survives exec, so a child of a big process
    # would report its parent's peak; psutil has no peak resident size on Linux.
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _fork_with_message(source: Conversation) -> Conversation:
    fork = source.fork()
    fork.send_message("Now try the other approach.")
    return fork


def main(argv: list[str]) -> None:
    mode, size, count = argv[0], int(argv[1]), int(argv[2])
    if mode not in MODES:
        raise SystemExit(f"mode must be one of {MODES}")
    workload = Workload()
    source = workload.conversation(size)
    events = workload.events(size)
    makers: dict[str, Callable[[], object]] = {
        "none": lambda: None,
        "cowconv": source.fork,
        "cowconv+message": lambda: _fork_with_message(source),
        "deepcopy": lambda: copy.deepcopy(events),
    }
    make = makers[mode]
    gc.collect()
    before, peak_before = rss(), peak()
    started = time.perf_counter()
    kept = [make() for _ in range(count if mode != "none" else 0)]
    seconds = time.perf_counter() - started
    pauses = []
    for _ in range(3):
        collected = time.perf_counter()
        gc.collect()
        pauses.append(time.perf_counter() - collected)
    collect_seconds = min(pauses)
    report = {
        "mode": mode,
        "size": size,
        "count": len(kept),
        "rss_before": before,
        "peak_before": peak_before,
        "rss_after": rss(),
        "peak_after": peak(),
        "seconds": seconds,
        "collect_seconds": collect_seconds,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
