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
ones, whose content can move a kernel's time).

What it cannot know: the noise of the real run (a pilot's few repeats sample it roughly, and
repeats grow with its square; a rare slow repeat, which can add a hundred repeats to a case,
is predicted for the typical run, not the unlucky one), and compilation, which the pilot pays
and caches (reported apart).
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
from evaluator.results import CaseResult
from evaluator.runner import RunOptions, StagePlan, plan_stages, run_stage, spare_count
from evaluator.shapes import Case, ShapeSet, Timing
from reference.checker import verdict
from reference.inputs import generate_input

__all__ = [
    "CasePilot",
    "Estimate",
    "StageEstimate",
    "estimate_run",
    "fixed_costs",
    "predict_repeats",
    "render_estimate",
    "settled_spread",
]

PILOT_REPEATS = 10
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
    """One stage's predicted timed repeats and wall time, for qrbench and for the contest."""

    name: str
    repeats: int
    wall_s: float
    contest_repeats: int
    contest_wall_s: float
    contest_limit_s: float

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
    ``reports/h200/2026-12-02-blocked_wy-time-to-verdict-spare-workers.json``). The rule's
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


def _pilot_source(shapes: ShapeSet, mode: str, secret: int | None, repeats: int,
                  pilots: list[CasePilot], test_walls: list[tuple[float, float]]) -> PilotSource:
    """The pilot's stage: every test case twice (when the mode runs them), then every benchmark
    case with ``repeats`` timed repeats; what each cost goes to ``pilots`` and ``test_walls``
    (each test case's first and second call)."""

    def source(h: Harness, executor: Executor) -> Iterator[CaseResult]:
        if "test" in STAGES_BY_MODE[mode]:
            for i, case in enumerate(shapes.tests):
                start = time.perf_counter()
                test_case(h, i, seeded(case, secret))  # first call: compiles, or loads what is cached
                first = time.perf_counter() - start
                start = time.perf_counter()
                yield test_case(h, i, seeded(case, secret))
                test_walls.append((first, time.perf_counter() - start))
        forward = h.progress
        for i, case in enumerate(seeded(c, secret) for c in shapes.benchmarks):
            timed_s: list[float] = []

            def watch(event: dict[str, object], timed_s: list[float] = timed_s) -> None:
                if event.get("event") == "repeat":
                    timed_s.append(float(event["elapsed_s"]))  # type: ignore[arg-type]
                forward(event)

            h.progress = watch
            checked_before = h.ledger.seconds["check"]
            start = time.perf_counter()
            result = benchmark_case(h, i, case, BenchSettings(True, repeats, math.inf), shapes.timing)
            wall_s = time.perf_counter() - start
            checked_s = h.ledger.seconds["check"] - checked_before
            h.progress = forward
            yield result
            if result.stats is None or not timed_s:
                continue
            runs = len(timed_s)
            count = shapes.timing.input_count(case)
            stats = result.stats
            # The median repeat: a case's first repeats carry one-off costs the long run amortises.
            repeat_s = statistics.median(b - a for a, b in zip([0.0, *timed_s], timed_s, strict=False))
            pilots.append(CasePilot(
                case=case, inputs=count, call_s=stats.mean_ns / 1e9, repeat_s=repeat_s,
                check_s=checked_s / (runs + 1), first_pass_s=wall_s - timed_s[-1], published_check_s=0.0,
                spread=settled_spread(result.samples_ns),
                contest_spread=_same_inputs_spread(h, i, case, repeats, shapes.timing),
            ))

    return source


def settled_spread(samples: Sequence[float]) -> tuple[float, ...]:
    """A pilot pass's repeats after its first, each over their mean (``(1.0,)`` when fewer than
    two). Both of a case's pilot passes start with a repeat after a pause (their correctness
    pass's checks), which runs 1-4% slower than one back to back
    (reports/h200/2026-12-01-pause-before-repeat.md); a long run's repeats are mostly not
    (hardened) or all are (the contest's, each after its check), so that one repeat is the
    pilot's alone. Counted, it gave 640x512 a 2.06% spread against the 0.10-0.15% of the
    contest's own run (``reports/h200/2026-12-02-blocked_wy-estimate-plain-spread.txt``,
    ``reports/h200/2026-12-02-blocked_wy-time-to-verdict-compat.json``)."""
    settled = list(samples[1:])
    mean = statistics.fmean(settled) if settled else 0.0
    if len(settled) < 2 or mean <= 0:
        return (1.0,)
    return tuple(x / mean for x in settled)


def _cv(spread: Sequence[float]) -> float:
    """The relative standard deviation of samples given over their mean (the estimate's table)."""
    return statistics.stdev(spread) if len(spread) > 1 else 0.0


def _same_inputs_spread(h: Harness, index: int, case: Case, repeats: int, timing: Timing) -> tuple[float, ...]:
    """The repeats of ``case`` timed the contest's way: the same inputs in every
    repeat, no recheck. Only the prediction reads it (no result is reported from this pass);
    a kernel that caches outputs by pointer shows the contest's own blind spot here, which is
    what the contest's repeats will follow.

    The samples are :func:`settled_spread`'s.
    """
    hardening, progress = h.hardening, h.progress
    h.hardening, h.progress = replace(hardening, fresh_inputs=False), no_progress
    try:
        result = benchmark_case(h, index, case, BenchSettings(False, repeats, math.inf), timing)
    finally:
        h.hardening, h.progress = hardening, progress
    return settled_spread(result.samples_ns)


def _published_check_s(case: Case, checks: int = PUBLISHED_CHECKS) -> float:
    """One check of one output with the contest's checker (its per-matrix Q loop), on geqrf's
    output of an input of this shape: its cost depends on the shape alone. The median of
    ``checks`` timed checks after a warm one: a single one read 3.6 ms at 20x32 on an H200 where
    the contest's run spent about 2.5 ms a check (``reports/h200/2026-12-01-blocked_wy-estimate.txt``,
    ``reports/h200/2026-12-01-blocked_wy-time-to-verdict-compat.json``: 932 ranked repeats of 50
    checks in its 120 s cap)."""
    a = generate_input(**replace(case, seed=1).generator_args())
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


def _timed_pass(pilots: Sequence[CasePilot], settings: BenchSettings, contest: bool) -> tuple[int, float]:
    """Repeats and wall time of one timed pass over ``pilots`` with ``settings``."""
    rule = ContestRule(budget_s=settings.budget_s)
    repeats, wall_s = 0, 0.0
    for p in pilots:
        if contest:
            checks = p.inputs * p.published_check_s if settings.recheck else 0.0
            repeat_s, first_s = p.call_s * p.inputs + checks, p.inputs * (p.call_s + p.published_check_s)
        else:
            repeat_s = p.repeat_s if settings.recheck else max(p.repeat_s - p.check_s, p.call_s * p.inputs)
            first_s = p.first_pass_s
        spread = p.contest_spread if contest else p.spread
        n = predict_repeats(rule, settings.max_repeats, p.call_s * 1e9, spread, repeat_s)
        repeats += n
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
    wall_s, contest_wall_s = fixed_s + tests_s, contest_fixed_s + tests_s
    for cases, settings in passes:
        n, w = _timed_pass(cases, settings, contest=False)
        cn, cw = _timed_pass(cases, settings, contest=True)
        repeats, wall_s = repeats + n, wall_s + w
        contest_repeats, contest_wall_s = contest_repeats + cn, contest_wall_s + cw
    return StageEstimate(name, repeats, wall_s, contest_repeats, contest_wall_s, limit_s)


def fixed_costs(breakdown: dict[str, float], stages: int, spares: bool,
                reload_s: float = 0.0) -> list[tuple[float, float]]:
    """Each stage's seconds beyond its cases' steady cost, (qrbench, the contest's protocol), from
    the pilot's ``breakdown``: starting a worker and importing the submission, qrbench's
    calibration, and ``reload_s``, what a fresh worker's first calls cost over later ones
    (loading the kernels, library handles), which every stage's worker pays again. With
    ``spares`` a stage after the first finds its worker started (:mod:`evaluator.workers`); the
    contest's service starts each one fresh."""
    start, load = breakdown.get("worker_start", 0.0), breakdown.get("load", 0.0)
    calibration = breakdown.get("calibration", 0.0)
    return [((0.0 if spares and i else start) + calibration + load + reload_s, start + load + reload_s)
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


def estimate_run(contestant: Contestant, mode: str, shapes: ShapeSet, options: RunOptions,
                 repeats: int = PILOT_REPEATS, on_progress: Any = None) -> Estimate:
    """Pilot ``contestant`` on ``shapes`` (hardened, one worker) and predict each stage of ``mode``."""
    if mode not in (Mode.TEST, Mode.BENCHMARK, Mode.LEADERBOARD):
        raise ValueError(f"--estimate predicts test, benchmark and leaderboard runs, not {mode}")
    pilots: list[CasePilot] = []
    test_walls: list[tuple[float, float]] = []
    timing = options.timing_for(shapes)
    source = _pilot_source(replace(shapes, timing=timing), mode, options.seed, repeats, pilots, test_walls)
    scratch = Scratch.for_contestant(contestant.sha256)
    caches_before = scratch.compile_cache_state()
    start = time.perf_counter()
    stage, _ = run_stage(contestant, StagePlan("pilot", Mode.BENCHMARK, options.seed), shapes,
                         replace(options, compat=False), on_progress=on_progress, cases_of=source)
    pilot_wall_s = time.perf_counter() - start
    notes = [f"the pilot's stage ended {stage.status}: {stage.reason}"] if stage.status not in ("pass", "fail") else []
    reload_s = _first_calls_over_later(test_walls, scratch.compile_cache_state() != caches_before, notes)
    published: dict[tuple[int, int], float] = {}
    for i, p in enumerate(pilots):
        key = (p.case.batch, p.case.n)
        if key not in published:
            published[key] = _published_check_s(p.case)
        pilots[i] = replace(p, published_check_s=published[key])
    breakdown = stage.breakdown_s or {}
    names = STAGES_BY_MODE[mode]
    spares = spare_count(plan_stages(mode, options.seed), replace(options, compat=False)) > 0
    tests_s = sum(second for _, second in test_walls)
    stages = tuple(
        _stage(name, pilots, timing, fixed_s, contest_fixed_s, tests_s if name == "test" else 0.0,
               shapes.timeout_s(stage_mode(name)))
        for name, (fixed_s, contest_fixed_s)
        in zip(names, fixed_costs(breakdown, len(names), spares, reload_s or 0.0), strict=True)
    )
    return Estimate(contestant.name, mode, stages, tuple(pilots), pilot_wall_s,
                    breakdown.get("untimed_calls", 0.0), reload_s, tuple(notes))


def render_estimate(est: Estimate) -> str:
    """The estimate as plain text: per case, per stage, then the totals and any warning."""
    case_rows = [[p.case.label, p.inputs, f"{p.call_s * 1e3:.3f}", f"{p.cv * 100:.2f}", f"{p.contest_cv * 100:.2f}",
                  f"{p.repeat_s * 1e3:.1f}", f"{p.published_check_s * 1e3:.1f}"] for p in est.cases]
    stage_rows = [[s.name, s.repeats, f"{s.wall_s:.0f}", s.contest_repeats, f"{s.contest_wall_s:.0f}",
                   f"{s.contest_limit_s:.0f}" + (" (over)" if s.over_limit else "")] for s in est.stages]
    lines = [
        f"Estimate for {est.contestant}, {est.mode} (pilot: {est.pilot_wall_s:.0f} s, of which first calls "
        f"{est.first_calls_s:.0f} s; compiles are cached for the real run; "
        + ("a fresh worker's first calls, which every stage pays again, not measured)" if est.reload_s is None else
           f"every stage pays {est.reload_s:.1f} s for a fresh worker's first calls)"),
        tabulate(case_rows, headers=["case", "inputs", "ms per call", "cv %", "cv % (same inputs)",
                                     "ms per repeat (qrbench)", "ms per published check"], tablefmt="github"),
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
