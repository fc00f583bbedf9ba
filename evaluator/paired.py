"""Paired, interleaved timing of two or more contestants on the same inputs (``qrbench compare``).

Separate runs drift: a change measured in one run against another made minutes earlier carries
whatever moved in between (clocks, temperature, other load), and the interval of a separate-runs
report holds none of it. Here every contestant's kernel sits in a worker of its own, hardened as
in a normal run, all on one device, and one parent drives them case by case:

1. make the case's inputs once (the contest's seeds), hand them to every contestant, and run each
   one's correctness pass on them, as a benchmark case does;
2. then blocks: each block draws fresh content once, and every contestant still in the case runs
   one timed repeat of that same content, in an order drawn at random for the block, with the
   parent's L2 flush, hand-over and checks of a benchmark repeat
   (:func:`evaluator.protocol.timed_repeat`); the first ``warmup_blocks`` blocks are discarded;
3. until the :class:`~evaluator.measure.stopping.BlockRule` is met (judged on the per-block ratios, the
   figure a comparison reports), or the case's budget or block cap is reached;
4. then each contestant's case rules (parent clock, stream join, physical floor).

A contestant whose repeat fails (a check, a rule, a raise) leaves the case and its blocks go on
without it; one whose worker is gone leaves the comparison. Each contestant's samples of a case
are its per-call times in block order, and ``orders`` says in which order each block ran them, so
:mod:`evaluator.paired_stats` pairs them block by block.

Everything here runs over :class:`~evaluator.protocol.Harness` objects, so the tests drive it with
in-process executors and fake timers; :mod:`evaluator.paired_runner` starts the workers.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from evaluator.execution import Handed, WorkerGone
from evaluator.measure.clocks import RepeatLog
from evaluator.measure.stopping import BlockRule
from evaluator.measure.timing import Measurement
from evaluator.protocol import (
    CaseInputs,
    Harness,
    Progress,
    error_text,
    first_pass,
    no_progress,
    seeded,
    timed_case_result,
    timed_repeat,
)
from evaluator.results import CaseResult
from evaluator.shapes import Case, ShapeSet, Timing

__all__ = ["PairedCase", "PairedSettings", "compare_case", "compare_shapes"]

_MIN_BLOCKS = 2  # the fewest blocks a case keeps before its budget may end it: an interval needs two


@dataclass(frozen=True)
class PairedSettings:
    """How long a comparison times each case: at most ``max_blocks`` kept blocks and ``budget_s``
    wall seconds of blocks (after the correctness passes, at least two blocks), the first
    ``warmup_blocks`` blocks discarded, stopping early by ``rule``."""

    max_blocks: int
    budget_s: float
    warmup_blocks: int = 1
    rule: BlockRule = field(default_factory=BlockRule)

    def __post_init__(self) -> None:
        if self.max_blocks < 1:
            raise ValueError(f"max_blocks must be at least 1, got {self.max_blocks}")
        if not self.budget_s > 0:
            raise ValueError(f"budget_s must be positive, got {self.budget_s}")
        if self.warmup_blocks < 0:
            raise ValueError(f"warmup_blocks must not be negative, got {self.warmup_blocks}")


@dataclass(frozen=True)
class PairedCase:
    """One case of a comparison: a result per contestant (its samples in block order), the order
    in which each kept block ran the contestants, and the contestants whose worker is gone (they
    leave the comparison)."""

    results: tuple[CaseResult, ...]
    orders: tuple[tuple[int, ...], ...]
    gone: Mapping[int, WorkerGone] = field(default_factory=dict)


class _Seat:
    """One contestant's place in a case: its harness, its hand-over of the inputs, its kept timed
    repeats, and what took it out of the case (a status and message, and its worker if gone)."""

    def __init__(self, harness: Harness | None, left: str = "") -> None:
        if harness is None and not left:
            raise ValueError("a contestant without a harness must be out of the comparison, with a reason")
        self._harness = harness
        self.handed: Handed | None = None
        self.measurements: list[Measurement] = []
        self.status = "skipped" if left else ""
        self.message = left
        self.gone: WorkerGone | None = None

    @property
    def active(self) -> bool:
        return not self.status

    @property
    def h(self) -> Harness:
        assert self._harness is not None, "a contestant out of the comparison has no harness"
        return self._harness

    def attempt(self, step: Callable[[], str]) -> None:
        """Run one step of this contestant's case: a message it returns, an exception the kernel
        raised, or a worker that went away takes the contestant out of the case."""
        try:
            message = step()
        except WorkerGone as gone:
            self.gone, self.status, self.message = gone, gone.status, gone.reason
            return
        except Exception as exc:  # noqa: BLE001 - any kernel exception is this contestant's failure
            self.status, self.message = "error", error_text(exc)
            return
        if message:
            self.status, self.message = "fail", message

    def hand(self, inputs: CaseInputs) -> str:
        with self.h.ledger.timing("inputs"):
            self.handed = self.h.executor.hand(inputs.pristine)
        return ""

    def repeat(self, inputs: CaseInputs, kept: bool) -> str:
        """One timed repeat of the block's content in this contestant's memory."""
        assert self.handed is not None
        inputs.tensors = self.handed.tensors
        measurement, message = timed_repeat(self.h, inputs, self.handed, recheck=True)
        if kept:
            self.measurements.append(measurement)
        return message

    def release(self) -> None:
        """Give the hand-over back (a worker already gone holds nothing to give back)."""
        if self.handed is None or self.gone is not None:
            return
        handed, self.handed = self.handed, None

        def give_back() -> str:
            self.h.executor.release(handed)
            return ""

        self.attempt(give_back)

    def samples(self, count: int) -> tuple[float, ...]:
        return tuple(m.elapsed_ns / count for m in self.measurements)


def _log_ratios(seats: Sequence[_Seat], count: int) -> list[list[float]]:
    """Per candidate still in the case, log(its time / the baseline's) of each kept block."""
    base = seats[0].samples(count)
    return [[math.log(c / b) for b, c in zip(base, seat.samples(count), strict=True)]
            for seat in seats[1:] if seat.active]


def _blocks(seats: Sequence[_Seat], index: int, inputs: CaseInputs, settings: PairedSettings, rng: random.Random,
            clock: Callable[[], int], progress: Progress) -> list[tuple[int, ...]]:
    """Time blocks until the rule, the cap or the budget ends them, or fewer than two
    contestants (the baseline among them) are left; the order of each kept block."""
    lead = seats[0].h
    count = len(inputs.pristine)
    orders: list[tuple[int, ...]] = []
    started_ns = clock()
    block = 0
    while seats[0].active and sum(seat.active for seat in seats) >= 2:
        kept = block >= settings.warmup_blocks
        if block == settings.warmup_blocks:  # the clock records cover the kept repeats only
            for seat in seats:
                if seat.active:
                    seat.h.clocks = RepeatLog(seat.h.sampler)
        order = [j for j, seat in enumerate(seats) if seat.active]
        rng.shuffle(order)
        with lead.ledger.timing("inputs"):
            inputs.refresh()
        for j in order:
            seats[j].attempt(lambda seat=seats[j], kept=kept: seat.repeat(inputs, kept))
        block += 1
        if not kept:
            continue
        orders.append(tuple(order))
        elapsed_s = (clock() - started_ns) / 1e9
        progress({"event": "repeat", "index": index, "repeat": len(orders), "elapsed_s": elapsed_s})
        if len(orders) >= settings.max_blocks or not seats[0].active:
            break
        if len(orders) >= _MIN_BLOCKS and (elapsed_s > settings.budget_s
                                           or settings.rule.should_stop(_log_ratios(seats, count))):
            break
    return orders


def _result(seat: _Seat, index: int, case: Case, count: int, seeds: tuple[int, ...]) -> CaseResult:
    if seat.status == "skipped":
        return CaseResult(index, case, seat.status, seat.message, seeds=seeds)
    if not seat.status and not seat.measurements:
        return CaseResult(index, case, "skipped", "not timed: no contestant it could be paired with was left "
                          "in this case", seeds=seeds)
    return timed_case_result(seat.h, index, case, seat.measurements, count, seeds, seat.status, seat.message)


def compare_case(harnesses: Sequence[Harness | None], index: int, case: Case, settings: PairedSettings,
                 timing: Timing, rng: random.Random, left: Mapping[int, str] | None = None,
                 progress: Progress = no_progress) -> PairedCase:
    """Time one case paired (see the module docstring); ``harnesses[0]`` is the baseline. ``left``
    names the contestants out of the comparison and why (their result is skipped; their harness
    may be None)."""
    if any(h is not None and h.discard_throttled for h in harnesses):
        raise ValueError("a paired comparison keeps every repeat: a discarded one would break its block")
    left = left or {}
    seats = [_Seat(h, f"not run: {left[j]}" if j in left else "") for j, h in enumerate(harnesses)]
    for seat in seats:
        if seat.active:
            seat.h.worst = {}
            seat.h.clocks = RepeatLog(seat.h.sampler)
    if not seats[0].active or sum(seat.active for seat in seats) < 2:
        return PairedCase(tuple(_result(seat, index, case, 1, (case.seed,)) for seat in seats), ())
    lead = seats[0].h
    with lead.ledger.timing("inputs"):
        inputs = CaseInputs(case, timing.input_count(case), lead.hardening.fresh_inputs, lead.device)
    seeds = tuple(inputs.seeds)
    orders: list[tuple[int, ...]] = []
    try:
        for seat in seats:
            if seat.active:
                seat.attempt(lambda seat=seat: seat.hand(inputs))
        for seat in seats:
            if seat.active and seat.handed is not None:
                seat.attempt(lambda seat=seat: first_pass(seat.h, inputs))
        orders = _blocks(seats, index, inputs, settings, rng, lead.clock, progress)
    finally:
        for seat in seats:
            seat.release()
    count = len(inputs.pristine)
    results = tuple(_result(seat, index, case, count, seeds) for seat in seats)
    return PairedCase(results, tuple(orders), {j: s.gone for j, s in enumerate(seats) if s.gone is not None})


def compare_shapes(harnesses: Sequence[Harness | None], shapes: ShapeSet, settings: PairedSettings,
                   rng: random.Random, secret: int | None = None, progress: Progress = no_progress,
                   left: Mapping[int, str] | None = None) -> Iterator[PairedCase]:
    """Every benchmark case of ``shapes`` paired, ``harnesses[0]`` the baseline; ``left`` names the
    contestants out from the start and why (a refused file, a worker that never started: their
    harness is None). A contestant whose worker goes away sits out the later cases; once the
    baseline is out, or fewer than two contestants are left, the rest of the cases are skipped."""
    if len(harnesses) < 2:
        raise ValueError(f"a comparison needs at least two contestants, got {len(harnesses)}")
    cases = [seeded(c, secret) for c in shapes.benchmarks]
    left = dict(left or {})
    for i, case in enumerate(cases):
        if 0 in left or len(harnesses) - len(left) < 2:
            why = f"the baseline left the comparison: {left[0]}" if 0 in left else "no contestant is left to pair with"
            left.update({j: why for j in range(len(harnesses)) if j not in left})
        progress({"event": "case", "index": i, "count": len(cases), "label": case.label})
        paired = compare_case(harnesses, i, case, settings, shapes.timing, rng, left, progress)
        left.update({j: f"its worker stopped in case {i + 1} ({gone.reason})" for j, gone in paired.gone.items()})
        yield paired
