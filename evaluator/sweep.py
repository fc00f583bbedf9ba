"""A kernel's knobs over a grid, every variant timed by the evaluator's own protocol in one worker.

The contestant declares its knobs (:mod:`evaluator.axes`). A sweep times the kernel's own plan
first, then every combination of the requested values, each as a benchmark pass
(:func:`evaluator.protocol.run_benchmark`: a warm-up, then per case the correctness pass and timed
repeats with every output checked, under every hardening rule). All of them run in one hardened
worker, one after another (:func:`evaluator.runner.run_stage` with the variants as its cases), so
the kernel is imported once and what it compiled stays warm. Each variant becomes a benchmark-mode
:class:`~evaluator.results.RunResult` of its own, named with its values (``blocked_wy[nb=32]``)
and carrying them as ``params``: a sweep's results file is an ordinary one, and
``qrbench report FILE --baseline blocked_wy`` gives every variant's per-case verdicts against
the kernel's own plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from evaluator.axes import AxisError, Requested, Variant, replied_axes, resolve, variant_count, variants
from evaluator.contestant import Contestant
from evaluator.execution import KernelError
from evaluator.hardening.precheck import Precheck, precheck_file
from evaluator.modes import Mode
from evaluator.protocol import Harness, combine_seed, run_benchmark
from evaluator.remote import RemoteExecutor
from evaluator.results import PASSED, CaseResult, RunResult, StageResult
from evaluator.runner import ProgressFn, RunOptions, StagePlan, new_run, run_stage
from evaluator.shapes import ShapeSet

__all__ = ["run_sweep"]

Progress = Callable[[dict[str, object]], None]
# Case statuses a variant's case ends in; any other (skipped, timeout, ...) means the stage stopped first.
_FINAL = (PASSED, "fail", "error")


def _shifted(progress: Progress, offset: int, count: int) -> Progress:
    """Progress events of one variant's pass, placed in the whole sweep (case 5/24, not 1/2)."""

    def shifted(event: dict[str, object]) -> None:
        if isinstance(event.get("index"), int):
            event = {**event, "index": offset + event["index"]}  # type: ignore[operator]
        if "count" in event:
            event = {**event, "count": count}
        progress(event)

    return shifted


@dataclass
class _Sweep:
    """One sweep in flight: the grid (known once the worker reported the kernel's axes), when each
    variant started, and the stage's cases split back into one run per variant."""

    contestant: Contestant
    shapes: ShapeSet
    requested: Requested
    base: RunResult
    secret: int | None
    on_variant: Callable[[Variant], None] | None
    grid: list[Variant] = field(default_factory=list)
    marks: list[float] = field(default_factory=list)  # monotonic time each variant started, then the end

    @property
    def per(self) -> int:
        """Cases per variant."""
        return len(self.shapes.benchmarks)

    @property
    def count(self) -> int:
        """Variants, the kernel's own plan included."""
        return variant_count(self.requested)

    def cases(self, harness: Harness, executor: RemoteExecutor) -> Iterator[CaseResult]:
        """The stage's cases: every variant's benchmark pass, configured first (a
        :class:`~evaluator.runner.CaseSource`)."""
        declared = replied_axes(self.contestant.name, executor.axes())
        self.grid = variants(self.contestant.name, resolve(self.contestant.name, self.requested, declared))
        progress = harness.progress
        for k, variant in enumerate(self.grid):
            self.marks.append(time.monotonic())
            if self.on_variant is not None:
                self.on_variant(variant)
            harness.progress = _shifted(progress, k * self.per, self.count * self.per)
            try:
                executor.configure(variant.params)
            except KernelError as exc:
                for i, case in enumerate(self.shapes.benchmarks):
                    seeded = case if self.secret is None else case.with_seed(combine_seed(self.secret, case.seed))
                    yield CaseResult(k * self.per + i, seeded, "error", f"configure({variant.setting}) raised: {exc}")
                continue
            for result in run_benchmark(harness, self.shapes, self.secret):
                yield replace(result, index=k * self.per + result.index)
        self.marks.append(time.monotonic())
        harness.progress = progress

    def _wall_s(self, k: int) -> float:
        if k >= len(self.marks):
            return 0.0
        end = self.marks[k + 1] if k + 1 < len(self.marks) else time.monotonic()
        return round(end - self.marks[k], 3)

    def runs(self, stage: StageResult | None, environment: dict[str, object]) -> list[RunResult]:
        """One run per variant from the stage as it stands (a variant not reached yet carries the
        stage's status: running, or why it stopped)."""
        if not self.grid:  # stopped before the axes were known: the stage alone, with nothing timed
            return [self.base if stage is None else self.base.with_stage(replace(stage, cases=()))]
        assert stage is not None
        runs = []
        for k, variant in enumerate(self.grid):
            own = stage.cases[k * self.per:(k + 1) * self.per]
            cases = tuple(replace(c, index=c.index - k * self.per) for c in own)
            finished = bool(cases) and all(c.status in _FINAL for c in cases)
            if finished:
                status, reason = (PASSED if all(c.passed for c in cases) else "fail"), ""
            else:
                status, reason = stage.status, stage.reason
            part = StageResult(stage.name, stage.mode, status, cases, stage.seed, reason, self._wall_s(k),
                               output="" if status == PASSED else stage.output)
            contestant = {**self.base.contestant, "name": variant.label}
            runs.append(replace(self.base, contestant=contestant, params=variant.params,
                                environment=dict(environment), stages=(part,)))
        return runs


def run_sweep(
    contestant: Contestant,
    shapes: ShapeSet,
    requested: Requested,
    options: RunOptions,
    on_update: Callable[[list[RunResult]], None] | None = None,
    on_progress: ProgressFn | None = None,
    on_variant: Callable[[Variant], None] | None = None,
) -> list[RunResult]:
    """Time the contestant's own plan and every combination of ``requested`` (axis name to the
    values' texts) on the benchmark cases of ``shapes``, in one hardened worker; one run per
    variant, in grid order. ``on_update`` gets every variant's run after each finished case,
    ``on_variant`` each variant as it starts. An unknown axis or value, or a contestant without
    the hook, raises :class:`~evaluator.axes.AxisError` before anything is timed.
    """
    if not requested:
        raise AxisError("a sweep needs at least one axis")
    shapes = replace(shapes, timing=options.timing_for(shapes))
    mode = Mode.BENCHMARK
    gates = (precheck_file(contestant.path, mode, options.kernelguard) if options.precheck
             else Precheck.not_run(str(contestant.path), mode))
    base = replace(new_run(contestant, mode, shapes, options), precheck=gates)
    if not gates.passed:
        if on_update is not None:
            on_update([base])
        return [base]
    sweep = _Sweep(contestant, shapes, requested, base, options.seed, on_variant)
    # One stage whose cases are every variant's, back to back; its time limit grows with them.
    stage_shapes = replace(shapes, benchmarks=shapes.benchmarks * sweep.count)
    stage_options = replace(options, timeout_scale=options.timeout_scale * sweep.count)

    def publish(stage: StageResult) -> None:
        if on_update is not None:
            on_update(sweep.runs(stage, {}))

    stage, environment = run_stage(contestant, StagePlan(mode, mode, options.seed), stage_shapes, stage_options,
                                   publish, on_progress, sweep.cases)
    runs = sweep.runs(stage, environment)
    if on_update is not None:
        on_update(runs)
    return runs
