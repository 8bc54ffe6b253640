"""Scenario 7: fork latency through the agent server's REST API, over real HTTP."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._measure import fit_loglog, human_seconds, human_size, time_op
from benchmarks._scenario import (
    Config,
    Context,
    Scenario,
    Skip,
    at_size,
    cell,
    measured,
    point,
    table,
)


class RestFork(Scenario):
    name = "rest"
    title = "REST fork latency through the agent server"

    def steps(self, config: Config) -> int:
        return len(config.sizes) + 1

    def run(self, ctx: Context) -> dict[str, Any]:
        try:
            import httpx

            from cowconv.agent_server import BackgroundServer, create_app
        except ImportError as error:
            raise Skip(
                "the agent server is not available (needs the server extra: "
                f"pip install 'cowconv[server]', and cowconv.agent_server): {error}"
            ) from None
        settings = ctx.settings
        app = create_app()
        registry = app.state.registry
        agent = ctx.workload.agent.model_dump(mode="json", context={"expose_secrets": True})
        forks, infos = [], []
        with BackgroundServer(app) as server, httpx.Client(base_url=server.url) as client:
            ctx.tick("HTTP floor: GET /health")

            def health() -> None:
                client.get("/health").raise_for_status()

            floor = time_op(health, settings)
            for size in sorted(ctx.config.sizes):
                ctx.tick(f"POST /fork at {human_size(size)} events")
                created = client.post(
                    "/api/conversations",
                    json={"agent": agent, "workspace": {"working_dir": str(ctx.scratch)}},
                )
                created.raise_for_status()
                conversation_id = created.json()["id"]
                log = ctx.workload.log(size)
                # The history is installed in-process: n events over HTTP would time the
                # uploads, not the fork.
                registry.get(conversation_id)._commit(
                    lambda state, log=log: state._replace(events=log)
                )
                url = f"/api/conversations/{conversation_id}/fork"
                answer = client.post(url, json={"title": "check"})
                answer.raise_for_status()
                if answer.json()["event_count"] != size:
                    raise AssertionError(f"the fork has {answer.json()['event_count']} events")

                def fork(url: str = url) -> None:
                    client.post(url, json={"tags": {"variant": "B"}}).raise_for_status()

                def info(url: str = url.removesuffix("/fork")) -> None:
                    client.get(url).raise_for_status()

                forks.append(point(size, time_op(fork, settings)))
                infos.append(point(size, time_op(info, settings)))
        slope = fit_loglog([p["size"] for p in measured(forks)], [p["median"] for p in forks])[0]
        return {
            "sizes": sorted(ctx.config.sizes),
            "transport": "uvicorn on 127.0.0.1 (BackgroundServer), httpx.Client with keep-alive",
            "floor": point(0, floor),
            "fork": forks,
            "info": infos,
            "slope": slope,
        }

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        worst = max(data["fork"], key=lambda p: p["median"])
        floor = human_seconds(data["floor"]["median"])
        return [
            (
                "POST /fork",
                f"worst {human_seconds(worst['median'])} at {human_size(worst['size'])} "
                f"(slope {data['slope']:+.3f}); GET /health {floor}",
            )
        ]

    def plot(self, data: dict[str, Any], directory: Path) -> list[str]:
        from benchmarks._plots import Line, Panel, chart

        floor = [{**data["floor"], "size": p["size"]} for p in data["fork"]]
        panel = Panel(
            title="REST fork through the agent server (real HTTP)",
            unit="s",
            ylabel="time per request",
            lines=[
                Line("POST /api/conversations/{id}/fork", data["fork"]),
                Line("GET /api/conversations/{id}", data["info"]),
                Line("GET /health (HTTP floor)", floor),
            ],
        )
        return [chart(directory / "rest_fork.png", [panel])]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        rows = [
            [
                f"{size:,}",
                cell(at_size(data["fork"], size), human_seconds),
                cell(at_size(data["info"], size), human_seconds),
            ]
            for size in data["sizes"]
        ]
        return "\n".join(
            [
                f"Transport: {data['transport']}; the server keeps conversations in memory. "
                "Each source conversation is created with `POST /api/conversations`; its "
                "history (the prebuilt log) is installed in the server process, then "
                "`POST /api/conversations/{id}/fork` is timed (one request and its "
                "`ConversationInfo` answer per call). `GET /health` is the cost of any "
                f"request on this stack: **{cell(data['floor'], human_seconds)}**.",
                "",
                table(["events", "POST …/fork", "GET …/{id} (summary)"], rows),
                "",
                f"Fitted log-log slope of the REST fork: **{data['slope']:+.3f}**.",
            ]
        )
