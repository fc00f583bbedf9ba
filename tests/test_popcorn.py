"""The contest-protocol drop-in: key names, values and exit codes of the contest's eval.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator.popcorn import SpecError, parse_spec_lines
from tests.conftest import REPO

FIXTURES = Path(__file__).parent / "contestants"
SPECS = "batch: 2; n: 8; cond: 1; seed: 5\nbatch: 3; n: 16; cond: 0; seed: 7; case: mixed\n"


def _popcorn(folder: Path, *args: str, fd: bool = True, seed: str | None = None) -> tuple[int, str, str]:
    """Run the drop-in as the contest's runner would: in the submission's folder, lines on a pipe."""
    env = {k: v for k, v in os.environ.items() if k not in ("POPCORN_FD", "POPCORN_SEED")}
    env["PYTHONPATH"] = str(REPO)
    env["CUDA_VISIBLE_DEVICES"] = ""
    read_fd, write_fd = os.pipe()
    if fd:
        env["POPCORN_FD"] = str(write_fd)
    if seed is not None:
        env["POPCORN_SEED"] = seed
    proc = subprocess.Popen([sys.executable, "-m", "evaluator.popcorn", *args], cwd=folder, env=env,
                            pass_fds=(write_fd,), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(write_fd)
    with os.fdopen(read_fd) as lines:
        out = lines.read()
    _, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


@pytest.fixture
def submission(tmp_path: Path):
    def make(source: Path) -> Path:
        shutil.copy(source, tmp_path / "submission.py")
        (tmp_path / "specs.txt").write_text(SPECS)
        return tmp_path

    return make


def _keys(out: str) -> list[str]:
    return [line.split(": ", 1)[0] for line in out.splitlines()]


def test_test_mode_lines(submission) -> None:
    folder = submission(REPO / "contestants" / "geqrf" / "submission.py")
    code, out, _ = _popcorn(folder, "test", "specs.txt")
    assert code == 0
    assert _keys(out) == ["test-count", "test.0.spec", "test.0.status", "test.0.message",
                          "test.1.spec", "test.1.status", "test.1.message", "check"]
    assert "test.0.spec: batch: 2; n: 8; cond: 1; seed: 5" in out.splitlines()
    assert out.splitlines()[-1] == "check: pass"


def test_benchmark_mode_lines(submission) -> None:
    folder = submission(REPO / "contestants" / "geqrf" / "submission.py")
    code, out, _ = _popcorn(folder, "benchmark", "specs.txt", seed="1234")
    assert code == 0
    stats = ["runs", "mean", "std", "err", "best", "worst"]
    assert _keys(out) == ["benchmark-count", "benchmark.0.spec", *[f"benchmark.0.{s}" for s in stats],
                          "benchmark.1.spec", *[f"benchmark.1.{s}" for s in stats], "check"]
    values = dict(line.split(": ", 1) for line in out.splitlines())
    assert int(values["benchmark.0.runs"]) >= 3
    assert float(values["benchmark.0.best"]) <= float(values["benchmark.0.mean"]) <= float(values["benchmark.0.worst"])


def test_failing_kernel_reports_fail_and_exits_112(submission) -> None:
    folder = submission(FIXTURES / "zeros.py")
    code, out, _ = _popcorn(folder, "test", "specs.txt")
    assert code == 112
    assert "test.0.status: fail" in out
    assert "test.0.error: R - Q.T @ A is too large: matrix=" in out
    assert out.splitlines()[-1] == "check: fail"


def test_leaderboard_stops_at_the_first_failure(submission) -> None:
    folder = submission(FIXTURES / "zeros.py")
    code, out, _ = _popcorn(folder, "leaderboard", "specs.txt")
    assert code == 112
    assert _keys(out) == ["benchmark-count", "benchmark.0.spec", "benchmark.0.status", "benchmark.0.error", "check"]


def test_crash_is_reported_as_the_first_unfinished_case(submission) -> None:
    folder = submission(FIXTURES / "segfault.py")
    code, out, _ = _popcorn(folder, "test", "specs.txt")
    assert code == 112
    assert "test.0.status: fail" in out
    assert "SIGSEGV" in out


def test_exit_codes_for_missing_fd_bad_spec_and_usage(submission, tmp_path: Path) -> None:
    folder = submission(REPO / "contestants" / "geqrf" / "submission.py")
    assert _popcorn(folder, "test", "specs.txt", fd=False)[0] == 111
    assert _popcorn(folder, "test")[0] == 2
    assert _popcorn(folder, "nonsense", "specs.txt")[0] == 2
    (folder / "bad.txt").write_text("batch: 2; n: eight point five\n")
    code, _, err = _popcorn(folder, "test", "bad.txt")
    assert code == 113
    assert "invalid test case" in err
    assert _popcorn(folder, "test", "missing.txt")[0] == 113


def test_spec_parsing_follows_the_contest() -> None:
    assert parse_spec_lines("batch: 2; n: -3; case: dense") == [
        ("batch: 2; n: -3; case: dense", {"batch": 2, "n": -3, "case": "dense"})]
    with pytest.raises(SpecError, match="invalid test case"):
        parse_spec_lines("batch 2")
