"""The pytest-benchmark door onto the evaluator: every contestant on every benchmark case of a
shape set, timed by the evaluator and recorded by pytest-benchmark.

    python -m pytest benchmarks --benchmark-only [--qrbench-shapes smoke|qr_v2|FILE]
        [--qrbench-contestants geqrf,path/to/kernel.py] [--qrbench-device auto|cpu|cuda]
        [--benchmark-json FILE | --benchmark-save NAME | --benchmark-compare [NUM]] ...

Each test times its case with :func:`evaluator.runner.run_stage` in a fresh worker (the hardened
protocol: L2 flushed, CUDA events on a GPU or the host clock on the CPU, every timed repeat's
output checked), fails when the evaluator's verdict is not a pass, and otherwise replays the
evaluator's raw per-repeat times into the ``benchmark`` fixture (:class:`ReplayClock`). So
pytest-benchmark's statistics, storage and ``--benchmark-compare(-fail)`` work on the
evaluator's figures, and pytest-benchmark's own timing loop never runs a kernel.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from evaluator.contestant import Contestant, ContestantError, discover_contestants, resolve_contestant
from evaluator.environment import fingerprint, gpu_key
from evaluator.results import CaseResult
from evaluator.runner import RunOptions, StagePlan, run_stage
from evaluator.shapes import Case, ShapeFileError, ShapeSet, load_shapes, resolve_shapes

# Fingerprint fields left out of pytest-benchmark's machine_info: it warns on any difference
# from a saved run, and these differ between any two runs (the commit is in commit_info).
_PER_RUN_FIELDS = ("git_commit", "git_dirty", "sm_clock_mhz", "mem_clock_mhz")


class ReplayClock:
    """A pytest-benchmark timer that replays durations measured elsewhere.

    pytest-benchmark times a pedantic round as ``timer()`` before and after its target. Here
    each round's setup sets the clock to zero and the target sets it to the next recorded
    duration, so every round records exactly that duration (in seconds, as pytest-benchmark
    keeps times).
    """

    def __init__(self) -> None:
        self._now_s = 0.0
        self._pending: deque[float] = deque()

    def __call__(self) -> float:
        return self._now_s

    def __repr__(self) -> str:  # how pytest-benchmark names the timer in its JSON
        return "qrbench evaluator samples"

    def replay(self, benchmark: Any, samples_ns: tuple[float, ...]) -> None:
        """Record ``samples_ns`` as the rounds of ``benchmark`` (a pedantic run, one call a round)."""
        self._pending = deque(ns / 1e9 for ns in samples_ns)
        benchmark.pedantic(self._next, setup=self._restart, rounds=len(samples_ns))

    def _restart(self) -> None:
        self._now_s = 0.0

    def _next(self) -> None:
        self._now_s = self._pending.popleft()


REPLAY = ReplayClock()


@dataclass(frozen=True)
class Plan:
    """What this session benchmarks: contestants by name, cases by test id, and how to run them."""

    shapes: ShapeSet
    contestants: dict[str, Contestant]
    cases: dict[str, Case]
    options: RunOptions

    def time(self, contestant: str, case_id: str, folder: Path) -> CaseResult:
        """Time one case through the evaluator in a fresh worker, on a one-case shape file
        written into ``folder`` (the worker reads its cases from a file)."""
        case = self.cases[case_id]
        path = folder / f"{case_id}.yaml"
        path.write_text(yaml.safe_dump({
            "name": self.shapes.name,
            "timeouts_s": self.shapes.timeouts_s,
            "timing": asdict(self.shapes.timing),
            "tests": [case.fields()],
            "benchmarks": [case.fields()],
        }, sort_keys=False))
        stage, _ = run_stage(self.contestants[contestant], StagePlan("benchmark", "benchmark", None),
                             load_shapes(path), self.options)
        return stage.cases[0]

    def record(self, benchmark: Any, result: CaseResult) -> None:
        """Hand a passed case's samples to pytest-benchmark, with what it was (``extra_info``)."""
        benchmark.extra_info.update(
            shapes=self.shapes.name,
            spec=result.case.fields(),
            flops=result.case.flops,
            min_bytes=result.case.min_bytes,
            timer="cuda-events" if self.options.device == "cuda" else "cpu-clock",
            protocol="hardened",
            residuals=result.diagnostics,
        )
        REPLAY.replay(benchmark, result.samples_ns)


_PLAN = pytest.StashKey[Plan]()
_MACHINE = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qrbench", "qrbench contestants under pytest-benchmark")
    group.addoption("--qrbench-shapes", metavar="NAME|FILE",
                    help="bundled shape set or shape file (default: qr_v2 on CUDA, smoke on the CPU)")
    group.addoption("--qrbench-contestants", metavar="A,B,...",
                    help="comma-separated contestants: names under contestants/, folders or .py files "
                         "(default: all of contestants/)")
    group.addoption("--qrbench-device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="where kernels run (default: auto = CUDA when present)")


def _device(choice: str) -> str:
    if choice == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--qrbench-device cuda: no CUDA device is available here")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return choice


def _case_ids(shapes: ShapeSet) -> dict[str, Case]:
    """Test ids from case labels (``8x48-mixed``), stable when cases are added elsewhere in the
    file, which keeps ``--benchmark-compare`` matching; repeated labels get their position."""
    labels = [c.label.replace(" ", "-") for c in shapes.benchmarks]
    return {(label if labels.count(label) == 1 else f"{label}-{i}"): case
            for i, (label, case) in enumerate(zip(labels, shapes.benchmarks, strict=True))}


def _plan(config: pytest.Config) -> Plan:
    if _PLAN not in config.stash:
        device = _device(config.getoption("qrbench_device"))
        refs = [r.strip() for r in (config.getoption("qrbench_contestants") or "").split(",") if r.strip()]
        try:
            shapes = resolve_shapes(config.getoption("qrbench_shapes") or ("qr_v2" if device == "cuda" else "smoke"))
            contestants = [resolve_contestant(r) for r in refs] if refs else discover_contestants()
        except (ShapeFileError, ContestantError) as exc:
            raise pytest.UsageError(str(exc)) from exc
        config.stash[_PLAN] = Plan(shapes, {c.name: c for c in contestants}, _case_ids(shapes),
                                   RunOptions(device=device))
    return config.stash[_PLAN]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per contestant and case, grouped by case so the tables set contestants side by side."""
    if not {"contestant", "case"} <= set(metafunc.fixturenames):
        return
    plan = _plan(metafunc.config)
    metafunc.parametrize(("contestant", "case"), [
        pytest.param(name, case_id, id=f"{name}-{case_id}",
                     marks=pytest.mark.benchmark(group=f"{plan.shapes.name} {case_id}", timer=REPLAY))
        for name in plan.contestants for case_id in plan.cases
    ])


@pytest.fixture(scope="session")
def qrbench(request: pytest.FixtureRequest) -> Plan:
    return _plan(request.config)


def _machine(config: pytest.Config) -> dict[str, Any]:
    if _MACHINE not in config.stash:
        env = fingerprint(_plan(config).options.device)
        stable = {key: value for key, value in env.items() if key not in _PER_RUN_FIELDS}
        config.stash[_MACHINE] = {"gpu_key": gpu_key(env), **stable}
    return config.stash[_MACHINE]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """The evaluator's device fingerprint (GPU, SMs, driver, versions) under ``qrbench``."""
    machine_info["qrbench"] = _machine(config)


def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any,
                                          machine_info: dict[str, Any], compared_benchmark: dict[str, Any]) -> None:
    """Say loudly when a saved run came from another GPU (pytest-benchmark only warns that
    something in machine_info differs)."""
    ours = machine_info.get("qrbench", {}).get("gpu_key")
    theirs = compared_benchmark.get("machine_info", {}).get("qrbench", {}).get("gpu_key")
    if ours != theirs:
        benchmarksession.logger.error(
            f"WARNING: comparing with results from a different device: {theirs or 'unknown'} (saved) vs {ours} "
            "(now); the differences measure the devices as much as the kernels"
        )
