"""Fan a ranking's jobs out to a dispatcher, retry what the machinery broke, gather the runs.

A dispatcher runs one job's request somewhere and returns the RunResult dict: :class:`LocalDispatcher`
in this process, :class:`evaluator.cloud.modal_app.ModalDispatcher` in a Modal container. It also
says which exceptions are the machinery's (a lost container, a dropped connection): those are
retried. A kernel's failure is never an exception here, it is a failing RunResult, so it is
recorded once like any other result; an error of our own code is raised at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

from evaluator.cloud.jobs import Job, RunRequest, combine
from evaluator.cloud.remote import execute
from evaluator.environment import gpu_key
from evaluator.results import RunResult

__all__ = ["DispatchError", "Dispatcher", "InfrastructureError", "LocalDispatcher", "run_ranking"]

LogFn = Callable[[str], None]
RunFn = Callable[[int, RunResult], None]


class InfrastructureError(Exception):
    """The machinery that carries a run failed (container, network, scheduler), not the kernel."""


class DispatchError(Exception):
    """A dispatcher that cannot start at all (no credentials): nothing was run."""


class Dispatcher(Protocol):
    """Where jobs run. ``max_parallel`` jobs may run at once; :meth:`session` wraps them all."""

    name: str
    max_parallel: int

    def session(self) -> AbstractContextManager[object]: ...

    def run(self, request: RunRequest, timeout_s: int) -> dict[str, Any]: ...

    def is_infrastructure(self, error: BaseException) -> bool: ...


class LocalDispatcher:
    """Runs each job's body in this process, one at a time (timings on one device must not
    overlap). The runner's per-stage limits hold; a container limit has no meaning here."""

    name = "local"
    max_parallel = 1

    def session(self) -> AbstractContextManager[object]:
        return nullcontext()

    def run(self, request: RunRequest, timeout_s: int) -> dict[str, Any]:
        return execute(request)

    def is_infrastructure(self, error: BaseException) -> bool:
        return isinstance(error, InfrastructureError)


def _quiet(_line: str) -> None:
    """The default log: say nothing."""


class _Fan:
    """One ranking in flight: each job in a pool thread, retried on infrastructure errors."""

    def __init__(self, jobs: Sequence[Job], dispatcher: Dispatcher, attempts: int, backoff_s: float,
                 progress: LogFn, warn: LogFn) -> None:
        self.jobs = jobs
        self.dispatcher = dispatcher
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.progress = progress
        self.warn = warn
        self.done: dict[int, RunResult | None] = {}
        self.lock = threading.Lock()

    def moot(self, job: Job) -> bool:
        """Whether the job this one needs has already failed (then its result would be dropped)."""
        with self.lock:
            needed = self.done.get(job.needs) if job.needs is not None else None
        return needed is not None and not needed.no_stage_failed

    def attempt(self, job: Job) -> RunResult | None:
        """The job's run; None when skipped as moot; a failed run when every attempt broke down."""
        if self.moot(job):
            self.progress(f"{job.label}: skipped (the stages before it failed)")
            return None
        error: BaseException | None = None
        for attempt in range(1, self.attempts + 1):
            started = time.monotonic()
            try:
                run = RunResult.from_dict(self.dispatcher.run(job.request, job.timeout_s))
            except Exception as exc:  # re-raised below unless it is the machinery's
                if not self.dispatcher.is_infrastructure(exc):
                    raise
                error = exc
                self.warn(f"{job.label}: infrastructure error on attempt {attempt} of {self.attempts}: "
                          f"{type(exc).__name__}: {exc}")
                if attempt < self.attempts:
                    time.sleep(self.backoff_s * attempt)
                continue
            stages = ", ".join(f"{stage.name} {stage.status}" for stage in run.stages)
            self.progress(f"{job.label}: {run.status} ({stages}) in {time.monotonic() - started:.0f} s "
                          f"on {gpu_key(run.environment)}")
            return run
        return job.failed_run(f"infrastructure failure on every one of {self.attempts} attempts: "
                              f"{type(error).__name__}: {error}")

    def work(self, position: int) -> RunResult | None:
        """Attempt one job and record its outcome before this thread takes the next job, so a
        job queued behind the one it needs sees that one's result."""
        run = self.attempt(self.jobs[position])
        with self.lock:
            self.done[position] = run
        return run

    def contestant_done(self, index: int) -> bool:
        with self.lock:
            return all(p in self.done for p, job in enumerate(self.jobs) if job.index == index)

    def contestant_run(self, index: int) -> RunResult:
        with self.lock:
            parts = [self.done[p] for p, job in enumerate(self.jobs) if job.index == index]
        return combine([run for run in parts if run is not None])


def run_ranking(jobs: Sequence[Job], dispatcher: Dispatcher, attempts: int = 3, backoff_s: float = 10.0,
                progress: LogFn = _quiet, warn: LogFn = _quiet, on_run: RunFn | None = None) -> list[RunResult]:
    """Run ``jobs`` (from :func:`~evaluator.cloud.jobs.plan_jobs`) on ``dispatcher`` and return
    one run per contestant, in contestant order. ``on_run(index, run)`` is called as each
    contestant's last job finishes; ``progress`` gets a line per finished job, ``warn`` a line
    per infrastructure error. An attempt that breaks down is retried after ``backoff_s`` times
    the attempt number; after ``attempts`` the job's run fails with the reason."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    fan = _Fan(jobs, dispatcher, attempts, backoff_s, progress, warn)
    progress(f"{len(jobs)} jobs on {dispatcher.name}, {dispatcher.max_parallel} at a time")
    runs: dict[int, RunResult] = {}
    with dispatcher.session():
        pool = ThreadPoolExecutor(max_workers=dispatcher.max_parallel, thread_name_prefix="qrbench-job")
        try:
            pending: dict[Future[RunResult | None], int] = {
                pool.submit(fan.work, position): position for position in range(len(jobs))
            }
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    future.result()  # raises what the job raised: an error of ours, not the machinery's
                    index = jobs[pending.pop(future)].index
                    if index not in runs and fan.contestant_done(index):
                        runs[index] = fan.contestant_run(index)
                        if on_run is not None:
                            on_run(index, runs[index])
        finally:
            # Leave running calls behind: closing the session (a Modal app) ends them.
            pool.shutdown(wait=False, cancel_futures=True)
    return [runs[index] for index in sorted(runs)]
