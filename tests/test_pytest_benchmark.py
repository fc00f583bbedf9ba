"""The pytest plugin: replayed samples become pytest-benchmark's rounds exactly; plain ``pytest``
skips the contestant benchmarks without starting the evaluator and ``pytest --benchmark-only``
from the root runs them; a kernel author's own project gets the options and fixtures through
the installed entry point; and ``pytest benchmarks --benchmark-only`` on a tiny shape set records
per-case statistics of correct contestants, fails a wrong one, carries the device fingerprint,
and lets ``--benchmark-compare-fail`` catch a slowed kernel."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from evaluator.shapes import load_shapes
from tests.conftest import REPO

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).parent / "contestants"
TINY = Path(__file__).parent / "shapes_tiny.yaml"
CASE_IDS = ("2x8", "2x16-rankdef")
# What a kernel author's project gets only from an installed qrbench (``pip install -e .``, as the
# README's first command does); a plain checkout, as a GPU box without pip may run, has no entry point.
needs_entry_point = pytest.mark.skipif(
    not any(ep.value == "evaluator.pytest_plugin" for ep in entry_points(group="pytest11")),
    reason="qrbench is not installed: its pytest11 entry point is what this tests (pip install -e .)",
)


@pytest.fixture(autouse=True)
def _a_session_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sessions these tests start are not xdist workers, even when this one is (``pytest -n``):
    pytest-benchmark reads PYTEST_XDIST_WORKER from the environment and turns itself off there."""
    for name in [name for name in os.environ if name.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)


def test_replayed_samples_are_the_rounds_exactly(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_replay="""
        import pytest
        from evaluator.pytest_plugin import REPLAY

        @pytest.mark.benchmark(timer=REPLAY)
        def test_replay(benchmark):
            REPLAY.replay(benchmark, (1500.0, 2500.5, 1000.25, 1e9 / 3))
    """)
    pytester.runpytest("--benchmark-json=out.json", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    (bench,) = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    assert bench["stats"]["data"] == [1500.0 / 1e9, 2500.5 / 1e9, 1000.25 / 1e9, 1 / 3]
    assert bench["stats"]["rounds"] == 4
    assert bench["options"]["timer"] == "qrbench evaluator samples"


def _pytest_at_root(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_plain_pytest_skips_the_contestant_benchmarks_in_one_item() -> None:
    proc = _pytest_at_root("-q", "-rs", "benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout
    assert "qrbench benchmarks run under --benchmark-only" in proc.stdout


def test_benchmark_only_at_the_root_collects_the_contestants() -> None:
    proc = _pytest_at_root("--collect-only", "-q", "--benchmark-only", "--qrbench-shapes", str(TINY),
                           "--qrbench-contestants", "geqrf,blocked_wy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = {line for line in proc.stdout.splitlines() if line.startswith("benchmarks/")}
    assert listed == {f"benchmarks/test_contestants.py::test_contestant[{name}-{case_id}]"
                      for name in ("geqrf", "blocked_wy") for case_id in CASE_IDS}


def test_a_cpu_session_on_a_shape_file_without_timing_gets_the_note(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text("\n".join(line for line in TINY.read_text().splitlines()
                                if not line.startswith(("timing:", "  "))))
    args = ("--collect-only", "-q", "--benchmark-only", "benchmarks", "--qrbench-device", "cpu",
            "--qrbench-contestants", "geqrf")
    proc = _pytest_at_root(*args, "--qrbench-shapes", str(plain))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"qrbench: note: {plain} has no timing section" in proc.stdout
    proc = _pytest_at_root(*args, "--qrbench-shapes", str(TINY))
    assert "qrbench: shape set tiny on cpu" in proc.stdout
    assert "no timing section" not in proc.stdout


def test_a_bad_contestant_stops_the_session_with_its_reason() -> None:
    proc = _pytest_at_root("--collect-only", "-q", "--benchmark-only", "benchmarks",
                           "--qrbench-contestants", "no_such_kernel")
    assert proc.returncode == pytest.ExitCode.INTERRUPTED
    assert "qrbench: no_such_kernel: no such contestant" in proc.stdout + proc.stderr


@pytest.mark.slow
@needs_entry_point
def test_an_authors_project_benchmarks_its_kernel_through_the_entry_point(pytester: pytest.Pytester) -> None:
    """Outside this repository (no conftest): the installed plugin alone, the ini options as an
    author would set them."""
    (pytester.path / "kernel.py").write_text((FIXTURES / "slowed.py").read_text())
    pytester.makeini(f"[pytest]\nqrbench_contestants = kernel.py\nqrbench_shapes = {TINY}\n")
    pytester.makepyfile(test_kernel="""
        def test_kernel(benchmark, qrbench, contestant, case):
            qrbench.benchmark(benchmark, contestant, case)
    """)
    result = pytester.runpytest_subprocess("--benchmark-only", "--qrbench-device", "cpu",
                                           "--benchmark-json", "out.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    doc = json.loads((pytester.path / "out.json").read_text())
    assert {b["name"] for b in doc["benchmarks"]} == {f"test_kernel[kernel-{case_id}]" for case_id in CASE_IDS}
    assert doc["machine_info"]["qrbench"]["device"] == "cpu"


@pytest.mark.slow
@needs_entry_point
def test_a_test_with_a_contestant_parameter_of_its_own_leaves_the_timing_alone(pytester: pytest.Pytester) -> None:
    """``pytest --benchmark-only`` at this repository's root collects tests/ too, where a sweep's
    test has a ``contestant`` parameter and no case: the session's timing must not read it as one."""
    (pytester.path / "kernel.py").write_text((FIXTURES / "slowed.py").read_text())
    pytester.makeini(f"[pytest]\nqrbench_contestants = kernel.py\nqrbench_shapes = {TINY}\n")
    pytester.makepyfile(test_kernel="""
        import pytest

        @pytest.mark.parametrize("contestant", ["another_kernel"])
        def test_other(contestant):
            assert contestant

        def test_kernel(benchmark, qrbench, contestant, case):
            qrbench.benchmark(benchmark, contestant, case)
    """)
    result = pytester.runpytest_subprocess("--benchmark-only", "--qrbench-device", "cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=1)


def _bench(tmp_path: Path, contestants: list[str], *args: str, slowed_ms: int = 0) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "benchmarks", "--benchmark-only", "-p", "no:cacheprovider",
               "--qrbench-shapes", str(TINY), "--qrbench-device", "cpu", "--qrbench-contestants", ",".join(contestants),
               "--benchmark-storage", f"file://{tmp_path / 'storage'}", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "QRBENCH_SLOWED_MS": str(slowed_ms)})


@pytest.mark.slow
def test_benchmark_run_records_the_evaluator_statistics_and_fails_a_wrong_kernel(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    slowed = str(FIXTURES / "slowed.py")
    proc = _bench(tmp_path, ["geqrf", slowed, str(FIXTURES / "zeros.py")], "--benchmark-json", str(out),
                  "--benchmark-save", "base")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 failed, 4 passed" in proc.stdout
    assert "zeros on 2x8: fail: R - Q.T @ A is too large" in proc.stdout

    doc = json.loads(out.read_text())
    assert doc["machine_info"]["qrbench"]["device"] == "cpu"
    assert doc["machine_info"]["qrbench"]["gpu_key"].startswith("CPU: ")
    benches = {(b["params"]["contestant"], b["params"]["case"]): b for b in doc["benchmarks"]}
    assert set(benches) == {(name, case) for name in ("geqrf", "slowed") for case in CASE_IDS}
    specs = {case_id: case.fields() for case_id, case in zip(CASE_IDS, load_shapes(TINY).benchmarks, strict=True)}
    for (_, case_id), bench in benches.items():
        stats = bench["stats"]
        assert stats["rounds"] == len(stats["data"]) >= 3  # the contest's stopping rule: three at least
        assert stats["mean"] == pytest.approx(statistics.mean(stats["data"]))
        assert 0 < stats["min"] < 0.1  # seconds per call of a 2x8 or 2x16 QR on the host clock
        assert bench["group"] == f"tiny {case_id}"
        assert bench["extra_info"]["spec"] == specs[case_id]
        assert bench["extra_info"]["timer"] == "cpu-clock"
        assert isinstance(bench["extra_info"]["retimed"], str)  # '' unless a first attempt was set aside
        assert bench["options"]["timer"] == "qrbench evaluator samples"

    proc = _bench(tmp_path, [slowed], "-k", "2x8", "--benchmark-compare=0001", "--benchmark-compare-fail=mean:100%",
                  slowed_ms=20)
    assert proc.returncode != 0
    assert "1 deselected / 1 selected" in proc.stdout
    assert "Performance has regressed" in proc.stdout + proc.stderr
