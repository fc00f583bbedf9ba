"""The parent side of a run: one contained worker per stage, its time limit, its results.

Hardened (the default), the parent runs each mode itself: it makes the inputs, checks the
outputs, judges every time and writes the results, while the worker only runs the kernel
(:mod:`evaluator.remote`). With ``--compat`` the worker runs the mode, as the contest's does, and
the parent reads its signed reports. Either way a worker that raises, crashes, hangs, floods its
output or forges results only ever fails its own contestant: the parent waits with a deadline,
kills the worker's process group and every process it left behind, undoes what it wrote into
the project, and turns whatever happened into a stage status and reason. Each finished case is
handed to ``on_update`` at once, so callers can keep it on disk.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from evaluator.contestant import Contestant
from evaluator.environment import fingerprint
from evaluator.execution import WorkerGone
from evaluator.handover import HandoverArena
from evaluator.hardening.channel import ChannelError, new_key
from evaluator.hardening.containment import contained_stage, prepare_checks, worker_scratch
from evaluator.hardening.guards import Hardening, PhysicalFloor, rule_message
from evaluator.hardening.precheck import Precheck, precheck_file
from evaluator.margin import DEFAULT_MARGIN_WARN
from evaluator.measure.clocks import ClockSampler, sampler_for
from evaluator.measure.ledger import Ledger
from evaluator.modes import SECRET_STAGE, STAGES_BY_MODE, Mode, stage_mode
from evaluator.protocol import CASE_MODES, Harness, combine_seed, run_profile
from evaluator.remote import RemoteExecutor, WorkerLink
from evaluator.results import INTERRUPTED, RUNNING, CaseResult, RunResult, StageResult
from evaluator.shapes import Case, ShapeSet, Timing
from evaluator.workers import SpareWorkers, StartedWorker, spawn_worker

__all__ = [
    "RunOptions",
    "StagePlan",
    "clock_sampler",
    "finish_stage",
    "hardened_harness",
    "new_run",
    "plan_stages",
    "run_contestant",
    "run_stage",
    "spare_count",
    "stage_limit_s",
    "stop_worker",
    "worker_job",
]

ProgressFn = Callable[[str, dict[str, Any]], None]
UpdateFn = Callable[[RunResult], None]
# What a hardened stage times instead of its mode's cases (a sweep's variants, one after another).
CaseSource = Callable[[Harness, RemoteExecutor], Iterator[CaseResult]]


@dataclass(frozen=True)
class RunOptions:
    """How to run: ``device`` is "cuda" or "cpu"; ``seed`` is combined into every spec seed as
    the contest's POPCORN_SEED is; ``compat`` runs the contest's exact protocol. ``precheck``
    runs the contest service's submission gates first (off only for lab work), with kernelguard
    under ``kernelguard``: enforce, warn or off (see :mod:`evaluator.hardening.precheck`). ``margin_warn``:
    warn when a passing case's numerical margin is under this factor (:mod:`evaluator.margin`);
    ``discard_on_throttle`` leaves repeats the GPU throttled in out of the statistics
    (:mod:`evaluator.measure.clocks`; hardened runs only: the contest's protocol keeps every repeat).
    ``mirror_check``: before each checked timed repeat the worker runs the check once more in its own
    process, as the contest's process checks beside the kernel (hardened runs only: under
    ``--compat`` the check runs there already; :meth:`evaluator.remote.RemoteExecutor.timed`)."""

    device: str
    seed: int | None = None
    compat: bool = False
    profiler: bool = False
    timing: dict[str, float | int] = field(default_factory=dict)
    timeout_scale: float = 1.0
    env: dict[str, str] = field(default_factory=dict)
    precheck: bool = True
    kernelguard: str = "enforce"
    margin_warn: float = DEFAULT_MARGIN_WARN
    discard_on_throttle: bool = False
    mirror_check: bool = False

    def __post_init__(self) -> None:
        if self.discard_on_throttle and self.compat:
            raise ValueError("discard_on_throttle: the contest's protocol (compat) keeps every repeat")
        if self.mirror_check and self.compat:
            raise ValueError("mirror_check: under the contest's protocol (compat) the check runs beside the kernel "
                             "already")
        if not self.margin_warn >= 1:
            raise ValueError(f"margin_warn must be at least 1 (1: never warn), got {self.margin_warn}")

    def timing_for(self, shapes: ShapeSet) -> Timing:
        """The shape set's timing settings with this run's overrides applied."""
        return replace(shapes.timing, **self.timing)


@dataclass(frozen=True)
class StagePlan:
    name: str
    mode: str
    secret: int | None


def plan_stages(mode: str, seed: int | None) -> list[StagePlan]:
    """The stages of ``mode`` (``STAGES_BY_MODE``). A leaderboard run is the contest's ranked
    submission: tests, benchmarks, the ranked pass, then a second ranked pass (contest mode
    ``leaderboard``) under a fresh secret seed."""
    plans = []
    for name in STAGES_BY_MODE[mode]:
        plans.append(StagePlan(name, stage_mode(name), secrets.randbits(31) if name == SECRET_STAGE else seed))
    return plans


def stage_limit_s(plan: StagePlan, shapes: ShapeSet, options: RunOptions) -> float:
    """The wall-time limit of one stage's worker (the shape file's limit for its mode, scaled)."""
    return shapes.timeout_s(plan.mode) * options.timeout_scale


class _Collector:
    """Builds a stage from what a ``--compat`` worker sends; survives whatever the worker does.

    Each case it reports is judged against the parent's own copy of that case: a worker that
    reports a spec it was not given breaks the result channel.
    """

    def __init__(self, plan: StagePlan, shapes: ShapeSet) -> None:
        self.plan = plan
        self.expected = _stage_cases(plan, shapes)
        self.cases: list[CaseResult] = []
        self.profile_table = ""
        self.error = ""
        self.done = False

    def take(self, message: dict[str, Any]) -> None:
        event = message.get("event")
        if event == "case":
            # A witness, and what it set aside, are the parent's own: whatever the worker's report says is dropped.
            result = replace(CaseResult.from_dict(message["result"]), parent_clock=None, retimed="")
            index = len(self.cases)
            if index >= len(self.expected) or result.case != self.expected[index] or result.index != index:
                raise ChannelError(f"the worker reported case {index} with a spec it was not given")
            self.cases.append(result)
        elif event == "profile":
            self.profile_table = message.get("table", "")
        elif event == "error":
            self.error = message.get("message", "worker error")
        elif event == "done":
            self.done = True


def _stage_cases(plan: StagePlan, shapes: ShapeSet) -> tuple[Case, ...]:
    cases = shapes.cases(plan.mode)
    if plan.secret is not None:
        cases = tuple(c.with_seed(combine_seed(plan.secret, c.seed)) for c in cases)
    return cases[:1] if plan.mode == Mode.PROFILE else cases


# Statuses that stop a stage in the middle of a case: that case gets the status, later ones are skipped.
_STOPPED_MID_CASE = ("timeout", INTERRUPTED)


def finish_stage(plan: StagePlan, shapes: ShapeSet, cases: list[CaseResult], status: str | None, reason: str,
                 wall_s: float, table: str = "", output: str = "") -> StageResult:
    """The stage's result from the cases it finished: a case a fault stopped carries that fault's
    status, the cases after it are marked not run, and the stage's status is ``status`` when a
    fault decided it, else pass only when every case passed."""
    all_cases = _stage_cases(plan, shapes)
    cases = list(cases)
    if status in _STOPPED_MID_CASE and len(cases) < len(all_cases):
        cases.append(CaseResult(len(cases), all_cases[len(cases)], status, reason))
    for i in range(len(cases), len(all_cases)):
        cases.append(CaseResult(i, all_cases[i], "skipped", f"not run: {reason}" if reason else "not run"))
    if status is None:
        status = "pass" if cases and all(c.passed for c in cases) else "fail"
    return StageResult(plan.name, plan.mode, status, tuple(cases), plan.secret, reason, round(wall_s, 3), table,
                       output=output)


def _running(event: dict[str, Any]) -> str:
    """The case a progress event says is running, e.g. ``case 2/5 (b=2 n=16)`` or its warm-up."""
    where = f"case {event['index'] + 1}/{event['count']}" if "index" in event and "count" in event else "case"
    return f"{'the warm-up of ' if event.get('event') == 'warmup' else ''}{where} ({event.get('label', '')})"


def worker_job(contestant: Contestant, plan: StagePlan, shapes: ShapeSet, options: RunOptions, key: str,
               scratch: str) -> dict[str, Any]:
    """The job a worker reads as its first line: what to load, where, and how to report."""
    return {
        "key": key,
        "contestant": contestant.to_dict(),
        "mode": plan.mode,
        "secret": plan.secret,
        "shapes": shapes.to_dict(),
        "device": options.device,
        "isolated": not options.compat,
        "profiler": options.profiler,
        "scratch": scratch,
        "mirror_check": options.mirror_check,
    }


@functools.cache
def _floor(device: torch.device) -> PhysicalFloor:
    """The device's measured ceilings, once per process (before any worker of this run)."""
    return PhysicalFloor.measure(device)


@functools.cache
def _arena(device: torch.device) -> HandoverArena:
    """One hand-over allocator per device for the process: kept buffers serve every stage."""
    return HandoverArena(device)


@functools.cache
def clock_sampler(device: torch.device) -> ClockSampler:
    """The device's clock sampler, once per process (NVML is opened once)."""
    return sampler_for(device)


def hardened_harness(link: WorkerLink, contestant: Contestant, options: RunOptions,
                     progress: Callable[[dict[str, Any]], None], ledger: Ledger) -> tuple[Harness, RemoteExecutor]:
    """The parent's side of a hardened worker that is ready: the hand-over allowance measured, the
    kernel imported, and the harness the protocol runs over (every rule on)."""
    device = torch.device(options.device)
    floor = _floor(device)  # measured before any kernel runs here
    sampler = clock_sampler(device)
    executor = RemoteExecutor(link, device, _arena(device), rules=True, ledger=ledger, mirror=options.mirror_check)
    executor.calibrate()
    executor.load(contestant.to_dict())
    harness = Harness(executor, Hardening(), device=device, floor=floor, progress=progress, ledger=ledger,
                      sampler=sampler, discard_throttled=options.discard_on_throttle)
    return harness, executor


def _run_isolated(link: WorkerLink, contestant: Contestant, plan: StagePlan, shapes: ShapeSet,
                  options: RunOptions, publish: Callable[[list[CaseResult]], None],
                  on_progress: ProgressFn | None, ledger: Ledger,
                  cases_of: CaseSource | None = None) -> tuple[list[CaseResult], str]:
    """The hardened stage: the parent runs the mode (or ``cases_of``), the worker only runs the kernel."""

    def progress(event: dict[str, Any]) -> None:
        if on_progress is not None:
            with ledger.timing("reporting"):
                on_progress(plan.name, event)

    def hand_on(cases: list[CaseResult]) -> None:
        with ledger.timing("reporting"):
            publish(cases)

    harness, executor = hardened_harness(link, contestant, options, progress, ledger)
    cases: list[CaseResult] = []
    if plan.mode == Mode.PROFILE:
        result, table = run_profile(harness, shapes, plan.secret, profiler=options.profiler)
        cases.append(result)
        hand_on(cases)
        return cases, table
    source = cases_of(harness, executor) if cases_of else CASE_MODES[plan.mode](harness, shapes, plan.secret)
    for result in source:
        cases.append(result)
        hand_on(cases)
    return cases, ""


def _run_in_worker(link: WorkerLink, plan: StagePlan, shapes: ShapeSet,
                   publish: Callable[[list[CaseResult]], None], on_progress: ProgressFn | None) -> _Collector:
    """The ``--compat`` stage: the worker runs the mode beside the kernel and reports cases."""
    collector = _Collector(plan, shapes)
    while not collector.done and not collector.error:
        try:
            message = link.receive()
        except ChannelError as exc:
            raise WorkerGone("fail", rule_message("result-channel", str(exc))) from None
        try:
            collector.take(message)
        except (ChannelError, KeyError, TypeError, ValueError) as exc:
            raise WorkerGone("fail", rule_message("result-channel", str(exc))) from None
        if message.get("event") == "case":
            publish(collector.cases)
        elif message.get("event") == "progress" and on_progress is not None:
            on_progress(plan.name, message["progress"])
    return collector


def run_stage(
    contestant: Contestant,
    plan: StagePlan,
    shapes: ShapeSet,
    options: RunOptions,
    on_case: Callable[[StageResult], None] | None = None,
    on_progress: ProgressFn | None = None,
    cases_of: CaseSource | None = None,
    spares: SpareWorkers | None = None,
) -> tuple[StageResult, dict[str, Any]]:
    """Run one stage in a fresh, contained worker; return the stage and the environment.

    Hardened, the parent runs the mode itself against a worker that holds only the kernel
    (:mod:`evaluator.remote`); with ``--compat`` the worker runs the mode, as the contest's does.
    Either way the worker's leftover processes are killed afterwards and what it wrote into the
    project is undone and named (:mod:`evaluator.hardening.sandbox`). ``cases_of`` (hardened only) yields the
    stage's cases in place of the mode's (:mod:`evaluator.sweep`), ``shapes`` listing them all.
    ``spares``: workers started ahead, one of which this stage takes (:mod:`evaluator.workers`),
    hardened only.
    """
    if spares is not None and options.compat:
        raise ValueError("a --compat stage starts its worker fresh, as the contest's service does")
    if cases_of is not None and options.compat:
        raise ValueError("cases_of runs in the parent: a --compat stage runs its mode in the worker")
    shapes = replace(shapes, timing=options.timing_for(shapes))
    limit_s = stage_limit_s(plan, shapes, options)
    started = time.monotonic()
    environment = fingerprint(torch.device(options.device))
    environment["clock_sampler"] = clock_sampler(torch.device(options.device)).description
    key = new_key()
    scratch = worker_scratch(contestant)
    ledger = Ledger()
    if not options.compat:  # the parent checks: its checks' code is loaded before any kernel runs
        prepare_checks(options.device, shapes.sizes())
    cases: list[CaseResult] = []
    status: str | None = None
    reason = ""
    table = ""

    running: dict[str, Any] = {}  # the last case (or warm-up) a progress event announced, until it is published
    interrupted: KeyboardInterrupt | None = None

    def publish(current: list[CaseResult]) -> None:
        cases[:] = current
        running.clear()
        if on_case is not None:
            on_case(finish_stage(plan, shapes, current, RUNNING, "", time.monotonic() - started))

    def progress(stage: str, event: dict[str, Any]) -> None:
        if event.get("event") in ("case", "warmup"):
            running.clear()
            running.update(event)
        if on_progress is not None:
            on_progress(stage, event)

    with contained_stage(shapes.path if shapes.path.is_file() else None, scratch) as containment:
        begun = time.perf_counter()
        spare = spares.take() if spares is not None else None
        proc, read_fd, early_output = spare or StartedWorker(*spawn_worker(options, scratch))
        ledger.add("worker_start", time.perf_counter() - begun)
        link = WorkerLink(proc, read_fd, key, started + limit_s, limit_s, plan.mode)
        link.output.add(early_output)
        if on_progress is not None:
            link.on_wait = lambda: on_progress(plan.name, {"event": "wait"})
        try:
            link.send_line(worker_job(contestant, plan, shapes, options, key, str(scratch.path)))
            with ledger.timing("worker_start"):
                link.ready()
            if options.compat:
                collector = _run_in_worker(link, plan, shapes, publish, progress)
                table = collector.profile_table
                if collector.error:
                    status, reason = "error", collector.error
            else:
                cases, table = _run_isolated(link, contestant, plan, shapes, options, publish, progress, ledger,
                                             cases_of)
                link.send({"op": "bye"})
        except WorkerGone as gone:
            status, reason = gone.status, gone.reason
            if status == "timeout" and running:
                reason += f" while running {_running(running)}"
        except KeyboardInterrupt as stop:  # Ctrl-C, or the reader of the caller's output went away
            interrupted, status = stop, INTERRUPTED
            reason = f"interrupted ({str(stop) or 'Ctrl-C'})"
            reason += f" while running {_running(running)}" if running else ""
        finally:
            os.close(read_fd)  # first: a worker still writing gets EPIPE, not a wait
            stop_worker(proc, link, grace_s=0.0 if status in (INTERRUPTED, "timeout") else 5.0)
    problem = containment.problem()
    if problem and status is None:
        status, reason = "fail", problem
    elif problem:
        reason = f"{reason}; {problem}"
    wall_s = time.monotonic() - started
    stage = finish_stage(plan, shapes, cases, status, reason, wall_s, table, link.output.text())
    if not options.compat:
        stage = replace(stage, breakdown_s=ledger.breakdown(wall_s))
    if interrupted is not None:
        if on_case is not None:
            on_case(stage)  # what was measured, for the caller to save before it stops
        raise interrupted
    return stage, environment


def stop_worker(proc: subprocess.Popen[bytes], link: WorkerLink, grace_s: float = 5.0) -> None:
    """Let a finished worker exit (draining its output) for ``grace_s``, then kill its whole
    process group; the kill happens even if the wait is interrupted (a second Ctrl-C)."""
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        deadline = time.monotonic() + grace_s
        out_fd = proc.stdout.fileno()
        reading = True
        while proc.poll() is None and time.monotonic() < deadline:
            if not reading:
                time.sleep(0.02)
                continue
            ready, _, _ = select.select([out_fd], [], [], 0.1)
            if ready and not link.output.add(os.read(out_fd, 1 << 16)):
                reading = False
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()


def new_run(contestant: Contestant, mode: str, shapes: ShapeSet, options: RunOptions) -> RunResult:
    """A run with no stages yet: who runs, in which mode, on which shapes, how."""
    return RunResult(
        contestant=contestant.to_dict(),
        mode=mode,
        shapes={"name": shapes.name, "path": str(shapes.path), "timing": asdict(options.timing_for(shapes))},
        device=options.device,
        timer="cuda-events" if options.device == "cuda" else "cpu-clock",
        compat=options.compat,
        stages=(),
        environment={},
        seed=options.seed,
        margin_warn=options.margin_warn,
        mirror_check=options.mirror_check,
    )


def run_contestant(
    contestant: Contestant,
    mode: str,
    shapes: ShapeSet,
    options: RunOptions,
    on_update: UpdateFn | None = None,
    on_progress: ProgressFn | None = None,
    stages: Sequence[StagePlan] | None = None,
) -> RunResult:
    """Run the submission gates, then every stage of ``mode`` for one contestant; stop at the first
    refusal or failing stage.

    ``stages`` (default: :func:`plan_stages`) lets a caller run part of a mode's stages, e.g. a
    cloud run that puts the secret-seed pass in a container of its own (each part runs the gates).
    """
    run = new_run(contestant, mode, shapes, options)
    if options.precheck:
        gates = precheck_file(contestant.path, mode, options.kernelguard)
    else:
        gates = Precheck.not_run(str(contestant.path), mode)
    run = replace(run, precheck=gates)
    if on_update is not None:
        on_update(run)
    if not gates.passed:
        return run
    plans = plan_stages(mode, options.seed) if stages is None else list(stages)
    count = spare_count(plans, options)
    with SpareWorkers(options, worker_scratch(contestant), count) as spares:
        for i, plan in enumerate(plans):

            def publish(stage: StageResult, current: RunResult = run) -> None:
                if on_update is not None:
                    on_update(current.with_stage(stage))

            stage, environment = run_stage(contestant, plan, shapes, options, publish, on_progress,
                                           spares=spares if i and count else None)
            run = run.with_stage(stage)
            if environment and not run.environment:
                run = replace(run, environment=environment)
            if on_update is not None:
                on_update(run)
            if not stage.passed:
                break
    return run


def spare_count(plans: Sequence[StagePlan], options: RunOptions) -> int:
    """Workers to start ahead (:mod:`evaluator.workers`): one per stage after the first, where the
    first is the untimed test stage (their imports then overlap nothing timed) and the run is
    hardened (the contest's service starts each worker fresh)."""
    if options.compat or len(plans) < 2 or plans[0].mode != Mode.TEST:
        return 0
    return len(plans) - 1
