"""The run modes (SPEC §4) as plain functions over a kernel, a timer and a checker.

No files, pipes or printing here: a mode yields :class:`CaseResult`s and reports progress
through a callback, so the worker, the tests and the pytest plugin drive the same code.
With :class:`~evaluator.guards.Hardening` all on (the default) the holes of SPEC §5 are closed;
``Hardening.compat()`` runs the contest's protocol step for step.
"""

from __future__ import annotations

import secrets
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from evaluator import guards
from evaluator.guards import Hardening, PhysicalFloor, Tripwire
from evaluator.results import CaseResult
from evaluator.shapes import Case, ShapeSet, Timing
from evaluator.stats import Stats
from evaluator.stopping import ContestRule
from evaluator.timing import Timer
from reference.checker import QMethod, Verdict, verdict
from reference.inputs import generate_input

__all__ = [
    "BenchSettings",
    "Harness",
    "benchmark_case",
    "combine_seed",
    "run_benchmark",
    "run_leaderboard",
    "run_profile",
    "run_test",
    "test_case",
]

Kernel = Callable[[torch.Tensor], object]
Progress = Callable[[dict[str, object]], None]
SEED_STEP = 42  # the contest bumps a benchmark spec's seed by 42 before each input
WALL_CAP_S = 120.0  # the contest's hard cap on one case's timing loop
_perf_counter_ns = time.perf_counter_ns  # bound before any kernel is imported
_WORST_KEYS = ("scaled_factor_residual", "scaled_orthogonality_residual")


def combine_seed(secret: int, seed: int) -> int:
    """The contest's pairing of a run's secret seed with a spec's seed."""
    return secret + (secret + seed) * (secret + seed + 1) // 2


def _no_progress(event: dict[str, object]) -> None:
    return None


@dataclass
class Harness:
    """What a mode needs: the kernel and how to time and check it."""

    kernel: Kernel
    timer: Timer
    hardening: Hardening = field(default_factory=Hardening)
    q_method: QMethod = "auto"
    floor: PhysicalFloor | None = None
    progress: Progress = _no_progress
    tripwire: Tripwire | None = None

    def __post_init__(self) -> None:
        if self.tripwire is None and self.hardening.tamper:
            self.tripwire = Tripwire()
        # Bound now, before any kernel runs: see evaluator.timing.
        self._verdict = verdict
        self.worst: dict[str, float] = {}

    def check(self, a: torch.Tensor, output: object) -> Verdict:
        """Check one output; passing checks also raise ``worst`` (the largest scaled residuals
        seen since it was last cleared), which a timed case reports over all its checks."""
        v = self._verdict(a, output, self.q_method)
        if v.passed:
            for key in _WORST_KEYS:
                self.worst[key] = max(self.worst.get(key, 0.0), float(v.diagnostics[key]))
        return v

    def output_problem(self, given: torch.Tensor, pristine: torch.Tensor, output: object) -> str | None:
        """The hardening rules one call's output and input must satisfy (None when compat)."""
        if not self.hardening.output_rules:
            return None
        return (
            guards.output_type_problem(output)
            or guards.aliasing_problem(given, output)
            or guards.input_mutation_problem(given, pristine)
        )

    def tamper_problem(self) -> str | None:
        return self.tripwire.problem() if self.tripwire is not None and self.hardening.tamper else None


@dataclass(frozen=True)
class BenchSettings:
    """One timed pass over a case: recheck every repeat's outputs, repeat cap, time budget."""

    recheck: bool
    max_repeats: int
    budget_s: float


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _error_text(exc: BaseException) -> str:
    """Exception type and text, then the innermost frames: enough to find the line."""
    tail = "".join(traceback.format_exception(exc)[-6:]).strip()
    return f"{type(exc).__name__}: {exc}\n{tail}"


def _seeded(case: Case, secret: int | None) -> Case:
    return case if secret is None else case.with_seed(combine_seed(secret, case.seed))


def test_case(h: Harness, index: int, case: Case) -> CaseResult:
    """Generate, run the kernel on a clone, check (the contest's ``test`` mode, one case)."""
    try:
        data = generate_input(**case.generator_args())
        _sync()
        given = data.clone()
        output = h.kernel(given)
        _sync()
        problem = h.output_problem(given, data, output) or h.tamper_problem()
        if problem:
            return CaseResult(index, case, "fail", problem, seeds=(case.seed,))
        v = h.check(data, output)
    except Exception as exc:  # noqa: BLE001 - any kernel exception is this case's failure
        return CaseResult(index, case, "error", _error_text(exc), seeds=(case.seed,))
    return CaseResult(index, case, "pass" if v.passed else "fail", v.message, diagnostics=v.diagnostics,
                      seeds=(case.seed,))


class _Inputs:
    """The inputs one benchmark case cycles through, and their pristine copies for checking.

    The first set uses the contest's seeds (spec seed + 42, + 84, ...). With fresh inputs on,
    :meth:`refresh` writes new content into the same tensors before each timed repeat (so a
    kernel may still key work on pointers or shapes, but never on content), from seeds drawn
    at that moment, never the first set's.
    """

    def __init__(self, case: Case, count: int, fresh: bool) -> None:
        self.case = case
        self.fresh = fresh
        self.seeds = [case.seed + SEED_STEP * (k + 1) for k in range(count)]
        self.tensors = [generate_input(**case.with_seed(s).generator_args()) for s in self.seeds]
        self.pristine = [t.clone() for t in self.tensors]

    def refresh(self) -> None:
        if not self.fresh:
            return
        for k, tensor in enumerate(self.tensors):
            seed = secrets.randbits(62)
            content = generate_input(**self.case.with_seed(seed).generator_args())
            tensor.copy_(content)
            self.pristine[k] = content
            self.seeds[k] = seed


def _first_failure(h: Harness, given: Sequence[torch.Tensor], pristine: Sequence[torch.Tensor],
                   outputs: Sequence[object], fresh_rule: bool) -> str:
    """The first failing output's message (hardening rules, then the checker), or ''."""
    for g, p, output in zip(given, pristine, outputs, strict=True):
        problem = h.output_problem(g, p, output)
        if problem:
            return problem
        v = h.check(p, output)
        if not v.passed:
            if fresh_rule:
                return guards.rule_message("fresh-inputs", f"a timed repeat's output failed the check: {v.message}")
            return v.message
    return ""


def _snapshot(outputs: Sequence[object]) -> list[torch.Tensor]:
    return [t.clone() for out in outputs if isinstance(out, tuple) for t in out if isinstance(t, torch.Tensor)]


def benchmark_case(h: Harness, index: int, case: Case, settings: BenchSettings, timing: Timing) -> CaseResult:
    """Time one case as the contest does, with the hardening rules that are on."""
    hard = h.hardening
    h.worst = {}
    try:
        inputs = _Inputs(case, timing.input_count(case), hard.fresh_inputs)
        seeds = tuple(inputs.seeds)
        given = [t.clone() for t in inputs.tensors]
        message = _first_failure(h, given, inputs.pristine, [h.kernel(g) for g in given], fresh_rule=False)
        if message:
            return CaseResult(index, case, "fail", message, seeds=seeds)
        del given

        rule = ContestRule(budget_s=settings.budget_s)
        samples: list[float] = []
        tails: list[float] = []
        threads_before = set(threading.enumerate())
        started_ns = _perf_counter_ns()
        for repeat in range(settings.max_repeats):
            inputs.refresh()
            measurement, outputs = h.timer.time(lambda: [h.kernel(t) for t in inputs.tensors])
            samples.append(measurement.elapsed_ns / len(inputs.tensors))
            tails.append(measurement.tail_ns)
            message = (guards.thread_problem(threads_before) if hard.no_threads else None) or h.tamper_problem() or ""
            if not message and settings.recheck:
                before = _snapshot(outputs) if hard.output_rules else []
                message = _first_failure(h, inputs.tensors, inputs.pristine, outputs, fresh_rule=hard.fresh_inputs)
                _sync()
                if not message and before:
                    message = guards.settled_problem(before, _snapshot(outputs)) or ""
            if message:
                return CaseResult(index, case, "fail", message, samples_ns=tuple(samples), seeds=seeds)
            elapsed_s = (_perf_counter_ns() - started_ns) / 1e9
            h.progress({"event": "repeat", "index": index, "repeat": repeat + 1, "elapsed_s": elapsed_s})
            if rule.should_stop(samples, elapsed_s) or elapsed_s > WALL_CAP_S:
                break
    except Exception as exc:  # noqa: BLE001 - any kernel exception is this case's failure
        return CaseResult(index, case, "error", _error_text(exc), seeds=(case.seed,))

    stats = Stats.from_samples(samples)
    problem = None
    if hard.device_drain and h.timer.kind == "cuda-events":
        problem = guards.stream_join_problem(tails, samples)
    if problem is None and hard.physical_floor and h.floor is not None:
        problem = h.floor.problem(stats.mean_ns, case.flops, case.min_bytes)
    return CaseResult(index, case, "fail" if problem else "pass", problem or "", stats, tuple(samples),
                      diagnostics=dict(h.worst), seeds=seeds)


def run_test(h: Harness, shapes: ShapeSet, secret: int | None = None) -> Iterator[CaseResult]:
    """``test`` mode: every test case once, checked."""
    for i, case in enumerate(shapes.tests):
        h.progress({"event": "case", "index": i, "count": len(shapes.tests), "label": case.label})
        yield test_case(h, i, _seeded(case, secret))


def run_benchmark(h: Harness, shapes: ShapeSet, secret: int | None = None) -> Iterator[CaseResult]:
    """``benchmark`` mode: warm up on the first case, then time every case with recheck."""
    t = shapes.timing
    cases = [_seeded(c, secret) for c in shapes.benchmarks]
    h.progress({"event": "warmup", "label": cases[0].label})
    benchmark_case(h, 0, cases[0], BenchSettings(False, t.benchmark_warmup_repeats, t.benchmark_warmup_s), t)
    settings = BenchSettings(True, t.benchmark_repeats, t.benchmark_budget_s)
    for i, case in enumerate(cases):
        h.progress({"event": "case", "index": i, "count": len(cases), "label": case.label})
        yield benchmark_case(h, i, case, settings, t)


def run_leaderboard(h: Harness, shapes: ShapeSet, secret: int | None = None) -> Iterator[CaseResult]:
    """``leaderboard`` (ranked) mode: warm up on every case, then time every case with
    recheck; the first failing case ends the pass (the rest are reported as skipped)."""
    t = shapes.timing
    cases = [_seeded(c, secret) for c in shapes.benchmarks]
    warmup = BenchSettings(False, t.leaderboard_warmup_repeats, t.leaderboard_warmup_s)
    for i, case in enumerate(cases):
        h.progress({"event": "warmup", "index": i, "count": len(cases), "label": case.label})
        benchmark_case(h, i, case, warmup, t)
    settings = BenchSettings(True, t.leaderboard_repeats, t.leaderboard_budget_s)
    failed = False
    for i, case in enumerate(cases):
        if failed:
            yield CaseResult(i, case, "skipped", "not run: an earlier case failed")
            continue
        h.progress({"event": "case", "index": i, "count": len(cases), "label": case.label})
        result = benchmark_case(h, i, case, settings, t)
        failed = not result.passed
        yield result


def run_profile(h: Harness, shapes: ShapeSet, secret: int | None = None,
                profiler: bool = False) -> tuple[CaseResult, str]:
    """``profile`` mode: the first benchmark case once inside NVTX ranges, then checked.

    With ``profiler`` (CUDA only) the call also runs under the torch profiler, and the second
    value is its per-kernel table; otherwise it is empty.
    """
    case = _seeded(shapes.benchmarks[0], secret)
    cuda = torch.cuda.is_available()
    nvtx = torch.cuda.nvtx.range if cuda else (lambda name: nullcontext())
    table = ""
    try:
        with nvtx("generate input"):
            data = generate_input(**case.generator_args())
            _sync()
        given = data.clone()
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        profiling = torch.profiler.profile(activities=activities) if profiler and cuda else nullcontext()
        with profiling as prof, nvtx("custom_kernel"):
            output = h.kernel(given)
            _sync()
        if prof is not None:
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
        v = h.check(data, output)
    except Exception as exc:  # noqa: BLE001
        return CaseResult(0, case, "error", _error_text(exc), seeds=(case.seed,)), table
    return CaseResult(0, case, "pass" if v.passed else "fail", v.message, diagnostics=v.diagnostics,
                      seeds=(case.seed,)), table
