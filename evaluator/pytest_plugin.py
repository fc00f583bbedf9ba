"""qrbench's pytest plugin: kernels through the evaluator, recorded by pytest-benchmark.

pytest loads it wherever qrbench is installed (the ``pytest11`` entry point; the root
``conftest.py`` loads it in a plain checkout). A test that asks for the ``qrbench``,
``contestant`` and ``case`` fixtures is run once per contestant and benchmark case::

    def test_kernel(benchmark, qrbench, contestant, case):
        qrbench.benchmark(benchmark, contestant, case)

    pytest --benchmark-only [--qrbench-shapes smoke|qr_v2|FILE] [--qrbench-contestants A,B]
        [--qrbench-device auto|cpu|cuda] [--benchmark-save NAME | --benchmark-compare ...]

Contestants default to the ``qrbench_contestants`` ini option, else every contestant under
qrbench's ``contestants/``; the shape set to ``qrbench_shapes``, else ``qr_v2`` on CUDA and
``smoke`` on the CPU. Without ``--benchmark-only`` such a test is one skip, so a plain ``pytest``
stays quick and never starts the evaluator.

pytest-benchmark normally times a callable itself. Here the evaluator times (a worker per
contestant, the hardened protocol: L2 flushed, CUDA events on a GPU or the host clock on the CPU,
every timed repeat's output checked), and :class:`ReplayClock` hands the raw per-repeat times
to pytest-benchmark through its public ``pedantic`` call and ``timer`` marker option, so its
statistics, storage and ``--benchmark-compare(-fail)`` work on the evaluator's figures. Tests are
grouped by case, so pytest-benchmark's tables set the contestants side by side.

This module imports only pytest: the evaluator (torch, the runner) is imported from
:mod:`evaluator.pytest_cases` by sessions that benchmark.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from evaluator.pytest_cases import CaseTimer, Plan

__all__ = ["REPLAY", "ReplayClock"]

_PARAMS = {"qrbench", "contestant", "case"}
_PLAN = pytest.StashKey["Plan"]()
_MACHINE = pytest.StashKey[dict[str, Any]]()


class ReplayClock:
    """A pytest-benchmark timer that replays durations measured elsewhere.

    pytest-benchmark times a pedantic round as ``timer()`` before and after its target. Here
    each round's setup sets the clock to zero and the target sets it to the next recorded
    duration, so every round records exactly that duration (in seconds, as pytest-benchmark
    keeps times). Give it to the test as ``@pytest.mark.benchmark(timer=REPLAY)``.
    """

    def __init__(self) -> None:
        self._now_s = 0.0
        self._pending: deque[float] = deque()

    def __call__(self) -> float:
        return self._now_s

    def __repr__(self) -> str:  # how pytest-benchmark names the timer in its JSON
        return "qrbench evaluator samples"

    def replay(self, benchmark: Any, samples_ns: tuple[float, ...]) -> None:
        """Record ``samples_ns`` as the rounds of ``benchmark`` (one call a round)."""
        self._pending = deque(ns / 1e9 for ns in samples_ns)
        benchmark.pedantic(self._next, setup=self._restart, rounds=len(samples_ns))

    def _restart(self) -> None:
        self._now_s = 0.0

    def _next(self) -> None:
        self._now_s = self._pending.popleft()


REPLAY = ReplayClock()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qrbench", "qrbench kernels under pytest-benchmark")
    group.addoption("--qrbench-shapes", metavar="NAME|FILE",
                    help="bundled shape set or shape file (default: the qrbench_shapes ini option, else "
                         "qr_v2 on CUDA and smoke on the CPU)")
    group.addoption("--qrbench-contestants", metavar="A,B,...",
                    help="comma-separated contestants: names under qrbench's contestants/, folders or .py files "
                         "(default: the qrbench_contestants ini option, else all of contestants/)")
    group.addoption("--qrbench-device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="where kernels run (default: auto = CUDA when present)")
    parser.addini("qrbench_shapes", "qrbench shape set or file benchmarked by default")
    parser.addini("qrbench_contestants", "qrbench contestants benchmarked by default (paths or names)",
                  type="linelist")


def _benchmarking(config: pytest.Config) -> bool:
    return bool(config.getoption("benchmark_only", False))


def _plan(config: pytest.Config) -> Plan:
    if _PLAN not in config.stash:
        from evaluator.pytest_cases import make_plan

        given = config.getoption("qrbench_contestants")
        refs = [r.strip() for r in given.split(",")] if given else config.getini("qrbench_contestants")
        try:
            config.stash[_PLAN] = make_plan(config.getoption("qrbench_device"),
                                            config.getoption("qrbench_shapes") or config.getini("qrbench_shapes"),
                                            [r for r in refs if r])
        except ValueError as exc:
            raise pytest.UsageError(f"qrbench: {exc}") from exc
    return config.stash[_PLAN]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per contestant and case; a single skip unless benchmarking."""
    if not _PARAMS.issubset(metafunc.fixturenames):
        return
    if not _benchmarking(metafunc.config):
        metafunc.parametrize(("contestant", "case"), [pytest.param(
            None, None, id="qrbench", marks=pytest.mark.skip(reason="qrbench benchmarks run under --benchmark-only"))])
        return
    plan = _plan(metafunc.config)
    metafunc.parametrize(("contestant", "case"), [
        pytest.param(name, case_id, id=f"{name}-{case_id}",
                     marks=pytest.mark.benchmark(group=f"{plan.shapes.name} {case_id}", timer=REPLAY))
        for name in plan.contestants for case_id in plan.cases
    ])


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """What a benchmarking session runs, and the note for a CPU run of a shape file without
    ``timing`` (its timed passes follow the contest's GPU protocol: minutes per case)."""
    if _PLAN not in config.stash:
        return []
    plan = config.stash[_PLAN]
    note = plan.shapes.timing_note(plan.options.device)
    return [f"qrbench: shape set {plan.shapes.name} on {plan.options.device}", *([f"qrbench: {note}"] if note else [])]


@pytest.fixture(scope="session")
def qrbench(request: pytest.FixtureRequest) -> CaseTimer:
    """Times the cases this session selected (after ``-k`` and friends), a worker per contestant."""
    from evaluator.pytest_cases import CaseTimer

    selected: dict[str, list[str]] = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        # Only the tests that time through this fixture: another test's own "contestant"
        # parameter (a sweep's, say) names no case to time.
        if callspec is None or "qrbench" not in getattr(item, "fixturenames", ()):
            continue
        params = callspec.params
        if params.get("contestant") is not None and "case" in params:
            selected.setdefault(params["contestant"], []).append(params["case"])
    return CaseTimer(_plan(request.config), selected)


def _machine(config: pytest.Config) -> dict[str, Any]:
    if _MACHINE not in config.stash:
        from evaluator.pytest_cases import device_info

        try:
            config.stash[_MACHINE] = device_info(config.getoption("qrbench_device"))
        except ValueError as exc:  # --qrbench-device cuda without a CUDA device
            pytest.exit(f"qrbench: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    return config.stash[_MACHINE]


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """The evaluator's device fingerprint (GPU, SMs, driver, versions) under ``qrbench``, in
    ``--benchmark-only`` sessions (pytest-benchmark asks before collection, to compare saved runs)."""
    if _benchmarking(config):
        machine_info["qrbench"] = _machine(config)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any,
                                          machine_info: dict[str, Any], compared_benchmark: dict[str, Any]) -> None:
    """Say loudly when a saved run came from another device (pytest-benchmark only warns that
    something in machine_info differs)."""
    if "qrbench" not in machine_info:
        return
    ours = machine_info["qrbench"].get("gpu_key")
    theirs = compared_benchmark.get("machine_info", {}).get("qrbench", {}).get("gpu_key")
    if ours != theirs:
        benchmarksession.logger.error(
            f"WARNING: comparing with results from a different device: {theirs or 'unknown'} (saved) vs {ours} "
            "(now); the differences measure the devices as much as the kernels"
        )
