"""Scenario: workspace snapshots and copy forks, against a 10-file and a 10,000-file workspace."""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._measure import human_bytes, human_seconds
from benchmarks._scenario import Context, Scenario, Target, table

SMALL = 10
LARGE = 10_000
PER_DIRECTORY = 100  # the large workspace: 100 directories of 100 files, as a source tree
SNAPSHOT_RATIO_LIMIT = 10.0
FORK_SPEEDUP_TARGET = 10.0
BYTES_SHARE_LIMIT = 0.02


def _make_workspace(root: Path, files: int) -> Path:
    root.mkdir(parents=True)
    for number in range(files):
        directory = root / f"pkg{number // PER_DIRECTORY:03d}"
        directory.mkdir(exist_ok=True)
        (directory / f"module{number:05d}.py").write_text(
            f"# module {number}\n" + "def f(x):\n    return x + 1\n" * 8
        )
    return root


def _object_bytes(store_directory: Path) -> int:
    total = 0
    for root, _, names in os.walk(store_directory / "objects.git" / "objects"):
        for name in names:
            total += os.lstat(os.path.join(root, name)).st_size
    return total


def _timed(op: Any) -> float:
    start = time.perf_counter()
    op()
    return time.perf_counter() - start


class WorkspaceFork(Scenario):
    name = "workspace"
    title = "Workspace snapshots and copy forks: 10 files against 10,000"

    def steps(self, config: Any) -> int:
        return 4

    def run(self, ctx: Context) -> dict[str, Any]:
        from cowconv import LLM, Agent, Conversation, SnapshotStore, Workspace
        from cowconv.workspaces import materialize_workspace

        repeats = 3 if ctx.config.quick else 9
        store_dir = ctx.scratch / "store"
        store = SnapshotStore(store_dir)
        ctx.tick("making a 10-file and a 10,000-file workspace")
        small = _make_workspace(ctx.scratch / "small", SMALL)
        large = _make_workspace(ctx.scratch / "large", LARGE)
        first_bytes = _object_bytes(store_dir)
        first_large = _timed(lambda: store.snapshot(large))
        full_bytes = _object_bytes(store_dir) - first_bytes
        store.snapshot(small)

        ctx.tick("a snapshot after one changed file, both sizes side by side")
        seconds: dict[str, list[float]] = {"small": [], "large": []}
        added: dict[str, list[int]] = {"small": [], "large": []}
        for attempt in range(repeats):
            for key, root, target in (
                ("small", small, small / "pkg000" / "module00003.py"),
                ("large", large, large / "pkg042" / "module04217.py"),
            ):
                target.write_text(f"# changed {attempt}\n")
                before = _object_bytes(store_dir)
                seconds[key].append(_timed(lambda root=root: store.snapshot(root)))
                added[key].append(_object_bytes(store_dir) - before)

        ctx.tick("bytes stored per snapshot as more files change")
        growth: list[tuple[int, int]] = []
        for changed in (1, 10, 100):
            for number in range(changed):
                directory = (number * 7) % 100
                path = large / f"pkg{directory:03d}" / f"module{directory * 100 + number:05d}.py"
                path.write_text(f"# edited for {changed}\n")
            before = _object_bytes(store_dir)
            store.snapshot(large)
            growth.append((changed, _object_bytes(store_dir) - before))

        ctx.tick("fork(workspace='copy') of the 10,000-file workspace against shutil.copytree")
        agent = Agent(llm=LLM(model="openai/bench"))
        source = Conversation(
            agent=agent, workspace=Workspace(working_dir=str(large), snapshot_store=str(store_dir))
        )
        fork_seconds: list[float] = []
        used_seconds: list[float] = []
        copytree_seconds: list[float] = []
        for attempt in range(repeats):
            copy_target = ctx.scratch / f"copytree{attempt}"
            copytree_seconds.append(_timed(lambda t=copy_target: shutil.copytree(large, t)))
            # The fork alone (its directory made, its files written on first use) ...
            fork_seconds.append(_timed(lambda: source.fork(workspace="copy")))

            # ... and a fork whose files are then written (its first use), side by side.
            def fork_and_use() -> None:
                fork = source.fork(workspace="copy")
                materialize_workspace(fork.state.workspace)
                assert (Path(fork.state.workspace.working_dir) / "pkg042").is_dir()

            used_seconds.append(_timed(fork_and_use))
        return {
            "repeats": repeats,
            "first_snapshot_large": first_large,
            "first_snapshot_bytes": full_bytes,
            "snapshot_small": statistics.median(seconds["small"]),
            "snapshot_large": statistics.median(seconds["large"]),
            "bytes_small": statistics.median(added["small"]),
            "bytes_large": statistics.median(added["large"]),
            "growth": growth,
            "fork": statistics.median(fork_seconds),
            "fork_used": statistics.median(used_seconds),
            "copytree": statistics.median(copytree_seconds),
        }

    def targets(self, data: dict[str, Any]) -> list[Target]:
        ratio = data["snapshot_large"] / data["snapshot_small"]
        speedup = data["copytree"] / data["fork"]
        used = data["copytree"] / data["fork_used"]
        share = data["bytes_large"] / max(data["first_snapshot_bytes"], 1)
        return [
            Target(
                "snapshot after one changed file: 10,000 files against 10 (same run)",
                f"≤ {SNAPSHOT_RATIO_LIMIT:g}×",
                f"{ratio:.1f}×",
                ratio <= SNAPSHOT_RATIO_LIMIT,
            ),
            Target(
                "fork(workspace='copy') of 10,000 files against shutil.copytree (same run)",
                f"≥ {FORK_SPEEDUP_TARGET:g}× faster",
                f"{speedup:.1f}× faster",
                speedup >= FORK_SPEEDUP_TARGET,
            ),
            Target(
                "fork(workspace='copy') and its first use (files written) against copytree",
                "none",
                f"{used:.1f}× faster",
                None,
                unjudged="information: the first use writes every file, as copytree does",
            ),
            Target(
                "bytes stored by a one-file snapshot of 10,000 files, share of a full snapshot",
                f"≤ {BYTES_SHARE_LIMIT:.0%}",
                f"{share:.2%} ({human_bytes(data['bytes_large'])})",
                share <= BYTES_SHARE_LIMIT,
            ),
        ]

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        small, large = human_seconds(data["snapshot_small"]), human_seconds(data["snapshot_large"])
        return [
            ("snapshot after one change: 10 files / 10,000 files", f"{small} / {large}"),
            (
                "copy fork / fork + first use / copytree of 10,000 files",
                f"{human_seconds(data['fork'])} / {human_seconds(data['fork_used'])} / "
                f"{human_seconds(data['copytree'])}",
            ),
        ]

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        rows = [
            ["first snapshot of 10,000 files", human_seconds(data["first_snapshot_large"]),
             human_bytes(data["first_snapshot_bytes"])],
            ["snapshot after one change, 10 files", human_seconds(data["snapshot_small"]),
             human_bytes(data["bytes_small"])],
            ["snapshot after one change, 10,000 files", human_seconds(data["snapshot_large"]),
             human_bytes(data["bytes_large"])],
            ["fork(workspace='copy'), 10,000 files", human_seconds(data["fork"]), ""],
            ["fork(workspace='copy') + first use (files written)",
             human_seconds(data["fork_used"]), ""],
            ["shutil.copytree, 10,000 files", human_seconds(data["copytree"]), ""],
        ]  # fmt: skip
        growth = [[str(changed), human_bytes(size)] for changed, size in data["growth"]]
        return "\n".join(
            [
                "A 10-file and a 10,000-file workspace (100 directories of 100 files) are "
                "snapshotted into one store; then one file of each is changed and each is "
                f"snapshotted again, side by side, {data['repeats']} times (medians). Bytes are "
                "the loose git objects the snapshot added. The copy fork snapshots the source "
                "(O(files changed)) and makes the fork's directory; its files are checked out "
                "from the snapshot on first use, timed in the same loop as the fork followed "
                "by that first use (no reflinks on ext4: every file is written).",
                "",
                table(["operation", "seconds", "bytes stored"], rows),
                "",
                table(["files changed (10,000-file workspace)", "bytes stored"], growth),
            ]
        )
