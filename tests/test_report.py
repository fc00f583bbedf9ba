"""Reports: noise verdicts on made-up samples, pairing with baselines, the Markdown and plots
from synthetic and golden (H200) results, the report command, and the CI regression script."""

from __future__ import annotations

import re
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

import benchmarks.ci_report as ci_report
from evaluator.cli import main
from evaluator.contestant import resolve_contestant
from evaluator.measure.stats import Stats
from evaluator.report.compare import FASTER, SAME, SLOWER, NoiseRule, build_report
from evaluator.report.markdown import render_markdown, write_report
from evaluator.report.units import format_interval, format_ratio
from evaluator.results import CaseResult, RunResult, StageResult, write_results
from evaluator.shapes import Case, Timing
from tests.conftest import REPO

FIXTURES = Path(__file__).parent / "contestants"
TINY = str(Path(__file__).parent / "shapes_tiny.yaml")
H200_RESULTS = sorted((REPO / "reports" / "h200").glob("*-geqrf-benchmark-*.json.gz"))
CPU = {"device": "cpu", "cpu": "Test CPU", "torch": "2.13.0+cpu", "triton": "3.6.0", "python": "3.11.7"}
H200 = {"device": "cuda", "gpu_name": "NVIDIA H200", "compute_capability": "9.0", "driver_version": "580.159.04",
        "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "torch": "2.11.0+cu130", "cuda": "13.0", "triton": "3.6.0",
        "python": "3.12.3", "git_commit": "0123456789abcdef", "git_dirty": False}
H100 = {**H200, "gpu_name": "NVIDIA H100 80GB HBM3"}
PNG = b"\x89PNG\r\n\x1a\n"


def _samples(mean_ns: float, seed: int, count: int = 30, noise: float = 0.01) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(mean_ns * (1 + noise * rng.standard_normal(count)))


def _case(index: int, samples: list[float] | None, message: str = "") -> CaseResult:
    case = Case(4, 16 * (index + 1), 1, 100 + index)
    if samples is None:
        return CaseResult(index, case, "fail", message)
    return CaseResult(index, case, "pass", stats=Stats.from_samples(samples), samples_ns=tuple(samples),
                      diagnostics={"scaled_factor_residual": 0.1, "scaled_orthogonality_residual": 0.5})


def _run(name: str, cases: list[list[float] | None], env: dict | None = None, message: str = "",
         started_at: str = "2026-11-29T10:00:00+00:00", mode: str = "benchmark",
         timing: dict | None = None) -> RunResult:
    results = tuple(_case(i, s, message) for i, s in enumerate(cases))
    stage = StageResult("ranked" if mode == "leaderboard" else mode, mode,
                        "pass" if all(c.passed for c in results) else "fail", results)
    env = env or CPU
    return RunResult({"name": name, "path": f"/x/{name}.py", "sha256": "0" * 64}, mode,
                     {"name": "tiny", "path": TINY, "timing": timing or asdict(Timing())}, env["device"],
                     "cuda-events" if env["device"] == "cuda" else "cpu-clock", False, (stage,), env,
                     started_at=started_at)


def _geqrf(seed: int = 1, env: dict | None = None, **kw) -> RunResult:
    return _run("geqrf", [_samples(1e5, seed), _samples(4e5, seed + 100)], env, **kw)


def _slowed(factor: float = 1.5, seed: int = 7, **kw) -> RunResult:
    return _run("slowed", [_samples(factor * 1e5, seed), _samples(factor * 4e5, seed + 100)], **kw)


# Verdicts on made-up samples -------------------------------------------------------------------

@pytest.mark.parametrize(("factor", "verdict"), [(1.5, SLOWER), (1 / 1.5, FASTER), (1.0, SAME)])
def test_verdicts_on_clear_differences(factor: float, verdict: str) -> None:
    comparison = NoiseRule().compare(_samples(1e6, 1), _samples(factor * 1e6, 2))
    assert comparison.verdict == verdict
    assert comparison.speedup == pytest.approx(1 / factor, rel=0.02)
    assert comparison.low <= comparison.speedup <= comparison.high


def test_a_significant_change_below_the_minimum_is_same() -> None:
    base, cand = _samples(1e6, 1, 100, noise=0.001), _samples(1.02e6, 2, 100, noise=0.001)
    assert NoiseRule().compare(base, cand).verdict == SAME
    comparison = NoiseRule(min_change=0.01).compare(base, cand)
    assert comparison.verdict == SLOWER
    assert comparison.high < 1


def test_a_large_change_hidden_in_noise_is_same() -> None:
    comparison = NoiseRule().compare([1e6, 1e6, 1e6, 1e7], [2e6, 2e6, 2e6, 2e6])
    assert comparison.speedup > 1.5
    assert comparison.low < 1 < comparison.high
    assert comparison.verdict == SAME


def test_one_sample_gives_no_interval_and_no_verdict() -> None:
    comparison = NoiseRule().compare([1e6], [3e6])
    assert (comparison.low, comparison.high, comparison.verdict) == (None, None, SAME)


@pytest.mark.parametrize("settings", [{"min_change": -0.1}, {"confidence": 1.0}, {"resamples": 10}])
def test_rule_rejects_bad_settings(settings: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(settings))):
        NoiseRule(**settings)


# Pairing runs and the Markdown -----------------------------------------------------------------

def test_slowed_contestant_is_slower_than_the_baseline_contestant() -> None:
    report = build_report([_geqrf(), _slowed()], baseline="geqrf")
    geqrf, slowed = report.entries
    assert geqrf.baseline is None  # a run is not its own baseline
    assert slowed.baseline is geqrf.run
    assert slowed.count(SLOWER) == 2
    assert slowed.speedup == pytest.approx(1 / 1.5, rel=0.02)
    text = render_markdown(report)
    assert "| slowed" in text
    assert "0 / 2 / 0" in text  # faster / slower / same
    assert "| 1.50× slower " in text  # the summary's speedup, as people say it
    assert "not that there is none" in text  # says "same" may hide a difference


def test_same_contestant_twice_is_same_against_a_baseline_file() -> None:
    earlier, later = _geqrf(seed=1), _geqrf(seed=2, started_at="2026-11-30T10:00:00+00:00")
    report = build_report([later], baseline=[earlier])
    (entry,) = report.entries
    assert entry.baseline is earlier
    assert [c.comparison.verdict for c in entry.cases] == [SAME, SAME]
    assert entry.speedup == pytest.approx(1.0, rel=0.02)


def test_latest_run_of_a_contestant_is_reported_and_all_go_into_the_history_in_time_order() -> None:
    old, new = _geqrf(seed=1), _geqrf(seed=2, started_at="2026-11-30T10:00:00+00:00")
    report = build_report([new, old])
    assert [e.run for e in report.entries] == [new]
    assert report.history == (old, new)


def test_wrong_contestant_fails_in_the_report() -> None:
    message = "R - Q.T @ A is too large: matrix=0 rel=1 tol=1e-05"
    wrong = _run("zeros", [None, None], message=message)
    report = build_report([_geqrf(), wrong], baseline="geqrf")
    text = render_markdown(report)
    assert "| zeros" in text
    assert "**fail**" in text
    assert message in text.split("## Correctness")[1]
    assert report.entries[1].count(SLOWER) == report.entries[1].count(SAME) == 0


def test_a_case_timed_again_is_named_in_the_report() -> None:
    first = "[rule parent-clock] in 2 of 3 repeats the worker reported less than the parent saw: e.g. ..."
    run = _geqrf()
    stage = run.stages[0]
    run = replace(run, stages=(replace(stage, cases=(replace(stage.cases[0], retimed=first), *stage.cases[1:])),))
    correctness = render_markdown(build_report([run])).split("## Correctness")[1].split("\n## ")[0]
    assert "Every reported contestant passed every check" in correctness
    assert "Timed again" in correctness
    row = next(line for line in correctness.splitlines() if first in line)
    assert "geqrf" in row
    assert f" {stage.name} " in row
    assert f" {stage.cases[0].case.label} " in row
    assert "Timed again" not in render_markdown(build_report([_geqrf()]))

    unscored = replace(stage, name="ranked-secret", cases=(replace(stage.cases[1], retimed=first),))
    text = render_markdown(build_report([replace(run, stages=(*run.stages, unscored))]))
    assert any(" ranked-secret " in line and first in line for line in text.splitlines())  # any stage's


def test_unknown_baseline_name_is_refused() -> None:
    with pytest.raises(ValueError, match="baseline 'nosuch' is not among the reported contestants"):
        build_report([_geqrf()], baseline="nosuch")


def test_different_gpus_warn_in_the_report() -> None:
    report = build_report([_geqrf(env=H200), _slowed()], baseline="geqrf")
    assert report.warning is not None
    assert "NVIDIA H200 (sm 9.0)" in report.warning
    assert "CPU: Test CPU" in report.warning
    assert "> **WARNING: these results come from different devices" in render_markdown(report)
    assert build_report([_geqrf(), _slowed()], baseline="geqrf").warning is None


def test_markdown_carries_the_environment() -> None:
    text = render_markdown(build_report([_geqrf(env=H200), _slowed()]))
    environment = text.split("## Environment")[1]
    for expected in ("NVIDIA H200 (sm 9.0), CUDA events, hardened protocol", "580.159.04", "2.11.0+cu130",
                     "1980/1980 MHz", "0123456789", "2026-11-29T10:00:00", "CPU: Test CPU, CPU timings (host clock)"):
        assert expected in environment


def test_write_report_draws_the_plots(tmp_path: Path) -> None:
    history = [_geqrf(seed=1), _slowed(), _geqrf(seed=2, started_at="2026-11-30T10:00:00+00:00")]
    path = write_report(build_report(history, baseline="geqrf"), tmp_path)
    text = path.read_text()
    for name in ("times-tiny-benchmark.png", "speedup-tiny-benchmark.png", "history.png"):
        assert f"]({name})" in text
        assert (tmp_path / name).read_bytes().startswith(PNG)


@pytest.mark.parametrize(("speedup", "text"), [
    (41.6123, "41.6×"), (1.0, "1.00×"), (1.5, "1.50×"), (0.5, "2.00× slower"), (0.0006671, "1,499× slower"),
    (12345.6, "12,346×"), (None, "-"),
])
def test_ratios_read_as_people_say_them(speedup: float | None, text: str) -> None:
    assert format_ratio(speedup) == text


def test_interval_has_three_significant_digits() -> None:
    assert format_interval(0.0006671, 1.02345) == "[0.000667, 1.02]"


def test_runs_of_different_modes_are_not_compared() -> None:
    report = build_report([_geqrf(), _slowed(mode="leaderboard")], baseline="geqrf")
    _, slowed = report.entries
    assert slowed.baseline is None
    assert slowed.speedup is None
    assert report.notes == ("slowed (leaderboard on tiny): no baseline run of the same mode and shape set, "
                            "not compared",)
    text = render_markdown(report)
    assert re.search(r"\| slowed +\| tiny +\| leaderboard +\|", text)
    assert "## Per-case times: tiny, benchmark mode" in text
    assert "## Per-case times: tiny, leaderboard mode" in text
    assert "not compared" in text.split("## Per-case")[0]


def test_a_test_run_and_a_benchmark_run_of_one_contestant_are_both_reported() -> None:
    bench, test = _geqrf(), _geqrf(mode="test", started_at="2026-11-30T10:00:00+00:00")
    assert [e.run for e in build_report([bench, test]).entries] == [bench, test]


def test_shortened_runs_are_marked() -> None:
    short = {**asdict(Timing()), "benchmark_repeats": 100, "leaderboard_repeats": 100}
    text = render_markdown(build_report([_geqrf(), _slowed(timing=short)]))
    summary = text.split("## Per-case")[0]
    assert summary.count("†") == 2  # slowed's score and the note under the table
    assert "† shortened timed passes" in summary
    assert "†" not in render_markdown(build_report([_geqrf()]))


# The report command ------------------------------------------------------------------------------

def test_report_command_on_the_golden_h200_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert len(H200_RESULTS) >= 2
    code = main(["report", *map(str, H200_RESULTS), "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "WARNING" not in err
    text = (tmp_path / "report.md").read_text()
    assert "NVIDIA H200 (sm 9.0), CUDA events, hardened protocol" in text
    assert "116.6 ms" in text
    assert "geqrf (compat)" in text
    assert (tmp_path / "history.png").read_bytes().startswith(PNG)
    assert str(tmp_path / "report.md") in out


def test_report_command_warns_on_stderr_across_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_results(tmp_path / "h200.json", [_geqrf(env=H200)])
    write_results(tmp_path / "h100.json", [_slowed(), _geqrf(env=H100)])
    code = main(["report", str(tmp_path / "h200.json"), str(tmp_path / "h100.json"), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 0
    assert "WARNING: these results come from different devices" in err
    assert "NVIDIA H100 80GB HBM3" in err


def test_report_command_baseline_file_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_results(tmp_path / "old.json", [_geqrf(seed=1)])
    write_results(tmp_path / "new.json", [_geqrf(seed=2)])
    args = ["report", str(tmp_path / "new.json"), "--out", str(tmp_path / "r")]
    assert main([*args, "--baseline", str(tmp_path / "old.json")]) == 0
    assert "| 0 / 0 / 2" in (tmp_path / "r" / "report.md").read_text()
    assert main([*args, "--baseline", "nosuch"]) == 2
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert "baseline 'nosuch'" in err
    assert "missing.json: cannot read" in err


def test_report_command_refuses_a_baseline_over_test_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_results(tmp_path / "test.json", [_geqrf(mode="test"), _slowed(mode="test")])
    assert main(["report", str(tmp_path / "test.json"), "--baseline", "geqrf", "--out", str(tmp_path / "r")]) == 2
    assert ("--baseline geqrf: nothing to compare: every run is a test run, which times nothing"
            in capsys.readouterr().err)
    assert not (tmp_path / "r").exists()


def test_report_command_refuses_empty_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_results(tmp_path / "empty.json", [])
    assert main(["report", str(tmp_path / "empty.json"), "--out", str(tmp_path / "r")]) == 2
    assert f"no runs to report: {tmp_path / 'empty.json'} holds none" in capsys.readouterr().err


# The CI regression script ------------------------------------------------------------------------

@pytest.mark.slow
def test_ci_report_exits_112_on_a_failing_contestant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    contestants = [resolve_contestant("geqrf"), resolve_contestant(FIXTURES / "zeros.py")]
    monkeypatch.setattr(ci_report, "discover_contestants", lambda: contestants)
    code = ci_report.main(["--shapes", TINY, "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 112
    assert "correctness regression: zeros failed" in captured.err
    text = (tmp_path / "report.md").read_text()
    assert "R - Q.T @ A is too large" in text.split("## Correctness")[1]
    assert "CPU timings (host clock)" in text
    assert (tmp_path / "times-tiny-leaderboard.png").read_bytes().startswith(PNG)
    assert len(list(tmp_path.glob("*-leaderboard-tiny.json.gz"))) == 1


def test_the_report_says_where_each_stages_time_went() -> None:
    """Stages that recorded a breakdown get a row of seconds by activity; older runs none."""
    run = _geqrf()
    stage = run.stages[0]
    timed = replace(run, stages=(replace(stage, wall_s=12.0, breakdown_s={"worker_start": 3.0, "kernel": 2.0,
                                                                         "check": 6.5, "other": 0.5}),))
    text = render_markdown(build_report([timed]))
    assert "## Where the time went" in text
    row = next(line for line in text.splitlines() if line.startswith("| geqrf (benchmark)"))
    assert "6.5 s" in row
    assert "3 s" in row
    assert "## Where the time went" not in render_markdown(build_report([_geqrf()]))
