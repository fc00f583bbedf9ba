"""What the pytest-benchmark door (``benchmarks/conftest.py``) asks of the evaluator: time the
selected cases in workers, replay their samples into pytest-benchmark, describe the machine.

pytest-benchmark normally times a callable itself. Here the evaluator times (a worker per
contestant, the hardened protocol: L2 flushed, CUDA events on a GPU or the host clock on the CPU,
every timed repeat's output checked), and :class:`ReplayClock` hands the raw per-repeat times
to pytest-benchmark through its public ``pedantic`` call and ``timer`` marker option, so its
statistics, storage and ``--benchmark-compare(-fail)`` work on the evaluator's figures.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from evaluator.contestant import Contestant
from evaluator.environment import fingerprint, gpu_key
from evaluator.results import CaseResult
from evaluator.runner import RunOptions, StagePlan, run_stage
from evaluator.shapes import Case, ShapeSet, load_shapes

__all__ = ["REPLAY", "CaseTimer", "Plan", "ReplayClock", "device_info"]

# Fingerprint fields left out of pytest-benchmark's machine_info: it warns on any difference
# from a saved run, and these differ between any two runs (the commit is in commit_info).
_PER_RUN_FIELDS = ("git_commit", "git_dirty", "sm_clock_mhz", "mem_clock_mhz")


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


@dataclass(frozen=True)
class Plan:
    """What a session benchmarks: contestants by name, cases by test id, and how to run them."""

    shapes: ShapeSet
    contestants: dict[str, Contestant]
    cases: dict[str, Case]
    options: RunOptions


class CaseTimer:
    """Times the cases a session selected and hands out each case's result.

    A contestant's selected cases run together, the first time one of them is asked for, as one
    benchmark stage in one worker (on a shape file of just those cases, written into
    ``folder``): the evaluator's benchmark mode exactly, warm-up on the first case included, and
    one worker start per contestant rather than per case.
    """

    def __init__(self, plan: Plan, selected: Mapping[str, Sequence[str]], folder: Path) -> None:
        self.plan = plan
        self._selected = selected
        self._folder = folder
        self._results: dict[tuple[str, str], CaseResult] = {}

    def result(self, contestant: str, case_id: str) -> CaseResult:
        if (contestant, case_id) not in self._results:
            self._run(contestant)
        return self._results[(contestant, case_id)]

    def _run(self, contestant: str) -> None:
        shapes, case_ids = self.plan.shapes, self._selected[contestant]
        path = self._folder / f"{contestant}.yaml"
        path.write_text(yaml.safe_dump({
            "name": shapes.name,
            "timeouts_s": shapes.timeouts_s,
            "timing": asdict(shapes.timing),
            "tests": [self.plan.cases[c].fields() for c in case_ids],
            "benchmarks": [self.plan.cases[c].fields() for c in case_ids],
        }, sort_keys=False))
        stage, _ = run_stage(self.plan.contestants[contestant], StagePlan("benchmark", "benchmark", None),
                             load_shapes(path), self.plan.options)
        self._results.update(((contestant, c), r) for c, r in zip(case_ids, stage.cases, strict=True))

    def record(self, benchmark: Any, result: CaseResult) -> None:
        """Hand a passed case's samples to pytest-benchmark, with what it was (``extra_info``)."""
        benchmark.extra_info.update(
            shapes=self.plan.shapes.name,
            spec=result.case.fields(),
            flops=result.case.flops,
            min_bytes=result.case.min_bytes,
            timer="cuda-events" if self.plan.options.device == "cuda" else "cpu-clock",
            protocol="hardened",
            residuals=result.diagnostics,
        )
        REPLAY.replay(benchmark, result.samples_ns)


def device_info(device: str) -> dict[str, Any]:
    """The evaluator's fingerprint of ``device`` with its ``gpu_key``, less per-run readings."""
    env = fingerprint(device)
    return {"gpu_key": gpu_key(env), **{k: v for k, v in env.items() if k not in _PER_RUN_FIELDS}}
