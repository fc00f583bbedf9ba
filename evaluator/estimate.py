"""``--estimate``: how long a run will take, before it runs, for qrbench and for the contest.

A short pilot in one hardened worker measures what a run's wall time is made of: each test
case once, then each benchmark case through the real protocol (correctness pass, then a few
timed repeats with fresh inputs and every output checked), and the worker's start, calibration
and load. From the pilot's per-call times and the wall time of a repeat, the contest's stopping
rule itself (:meth:`~evaluator.measure.stopping.ContestRule.stops`, played over runs made up by
drawing the pilot's own samples) predicts the repeats of every timed pass, and so each stage's
wall. The contest's protocol is predicted from the same pilot with its own costs: the published
checker (its median over a few checks per shape) on every output of every repeat, and no
hand-over; and with its own samples, which a second short pass per case takes the contest's
way, timing the same inputs in every repeat (the contest reuses its inputs; qrbench makes fresh
ones, whose content can move a kernel's time), each repeat checked before the next.

A noisy case whose repeats are cheap is sampled further in both passes (:func:`more_repeats`).
Each stage's wall is its cases' plus what the pilot's own stage spent outside its cases: the
worker's start (beside the spares a ranked submission starts with its test stage), calibration,
loading, and the stage's plumbing (containment, the environment's fingerprint, stopping the
worker); the first stage also pays what the parent loads once per process for its checks.

What it cannot know: the noise of the real run (a pilot samples it roughly, and repeats grow
with its square; a rare slow repeat, which can add a hundred repeats to a case, is predicted
for the typical run, not the unlucky one), and compilation, which the pilot pays and caches
(reported apart).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from tabulate import tabulate

from evaluator.contestant import Contestant
from evaluator.execution import Executor
from evaluator.hardening.containment import prepare_checks, worker_scratch
from evaluator.hardening.sandbox.scratch import Scratch
from evaluator.measure.stopping import ContestRule
from evaluator.measure.timing import synchronize
from evaluator.modes import STAGES_BY_MODE, Mode, stage_mode
from evaluator.protocol import (
    WALL_CAP_S,
    BenchSettings,
    Harness,
    benchmark_case,
    no_progress,
    seeded,
    test_case,
)
from evaluator.results import CaseResult, StageResult
from evaluator.runner import RunOptions, StagePlan, clock_sampler, plan_stages, run_stage, spare_count
from evaluator.shapes import Case, ShapeSet, Timing
from evaluator.workers import SpareWorkers
from reference.checker import verdict
from reference.inputs import generate_input

__all__ = [
    "CasePilot",
    "Estimate",
    "StageEstimate",
    "estimate_run",
    "fixed_costs",
    "more_repeats",
    "predict_repeats",
    "render_estimate",
    "settled_spread",
]

PILOT_REPEATS = 10
# A case whose pilot pass ran all its repeats without meeting the contest's rule, and whose repeats
# are cheap, is sampled again, up to PILOT_MAX_REPEATS samples or PILOT_PASS_S of repeats a pass.
# Repeats grow with the square of a case's spread, which ten samples give to about 24% and 200 to
# about 5%: ten of blocked_wy's 20x32 read 20.5% and 1.31% in two H200 pilots minutes apart
# (reports/h200/2026-12-02-blocked_wy-estimate-ten-samples-{1,2}.txt). A case that cannot take
# PILOT_REPEATS more in a pass's second is expensive and keeps its first pass's samples.
PILOT_MAX_REPEATS = 200
PILOT_PASS_S = 1.0
RESAMPLES = 201  # made-up runs per prediction; odd, so their median is one run's count
BLOCK_REPEATS = 1024  # repeats of every made-up run played at once
PUBLISHED_CHECKS = 5  # timed checks per shape, after a warm one; their median is the prediction's


@dataclass(frozen=True)
class CasePilot:
    """What the pilot measured of one benchmark case (times per call are for one input)."""

    case: Case
    inputs: int
    call_s: float
    repeat_s: float
    check_s: float
    first_pass_s: float
    published_check_s: float
    spread: tuple[float, ...]
    contest_spread: tuple[float, ...]

    @property
    def cv(self) -> float:
        """Relative standard deviation of the pilot's fresh-input repeats (qrbench's)."""
        return _cv(self.spread)

    @property
    def contest_cv(self) -> float:
        """Relative standard deviation of the pilot's same-input repeats (the contest's)."""
        return _cv(self.contest_spread)


@dataclass(frozen=True)
class StageEstimate:
    """One stage's predicted timed repeats and wall time, for qrbench and for the contest, and
    each case's repeats in its timed pass (none in a stage without one)."""

    name: str
    repeats: int
    wall_s: float
    contest_repeats: int
    contest_wall_s: float
    contest_limit_s: float
    case_repeats: tuple[int, ...] = ()
    contest_case_repeats: tuple[int, ...] = ()

    @property
    def over_limit(self) -> bool:
        return self.contest_wall_s > self.contest_limit_s


@dataclass(frozen=True)
class Estimate:
    contestant: str
    mode: str
    stages: tuple[StageEstimate, ...]
    cases: tuple[CasePilot, ...]
    pilot_wall_s: float
    first_calls_s: float
    reload_s: float | None  # a fresh worker's first calls over later ones; None: not measured
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def wall_s(self) -> float:
        return sum(s.wall_s for s in self.stages)

    @property
    def contest_wall_s(self) -> float:
        return sum(s.contest_wall_s for s in self.stages)


def predict_repeats(rule: ContestRule, max_repeats: int, call_ns: float, spread: Sequence[float],
                    repeat_wall_s: float, resamples: int = RESAMPLES) -> int:
    """How many repeats the timed loop runs for a case whose calls take ``call_ns`` with the
    pilot's relative samples ``spread`` (each over their mean) and ``repeat_wall_s`` of wall time
    per repeat: the median, over ``resamples`` made-up runs whose samples are drawn from
    ``spread``, of where the contest's rule stops them under the loop's caps (``max_repeats``,
    and the wall-clock cap from the rule's third sample).

    Drawn, not modelled: a case's own tail comes back as often as the pilot met it (20x32's
    frequent slow repeats run it to its caps, as the real runs do), and the median run is the
    typical one. A plain spread put one slow repeat among a pilot's nine into every repeat's
    noise: 5.2% at 640x512 mixed, whose repeats the contest follows with 0.37 s of published
    checks each, predicted 687 s for a contest run measured at 394 s on the same lease
    (``reports/h200/2026-12-02-blocked_wy-estimate-settled-spread.txt``,
    ``reports/h200/2026-12-02-blocked_wy-time-to-verdict-spare-workers.json.gz``). The rule's
    budget reads the per-call mean, as the loop's samples are per call (the contest's too).
    """
    generator = torch.Generator().manual_seed(0)  # the same pilot always gives the same prediction
    pool = torch.tensor(spread, dtype=torch.float64) * call_ns
    counts = torch.full((resamples,), max_repeats)
    pending = torch.ones(resamples, dtype=torch.bool)
    sums, done = None, 0
    while done < max_repeats and bool(pending.any()):  # a block of repeats at a time: --repeats may be large
        repeat = torch.arange(done + 1, min(max_repeats, done + BLOCK_REPEATS) + 1)
        samples = pool[torch.randint(len(pool), (resamples, len(repeat)), generator=generator)]
        elapsed_s = repeat.to(torch.float64) * repeat_wall_s
        stops, sums = rule.stops(samples, elapsed_s, sums)
        stops |= (repeat >= rule.min_samples) & (elapsed_s > WALL_CAP_S)
        stopped = pending & stops.any(-1)
        counts[stopped] = done + 1 + stops[stopped].to(torch.int8).argmax(-1)
        pending &= ~stopped
        done += len(repeat)
    return int(counts.median())


PilotSource = Callable[[Harness, Executor], Iterator[CaseResult]]


@dataclass(frozen=True)
class _Pass:
    """One pilot pass over a case: its result, the timed loop's wall time after each of its
    repeats, and the seconds it took in all and checking (the parent's checks and the worker's
    mirror checks: what a pass without recheck does not pay)."""

    result: CaseResult
    elapsed_s: tuple[float, ...]
    wall_s: float
    check_s: float

    @property
    def intervals(self) -> list[float]:
        """The wall time of each repeat."""
        return [b - a for a, b in zip([0.0, *self.elapsed_s], self.elapsed_s, strict=False)]


def _timed(h: Harness, index: int, case: Case, settings: BenchSettings, timing: Timing) -> _Pass:
    """:func:`benchmark_case`, its repeats' progress events watched (and passed on)."""
    elapsed: list[float] = []
    forward = h.progress

    def watch(event: dict[str, object]) -> None:
        if event.get("event") == "repeat":
            elapsed.append(float(event["elapsed_s"]))  # type: ignore[arg-type]
        forward(event)

    h.progress = watch
    checked_before = _checking_s(h)
    start = time.perf_counter()
    try:
        result = benchmark_case(h, index, case, settings, timing)
    finally:
        h.progress = forward
    return _Pass(result, tuple(elapsed), time.perf_counter() - start, _checking_s(h) - checked_before)


def _checking_s(h: Harness) -> float:
    return h.ledger.seconds["check"] + h.ledger.seconds["mirror_check"]


def more_repeats(samples_ns: Sequence[float], elapsed_s: Sequence[float], repeats: int,
                 max_repeats: int = PILOT_MAX_REPEATS, pass_s: float = PILOT_PASS_S) -> int:
    """How many repeats a second pilot pass takes after a pass of ``repeats`` whose samples are
    ``samples_ns`` and whose loop had run ``elapsed_s`` after each repeat: none when the pass
    stopped early or its samples met the contest's rule at its last repeat (a settled case: the
    real run stops soon too), nor when fewer than ``repeats`` more fit in ``pass_s`` (an expensive
    case); else as many as fit, up to ``max_repeats`` samples in all (:data:`PILOT_MAX_REPEATS`
    says why). The rule judges the samples :func:`settled_spread` keeps, for the reason given
    there: a pass's slow first repeat alone would leave settled cases looking unsettled, each
    sampled again for nothing."""
    if len(elapsed_s) < repeats or len(samples_ns) < 2:
        return 0
    if ContestRule(budget_s=math.inf).should_stop(samples_ns[1:], elapsed_s[-1]):  # the pilot's rule, settled
        return 0
    more = min(max_repeats - len(samples_ns), int(pass_s * len(elapsed_s) / elapsed_s[-1]))
    return more if more >= repeats else 0


def _sampled(h: Harness, index: int, case: Case, recheck: bool, repeats: int, max_repeats: int,
             timing: Timing) -> list[_Pass]:
    """A case's pilot pass of ``repeats``, and a second whose samples add to the first's where
    :func:`more_repeats` asks for one."""
    first = _timed(h, index, case, BenchSettings(recheck, repeats, math.inf), timing)
    more = more_repeats(first.result.samples_ns, first.elapsed_s, repeats, max_repeats) if first.result.passed else 0
    if not more:
        return [first]
    return [first, _timed(h, index, case, BenchSettings(recheck, more, math.inf), timing)]


@dataclass
class _PilotLog:
    """What the pilot's stage measured beside its results: each benchmark case's pilot, each test
    case's first and second call, and the stage's seconds from its first case to the end of its
    last (what it reported included)."""

    pilots: list[CasePilot] = field(default_factory=list)
    test_walls: list[tuple[float, float]] = field(default_factory=list)
    cases_s: float = 0.0


def _pilot_source(shapes: ShapeSet, mode: str, secret: int | None, repeats: int, max_repeats: int,
                  log: _PilotLog, settle: Callable[[], None]) -> PilotSource:
    """The pilot's stage: every test case twice (when the mode runs them), then, once ``settle``
    returns, every benchmark case through :func:`_sampled` (``repeats`` timed repeats, more where
    it asks), both qrbench's way and the contest's; what each cost goes to ``log``.

    ``settle`` waits for the spare workers' imports, as the run's second stage does before its
    first timed case (:meth:`~evaluator.workers.SpareWorkers.take`): no timed repeat of the run
    shares the machine with a worker starting, so none of the pilot's may. A warm pilot, its test
    cases quick, otherwise times its first cases during those imports, whose spread is then the
    run's no more (``reports/h200/2026-12-02-blocked_wy-estimate-spares-importing{,-cold}.txt``
    against ``...-estimate-spares-settled-{1,2,3}.txt``; reports/h200/README.md has the figures)."""

    def source(h: Harness, executor: Executor) -> Iterator[CaseResult]:
        begun = time.perf_counter()
        try:
            yield from cases(h)
        finally:
            log.cases_s = time.perf_counter() - begun

    def cases(h: Harness) -> Iterator[CaseResult]:
        if "test" in STAGES_BY_MODE[mode]:
            for i, case in enumerate(shapes.tests):
                start = time.perf_counter()
                test_case(h, i, seeded(case, secret))  # first call: compiles, or loads what is cached
                first = time.perf_counter() - start
                start = time.perf_counter()
                yield test_case(h, i, seeded(case, secret))
                log.test_walls.append((first, time.perf_counter() - start))
        settle()
        for i, case in enumerate(seeded(c, secret) for c in shapes.benchmarks):
            passes = _sampled(h, i, case, True, repeats, max_repeats, shapes.timing)
            result = passes[0].result
            yield result
            if result.stats is None or not passes[0].elapsed_s:
                continue
            samples = [s for p in passes for s in p.result.samples_ns]
            runs = sum(len(p.elapsed_s) for p in passes)
            # The median repeat: a case's first repeats carry one-off costs the long run amortises.
            repeat_s = statistics.median(x for p in passes for x in p.intervals)
            log.pilots.append(CasePilot(
                case=case, inputs=shapes.timing.input_count(case), call_s=statistics.fmean(samples) / 1e9,
                repeat_s=repeat_s, check_s=sum(p.check_s for p in passes) / (runs + len(passes)),
                first_pass_s=passes[0].wall_s - passes[0].elapsed_s[-1], published_check_s=0.0,
                spread=settled_spread(*(p.result.samples_ns for p in passes)),
                contest_spread=_same_inputs_spread(h, i, case, repeats, max_repeats, shapes.timing),
            ))

    return source


def settled_spread(*passes: Sequence[float]) -> tuple[float, ...]:
    """The repeats of a case's pilot passes, each pass's first left out, each over their mean
    (``(1.0,)`` when fewer than two). Every pilot pass starts with a repeat after a pause (its
    correctness pass's checks), which runs 1-4% slower than one back to back
    (reports/h200/2026-12-01-pause-before-repeat.md); a long run's repeats are mostly not
    (hardened) or all are (the contest's, each after its check), so that one repeat is the
    pilot's alone. Counted, it gave 640x512 a 2.06% spread against the 0.10-0.15% of the
    contest's own run (``reports/h200/2026-12-02-blocked_wy-estimate-plain-spread.txt``,
    ``reports/h200/2026-12-02-blocked_wy-time-to-verdict-compat.json.gz``)."""
    settled = [x for samples in passes for x in samples[1:]]
    mean = statistics.fmean(settled) if settled else 0.0
    if len(settled) < 2 or mean <= 0:
        return (1.0,)
    return tuple(x / mean for x in settled)


def _cv(spread: Sequence[float]) -> float:
    """The relative standard deviation of samples given over their mean (the estimate's table)."""
    return statistics.stdev(spread) if len(spread) > 1 else 0.0


def _same_inputs_spread(h: Harness, index: int, case: Case, repeats: int, max_repeats: int,
                        timing: Timing) -> tuple[float, ...]:
    """The repeats of ``case`` timed the contest's way: the same inputs in every repeat, each
    repeat's outputs checked before the next, as the contest checks them. Only the prediction
    reads it (no result is reported from this pass); a kernel that caches outputs by pointer
    shows the contest's own blind spot here, which is what the contest's repeats will follow.

    The checks are what make the contest's repeats as noisy as they are: back to back, blocked_wy's
    20x32 repeats were tight but for a few slow ones (16.4% in all), so most runs drawn from them
    met the contest's rule by their fourth repeat, where the contest's own runs, each repeat after
    its checks, spread 15-22% and ran 572-932 ranked repeats
    (``reports/h200/2026-12-02-blocked_wy-estimate-back-to-back.txt``,
    ``reports/h200/2026-12-02-blocked_wy-time-to-verdict-spare-workers.json.gz``). The pilot's
    checks are qrbench's, not the contest's slower ones, which the prediction adds as time.

    Sampled as qrbench's pass is (:func:`_sampled`); the samples are :func:`settled_spread`'s.
    """
    hardening, progress = h.hardening, h.progress
    h.hardening, h.progress = replace(hardening, fresh_inputs=False), no_progress
    try:
        passes = _sampled(h, index, case, True, repeats, max_repeats, timing)
    finally:
        h.hardening, h.progress = hardening, progress
    return settled_spread(*(p.result.samples_ns for p in passes))


def _published_check_s(case: Case, device: torch.device, checks: int = PUBLISHED_CHECKS) -> float:
    """One check of one output with the contest's checker (its per-matrix Q loop), on geqrf's
    output of an input of this shape: its cost depends on the shape alone. The median of
    ``checks`` timed checks after a warm one: a single one read 3.6 ms at 20x32 on an H200 where
    the contest's run spent about 2.5 ms a check (``reports/h200/2026-12-01-blocked_wy-estimate.txt``,
    ``reports/h200/2026-12-01-blocked_wy-time-to-verdict-compat.json.gz``: 932 ranked repeats of 50
    checks in its 120 s cap)."""
    a = generate_input(**replace(case, seed=1).generator_args(), device=device)
    output = torch.geqrf(a)
    verdict(a, output, "published")  # first call: library handles and workspaces
    times: list[float] = []
    for _ in range(checks):
        synchronize()
        start = time.perf_counter()
        verdict(a, output, "published")
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _timed_pass(pilots: Sequence[CasePilot], settings: BenchSettings, contest: bool) -> tuple[list[int], float]:
    """Each case's repeats, and the wall time, of one timed pass over ``pilots`` with ``settings``."""
    rule = ContestRule(budget_s=settings.budget_s)
    repeats, wall_s = [], 0.0
    for p in pilots:
        if contest:
            checks = p.inputs * p.published_check_s if settings.recheck else 0.0
            repeat_s, first_s = p.call_s * p.inputs + checks, p.inputs * (p.call_s + p.published_check_s)
        else:
            repeat_s = p.repeat_s if settings.recheck else max(p.repeat_s - p.check_s, p.call_s * p.inputs)
            first_s = p.first_pass_s
        spread = p.contest_spread if contest else p.spread
        n = predict_repeats(rule, settings.max_repeats, p.call_s * 1e9, spread, repeat_s)
        repeats.append(n)
        wall_s += first_s + n * repeat_s
    return repeats, wall_s


def _stage(name: str, pilots: Sequence[CasePilot], timing: Timing, fixed_s: float, contest_fixed_s: float,
           tests_s: float, limit_s: float) -> StageEstimate:
    mode = stage_mode(name)
    passes: list[tuple[Sequence[CasePilot], BenchSettings]] = []
    if mode == Mode.BENCHMARK:
        passes = [(pilots[:1], BenchSettings(False, timing.benchmark_warmup_repeats, timing.benchmark_warmup_s)),
                  (pilots, BenchSettings(True, timing.benchmark_repeats, timing.benchmark_budget_s))]
    elif mode == Mode.LEADERBOARD:
        passes = [(pilots, BenchSettings(False, timing.leaderboard_warmup_repeats, timing.leaderboard_warmup_s)),
                  (pilots, BenchSettings(True, timing.leaderboard_repeats, timing.leaderboard_budget_s))]
    repeats = contest_repeats = 0
    case_repeats: list[int] = []
    contest_case_repeats: list[int] = []
    wall_s, contest_wall_s = fixed_s + tests_s, contest_fixed_s + tests_s
    for cases, settings in passes:  # the warm-up, then the timed pass, whose repeats per case are kept
        case_repeats, w = _timed_pass(cases, settings, contest=False)
        contest_case_repeats, cw = _timed_pass(cases, settings, contest=True)
        repeats, wall_s = repeats + sum(case_repeats), wall_s + w
        contest_repeats, contest_wall_s = contest_repeats + sum(contest_case_repeats), contest_wall_s + cw
    return StageEstimate(name, repeats, wall_s, contest_repeats, contest_wall_s, limit_s,
                         tuple(case_repeats), tuple(contest_case_repeats))


def fixed_costs(breakdown: dict[str, float], stages: int, spares: bool, *, outside_s: float,
                reload_s: float = 0.0, parent_s: float = 0.0) -> list[tuple[float, float]]:
    """Each stage's seconds beyond its cases' steady cost, (qrbench, the contest's protocol), from
    the pilot stage's ``breakdown`` and ``outside_s``, its seconds outside its cases: starting a
    worker and importing the submission, qrbench's calibration, the rest of ``outside_s`` (the
    stage's plumbing: containment, the environment's fingerprint, stopping the worker, which
    both protocols' stages pay), and ``reload_s``, what a fresh worker's first calls cost over
    later ones (loading the kernels, library handles), which every stage's worker pays again.
    With ``spares`` a stage after the first finds its worker started (:mod:`evaluator.workers`);
    the contest's service starts each one fresh. ``parent_s``: what qrbench's parent loads once
    for its checks, in its first stage (the contest's checks run in each stage's worker)."""
    start, load = breakdown.get("worker_start", 0.0), breakdown.get("load", 0.0)
    calibration = breakdown.get("calibration", 0.0)
    plumbing = max(0.0, outside_s - start - calibration - load)
    return [((0.0 if spares and i else start) + calibration + load + plumbing + reload_s + (0.0 if i else parent_s),
             start + load + plumbing + reload_s)
            for i in range(stages)]


def _first_calls_over_later(test_walls: Sequence[tuple[float, float]], compiled: bool,
                            notes: list[str]) -> float | None:
    """What the pilot's test cases' first calls cost over their second: loading what the caches
    hold, which every stage's fresh worker pays again (1.7-2.0 s of untimed calls in each of
    blocked_wy's measured stages, reports/h200/2026-12-02-spare-workers-on-the-h200.md). None
    when not measured: no test cases, or a pilot that ``compiled`` (its first calls are compile
    time, which the real run finds cached), which goes to ``notes``."""
    if not test_walls:
        return None
    reload_s = sum(max(0.0, first - second) for first, second in test_walls)
    if compiled:
        notes.append(f"the pilot compiled the kernel's code ({reload_s:.0f} s of first calls): each stage's "
                     "loading of it from the cache is not in the prediction; a second --estimate includes it")
        return None
    return reload_s


def _parent_setup_s(options: RunOptions, shapes: ShapeSet) -> float:
    """Load what a hardened run's parent loads once, in its first stage, for its checks (their code,
    the clocks' library), and return how long it took: done before the pilot's stage, so that
    stage's own seconds are what every stage pays."""
    start = time.perf_counter()
    prepare_checks(options.device, shapes.sizes())
    clock_sampler(torch.device(options.device))
    return time.perf_counter() - start


def _pilot_notes(stage: StageResult) -> list[str]:
    """Why the pilot's stage did not pass, if it did not: the predictions then rest on the cases it
    timed before it stopped (none, where its first case failed)."""
    if stage.passed:
        return []
    failed = next((c for c in stage.cases if c.status != "pass"), None)
    why = stage.reason or (f"{failed.case.label}: {failed.message}" if failed is not None else "")
    return [f"the pilot's stage ended {stage.status}: {why}"]


def estimate_run(contestant: Contestant, mode: str, shapes: ShapeSet, options: RunOptions,
                 repeats: int = PILOT_REPEATS, on_progress: Any = None,
                 max_repeats: int = PILOT_MAX_REPEATS) -> Estimate:
    """Pilot ``contestant`` on ``shapes`` (hardened, one worker) and predict each stage of ``mode``.

    Where the run starts spare workers beside its first stage's (:func:`~evaluator.runner.spare_count`),
    the pilot starts as many beside its own, unused: its worker's start is then the first stage's,
    which they slow (reports/h200/2026-12-02-spare-workers-on-the-h200.md). The contest's workers,
    which start alone, are predicted with that start too: a pilot has one start to measure, and the
    contest's prediction errs on the safe side of its limits by the difference."""
    if mode not in (Mode.TEST, Mode.BENCHMARK, Mode.LEADERBOARD):
        raise ValueError(f"--estimate predicts test, benchmark and leaderboard runs, not {mode}")
    log = _PilotLog()
    timing = options.timing_for(shapes)
    hardened = replace(options, compat=False)
    scratch = Scratch.for_contestant(contestant.sha256)
    caches_before = scratch.compile_cache_state()
    start = time.perf_counter()
    parent_s = _parent_setup_s(hardened, shapes)
    with SpareWorkers(hardened, worker_scratch(contestant), spare_count(plan_stages(mode, None), hardened)) as spares:
        source = _pilot_source(replace(shapes, timing=timing), mode, options.seed, repeats, max_repeats, log,
                               spares.settle)
        stage, _ = run_stage(contestant, StagePlan("pilot", Mode.BENCHMARK, options.seed), shapes, hardened,
                             on_progress=on_progress, cases_of=source)
    pilot_wall_s = time.perf_counter() - start
    notes = _pilot_notes(stage)
    reload_s = _first_calls_over_later(log.test_walls, scratch.compile_cache_state() != caches_before, notes)
    pilots = log.pilots
    published: dict[tuple[int, int], float] = {}
    for i, p in enumerate(pilots):
        key = (p.case.batch, p.case.n)
        if key not in published:
            published[key] = _published_check_s(p.case, torch.device(options.device))
        pilots[i] = replace(p, published_check_s=published[key])
    breakdown = stage.breakdown_s or {}
    names = STAGES_BY_MODE[mode]
    spares = spare_count(plan_stages(mode, options.seed), hardened) > 0
    tests_s = sum(second for _, second in log.test_walls)
    costs = fixed_costs(breakdown, len(names), spares, outside_s=stage.wall_s - log.cases_s,
                        reload_s=reload_s or 0.0, parent_s=parent_s)
    stages = tuple(
        _stage(name, pilots, timing, fixed_s, contest_fixed_s, tests_s if name == "test" else 0.0,
               shapes.timeout_s(stage_mode(name)))
        for name, (fixed_s, contest_fixed_s) in zip(names, costs, strict=True)
    )
    return Estimate(contestant.name, mode, stages, tuple(pilots), pilot_wall_s,
                    breakdown.get("untimed_calls", 0.0), reload_s, tuple(notes))


def _timed_stage(est: Estimate) -> StageEstimate | None:
    """The stage whose timed pass the per-case table shows: the ranked pass, else the benchmark's."""
    timed = {s.name: s for s in est.stages if s.case_repeats}
    return timed.get("ranked") or timed.get("benchmark")


def render_estimate(est: Estimate) -> str:
    """The estimate as plain text: per case (with the repeats of the timed pass that drive the
    wall), per stage, then the totals and any warning."""
    timed = _timed_stage(est)
    case_rows = [[p.case.label, p.inputs, f"{p.call_s * 1e3:.3f}", f"{p.cv * 100:.2f}", f"{p.contest_cv * 100:.2f}",
                  f"{p.repeat_s * 1e3:.1f}", f"{p.published_check_s * 1e3:.1f}",
                  *((timed.case_repeats[i], timed.contest_case_repeats[i]) if timed else ())]
                 for i, p in enumerate(est.cases)]
    case_headers = ["case", "inputs", "ms per call", "cv %", "cv % (same inputs)", "ms per repeat (qrbench)",
                    "ms per published check"]
    if timed:
        case_headers += [f"{timed.name} repeats", f"contest {timed.name} repeats"]
    stage_rows = [[s.name, s.repeats, f"{s.wall_s:.0f}", s.contest_repeats, f"{s.contest_wall_s:.0f}",
                   f"{s.contest_limit_s:.0f}" + (" (over)" if s.over_limit else "")] for s in est.stages]
    lines = [
        f"Estimate for {est.contestant}, {est.mode} (pilot: {est.pilot_wall_s:.0f} s, of which first calls "
        f"{est.first_calls_s:.0f} s; compiles are cached for the real run; "
        + ("a fresh worker's first calls, which every stage pays again, not measured)" if est.reload_s is None else
           f"every stage pays {est.reload_s:.1f} s for a fresh worker's first calls)"),
        tabulate(case_rows, headers=case_headers, tablefmt="github"),
        "",
        tabulate(stage_rows, headers=["stage", "repeats", "wall s", "contest repeats", "contest wall s",
                                      "contest limit s"], tablefmt="github"),
        "",
        f"qrbench: about {est.wall_s:.0f} s; the contest's protocol: about {est.contest_wall_s:.0f} s "
        "(repeats: the contest's stopping rule over runs drawn from the pilot's repeats, fresh inputs for qrbench and "
        "the same inputs for the contest; the typical run, which a rare slow repeat can lengthen by minutes)",
    ]
    lines += [f"warning: the contest's protocol would run past the {s.name} stage's {s.contest_limit_s:.0f} s limit "
              f"(about {s.contest_wall_s:.0f} s)" for s in est.stages if s.over_limit]
    lines += [f"note: {n}" for n in est.notes]
    return "\n".join(lines)
