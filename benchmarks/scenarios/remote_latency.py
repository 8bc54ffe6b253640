"""Remote latency: a fork through ``RemoteConversation`` against a raw REST fork, and the
in-process server (``BackgroundServer``) against ``cowconv serve`` in its own process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._measure import human_seconds, time_op
from benchmarks._scenario import (
    Context,
    Scenario,
    Skip,
    Target,
    cell,
    fmt_ratio,
    point,
    ratio,
    table,
)

REMOTE_FORK_FACTOR = 2.0
"""``RemoteConversation.fork()`` against a raw ``POST /fork`` on the same server."""
IN_PROCESS_FACTOR = 3.0
"""A request to the in-process ``BackgroundServer`` against the same to ``cowconv serve``."""
_START_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _server_process(data_dir: Path) -> Iterator[str]:
    """``python -m cowconv.agent_server`` on a free loopback port; its URL once it answers."""
    import httpx

    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "cowconv.agent_server", "--port", str(port)],
        env={**os.environ, "COWCONV_DATA_DIR": str(data_dir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5).is_success:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise Skip(f"cowconv serve did not start on port {port}")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


class RemoteLatency(Scenario):
    name = "remote"
    title = "Remote fork and server latency, side by side"
    uses_events = False

    def steps(self, config: Any) -> int:
        return 2

    def run(self, ctx: Context) -> dict[str, Any]:
        try:
            import httpx

            from cowconv import Conversation, Workspace
            from cowconv.agent_server import BackgroundServer, create_app
        except ImportError as error:
            raise Skip(f"the agent server needs the server extra: {error}") from None
        results: dict[str, Any] = {}
        agent = ctx.workload.agent

        def measure(label: str, url: str) -> None:
            workspace = Workspace(host=url, working_dir=str(ctx.scratch))
            with (
                httpx.Client(base_url=url) as client,
                Conversation(agent=agent, workspace=workspace) as source,
            ):
                source.send_message("hi")
                path = f"/api/conversations/{source.id}/fork"

                def health() -> None:
                    client.get("/health").raise_for_status()

                def raw_fork() -> None:
                    client.post(path, json={}).raise_for_status()

                def remote_fork() -> None:
                    source.fork().close()

                ops: dict[str, Callable[[], None]] = {
                    "health": health,
                    "raw_fork": raw_fork,
                    "remote_fork": remote_fork,
                }
                results[label] = {
                    name: point(0, time_op(op, ctx.settings)) for name, op in ops.items()
                }

        ctx.tick("in-process server (BackgroundServer)")
        with BackgroundServer(create_app()) as server:
            measure("in_process", server.url)
        ctx.tick("server process (python -m cowconv.agent_server)")
        with _server_process(ctx.scratch / "serve") as url:
            measure("process", url)
        return results

    @staticmethod
    def _remote_ratio(data: dict[str, Any], server: str) -> float | None:
        return ratio(data[server]["remote_fork"], data[server]["raw_fork"])

    def targets(self, data: dict[str, Any]) -> list[Target]:
        remote = self._remote_ratio(data, "process")
        in_process = ratio(data["in_process"]["health"], data["process"]["health"])
        return [
            Target(
                "RemoteConversation.fork() against a raw POST /fork (cowconv serve, medians)",
                f"≤ {REMOTE_FORK_FACTOR:g}×",
                fmt_ratio(remote),
                None if remote is None else remote <= REMOTE_FORK_FACTOR,
            ),
            Target(
                "GET /health: in-process BackgroundServer against cowconv serve (medians)",
                f"≤ {IN_PROCESS_FACTOR:g}×",
                fmt_ratio(in_process),
                None if in_process is None else in_process <= IN_PROCESS_FACTOR,
            ),
        ]

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        process, in_process = data["process"], data["in_process"]
        return [
            (
                "remote fork",
                f"{human_seconds(process['remote_fork']['median'])} vs raw "
                f"{human_seconds(process['raw_fork']['median'])}; /health in-process "
                f"{human_seconds(in_process['health']['median'])} vs process "
                f"{human_seconds(process['health']['median'])}",
            )
        ]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        names = {
            "health": "GET /health",
            "raw_fork": "POST …/fork (httpx, keep-alive)",
            "remote_fork": "RemoteConversation.fork()",
        }
        rows = [
            [
                label,
                cell(data["in_process"][name], human_seconds),
                cell(data["process"][name], human_seconds),
                fmt_ratio(ratio(data["in_process"][name], data["process"][name])),
            ]
            for name, label in names.items()
        ]
        return "\n".join(
            [
                "Per request, medians, one run side by side: the in-process server "
                "(`BackgroundServer`, what tests and notebooks use) and `python -m "
                "cowconv.agent_server` in its own process, both on 127.0.0.1. "
                "`RemoteConversation.fork()` reuses its conversation's pooled connection.",
                "",
                table(["request", "in-process", "server process", "in-process / process"], rows),
                "",
                "RemoteConversation.fork() / raw POST: "
                f"{fmt_ratio(self._remote_ratio(data, 'process'))} (server process), "
                f"{fmt_ratio(self._remote_ratio(data, 'in_process'))} (in-process).",
            ]
        )
