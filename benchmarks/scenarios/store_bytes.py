"""Scenario: the bytes one persisted fork writes, SQLiteStore against PostgresStore."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks._measure import human_bytes, human_size
from benchmarks._scenario import Context, Scenario, Skip, Target, table

BYTES_LIMIT = 16 * 1024
LARGEST = 10_000


class StoreBytes(Scenario):
    name = "storebytes"
    title = "Bytes written by one persisted fork: SQLite against PostgreSQL"

    def steps(self, config: Any) -> int:
        return 2

    def run(self, ctx: Context) -> dict[str, Any]:
        try:
            from cowconv.stores.postgres import PostgresStore
            from cowconv.stores.sqlite import SQLiteStore
            from cowconv.testing import PostgresServer
        except ImportError as error:
            raise Skip(f"needs the postgres and postgres-server extras: {error}") from None
        size = min(max(ctx.config.sizes), LARGEST)
        forks = 20 if ctx.config.quick else 100

        def per_fork(store: Any) -> list[int]:
            # The write-ahead log each database writes: what a fork costs on disk.
            source = ctx.workload.saved_conversation(size, store)
            return [store.bytes_written_by(source.fork) for _ in range(forks)]

        ctx.tick(f"SQLiteStore fork at {human_size(size)} events")
        with SQLiteStore(ctx.scratch / "cowconv.db") as sqlite:
            sqlite_bytes = per_fork(sqlite)
        ctx.tick(f"PostgresStore fork at {human_size(size)} events")
        with PostgresServer() as server:
            with PostgresStore(server.create_database("bench")) as postgres:
                postgres_bytes = per_fork(postgres)
        return {
            "size": size,
            "forks": forks,
            "sqlite": statistics.median(sqlite_bytes),
            "postgres": statistics.median(postgres_bytes),
        }

    def targets(self, data: dict[str, Any]) -> list[Target]:
        return [
            Target(
                f"persisted fork on {name}: bytes written (WAL) at {human_size(data['size'])}",
                "≤ 16 KiB",
                human_bytes(data[key]),
                data[key] <= BYTES_LIMIT,
            )
            for name, key in (("SQLite", "sqlite"), ("PostgreSQL", "postgres"))
        ]

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        return [
            (
                f"one persisted fork at {human_size(data['size'])} events",
                f"SQLite {human_bytes(data['sqlite'])}, PostgreSQL {human_bytes(data['postgres'])}",
            )
        ]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        rows = [
            ["SQLiteStore (WAL frames: 4 KiB pages)", human_bytes(data["sqlite"])],
            [
                "PostgresStore (WAL records: the row and its index entries)",
                human_bytes(data["postgres"]),
            ],
        ]
        return "\n".join(
            [
                f"A conversation of {human_size(data['size'])} events is saved in each store, "
                f"then forked {data['forks']} times; each fork's write-ahead-log bytes are "
                "measured (`store.bytes_written_by(source.fork)`), median shown. A fork is one "
                "row in both: no event is written again.",
                "",
                table(["store", "bytes per fork"], rows),
            ]
        )
