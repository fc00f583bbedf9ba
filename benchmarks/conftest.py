"""The pytest-benchmark door onto the evaluator: every contestant on every benchmark case of a
shape set, timed by the evaluator and recorded by pytest-benchmark.

    python -m pytest benchmarks --benchmark-only [--qrbench-shapes smoke|qr_v2|FILE]
        [--qrbench-contestants geqrf,path/to/kernel.py] [--qrbench-device auto|cpu|cuda]
        [--benchmark-json FILE | --benchmark-save NAME | --benchmark-compare [NUM]] ...

Each test fails when the evaluator's verdict on its case is not a pass (every timed repeat's
output is checked); otherwise its samples become the benchmark's rounds
(:mod:`evaluator.pytest_plugin`). Tests are grouped by case, so pytest-benchmark's tables set
the contestants side by side.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from evaluator.contestant import ContestantError, discover_contestants, resolve_contestant
from evaluator.pytest_plugin import REPLAY, CaseTimer, Plan, device_info
from evaluator.runner import RunOptions
from evaluator.shapes import Case, ShapeFileError, ShapeSet, resolve_shapes

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
    """Test ids from case labels (``8x48-mixed``), which stay put when cases are added elsewhere
    in the file (so ``--benchmark-compare`` keeps matching); repeated labels get their position."""
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
    if not {"contestant", "case"} <= set(metafunc.fixturenames):
        return
    plan = _plan(metafunc.config)
    metafunc.parametrize(("contestant", "case"), [
        pytest.param(name, case_id, id=f"{name}-{case_id}",
                     marks=pytest.mark.benchmark(group=f"{plan.shapes.name} {case_id}", timer=REPLAY))
        for name in plan.contestants for case_id in plan.cases
    ])


@pytest.fixture(scope="session")
def qrbench(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> CaseTimer:
    """Times the cases this session selected (after ``-k`` and friends), a worker per contestant."""
    selected: dict[str, list[str]] = {}
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "contestant" in callspec.params:
            selected.setdefault(callspec.params["contestant"], []).append(callspec.params["case"])
    return CaseTimer(_plan(request.config), selected, tmp_path_factory.mktemp("qrbench"))


def _machine(config: pytest.Config) -> dict[str, Any]:
    if _MACHINE not in config.stash:
        config.stash[_MACHINE] = device_info(_plan(config).options.device)
    return config.stash[_MACHINE]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """The evaluator's device fingerprint (GPU, SMs, driver, versions) under ``qrbench``."""
    machine_info["qrbench"] = _machine(config)


def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any,
                                          machine_info: dict[str, Any], compared_benchmark: dict[str, Any]) -> None:
    """Say loudly when a saved run came from another device (pytest-benchmark only warns that
    something in machine_info differs)."""
    ours = machine_info.get("qrbench", {}).get("gpu_key")
    theirs = compared_benchmark.get("machine_info", {}).get("qrbench", {}).get("gpu_key")
    if ours != theirs:
        benchmarksession.logger.error(
            f"WARNING: comparing with results from a different device: {theirs or 'unknown'} (saved) vs {ours} "
            "(now); the differences measure the devices as much as the kernels"
        )
