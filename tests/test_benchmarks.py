"""The benchmark suite runs and writes its files (timings are never asserted)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._measure import QUICK, fit_loglog, parse_size, time_op
from benchmarks._scenario import sweep

ROOT = Path(__file__).resolve().parent.parent


def _suite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "--no-progress", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


class TestSuite:
    def test_quick_run_writes_results_report_and_plots(self, tmp_path: Path) -> None:
        """A tiny --quick run of every scenario succeeds and writes all of its files."""
        done = _suite("--quick", "--sizes", "10,100", "--output", str(tmp_path))
        assert done.returncode == 0, done.stderr
        results = json.loads((tmp_path / "results.json").read_text())
        assert results["quick"] is True
        assert results["sizes"] == [10, 100]
        assert {"cpu", "cpus", "python"} <= results["machine"].keys()
        statuses = {name: entry["status"] for name, entry in results["scenarios"].items()}
        assert set(statuses) == {
            "fork",
            "memory",
            "fork-from-event",
            "history",
            "persisted",
            "fanout",
            "rest",
            "import",
        }
        assert "error" not in statuses.values(), results["scenarios"]
        fork = results["scenarios"]["fork"]["data"]["series"]
        assert [p["size"] for p in fork["cowconv"]] == [10, 100]
        assert all(p["median"] > 0 and p["min"] <= p["median"] <= p["max"] for p in fork["cowconv"])
        assert {t["status"] for t in results["targets"]} <= {"PASS", "FALLS SHORT", "NOT MEASURED"}
        report = (tmp_path / "report.md").read_text()
        assert "## Targets" in report and "## Methodology" in report
        for name, files in results["plots"].items():
            assert statuses[name] == "ok"
            for file in files:
                assert (tmp_path / file).read_bytes().startswith(b"\x89PNG")
                assert f"]({file})" in report
        assert (tmp_path / "fork_latency.png").exists()
        assert "targets (issues 2 and 6)" in done.stdout

    def test_scenario_selection_by_name_and_number(self, tmp_path: Path) -> None:
        """--scenario takes names and numbers, comma separated or repeated."""
        done = _suite(
            "--quick",
            "--sizes",
            "10",
            "--scenario",
            "1,import",
            "--no-plots",
            "--output",
            str(tmp_path),
        )
        assert done.returncode == 0, done.stderr
        results = json.loads((tmp_path / "results.json").read_text())
        assert list(results["scenarios"]) == ["fork", "import"]
        assert results["plots"] == {}

    def test_unknown_scenario_is_refused(self, tmp_path: Path) -> None:
        """An unknown scenario name stops the suite with a message naming the choices."""
        done = _suite("--scenario", "nope", "--output", str(tmp_path))
        assert done.returncode != 0
        assert "unknown scenario 'nope'" in done.stderr
        assert not (tmp_path / "results.json").exists()


class TestMeasure:
    @pytest.mark.parametrize(
        ("text", "value"),
        [
            ("10", 10),
            ("1k", 1_000),
            ("10K", 10_000),
            ("1M", 1_000_000),
            ("1e5", 100_000),
            ("2_000", 2_000),
        ],
    )
    def test_parse_size(self, text: str, value: int) -> None:
        """Sizes accept k/M suffixes, exponents and underscores."""
        assert parse_size(text) == value

    @pytest.mark.parametrize("text", ["0", "1.5", "-3", "k"])
    def test_parse_size_refuses_non_counts(self, text: str) -> None:
        """A size must be a whole number of at least one."""
        with pytest.raises(ValueError):
            parse_size(text)

    def test_fit_loglog_recovers_power_laws(self) -> None:
        """The fitted slope of c·n^k is k."""
        sizes = [10, 100, 1_000, 10_000]
        assert fit_loglog(sizes, [3.0] * 4)[0] == pytest.approx(0.0, abs=1e-12)
        assert fit_loglog(sizes, [2e-6 * n for n in sizes])[0] == pytest.approx(1.0)
        assert math.isnan(fit_loglog([10], [1.0])[0])

    def test_time_op_counts_calls(self) -> None:
        """time_op runs every timed batch in full and orders min ≤ median ≤ max."""
        calls = []
        sample = time_op(lambda: calls.append(1), QUICK)
        assert sample.repeats == QUICK.repeats
        assert len(calls) >= sample.number * sample.repeats
        assert 0 <= sample.min <= sample.median <= sample.max

    def test_sweep_extrapolates_once_over_budget(self) -> None:
        """Sizes whose predicted cost exceeds the budget are scaled linearly, not measured."""
        from benchmarks._measure import Sample

        measured = []

        def measure(size: int) -> tuple[Sample, float]:
            measured.append(size)
            seconds = size * 1e-3  # 1 ms per event
            return Sample.of([seconds]), seconds

        points = sweep([10, 100, 1_000, 10_000], measure, budget_s=1.0, on_step=lambda _: None)
        assert measured == [10, 100]  # 1k would need 4 × 1 s
        assert [p["extrapolated"] for p in points] == [False, False, True, True]
        assert points[3]["median"] == pytest.approx(10.0)
