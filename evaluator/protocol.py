"""The run modes (SPEC §4) as plain functions over a kernel, a timer and a checker.

No files, pipes or printing here: a mode yields :class:`CaseResult`s and reports progress
through a callback, so the worker, the tests and the pytest plugin drive the same code.
With :class:`~evaluator.guards.Hardening` all on (the default) the holes of SPEC §5 are closed;
``Hardening.compat()`` runs the contest's protocol step for step.
"""

from __future__ import annotations

import secrets
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from evaluator import guards
from evaluator.guards import Hardening, PhysicalFloor
from evaluator.results import CaseResult
from evaluator.shapes import Case, ShapeSet, Timing
from evaluator.stats import Stats
from evaluator.stopping import ContestRule
from evaluator.threadwatch import ThreadWatch
from evaluator.timing import Measurement, Timer, copy_stream, synchronize
from evaluator.tripwire import Tripwire
from reference.checker import QMethod, Verdict, verdict
from reference.inputs import default_device, generate_input

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
SETTLE_GRACE_S = 0.05  # how long a failed repeat waits for outputs still being written
_perf_counter_ns = time.perf_counter_ns  # bound before any kernel is imported
_randbits = secrets.randbits
_sleep = time.sleep
_clone = torch.Tensor.clone
_WORST_KEYS = ("scaled_factor_residual", "scaled_orthogonality_residual")


def combine_seed(secret: int, seed: int) -> int:
    """The contest's pairing of a run's secret seed with a spec's seed."""
    return secret + (secret + seed) * (secret + seed + 1) // 2


def _no_progress(event: dict[str, object]) -> None:
    return None


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


@dataclass
class Harness:
    """What a mode needs: the kernel, how to time and check it, and which rules are on.

    ``tripwire`` should be made before the kernel is imported (the worker does); one made here
    misses what the kernel changed at import time. ``clock`` is the wall clock (ns) of the
    stopping rule, injectable for tests.
    """

    kernel: Kernel
    timer: Timer
    hardening: Hardening = field(default_factory=Hardening)
    q_method: QMethod = "auto"
    floor: PhysicalFloor | None = None
    progress: Progress = _no_progress
    tripwire: Tripwire | None = None
    clock: Callable[[], int] = _perf_counter_ns

    def __post_init__(self) -> None:
        if self.tripwire is None and self.hardening.tamper:
            self.tripwire = Tripwire()
        # Bound now, before any kernel runs: see evaluator.timing.
        self._verdict = verdict
        self.worst: dict[str, float] = {}
        self.view = guards.kernel_view if self.hardening.tamper else _same
        self.copy_stream = copy_stream(default_device())  # where outputs are copied when the clock stops
        if self.tripwire is not None:
            self.tripwire.watch_object(self, ignore=frozenset({"worst"}))
            self.tripwire.watch_object(self.timer)

    def check(self, a: torch.Tensor, output: object) -> Verdict:
        """Check one output; passing checks also raise ``worst`` (the largest scaled residuals
        seen since it was last cleared), which a timed case reports over all its checks."""
        v = self._verdict(a, output, self.q_method)
        if v.passed:
            for key in _WORST_KEYS:
                self.worst[key] = max(self.worst.get(key, 0.0), float(v.diagnostics[key]))
        return v

    def tamper_problem(self) -> str | None:
        return self.tripwire.problem() if self.tripwire is not None and self.hardening.tamper else None

    def output_problem(self, given: torch.Tensor, handed: torch.Tensor, pristine: torch.Tensor,
                       output: object) -> str | None:
        """The output rules for one call: ``given`` is the evaluator's input tensor, ``handed``
        the object the kernel received, ``output`` what it returned (None in compat mode)."""
        if not self.hardening.output_rules:
            return None
        return (
            guards.output_type_problem(output)
            or guards.aliasing_problem((given, handed), guards.plain_output(output))
            or guards.input_mutation_problem(given, pristine)
        )

    def plain(self, output: object) -> object:
        """What the checker sees of an output: see :func:`evaluator.guards.plain_output`."""
        return guards.plain_output(output) if self.hardening.output_rules else output


@dataclass(frozen=True)
class BenchSettings:
    """One timed pass over a case: recheck every repeat's outputs, repeat cap, time budget."""

    recheck: bool
    max_repeats: int
    budget_s: float


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
        synchronize()
        given = data.clone()
        handed = h.view(given)
        output = h.kernel(handed)
        synchronize()
        problem = h.tamper_problem() or h.output_problem(given, handed, data, output)
        if problem:
            return CaseResult(index, case, "fail", problem, seeds=(case.seed,))
        v = h.check(data, h.plain(output))
    except Exception as exc:  # noqa: BLE001 - any kernel exception is this case's failure
        return CaseResult(index, case, "error", _error_text(exc), seeds=(case.seed,))
    return CaseResult(index, case, "pass" if v.passed else "fail", v.message, diagnostics=v.diagnostics,
                      seeds=(case.seed,))


class _Inputs:
    """The inputs one benchmark case cycles through, and their pristine copies for checking.

    The first set uses the contest's seeds (spec seed + 42, + 84, ...). With fresh inputs on,
    each timed repeat gets new content in the same tensors (so the memory a kernel sees, and
    any pointer-keyed CUDA graph of an honest kernel, stay the contest's, while content can
    never be known before the repeat), from seeds drawn at that moment, never the first set's:
    :meth:`refresh` makes it (into the pristine copies, which only the evaluator holds) and
    :meth:`install` copies it into the tensors, as late as possible before the clock starts.
    ``handed`` are the objects the kernel gets (views of the tensors when the tamper rule is
    on), the same every repeat as in the contest.
    """

    def __init__(self, case: Case, count: int, fresh: bool, view: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.case = case
        self.fresh = fresh
        self.seeds = [case.seed + SEED_STEP * (k + 1) for k in range(count)]
        self.tensors = [generate_input(**case.with_seed(s).generator_args()) for s in self.seeds]
        self.pristine = [t.clone() for t in self.tensors]
        self.handed = [view(t) for t in self.tensors]

    def refresh(self) -> None:
        if not self.fresh:
            return
        for k in range(len(self.tensors)):
            self.seeds[k] = _randbits(62)
            self.pristine[k] = generate_input(**self.case.with_seed(self.seeds[k]).generator_args())

    def install(self) -> None:
        if not self.fresh:
            return
        for tensor, content in zip(self.tensors, self.pristine, strict=True):
            tensor.copy_(content)
        synchronize()  # complete before the kernel is called, as the contest's inputs are


class _Calls:
    """One timed repeat's calls, as the timer runs them: one call per input, in order.

    With a :class:`ThreadWatch` (hardened), the run also bounds the idle-threads windows:
    closed just before the first call, opened just after the last.
    """

    def __init__(self, h: Harness, inputs: _Inputs, watch: ThreadWatch | None) -> None:
        self.h = h
        self.inputs = inputs
        self.watch = watch
        self.outputs: list[object] = []

    def __call__(self) -> list[object]:
        if self.watch is not None:
            self.watch.close()
        self.outputs = [self.h.kernel(t) for t in self.inputs.handed]
        if self.watch is not None:
            self.watch.open()
        return self.outputs


def _snapshot(output: object) -> object:
    """A copy of a plain output's tensors (see :func:`evaluator.guards.plain_output`)."""
    if type(output) is not tuple:
        return output
    return tuple(_clone(v) if type(v) is torch.Tensor else v for v in output)


def _checked(h: Harness, pristine: torch.Tensor, output: object, fresh_rule: bool) -> str:
    v = h.check(pristine, output)
    if v.passed:
        return ""
    if fresh_rule:
        return guards.rule_message("fresh-inputs", f"a timed repeat's output failed the check: {v.message}")
    return v.message


def _first_pass(h: Harness, inputs: _Inputs, watch: ThreadWatch | None) -> str:
    """Call the kernel once per input, on clones, and check each result (the contest's
    correctness pass before timing); the first failure's message, or ''.

    The kernel's outputs are dropped before the first idle-threads window opens, and the
    tripwire looks again afterwards: whatever a finalizer on them installed is found before
    the timed repeats start.
    """
    message = _first_pass_checks(h, inputs)
    if watch is not None:
        watch.open()
    return message or h.tamper_problem() or ""


def _first_pass_checks(h: Harness, inputs: _Inputs) -> str:
    given = [t.clone() for t in inputs.tensors]
    handed = [h.view(t) for t in given]
    outputs = [h.kernel(t) for t in handed]
    synchronize()
    message = h.tamper_problem() or ""
    for g, k, p, output in zip(given, handed, inputs.pristine, outputs, strict=True):
        message = message or h.output_problem(g, k, p, output) or _checked(h, p, h.plain(output), False)
    return message


def _repeat_problem(h: Harness, inputs: _Inputs, outputs: Sequence[object], recheck: bool) -> str:
    """What the rules and the checker say about one timed repeat's outputs, or ''.

    Hardened: copy the outputs before anything else (on a stream of the evaluator's own, with
    nothing a kernel could have replaced running first), then the tripwire (nothing the kernel
    replaced runs in a check), then the output rules; the copies are what is checked, and the
    live outputs must still equal them (settled). Compat: the contest's recheck of the live
    outputs against the pristine inputs.
    """
    if not h.hardening.output_rules:
        message = h.tamper_problem() or ""
        if message or not recheck:
            return message
        for p, output in zip(inputs.pristine, outputs, strict=True):
            message = message or _checked(h, p, output, h.hardening.fresh_inputs)
        return message
    plain = [guards.plain_output(o) for o in outputs]  # type() checks only: no kernel code runs
    snapshots: list[object] = []
    if recheck:
        with h.copy_stream:
            snapshots = [_snapshot(o) for o in plain]
        synchronize()
    message = h.tamper_problem() or ""
    if message or not recheck:
        return message
    for output in outputs:
        message = message or guards.output_type_problem(output) or ""
    for g, k, p, live, snap in zip(inputs.tensors, inputs.handed, inputs.pristine, plain, snapshots, strict=True):
        message = (message or guards.aliasing_problem((g, k), live) or guards.input_mutation_problem(g, p)
                   or _settled(live, snap))
        if not message:
            message = _checked(h, p, snap, h.hardening.fresh_inputs)
            message = message and (_settled_after_grace(live, snap) or message)
    return message


def _settled(live: object, snapshot: object) -> str:
    if not isinstance(live, tuple) or not isinstance(snapshot, tuple):
        return ""
    pairs = [(s, v) for s, v in zip(snapshot, live, strict=True) if type(v) is torch.Tensor]
    return guards.settled_problem([s for s, _ in pairs], [v for _, v in pairs]) or ""


def _settled_after_grace(live: object, snapshot: object) -> str:
    """For a failed check only: give work still under way since the return time to show, so the
    failure names deferred work (settled) rather than a wrong answer."""
    _sleep(SETTLE_GRACE_S)
    synchronize()
    return _settled(live, snapshot)


def _timed_repeats(h: Harness, index: int, inputs: _Inputs, settings: BenchSettings,
                   watch: ThreadWatch | None) -> tuple[list[Measurement], str]:
    """Repeat: fresh inputs, one timed call per input, check; stop by the contest's rule."""
    rule = ContestRule(budget_s=settings.budget_s)
    calls = _Calls(h, inputs, watch)
    count = len(inputs.tensors)
    measurements: list[Measurement] = []
    started_ns = h.clock()
    for repeat in range(settings.max_repeats):
        inputs.refresh()
        if watch is not None:
            synchronize()
            watch.observe()  # from here to the call, a thread that works ahead would gain
        inputs.install()
        measurement = h.timer.time(calls)[0]  # the outputs live on in calls.outputs only
        measurements.append(measurement)
        message = _repeat_problem(h, inputs, calls.outputs, settings.recheck)
        # Checked: drop the kernel's objects now, before the next inputs are made, as the contest
        # does. Finalizers the kernel attached to them run here; whatever they install, the
        # tripwire finds before the next inputs exist.
        calls.outputs = []
        message = message or h.tamper_problem() or ""
        if message:
            return measurements, message
        elapsed_s = (h.clock() - started_ns) / 1e9
        h.progress({"event": "repeat", "index": index, "repeat": repeat + 1, "elapsed_s": elapsed_s})
        samples = [m.elapsed_ns / count for m in measurements]
        # The contest applies its wall-clock cap where its rule applies, from the third repeat.
        if rule.should_stop(samples, elapsed_s) or (len(samples) >= rule.min_samples and elapsed_s > WALL_CAP_S):
            break
    return measurements, ""


def _case_problem(h: Harness, case: Case, measurements: Sequence[Measurement], count: int,
                  watch: ThreadWatch | None) -> str | None:
    """Rules judged on a whole timed case: idle threads, stream join, physical floor."""
    hard = h.hardening
    problem = watch.problem() if watch is not None else None
    if problem is None and hard.device_drain and h.timer.kind == "cuda-events":
        problem = guards.stream_join_problem([m.tail_ns for m in measurements], [m.elapsed_ns for m in measurements])
    if problem is None and hard.physical_floor and h.floor is not None:
        mean_ns = sum(m.elapsed_ns for m in measurements) / len(measurements) / count
        problem = h.floor.problem(mean_ns, case.flops, case.input_bytes)
    return problem


def benchmark_case(h: Harness, index: int, case: Case, settings: BenchSettings, timing: Timing) -> CaseResult:
    """Time one case as the contest does, with the hardening rules that are on.

    The recipe: make the inputs and pristine copies; the correctness pass (one call per input,
    on clones, each checked); then timed repeats (fresh content, one timed call per input,
    every output checked) until the contest's stopping rule; then the rules judged over the
    whole case; then the statistics.
    """
    h.worst = {}
    watch = ThreadWatch() if h.hardening.idle_threads else None
    measurements: list[Measurement] = []
    seeds = (case.seed,)
    try:
        inputs = _Inputs(case, timing.input_count(case), h.hardening.fresh_inputs, h.view)
        seeds = tuple(inputs.seeds)
        message = _first_pass(h, inputs, watch)
        if not message:
            measurements, message = _timed_repeats(h, index, inputs, settings, watch)
    except Exception as exc:  # noqa: BLE001 - any kernel exception is this case's failure
        return CaseResult(index, case, "error", _error_text(exc), seeds=seeds)
    finally:
        if watch is not None:
            watch.finish()
    count = len(inputs.tensors)
    samples = tuple(m.elapsed_ns / count for m in measurements)
    if message:
        return CaseResult(index, case, "fail", message, samples_ns=samples, seeds=seeds)
    problem = _case_problem(h, case, measurements, count, watch) or h.tamper_problem()
    return CaseResult(index, case, "fail" if problem else "pass", problem or "", Stats.from_samples(samples),
                      samples, diagnostics=dict(h.worst), seeds=seeds)


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
            synchronize()
        given = data.clone()
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        profiling = torch.profiler.profile(activities=activities) if profiler and cuda else nullcontext()
        handed = h.view(given)
        with profiling as prof, nvtx("custom_kernel"):
            output = h.kernel(handed)
            synchronize()
        if prof is not None:
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
        problem = h.tamper_problem() or h.output_problem(given, handed, data, output)
        if problem:
            return CaseResult(0, case, "fail", problem, seeds=(case.seed,)), table
        v = h.check(data, h.plain(output))
    except Exception as exc:  # noqa: BLE001
        return CaseResult(0, case, "error", _error_text(exc), seeds=(case.seed,)), table
    return CaseResult(0, case, "pass" if v.passed else "fail", v.message, diagnostics=v.diagnostics,
                      seeds=(case.seed,)), table
