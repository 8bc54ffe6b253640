"""The benchmark suite runs and writes its files (timings are never asserted)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._cli import run
from benchmarks._machine import busy
from benchmarks._measure import QUICK, fit_loglog, human_bytes, parse_size, signed_bytes, time_op
from benchmarks._scenario import Config, Scenario, Target, sweep
from benchmarks.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parent.parent


INSIDER_TERMS = ("issue", "#2", "#6", "ANCHORS")


def _suite(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # No wall-time limit: how long a benchmark takes depends on the machine and its load
    # (the quick run of every scenario takes minutes on 2 shared cores), never on cowconv.
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "--no-progress", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


class _Quick(Scenario):
    name = "tiny"
    title = "A scenario that measures nothing"

    def run(self, ctx):
        return {"value": 1}

    def markdown(self, data, plots):
        return f"value {data['value']}"


class _Killed(Scenario):
    name = "killed"
    title = "A scenario whose run is stopped"

    def run(self, ctx):
        raise KeyboardInterrupt  # what Ctrl-C (or a stopped job) does mid-run


class TestPartialResults:
    def test_a_stopped_run_leaves_the_finished_scenarios(self, tmp_path: Path) -> None:
        """results.json and report.md are written as each scenario finishes: a run stopped
        in its second scenario leaves the first one's figures, marked partial."""
        config = Config(
            quick=True,
            sizes=(10,),
            scenarios=("tiny", "killed"),
            output=tmp_path,
            settings=QUICK,
            progress=False,
        )
        scenarios = [_Quick(), _Killed()]
        for number, scenario in enumerate(scenarios, start=1):
            scenario.number = number
        with pytest.raises(KeyboardInterrupt):
            run(config, scenarios, "python -m benchmarks")
        results = json.loads((tmp_path / "results.json").read_text())
        assert results["partial"] is True
        assert list(results["scenarios"]) == ["tiny"]
        assert results["scenarios"]["tiny"]["data"] == {"value": 1}
        report = (tmp_path / "report.md").read_text()
        assert "**Stopped early**" in report and "value 1" in report
        assert sorted(path.name for path in tmp_path.iterdir()) == ["report.md", "results.json"]


@pytest.mark.timeout(0)  # no wall-time limit on a benchmark run (see _suite)
class TestSuite:
    @pytest.mark.slow
    def test_quick_run_writes_results_report_and_plots(self, tmp_path: Path) -> None:
        """A tiny --quick run of every scenario succeeds and writes all of its files."""
        done = _suite("--quick", "--sizes", "10,100", "--output", str(tmp_path))
        assert done.returncode == 0, done.stderr
        results = json.loads((tmp_path / "results.json").read_text())
        assert results["quick"] is True
        assert results["sizes"] == [10, 100]
        assert {"cpu", "cpus", "python"} <= results["machine"].keys()
        statuses = {name: entry["status"] for name, entry in results["scenarios"].items()}
        # Every registered scenario ran (each one's own figures are checked by its tests).
        assert set(statuses) == {scenario.name for scenario in SCENARIOS}
        assert "error" not in statuses.values(), results["scenarios"]
        try:
            import openhands.sdk  # noqa: F401
        except ImportError:
            assert statuses["openhands"] == "skipped"
            assert "pip install openhands-sdk" in results["scenarios"]["openhands"]["message"]
        else:
            assert statuses["openhands"] == "ok"
        fork = results["scenarios"]["fork"]["data"]["series"]
        assert [p["size"] for p in fork["cowconv"]] == [10, 100]
        assert all(p["median"] > 0 and p["min"] <= p["median"] <= p["max"] for p in fork["cowconv"])
        statuses_seen = {t["status"] for t in results["targets"]}
        assert statuses_seen <= {
            "PASS",
            "FALLS SHORT",
            "NOT MEASURED",
            "NOT JUDGED (busy machine)",
            "NOT JUDGED (quick run)",
            "NOT JUDGED (baseline extrapolated)",
            "NOT JUDGED (OpenHands extrapolated)",
            # The workspace scenario's fork followed by its first use, beside copytree: shown
            # for what the lazy fork defers, not a promise.
            "NOT JUDGED (information: the first use writes every file, as copytree does)",
        }
        # A row that shows a figure is judged, or says why not: never "NOT MEASURED".
        for target in results["targets"]:
            if target["status"] == "NOT MEASURED":
                figure = re.search(r"\d\s?(ns|µs|ms|s|×|B|KiB|MiB)(?!\w)", target["measured"])
                assert figure is None, target
        report = (tmp_path / "report.md").read_text()
        assert "0.00×" not in report
        assert "## What cowconv promises" in report and "## Methodology" in report
        for name, files in results["plots"].items():
            assert statuses[name] == "ok"
            for file in files:
                assert (tmp_path / file).read_bytes().startswith(b"\x89PNG")
                assert f"]({file})" in report
        assert (tmp_path / "fork_latency.png").exists()
        assert "what cowconv promises" in done.stdout
        for text in (done.stdout, done.stderr, report):
            for term in INSIDER_TERMS:
                assert term not in text, term

    def test_results_go_to_the_working_directory(self, tmp_path: Path) -> None:
        """Without --out the suite writes into ./benchmark-results of the directory it runs in."""
        done = _suite(
            "--quick", "--sizes", "10", "--scenario", "import", "--no-plots", cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "benchmark-results" / "report.md").exists()

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

    def test_replot_rebuilds_report_from_results(self, tmp_path: Path) -> None:
        """--replot measures nothing: the report and plots come from a results file."""
        first = tmp_path / "first"
        done = _suite("--quick", "--sizes", "10", "--scenario", "fork", "--output", str(first))
        assert done.returncode == 0, done.stderr
        again = tmp_path / "again"
        redone = _suite("--replot", str(first / "results.json"), "--output", str(again))
        assert redone.returncode == 0, redone.stderr
        assert (again / "report.md").read_text() == (first / "report.md").read_text()
        assert (again / "fork_latency.png").read_bytes().startswith(b"\x89PNG")

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--scenario", "nope"], "unknown scenario 'nope'"),
            (["--sizes", "abc"], "--sizes: a size is a count"),
            (["--sizes", ","], "--sizes: give at least one size"),
            (["--sizes", "1.5"], "--sizes: a size must be a whole number"),
            (["--bogus"], "unrecognized arguments: --bogus"),
            (["--replot", "/no/such/results.json"], "--replot: cannot read"),
        ],
    )
    def test_wrong_arguments_are_refused(self, tmp_path: Path, args, message) -> None:
        """A wrong argument is a usage error naming it (status 2), no traceback, no files."""
        done = _suite(*args, "--output", str(tmp_path / "out"))
        assert done.returncode == 2
        assert message in done.stderr and "Traceback" not in done.stderr
        assert not (tmp_path / "out").exists()


class TestReading:
    @pytest.mark.parametrize(
        ("value", "text"),
        [(0, "±0 B"), (512, "+512 B"), (-232 * 1024, "−232 KiB"), (1536, "+1.5 KiB")],
    )
    def test_signed_bytes(self, value: float, text: str) -> None:
        """A change in size reads with one sign, never "+-"."""
        assert signed_bytes(value) == text

    @pytest.mark.parametrize(
        ("value", "text"),
        [(0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (14_336, "14 KiB"), (3 << 30, "3 GiB")],
    )
    def test_human_bytes(self, value: float, text: str) -> None:
        """Byte counts read in binary units with three significant digits."""
        assert human_bytes(value) == text

    def test_busy_machine(self) -> None:
        """Busy means a 1-minute load above 0.75 runnable processes per CPU."""
        assert busy([1.6, 0.0, 0.0], 2) and not busy([1.4, 9.0, 9.0], 2)
        assert not busy(None, 2) and not busy([5.0, 5.0, 5.0], None)

    @pytest.mark.parametrize(
        ("passed", "absolute", "is_busy", "status"),
        [
            (True, True, True, "PASS"),
            (False, False, True, "FALLS SHORT"),
            (False, True, False, "FALLS SHORT"),
            (False, True, True, "NOT JUDGED (busy machine)"),
            (None, True, True, "NOT MEASURED"),
        ],
    )
    def test_target_status(self, passed, absolute, is_busy, status) -> None:
        """Only an absolute time that misses on a busy machine is left unjudged."""
        target = Target("a promise", "≤ 1", "2", passed, absolute=absolute, busy=is_busy)
        assert target.status == status

    def test_a_measured_figure_that_is_not_judged_says_why(self) -> None:
        """A figure measured but not judged (a quick run, an extrapolated baseline) reads
        NOT JUDGED with its reason, never NOT MEASURED."""
        target = Target("a promise", "≥ 50×", "249× at 1,000 × 10", None, unjudged="quick run")
        assert target.status == "NOT JUDGED (quick run)"
        assert target.to_json()["status"] == "NOT JUDGED (quick run)"

    def test_import_ratio_never_reads_as_zero(self) -> None:
        """import cowconv against pydantic reads as a fraction with both times, not 0.00×."""
        from benchmarks.scenarios.import_time import ImportTime

        sample = {"median": 0.0007, "min": 0.0006, "max": 0.001}
        data = {
            "seconds": sample,
            "pydantic": {"median": 0.0484, "min": 0.043, "max": 0.057},
            "core": {"median": 0.1, "min": 0.09, "max": 0.11},
            "heavy_modules": [],
            "core_heavy_modules": [],
        }
        measured = {t.promise: t.measured for t in ImportTime().targets(data)}
        text = measured[
            "import cowconv against `from pydantic import BaseModel`, side by side (medians)"
        ]
        assert text == "1/69× (700 µs against 48.4 ms)"


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
