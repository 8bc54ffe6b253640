"""``import cowconv`` in a fresh interpreter: time, and which heavy modules it pulls in."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._measure import Sample, human_seconds
from benchmarks._scenario import (
    Config,
    Context,
    Scenario,
    Target,
    cell,
    fmt_ratio,
    ratio,
    table,
)

IMPORT_LIMIT_S = 0.150
PYDANTIC_FACTOR = 1.5
"""``import cowconv`` against ``from pydantic import BaseModel``, the floor it builds on: a
ratio measured side by side, which load on a shared machine moves far less than the time."""
HEAVY = ("litellm", "fastapi", "uvicorn", "httpx", "matplotlib", "rich", "openai")
ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys, time
start = time.perf_counter()
STATEMENT
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "heavy": [m for m in HEAVY if m in sys.modules]}))
""".replace("HEAVY", repr(HEAVY))
COWCONV = "import cowconv"
PYDANTIC = "from pydantic import BaseModel"
CORE = "from cowconv import Conversation, Agent, LLM, Tool, MessageEvent"
"""First use of the core (events, history, state, conversation, agent and LLM settings; no LLM
library, store or server): reported beside the judged figure, since `import cowconv` loads only
the exception tree and every other name on first use."""
FLOOR = (
    "from pydantic import BaseModel, ConfigDict\n"
    "class Model(BaseModel):\n"
    "    model_config = ConfigDict(defer_build=True)\n"
    "    x: int"
)
"""The least any library of pydantic models pays on first use: one deferred model with one
field (it imports ``pydantic.fields``, which imports ``pydantic.types`` and ``annotated_types``).
Measured in the same runs, so what the core adds beyond it reads off directly."""
# Bytecode is cached as for an installed package (pip compiles it): with
# PYTHONDONTWRITEBYTECODE set, every probe would compile cowconv from source.
_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def _probe(statement: str = COWCONV) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.replace("STATEMENT", statement)],
        cwd=ROOT,
        env=_ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _slowest_imports(limit: int = 10) -> list[dict[str, Any]]:
    """The modules with the largest cumulative import time (``-X importtime``), nested ones too."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import cowconv"],
        cwd=ROOT,
        env=_ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _own, cumulative, name = line.split(":", 1)[1].split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        rows.append({"module": name.strip(), "depth": depth, "cumulative_s": int(cumulative) / 1e6})
    return sorted(rows, key=lambda row: row["cumulative_s"], reverse=True)[:limit]


class ImportTime(Scenario):
    name = "import"
    title = "import cowconv"
    uses_events = False

    def _runs(self, config: Config) -> int:
        return 3 if config.quick else 10

    def steps(self, config: Config) -> int:
        return 2

    def run(self, ctx: Context) -> dict[str, Any]:
        ctx.tick("import cowconv and pydantic in fresh interpreters, alternating")
        # Warm-up: the first runs pay for cold file caches and write the bytecode.
        _probe(), _probe(PYDANTIC), _probe(CORE), _probe(FLOOR)
        runs, baseline, core, floor = [], [], [], []
        for _ in range(self._runs(ctx.config)):
            runs.append(_probe())
            baseline.append(_probe(PYDANTIC)["seconds"])
            core.append(_probe(CORE))
            floor.append(_probe(FLOOR)["seconds"])
        ctx.tick("import cowconv -X importtime")
        seconds = [run["seconds"] for run in runs]
        heavy = sorted({module for run in runs for module in run["heavy"]})
        core_heavy = sorted({module for run in core for module in run["heavy"]})
        return {
            "seconds": {"size": 0, **Sample.of(seconds).to_json(), "extrapolated": False},
            "pydantic": {"size": 0, **Sample.of(baseline).to_json(), "extrapolated": False},
            "core": {
                "size": 0,
                **Sample.of([run["seconds"] for run in core]).to_json(),
                "extrapolated": False,
            },
            "floor": {"size": 0, **Sample.of(floor).to_json(), "extrapolated": False},
            "core_heavy_modules": core_heavy,
            "heavy_modules": heavy,
            "slowest": _slowest_imports(),
            "median_s": statistics.median(seconds),
        }

    def targets(self, data: dict[str, Any]) -> list[Target]:
        median = data["seconds"]["median"]
        heavy = data["heavy_modules"]
        core_heavy = [
            module
            for module in data.get("core_heavy_modules", [])
            if module in ("litellm", "fastapi", "httpx")
        ]
        by_pydantic = ratio(data["seconds"], data.get("pydantic"))
        core_by_pydantic = ratio(data.get("core"), data.get("pydantic"))

        def side_by_side(value: float | None, mine: dict[str, Any] | None) -> str:
            # A ratio far below 1 as a fraction with both times ("1/64×: 757 µs against
            # 48.4 ms"), never a "0.00×" that reads as zero.
            if value is None or mine is None:
                return "not measured"
            theirs = data["pydantic"]["median"]
            return (
                f"{fmt_ratio(value)} ({human_seconds(mine['median'])}"
                f" against {human_seconds(theirs)})"
            )

        return [
            Target(
                f"first use of the core (`{CORE}`) against `{PYDANTIC}`, alternating (medians)",
                f"≤ {PYDANTIC_FACTOR:g}×",
                side_by_side(core_by_pydantic, data.get("core")),
                None if core_by_pydantic is None else core_by_pydantic <= PYDANTIC_FACTOR,
            ),
            Target(
                f"import cowconv against `{PYDANTIC}`, side by side (medians)",
                f"≤ {PYDANTIC_FACTOR:g}×",
                side_by_side(by_pydantic, data["seconds"]),
                None if by_pydantic is None else by_pydantic <= PYDANTIC_FACTOR,
            ),
            Target(
                "import cowconv in a fresh interpreter (median)",
                "< 150 ms",
                human_seconds(median),
                median < IMPORT_LIMIT_S,
                absolute=True,
            ),
            Target(
                "import cowconv does not import litellm",
                "not in sys.modules",
                "litellm imported" if "litellm" in heavy else "not imported",
                "litellm" not in heavy,
            ),
            Target(
                "first use of the core does not import litellm, FastAPI or httpx",
                "not in sys.modules",
                ", ".join(core_heavy) + " imported" if core_heavy else "none imported",
                not core_heavy,
            ),
        ]

    def summary(self, data: dict[str, Any]) -> list[tuple[str, str]]:
        heavy = ", ".join(data["heavy_modules"]) or "none"
        by_pydantic = ratio(data["seconds"], data.get("pydantic"))
        rows = [
            (
                "import cowconv",
                f"{human_seconds(data['seconds']['median'])}"
                f" ({fmt_ratio(by_pydantic)} of {PYDANTIC}); heavy: {heavy}",
            )
        ]
        if data.get("core"):
            rows.append(
                (
                    "first use of the core",
                    f"{human_seconds(data['core']['median'])}"
                    f" ({fmt_ratio(ratio(data['core'], data.get('pydantic')))} of {PYDANTIC})",
                )
            )
        if data.get("floor"):
            rows.append(
                (
                    "one deferred pydantic model (the floor)",
                    f"{human_seconds(data['floor']['median'])}"
                    f" ({fmt_ratio(ratio(data['floor'], data.get('pydantic')))} of {PYDANTIC})",
                )
            )
        return rows

    def markdown(self, data: dict[str, Any], plots: Sequence[str]) -> str:
        rows = [
            [row["module"], str(row["depth"]), human_seconds(row["cumulative_s"])]
            for row in data["slowest"]
        ]
        heavy = ", ".join(data["heavy_modules"]) or "none of them"
        return "\n".join(
            [
                "`import cowconv` timed inside a fresh `python -c` (interpreter start-up "
                f"excluded), {data['seconds']['repeats']} runs after one warm-up: "
                f"**{cell(data['seconds'], human_seconds)}**; `{PYDANTIC}` in the same way, "
                "alternating with it: "
                f"**{cell(data.get('pydantic'), human_seconds)}** (ratio of medians "
                f"{fmt_ratio(ratio(data['seconds'], data.get('pydantic')))}). Of "
                f"{', '.join(HEAVY)} it imported: {heavy}.",
                "",
                "`import cowconv` loads only the exception tree; every other name loads its "
                "module on first use. What a program that uses cowconv pays is the first use "
                "of its core, measured in the same runs "
                f"(`{CORE}`): **{cell(data.get('core'), human_seconds)}** "
                f"({fmt_ratio(ratio(data.get('core'), data.get('pydantic')))} of `{PYDANTIC}`). "
                "Defining any pydantic model costs more than `from pydantic import BaseModel` "
                "(it imports `pydantic.fields`, `pydantic.types` and `annotated_types`), so that "
                "is the floor; one deferred model with one field, in the same runs: "
                f"**{cell(data.get('floor'), human_seconds)}** "
                f"({fmt_ratio(ratio(data.get('floor'), data.get('pydantic')))} of `{PYDANTIC}`). "
                "The models build their schemas on first validation (`defer_build`).",
                "",
                "Largest cumulative import times in one `python -X importtime -c 'import cowconv'` "
                "(depth 0 is `cowconv` itself; nested modules are counted in their parents; the "
                "profiler adds its own overhead):",
                "",
                table(["module", "depth", "cumulative"], rows),
            ]
        )
