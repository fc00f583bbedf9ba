"""The run modes (docs/problem.md §4) as plain functions over an executor, a checker and a clock.

No files, pipes or printing here: a mode yields :class:`CaseResult`s and reports progress
through a callback. Where the kernel runs is the :class:`~evaluator.execution.Executor`'s
business: in a hardened run these functions run in the parent, which makes every input, checks
every output and judges every time while the kernel sits in a worker of its own
(:mod:`evaluator.remote`); a ``--compat`` worker runs them beside the kernel, as the contest does.
With :class:`~evaluator.hardening.guards.Hardening` all on (the default) the holes of docs/problem.md §5 are closed;
``Hardening.compat()`` runs the contest's protocol step for step.
"""

from __future__ import annotations

import secrets
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import torch

from evaluator.delivery import joined, snapshot
from evaluator.execution import Executor, Handed, KernelError, Returned
from evaluator.hardening import guards
from evaluator.hardening.guards import Hardening, PhysicalFloor
from evaluator.measure.clocks import ClockSampler, NullSampler, RepeatLog
from evaluator.measure.ledger import Ledger
from evaluator.measure.stats import Stats
from evaluator.measure.stopping import ContestRule
from evaluator.measure.timing import Measurement, synchronize
from evaluator.measure.witness import ParentClock
from evaluator.modes import Mode
from evaluator.results import CaseResult
from evaluator.shapes import Case, ShapeSet, Timing
from reference.checker import QMethod, Verdict, verdict
from reference.figure_graphs import FigureGraphs
from reference.inputs import CASES, default_device, generate_input

__all__ = [
    "CASE_MODES",
    "BenchSettings",
    "CaseInputs",
    "Harness",
    "benchmark_case",
    "combine_seed",
    "error_text",
    "first_pass",
    "no_progress",
    "run_benchmark",
    "run_leaderboard",
    "run_profile",
    "run_test",
    "seeded",
    "test_case",
    "timed_case_result",
    "timed_repeat",
]

Progress = Callable[[dict[str, object]], None]
Tensors = list[torch.Tensor]
SEED_STEP = 42  # the contest bumps a benchmark spec's seed by 42 before each input
WALL_CAP_S = 120.0  # the contest's hard cap on one case's timing loop
SETTLE_GRACE_S = 0.05  # how long a failed repeat waits for outputs still being written
_WORST_KEYS = ("scaled_factor_residual", "scaled_orthogonality_residual")
# Case kinds whose transform treats each matrix alone (``mixed`` draws its profiles over the
# whole batch, so its inputs are drawn one by one).
_PER_MATRIX_KINDS = frozenset(CASES) - {"mixed"}


def combine_seed(secret: int, seed: int) -> int:
    """The contest's pairing of a run's secret seed with a spec's seed."""
    return secret + (secret + seed) * (secret + seed + 1) // 2


def no_progress(event: dict[str, object]) -> None:
    """The progress callback of a run nobody watches."""
    return None


_perf_counter_ns = time.perf_counter_ns
_randbits = secrets.randbits
_sleep = time.sleep


@dataclass
class Harness:
    """What a mode needs: where the kernel runs, how to check it, and which rules are on.

    ``device`` is where inputs are made and checked: the kernel's (a CPU run on a machine with a GPU
    makes CPU inputs). ``clock`` is the wall clock (ns) of the stopping rule, injectable for tests. ``sampler``
    reads the GPU's clocks around each timed repeat; with ``discard_throttled`` a repeat the GPU
    throttled in is left out of the stopping rule and the statistics (:mod:`evaluator.measure.clocks`).
    """

    executor: Executor
    hardening: Hardening = field(default_factory=Hardening)
    device: torch.device = field(default_factory=default_device)
    q_method: QMethod = "auto"
    floor: PhysicalFloor | None = None
    progress: Progress = no_progress
    clock: Callable[[], int] = _perf_counter_ns
    ledger: Ledger = field(default_factory=Ledger)
    sampler: ClockSampler = field(default_factory=lambda: NullSampler("no sampler given"))
    discard_throttled: bool = False

    def __post_init__(self) -> None:
        self.worst: dict[str, float] = {}
        self.clocks = RepeatLog(self.sampler, self.discard_throttled)
        self.figure_graphs = FigureGraphs()

    def check(self, a: torch.Tensor, output: object, reconstruction: bool = True) -> Verdict:
        """Check one output; passing checks also raise ``worst`` (the largest scaled residuals
        seen since it was last cleared), which a timed case reports over all its checks. A timed
        case's checks pass ``reconstruction=False``: it reports the gates' residuals only, so
        the fast checker need not compute ``QR - A`` (same verdict, :func:`reference.checker.verdict`)."""
        with self.ledger.timing("check"):
            v = verdict(a, output, self.q_method, reconstruction, self.figure_graphs)
        if v.passed:
            for key in _WORST_KEYS:
                self.worst[key] = max(self.worst.get(key, 0.0), float(v.diagnostics[key]))
        return v

    def call_problem(self, returned: Returned, given: torch.Tensor, pristine: torch.Tensor) -> str | None:
        """The output rules for one call (none in compat): what was found where the kernel ran
        (exact-tensor, no-alias), then whether the input it was handed is unchanged."""
        if not self.hardening.output_rules:
            return None
        return returned.problem or guards.input_mutation_problem(given, pristine)


@dataclass(frozen=True)
class BenchSettings:
    """One timed pass over a case: recheck every repeat's outputs, repeat cap, time budget."""

    recheck: bool
    max_repeats: int
    budget_s: float


def error_text(exc: BaseException) -> str:
    """Exception type and text, then the innermost frames: enough to find the line. (A
    :class:`KernelError` already carries the worker's own account.)"""
    if isinstance(exc, KernelError):
        return str(exc)
    tail = "".join(traceback.format_exception(exc)[-6:]).strip()
    return f"{type(exc).__name__}: {exc}\n{tail}"


def seeded(case: Case, secret: int | None) -> Case:
    """``case`` with its seed combined with a run's secret seed, as the contest does (or as it is)."""
    return case if secret is None else case.with_seed(combine_seed(secret, case.seed))


def _single_call(h: Harness, case: Case, profile: str = "") -> tuple[CaseResult, str]:
    """Generate, hand a copy to the kernel, call it once, check: the contest's ``test`` mode
    for one case (and ``profile`` mode's call, with its profiler table)."""
    with h.ledger.timing("inputs"):
        data = generate_input(**case.generator_args(), device=h.device)
        synchronize()
        handed = h.executor.hand([data])
    try:
        with h.ledger.timing("untimed_calls"):
            returned = h.executor.call(handed, 0, profile)
        problem = h.call_problem(returned, handed.tensors[0], data)
        if problem:
            return CaseResult(0, case, "fail", problem, seeds=(case.seed,)), returned.table
        v = h.check(data, returned.output)
    finally:
        h.executor.release(handed)
    status = "pass" if v.passed else "fail"
    return CaseResult(0, case, status, v.message, diagnostics=v.diagnostics, seeds=(case.seed,)), returned.table


def test_case(h: Harness, index: int, case: Case) -> CaseResult:
    """Generate, run the kernel on a copy, check (the contest's ``test`` mode, one case)."""
    try:
        result, _ = _single_call(h, case)
    except Exception as exc:  # noqa: BLE001 - any kernel exception is this case's failure
        return CaseResult(index, case, "error", error_text(exc), seeds=(case.seed,))
    return CaseResult(index, case, result.status, result.message, diagnostics=result.diagnostics, seeds=(case.seed,))


class CaseInputs:
    """The inputs one benchmark case cycles through, and their pristine copies for checking.

    The first set uses the contest's seeds (spec seed + 42, + 84, ...). With fresh inputs on,
    each timed repeat gets new content in the same memory (so the memory a kernel sees, and any
    pointer-keyed CUDA graph of an honest kernel, stay the contest's, while content can never be
    known before the repeat), from seeds drawn at that moment, never the first set's:
    :meth:`refresh` makes it (into the pristine copies, which only the evaluator holds) and
    :meth:`install` copies it into the handed-over memory, as late as possible.
    """

    def __init__(self, case: Case, count: int, fresh: bool, device: torch.device) -> None:
        self.case = case
        self.fresh = fresh
        self.device = device
        self.seeds = [case.seed + SEED_STEP * (k + 1) for k in range(count)]
        self.pristine = [self._generate(case.with_seed(s)) for s in self.seeds]
        self.tensors: list[torch.Tensor] = []

    def refresh(self) -> None:
        if not self.fresh:
            return
        count = len(self.pristine)
        if count > 1 and self.case.kind in _PER_MATRIX_KINDS:
            # One generator call for the whole repeat (50 inputs at 20x32): each matrix's content
            # is drawn alone, so the split batch has the distribution of separate draws.
            whole = replace(self.case, batch=self.case.batch * count).with_seed(_randbits(62))
            self.pristine = list(self._generate(whole).chunk(count))
        else:
            for k in range(count):
                self.pristine[k] = self._generate(self.case.with_seed(_randbits(62)))
        synchronize()  # made by now: the time is the inputs', not the next repeat's witness

    def _generate(self, case: Case) -> torch.Tensor:
        return generate_input(**case.generator_args(), device=self.device)

    def install(self) -> None:
        if not self.fresh:
            return
        torch._foreach_copy_(self.tensors, self.pristine)  # one launch for all of a repeat's inputs
        synchronize()  # complete before the kernel is called, as the contest's inputs are


def _checked(h: Harness, pristine: torch.Tensor, output: object, fresh_rule: bool) -> str:
    v = h.check(pristine, output, reconstruction=False)
    if v.passed:
        return ""
    if fresh_rule:
        return guards.rule_message("fresh-inputs", f"a timed repeat's output failed the check: {v.message}")
    return v.message


def _batchable(pristines: Sequence[torch.Tensor], outputs: Sequence[object]) -> bool:
    """Whether every output is a plain (H, tau) pair of float32 tensors shaped as its input asks,
    on its input's device: then one check of them all decides as checking each would."""
    for a, output in zip(pristines, outputs, strict=True):
        if type(output) is not tuple or len(output) != 2:
            return False
        h, tau = output
        if type(h) is not torch.Tensor or type(tau) is not torch.Tensor:
            return False
        if h.shape != a.shape or tau.shape != a.shape[:2] or h.dtype != torch.float32 or tau.dtype != torch.float32:
            return False
        if h.device != a.device or tau.device != a.device:
            return False
    return True


def _checked_together(h: Harness, pristines: Sequence[torch.Tensor], outputs: Sequence[object],
                      fresh_rule: bool) -> str:
    """Check a repeat's outputs in one checker call where :func:`_batchable` allows, else one by
    one; the first failing output's message, or ''.

    Every gate is judged per matrix (the factor gate against each matrix's own norm, the
    orthogonality gate's maximum against a fixed bound, finiteness everywhere), so the outputs
    stacked along the batch pass exactly when each passes, and the worst residuals are the
    largest of each's. A failure is checked again one output at a time, so its message is the
    contest's for the first failing output.
    """
    if len(outputs) > 1 and _batchable(pristines, outputs):
        stacked = (joined([o[0] for o in outputs]), joined([o[1] for o in outputs]))  # type: ignore[index]
        if h.check(joined(pristines), stacked, reconstruction=False).passed:
            return ""
    for pristine, output in zip(pristines, outputs, strict=True):
        message = _checked(h, pristine, output, fresh_rule)
        if message:
            return message
    return ""


def first_pass(h: Harness, inputs: CaseInputs) -> str:
    """Call the kernel once per input, on copies, and check each result (the contest's
    correctness pass before timing); the first failure's message, or ''."""
    with h.ledger.timing("inputs"):
        copies = h.executor.hand(inputs.pristine)
    try:
        with h.ledger.timing("untimed_calls"):
            returned = [h.executor.call(copies, i) for i in range(len(copies.tensors))]
        message = ""
        for given, pristine, r in zip(copies.tensors, inputs.pristine, returned, strict=True):
            message = message or h.call_problem(r, given, pristine) or _checked(h, pristine, r.output, False)
    finally:
        h.executor.release(copies)
    return message


def _repeat_problem(h: Harness, inputs: CaseInputs, returned: Sequence[Returned], recheck: bool) -> str:
    """What the rules and the checker say about one timed repeat's outputs, or ''.

    Hardened: copy the outputs first, then the output rules, the input unchanged, and one check
    of all the copies against the pristine inputs (:func:`_checked_together`); the outputs must
    still equal the copies (settled).
    Compat: the contest's recheck of the outputs against the pristine inputs.
    """
    if not recheck:
        return ""
    if not h.hardening.output_rules:
        message = ""
        for p, r in zip(inputs.pristine, returned, strict=True):
            message = message or _checked(h, p, r.output, h.hardening.fresh_inputs)
        return message
    with h.ledger.timing("check"):
        snapshots = [snapshot(r.output) if r.snapshot is None else r.snapshot for r in returned]
        synchronize()
    message = ""
    live, copies = _settled_pairs(returned, snapshots)
    clean = (not any(r.problem for r in returned) and _all_equal(inputs.tensors, inputs.pristine)
             and _all_equal(live, copies))
    if not clean:  # output by output, for the first problem's own message
        for given, p, r, snap in zip(inputs.tensors, inputs.pristine, returned, snapshots, strict=True):
            message = message or h.call_problem(r, given, p) or _settled(r.output, snap)
    if not message:
        message = _checked_together(h, inputs.pristine, snapshots, h.hardening.fresh_inputs)
        if message:  # deferred work shows as a change since the report: name it (settled)
            _sleep(SETTLE_GRACE_S)
            synchronize()
            message = next((m for r, snap in zip(returned, snapshots, strict=True)
                            if (m := _settled(r.output, snap))), message)
    with h.ledger.timing("check"):
        if not message and not _all_equal(live, copies):
            pairs = zip(returned, snapshots, strict=True)
            message = next((m for r, snap in pairs if (m := _settled(r.output, snap))), "")
    return message


def _tensor_pairs(live: object, snapshot: object) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """An output's tensors, each with its copy taken at the report (none unless both are tuples)."""
    if not isinstance(live, tuple) or not isinstance(snapshot, tuple):
        return []
    return [(v, s) for s, v in zip(snapshot, live, strict=True) if type(v) is torch.Tensor]


def _settled_pairs(returned: Sequence[Returned], snapshots: Sequence[object]) -> tuple[Tensors, Tensors]:
    """Every output tensor of a repeat and its copy taken at the report, as two lists, by position
    in the output (every H, then every tau: the order of the copies' buffer, :func:`snapshot_all`)."""
    per_output = [_tensor_pairs(r.output, snap) for r, snap in zip(returned, snapshots, strict=True)]
    width = max(map(len, per_output), default=0)
    pairs = [found[position] for position in range(width) for found in per_output if position < len(found)]
    return [v for v, _ in pairs], [s for _, s in pairs]


def _all_equal(left: Sequence[torch.Tensor], right: Sequence[torch.Tensor]) -> bool:
    """Whether every pair is equal (``torch.equal``), decided with one comparison and so one device
    synchronization for a whole repeat (50 inputs at 20x32) where shapes, dtypes and devices
    allow; False sends the caller to its pair-by-pair loop, which names the first difference."""
    if len(left) != len(right):
        return False
    if len(left) <= 1:
        return all(torch.equal(a, b) for a, b in zip(left, right, strict=True))
    kinds = {(t.dtype, t.device) for t in (*left, *right)}
    if len(kinds) != 1 or any(a.shape != b.shape for a, b in zip(left, right, strict=True)):
        return False
    return torch.equal(joined([t.reshape(-1) for t in left]), joined([t.reshape(-1) for t in right]))


def _settled(live: object, snapshot: object) -> str:
    pairs = _tensor_pairs(live, snapshot)
    return guards.settled_problem([s for _, s in pairs], [v for v, _ in pairs]) or ""


def timed_repeat(h: Harness, inputs: CaseInputs, handed: Handed, recheck: bool) -> tuple[Measurement, str]:
    """One timed repeat of the content ``inputs`` holds (installed into ``handed``), the GPU's
    clocks read around it, and what the rules and the checker say of its outputs ('' if nothing).
    The outputs go when it returns, before the next inputs are made, as in the contest. (A paired
    comparison, :mod:`evaluator.paired`, times its contestants' repeats with this too.)"""
    with h.ledger.timing("clocks"):
        before = h.clocks.read()
    measurement, returned = h.executor.timed(handed, inputs.install, deliver=recheck)
    with h.ledger.timing("clocks"):
        h.clocks.add(before, measurement.elapsed_ns / len(inputs.pristine))
    return measurement, _repeat_problem(h, inputs, returned, recheck)


def _timed_repeats(h: Harness, index: int, inputs: CaseInputs, handed: Handed,
                   settings: BenchSettings) -> tuple[list[Measurement], str]:
    """Repeat: fresh inputs, one timed call per input, check; stop by the contest's rule."""
    rule = ContestRule(budget_s=settings.budget_s)
    count = len(inputs.pristine)
    measurements: list[Measurement] = []
    started_ns = h.clock()
    for repeat in range(settings.max_repeats):
        with h.ledger.timing("inputs"):
            inputs.refresh()
        measurement, message = timed_repeat(h, inputs, handed, settings.recheck)
        measurements.append(measurement)
        if message:
            return measurements, message
        elapsed_s = (h.clock() - started_ns) / 1e9
        h.progress({"event": "repeat", "index": index, "repeat": repeat + 1, "elapsed_s": elapsed_s})
        samples = h.clocks.kept(m.elapsed_ns / count for m in measurements)  # all, unless throttled ones go
        # The contest applies its wall-clock cap where its rule applies, from the third repeat.
        if rule.should_stop(samples, elapsed_s) or (len(measurements) >= rule.min_samples and elapsed_s > WALL_CAP_S):
            break
    return measurements, ""


def _parent_clock_problem(h: Harness, measurements: Sequence[Measurement]) -> str | None:
    """Rule parent-clock on a timed attempt's repeats, where it is on."""
    if not h.hardening.parent_clock:
        return None
    return guards.parent_clock_problem(measurements, guards.PARENT_CLOCK_SHARE[h.executor.timer_kind])


def _case_problem(h: Harness, case: Case, measurements: Sequence[Measurement], count: int) -> str | None:
    """Rules judged on a whole timed case: parent clock, stream join, physical floor."""
    hard = h.hardening
    problem = _parent_clock_problem(h, measurements)
    if problem is None and hard.device_drain and h.executor.timer_kind == "cuda-events":
        problem = guards.stream_join_problem([m.tail_ns for m in measurements], [m.elapsed_ns for m in measurements])
    if problem is None and hard.physical_floor and h.floor is not None:
        mean_ns = sum(m.elapsed_ns for m in measurements) / len(measurements) / count
        problem = h.floor.problem(mean_ns, case.flops, case.input_bytes)
    return problem


def benchmark_case(h: Harness, index: int, case: Case, settings: BenchSettings, timing: Timing) -> CaseResult:
    """Time one case as the contest does, with the hardening rules that are on.

    The recipe: make the inputs and pristine copies; the correctness pass (one call per input,
    on copies, each checked); then timed repeats (fresh content, one timed call per input,
    every output checked) until the contest's stopping rule; then the rules judged over the
    whole case; then the statistics.

    A timed attempt that rule parent-clock flags is set aside and the case timed once more:
    what the parent's clock saw beyond the claims may be the host's (a stretch of two repeats of a
    smoke case's three, on a loaded two-core machine, that its scheduler's statistics did not
    show: docs/hardening.md, "A loaded host") or the kernel's, and only the kernel's comes back.
    The second attempt alone is timed and judged by every rule, as any case is, so a kernel gains
    nothing from the first; the result keeps the first's message (``retimed``). The checks of both
    attempts count: a failed one ends the case, and the worst residuals are over both.
    """
    h.worst = {}
    h.clocks = RepeatLog(h.sampler, h.discard_throttled)
    measurements: list[Measurement] = []
    seeds = (case.seed,)
    handed: Handed | None = None
    set_aside = ""
    try:
        with h.ledger.timing("inputs"):
            inputs = CaseInputs(case, timing.input_count(case), h.hardening.fresh_inputs, h.device)
            seeds = tuple(inputs.seeds)
            handed = h.executor.hand(inputs.pristine)
        inputs.tensors = handed.tensors
        message = first_pass(h, inputs)
        if not message:
            measurements, message = _timed_repeats(h, index, inputs, handed, settings)
        if not message and (set_aside := _parent_clock_problem(h, measurements) or ""):
            h.progress({"event": "retime", "index": index, "label": case.label, "why": set_aside})
            h.clocks = RepeatLog(h.sampler, h.discard_throttled)
            measurements, message = _timed_repeats(h, index, inputs, handed, settings)
    except Exception as exc:  # noqa: BLE001 - any kernel exception is this case's failure
        return CaseResult(index, case, "error", error_text(exc), seeds=seeds, retimed=set_aside)
    finally:
        if handed is not None:
            h.executor.release(handed)
    return timed_case_result(h, index, case, measurements, len(inputs.pristine), seeds,
                             "fail" if message else "", message, retimed=set_aside)


def timed_case_result(h: Harness, index: int, case: Case, measurements: Sequence[Measurement], count: int,
                      seeds: tuple[int, ...], status: str = "", message: str = "", retimed: str = "") -> CaseResult:
    """A timed case's result from its repeats (``count`` calls each): ``status`` and ``message``
    when a repeat already decided it, else the rules judged on the whole case, then the
    statistics of the kept samples; ``retimed``, the rule message that set aside an earlier
    attempt (see :func:`benchmark_case`). (A paired comparison's cases end here too.)"""
    samples = tuple(h.clocks.kept(m.elapsed_ns / count for m in measurements))
    clocks = tuple(h.clocks.records)
    witnessed = ParentClock.of(measurements)
    if status:
        return CaseResult(index, case, status, message, samples_ns=samples, seeds=seeds, clocks=clocks,
                          parent_clock=witnessed, retimed=retimed)
    problem = _case_problem(h, case, measurements, count) or h.clocks.all_discarded()
    return CaseResult(index, case, "fail" if problem else "pass", problem or "",
                      Stats.from_samples(samples) if samples else None, samples, diagnostics=dict(h.worst),
                      seeds=seeds, clocks=clocks, parent_clock=witnessed, retimed=retimed)


def run_test(h: Harness, shapes: ShapeSet, secret: int | None = None) -> Iterator[CaseResult]:
    """``test`` mode: every test case once, checked."""
    for i, case in enumerate(shapes.tests):
        h.progress({"event": "case", "index": i, "count": len(shapes.tests), "label": case.label})
        yield test_case(h, i, seeded(case, secret))


def run_benchmark(h: Harness, shapes: ShapeSet, secret: int | None = None) -> Iterator[CaseResult]:
    """``benchmark`` mode: warm up on the first case, then time every case with recheck."""
    t = shapes.timing
    cases = [seeded(c, secret) for c in shapes.benchmarks]
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
    cases = [seeded(c, secret) for c in shapes.benchmarks]
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
    case = seeded(shapes.benchmarks[0], secret)
    try:
        return _single_call(h, case, "profiler" if profiler else "nvtx")
    except Exception as exc:  # noqa: BLE001
        return CaseResult(0, case, "error", error_text(exc), seeds=(case.seed,)), ""


#: The modes that run a list of cases (profile mode runs one call: :func:`run_profile`).
CASE_MODES: dict[Mode, Callable[[Harness, ShapeSet, int | None], Iterator[CaseResult]]] = {
    Mode.TEST: run_test, Mode.BENCHMARK: run_benchmark, Mode.LEADERBOARD: run_leaderboard,
}
