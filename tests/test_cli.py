"""The qrbench command line on the CPU: verdicts, exit codes, results files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator.cli import main
from tests.conftest import REPO

FIXTURES = Path(__file__).parent / "contestants"
TINY = str(Path(__file__).parent / "shapes_tiny.yaml")


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
def test_geqrf_passes_the_smoke_tests(capsys, tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    code, out, _ = _run(capsys, "test", "contestants/geqrf", "--shapes", "smoke", "--device", "cpu",
                        "--json", str(out_json))
    assert code == 0, out
    assert "geqrf — test on smoke: passed" in out
    run = json.loads(out_json.read_text())["runs"][0]
    assert run["status"] == "pass"
    assert run["timer"] == "cpu-clock"
    assert len(run["stages"][0]["cases"]) == 12
    assert run["environment"]["torch"]


def test_zeros_fails_with_112_and_the_contest_message(capsys, tmp_path: Path) -> None:
    code, out, _ = _run(capsys, "test", str(FIXTURES / "zeros.py"), "--shapes", TINY, "--device", "cpu",
                        "--json", str(tmp_path / "r.json"))
    assert code == 112
    assert "R - Q.T @ A is too large: matrix=" in out


def test_contest_format_submission_passes(capsys, tmp_path: Path) -> None:
    code, out, _ = _run(capsys, "test", str(FIXTURES / "contest_format"), "--shapes", TINY, "--device", "cpu",
                        "--json", str(tmp_path / "r.json"))
    assert code == 0, out


def test_benchmark_mode_labels_cpu_timings(capsys, tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    code, out, _ = _run(capsys, "benchmark", "geqrf", "--shapes", TINY, "--device", "cpu", "--json", str(out_json))
    assert code == 0, out
    assert "CPU timings" in out
    run = json.loads(out_json.read_text())["runs"][0]
    case = run["stages"][0]["cases"][0]
    assert case["stats"]["runs"] >= 3
    assert len(case["samples_ns"]) == case["stats"]["runs"]
    assert case["seeds"] == [3 + 42, 3 + 84]  # the contest's seed bumps
    assert run["score_s"] > 0


def test_bad_shape_file_exits_113(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntests:\n- {batch: 1, n: -3, cond: 0, seed: 1}\nbenchmarks: []\n")
    code, _, err = _run(capsys, "test", "geqrf", "--shapes", str(bad), "--device", "cpu")
    assert code == 113
    assert f"{bad}: tests[0]: n must be positive" in err


def test_unknown_contestant_exits_2(capsys) -> None:
    code, _, err = _run(capsys, "test", "nobody_by_this_name", "--device", "cpu")
    assert code == 2
    assert "nobody_by_this_name: no such contestant" in err


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_help_runs_without_an_install() -> None:
    proc = subprocess.run([sys.executable, "-m", "evaluator", "--help"], cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0
    for command in ("test", "benchmark", "leaderboard", "profile", "rank", "sweep"):
        assert command in proc.stdout
