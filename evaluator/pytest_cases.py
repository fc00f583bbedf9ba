"""What the pytest plugin (:mod:`evaluator.pytest_plugin`) asks of the evaluator: which cases a
session benchmarks, timing them in workers, and the machine they ran on.

Kept apart from the plugin because it imports torch and the runner: pytest loads the plugin in
every session wherever qrbench is installed, and only sessions that benchmark need this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch

from evaluator.contestant import Contestant, ContestantError, discover_contestants, resolve_contestant
from evaluator.environment import fingerprint, gpu_key
from evaluator.modes import Mode
from evaluator.pytest_plugin import REPLAY
from evaluator.results import CaseResult
from evaluator.runner import RunOptions, StagePlan, run_stage
from evaluator.shapes import Case, ShapeFileError, ShapeSet, resolve_shapes

__all__ = ["CaseTimer", "Plan", "device_info", "make_plan"]

# Fingerprint fields left out of pytest-benchmark's machine_info: it warns on any difference
# from a saved run, and these differ between any two runs (the commit is in commit_info).
_PER_RUN_FIELDS = ("git_commit", "git_dirty", "source_sha256", "sm_clock_mhz", "mem_clock_mhz")


@dataclass(frozen=True)
class Plan:
    """What a session benchmarks: contestants by name, cases by test id, and how to run them."""

    shapes: ShapeSet
    contestants: dict[str, Contestant]
    cases: dict[str, Case]
    options: RunOptions


def _device(choice: str) -> str:
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("--qrbench-device cuda: no CUDA device is available here")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return choice


def _case_ids(shapes: ShapeSet) -> dict[str, Case]:
    """Test ids from case labels (``8x48-mixed``), which stay put when cases are added elsewhere
    in the file (so ``--benchmark-compare`` keeps matching); repeated labels get their position."""
    labels = [c.label.replace(" ", "-") for c in shapes.benchmarks]
    return {(label if labels.count(label) == 1 else f"{label}-{i}"): case
            for i, (label, case) in enumerate(zip(labels, shapes.benchmarks, strict=True))}


def make_plan(device: str, shapes: str | None, contestants: Sequence[str]) -> Plan:
    """Resolve the session's choices (device ``auto|cpu|cuda``, a shape set or file or None for
    the device's default, contestant references or none for all of ``contestants/``); raises
    ValueError with a message for the user."""
    device = _device(device)
    try:
        shape_set = resolve_shapes(shapes or ("qr_v2" if device == "cuda" else "smoke"))
        resolved = [resolve_contestant(r) for r in contestants] if contestants else discover_contestants()
    except (ShapeFileError, ContestantError) as exc:
        raise ValueError(str(exc)) from exc
    if not resolved:
        raise ValueError("no contestants: give --qrbench-contestants or the qrbench_contestants ini option")
    return Plan(shape_set, {c.name: c for c in resolved}, _case_ids(shape_set), RunOptions(device=device))


class CaseTimer:
    """Times the cases a session selected and hands out each case's result.

    A contestant's selected cases run together, the first time one of them is asked for, as one
    benchmark stage in one worker (on the session's shape set cut down to just those cases): the
    evaluator's benchmark mode exactly, warm-up on the first case included, and one worker start
    per contestant rather than per case.
    """

    def __init__(self, plan: Plan, selected: Mapping[str, Sequence[str]]) -> None:
        self.plan = plan
        self._selected = selected
        self._results: dict[tuple[str, str], CaseResult] = {}

    def result(self, contestant: str, case_id: str) -> CaseResult:
        if (contestant, case_id) not in self._results:
            self._run(contestant)
        return self._results[(contestant, case_id)]

    def _run(self, contestant: str) -> None:
        case_ids = self._selected[contestant]
        cases = tuple(self.plan.cases[c] for c in case_ids)
        shapes = replace(self.plan.shapes, tests=cases, benchmarks=cases)
        stage, _ = run_stage(self.plan.contestants[contestant], StagePlan(Mode.BENCHMARK, Mode.BENCHMARK, None),
                             shapes, self.plan.options)
        self._results.update(((contestant, c), r) for c, r in zip(case_ids, stage.cases, strict=True))

    def benchmark(self, benchmark: Any, contestant: str, case_id: str) -> CaseResult:
        """Fail the calling test unless the evaluator passed the case (every timed repeat's output
        is checked); else hand its samples to pytest-benchmark as the rounds, with what it was."""
        result = self.result(contestant, case_id)
        if not result.passed:
            pytest.fail(f"{contestant} on {case_id}: {result.status}: {result.message}", pytrace=False)
        benchmark.extra_info.update(
            shapes=self.plan.shapes.name,
            spec=result.case.fields(),
            flops=result.case.flops,
            min_bytes=result.case.min_bytes,
            timer="cuda-events" if self.plan.options.device == "cuda" else "cpu-clock",
            protocol="hardened",
            residuals=result.diagnostics,
            retimed=result.retimed,  # a first attempt rule parent-clock set aside, if any
        )
        REPLAY.replay(benchmark, result.samples_ns)
        return result


def device_info(device: str) -> dict[str, Any]:
    """The evaluator's fingerprint of ``device`` (``auto|cpu|cuda``) with its ``gpu_key``, less
    per-run readings."""
    env = fingerprint(_device(device))
    return {"gpu_key": gpu_key(env), **{k: v for k, v in env.items() if k not in _PER_RUN_FIELDS}}
