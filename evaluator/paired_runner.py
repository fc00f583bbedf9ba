"""The parent side of ``qrbench compare``: a hardened worker per contestant, all on one device,
driven in interleaved blocks (:mod:`evaluator.paired`).

Contestants never share a process. Each gets what a normal hardened run gives it: the contest
service's submission gates first, a worker of its own with its scratch directory
(:func:`evaluator.workers.spawn_worker`), the hand-over allowance measured before its kernel is
imported, and every hardening rule (:func:`evaluator.runner.hardened_harness`). The workers live
at the same time, so they share one containment (:func:`evaluator.hardening.containment.contained_stage`
with every contestant's scratch directory): processes left behind and writes into the project
are found once all of them are gone, and fail the comparison as a whole, because no single worker
can be named for them.

What a comparison cannot close: within a block every contestant sees the same content, one after
the other, so two contestants whose workers pass answers to each other (a file, shared memory)
could hand the later one the earlier one's outputs. Compare kernels you trust not to collude (your
own variants); a ranking (``qrbench rank``) never runs two contestants at once.

A comparison runs hardened only: under ``--compat`` each kernel runs beside its own protocol, in
its worker, and nothing could interleave them.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from subprocess import Popen
from typing import Any

import torch

from evaluator.axes import Requested, Scalar, replied_axes, resolve
from evaluator.contestant import Contestant
from evaluator.environment import fingerprint
from evaluator.execution import KernelError, WorkerGone
from evaluator.hardening.channel import new_key
from evaluator.hardening.containment import contained_stage, prepare_checks, worker_scratch
from evaluator.hardening.precheck import Precheck, precheck_file
from evaluator.measure.ledger import Ledger
from evaluator.modes import Mode
from evaluator.paired import PairedCase, PairedSettings, compare_shapes
from evaluator.paired_results import Comparison
from evaluator.protocol import Harness
from evaluator.remote import RemoteExecutor, WorkerLink
from evaluator.results import INTERRUPTED, RUNNING, CaseResult, RunResult
from evaluator.runner import (
    ProgressFn,
    RunOptions,
    StagePlan,
    clock_sampler,
    finish_stage,
    hardened_harness,
    new_run,
    stage_limit_s,
    stop_worker,
    worker_job,
)
from evaluator.shapes import ShapeSet
from evaluator.workers import spawn_worker

__all__ = ["STAGE", "paired_settings", "run_comparison", "unique_labels"]

STAGE = "compare"  # the stage name progress events carry
_PLAN = StagePlan(Mode.BENCHMARK, Mode.BENCHMARK, None)  # what each contestant's run records


def unique_labels(contestants: Sequence[Contestant]) -> list[str]:
    """Contestants' names, a repeated one numbered from its second appearance
    (``blocked_wy``, ``blocked_wy-2``): a kernel compared with itself stays two contestants."""
    labels: list[str] = []
    for c in contestants:
        label, n = c.name, 1
        while label in labels:
            n += 1
            label = f"{c.name}-{n}"
        labels.append(label)
    return labels


def paired_settings(shapes: ShapeSet) -> PairedSettings:
    """The blocks a comparison times per case from the set's benchmark timing (``--budget`` and
    ``--repeats`` set it): at most its repeat cap in blocks, for at most its budget in wall
    seconds (the contest's budget counts kernel time; a block's wall time is what a comparison
    can plan with)."""
    timing = shapes.timing
    return PairedSettings(max_blocks=timing.benchmark_repeats, budget_s=timing.benchmark_budget_s)


@dataclass
class _Worker:
    """One contestant's worker while the comparison runs."""

    proc: Popen[bytes]
    read_fd: int
    link: WorkerLink
    harness: Harness | None = None
    gone: WorkerGone | None = None


def _gates(contestants: Sequence[Contestant], options: RunOptions) -> list[Precheck]:
    if not options.precheck:
        return [Precheck.not_run(str(c.path), Mode.BENCHMARK) for c in contestants]
    return [precheck_file(c.path, Mode.BENCHMARK, options.kernelguard) for c in contestants]


class _Record:
    """The comparison as it stands: each contestant's cases, and why a contestant's stage ended."""

    def __init__(self, runs: list[RunResult], shapes: ShapeSet, settings: PairedSettings, started: float) -> None:
        self.runs = runs
        self.shapes = shapes
        self.settings = asdict(settings)
        self.started = started
        self.cases: list[PairedCase] = []
        self.ended: dict[int, tuple[str, str]] = {}  # contestant -> (status, reason)
        self.outputs: dict[int, str] = {}

    def comparison(self, ran: Sequence[int], final: bool, ledger: Ledger | None = None,
                   reason: str = "") -> Comparison:
        wall_s = time.monotonic() - self.started
        runs = list(self.runs)
        for j in ran:
            cases: list[CaseResult] = [c.results[j] for c in self.cases]
            status, why = self.ended.get(j, (None if final else RUNNING, ""))
            stage = finish_stage(_PLAN, self.shapes, cases, status, why, wall_s, output=self.outputs.get(j, ""))
            runs[j] = runs[j].with_stage(stage)
        orders = tuple(c.orders for c in self.cases)
        breakdown = ledger.breakdown(wall_s) if ledger is not None else {}
        return Comparison(tuple(runs), orders, self.settings, round(wall_s, 3), breakdown, reason)


def _set_knobs(executor: RemoteExecutor, label: str, requested: Requested) -> dict[str, Scalar]:
    """Set a contestant's knobs in its worker (``NAME[KNOB=VALUE,...]``) and return their typed
    values; a knob or value its ``PLAN_AXES`` does not declare is an AxisError naming it."""
    declared = replied_axes(label, executor.axes())
    params = {name: values[0] for name, values in resolve(label, requested, declared).items()}
    executor.configure(params)
    return params


def run_comparison(contestants: Sequence[Contestant], shapes: ShapeSet, options: RunOptions,
                   on_update: Callable[[Comparison], None] | None = None, on_progress: ProgressFn | None = None,
                   rng: random.Random | None = None, knobs: Sequence[Requested] | None = None) -> Comparison:
    """Compare ``contestants`` (the first is the baseline) on every benchmark case of ``shapes``,
    paired and interleaved (see the module docstring); ``on_update`` gets the comparison after
    each case, and once more when it is stopped by Ctrl-C (then re-raised). ``knobs`` (one per
    contestant, empty: its own plan) are set in each worker before anything is timed (the
    contestant's ``configure``, :mod:`evaluator.axes`), so one kernel can be compared with itself
    at other settings; an unknown knob raises AxisError before any case runs."""
    if len(contestants) < 2:
        raise ValueError(f"a comparison needs at least two contestants, got {len(contestants)}")
    if knobs is not None and len(knobs) != len(contestants):
        raise ValueError(f"knobs for {len(knobs)} contestants, but {len(contestants)} contestants")
    if options.compat:
        raise ValueError("a comparison runs hardened only: under --compat each kernel runs beside its own protocol")
    if options.discard_on_throttle:
        raise ValueError("a comparison keeps every repeat: a discarded one would break its block")
    contestants = [replace(c, name=label) for c, label in zip(contestants, unique_labels(contestants), strict=True)]
    shapes = replace(shapes, timing=options.timing_for(shapes))
    settings = paired_settings(shapes)
    started = time.monotonic()
    runs = [replace(new_run(c, Mode.BENCHMARK, shapes, options), precheck=g)
            for c, g in zip(contestants, _gates(contestants, options), strict=True)]
    left = {j: f"refused by the submission gates: {r.precheck.reason}" for j, r in enumerate(runs)
            if r.precheck is not None and not r.precheck.passed}
    record = _Record(runs, shapes, settings, started)
    if 0 in left or len(contestants) - len(left) < 2:
        comparison = record.comparison((), final=True, reason="too few contestants passed the submission gates")
        if on_update is not None:
            on_update(comparison)
        return comparison
    device = torch.device(options.device)
    environment = {**fingerprint(device), "clock_sampler": clock_sampler(device).description}
    ran = [j for j in range(len(contestants)) if j not in left]
    record.runs = [replace(r, environment=environment) if j in ran else r for j, r in enumerate(runs)]
    ledger = Ledger()
    limit_s = stage_limit_s(_PLAN, shapes, options) * len(ran) + len(shapes.benchmarks) * settings.budget_s
    scratches = {contestants[j].sha256: worker_scratch(contestants[j]) for j in ran}
    workers: dict[int, _Worker] = {}
    interrupted: KeyboardInterrupt | None = None

    def progress(event: dict[str, Any]) -> None:
        if on_progress is not None:
            on_progress(STAGE, event)

    shape_file = shapes.path if shapes.path.is_file() else None
    prepare_checks(options.device, shapes.sizes())
    with contained_stage(shape_file, *scratches.values()) as containment:
        try:
            for j in ran:
                key = new_key()
                proc, read_fd = spawn_worker(options, scratches[contestants[j].sha256])
                link = WorkerLink(proc, read_fd, key, started + limit_s, limit_s, Mode.BENCHMARK)
                link.on_wait = lambda: progress({"event": "wait"})
                workers[j] = worker = _Worker(proc, read_fd, link)
                scratch = str(scratches[contestants[j].sha256].path)
                try:
                    link.send_line(worker_job(contestants[j], _PLAN, shapes, options, key, scratch))
                    with ledger.timing("worker_start"):
                        link.ready()
                    worker.harness, executor = hardened_harness(link, contestants[j], options, progress, ledger)
                    if knobs is not None and knobs[j]:
                        record.runs[j] = replace(record.runs[j],
                                                 params=_set_knobs(executor, contestants[j].name, knobs[j]))
                except WorkerGone as gone:
                    worker.gone = gone
                    record.ended[j] = (gone.status, gone.reason)
                    left[j] = f"its worker did not start: {gone.reason}"
                except KernelError as exc:  # the contestant's configure refused the setting
                    record.ended[j] = ("error", f"configure raised: {exc}")
                    left[j] = f"configure raised: {exc}"
            harnesses = [workers[j].harness if j in workers else None for j in range(len(contestants))]
            for paired in compare_shapes(harnesses, shapes, settings, rng or random.Random(), options.seed,
                                         progress, left):
                record.cases.append(paired)
                for j, gone in paired.gone.items():
                    workers[j].gone = gone
                    record.ended[j] = (gone.status, gone.reason)
                if on_update is not None:
                    on_update(record.comparison(ran, final=False, ledger=ledger))
            for worker in workers.values():
                if worker.gone is None:
                    with contextlib.suppress(WorkerGone):  # one that went meanwhile is stopped below
                        worker.link.send({"op": "bye"})
        except KeyboardInterrupt as stop:  # Ctrl-C, or the reader of the caller's output went away
            interrupted = stop
            for j in ran:
                record.ended.setdefault(j, (INTERRUPTED, f"interrupted ({str(stop) or 'Ctrl-C'})"))
        finally:
            for worker in workers.values():
                os.close(worker.read_fd)  # first: a worker still writing gets EPIPE, not a wait
            for j, worker in workers.items():
                quick = interrupted is not None or (worker.gone is not None and worker.gone.status == "timeout")
                stop_worker(worker.proc, worker.link, grace_s=0.0 if quick else 5.0)
                record.outputs[j] = worker.link.output.text()
    problem = containment.problem() or ""
    if problem:
        for j in ran:
            status, why = record.ended.get(j, ("fail", ""))
            record.ended[j] = (status, f"{why}; {problem}" if why else problem)
    comparison = record.comparison(ran, final=True, ledger=ledger, reason=problem)
    if interrupted is not None:
        if on_update is not None:
            on_update(comparison)
        raise interrupted
    return comparison
