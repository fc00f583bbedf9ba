"""The parent side of a run: spawn one worker per stage, enforce its time limit, collect results.

A worker that raises, crashes, hangs, floods its output or forges results only ever fails its
own contestant: the parent reads signed messages with a deadline, kills the worker's whole
process group when time is up, and turns whatever happened into a stage status and reason.
Each finished case is handed to ``on_update`` at once, so callers can keep it on disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from evaluator.channel import ChannelError, Reader, new_key
from evaluator.contestant import Contestant
from evaluator.guards import rule_message
from evaluator.precheck import Precheck, precheck_file
from evaluator.results import STAGES_BY_MODE, CaseResult, RunResult, StageResult
from evaluator.shapes import ShapeSet, Timing

__all__ = ["RunOptions", "StagePlan", "new_run", "plan_stages", "run_contestant", "run_stage", "stage_limit_s"]

_REPO = Path(__file__).resolve().parents[1]
_TAIL_BYTES = 4000

ProgressFn = Callable[[str, dict[str, Any]], None]
UpdateFn = Callable[[RunResult], None]


@dataclass(frozen=True)
class RunOptions:
    """How to run: ``device`` is "cuda" or "cpu"; ``seed`` is combined into every spec seed as
    the contest's POPCORN_SEED is; ``compat`` runs the contest's exact protocol. ``precheck``
    runs the contest service's submission gates first (off only for lab work), with kernelguard
    under ``kernelguard``: enforce, warn or off (see :mod:`evaluator.precheck`)."""

    device: str
    seed: int | None = None
    compat: bool = False
    profiler: bool = False
    timing: dict[str, float | int] = field(default_factory=dict)
    timeout_scale: float = 1.0
    env: dict[str, str] = field(default_factory=dict)
    precheck: bool = True
    kernelguard: str = "enforce"

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
        stage_mode = "leaderboard" if name.startswith("ranked") else name
        plans.append(StagePlan(name, stage_mode, secrets.randbits(31) if name == "ranked-secret" else seed))
    return plans


def stage_limit_s(plan: StagePlan, shapes: ShapeSet, options: RunOptions) -> float:
    """The wall-time limit of one stage's worker (the shape file's limit for its mode, scaled)."""
    return shapes.timeout_s(plan.mode) * options.timeout_scale


def _worker_env(options: RunOptions) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("POPCORN_SEED", None)
    env.pop("POPCORN_FD", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    if options.device == "cpu":
        # Set before the interpreter starts, so it holds before anything imports triton, and
        # hide GPUs so the generator (which follows CUDA availability) makes CPU inputs.
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(options.env)
    return env


class _Tail:
    """The last few kilobytes of a worker's output (a kernel may print megabytes)."""

    def __init__(self) -> None:
        self._data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> int:
        self.total += len(chunk)
        self._data += chunk
        del self._data[:-_TAIL_BYTES]
        return len(chunk)

    def text(self) -> str:
        text = self._data.decode(errors="replace").strip()
        return ("..." if self.total > _TAIL_BYTES else "") + text


def _death(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the worker was killed by {name}"
    return f"the worker exited with code {returncode}"


class _Collector:
    """Builds a stage from the worker's messages; survives whatever the worker does."""

    def __init__(self, plan: StagePlan, shapes: ShapeSet) -> None:
        self.plan = plan
        self.cases: list[CaseResult] = []
        self.total = len(shapes.cases(plan.mode))
        self.environment: dict[str, Any] = {}
        self.floor: dict[str, float] | None = None
        self.profile_table = ""
        self.error = ""
        self.done = False

    def take(self, message: dict[str, Any]) -> None:
        event = message.get("event")
        if event == "hello":
            self.environment = message.get("environment", {})
            self.floor = message.get("floor")
        elif event == "case":
            self.cases.append(CaseResult.from_dict(message["result"]))
        elif event == "profile":
            self.profile_table = message.get("table", "")
        elif event == "error":
            self.error = message.get("message", "worker error")
        elif event == "done":
            self.done = True

    def stage(self, status: str | None, reason: str, wall_s: float, shapes: ShapeSet) -> StageResult:
        cases = list(self.cases)
        all_cases = shapes.cases(self.plan.mode)
        if self.plan.mode == "profile":
            all_cases = all_cases[:1]
        for i in range(len(cases), len(all_cases)):
            cases.append(CaseResult(i, all_cases[i], "skipped", f"not run: {reason}" if reason else "not run"))
        if status is None:
            status = "pass" if cases and all(c.passed for c in cases) else "fail"
        return StageResult(self.plan.name, self.plan.mode, status, tuple(cases), self.plan.secret, reason,
                           round(wall_s, 3), self.profile_table)


def run_stage(
    contestant: Contestant,
    plan: StagePlan,
    shapes: ShapeSet,
    options: RunOptions,
    on_case: Callable[[StageResult], None] | None = None,
    on_progress: ProgressFn | None = None,
) -> tuple[StageResult, dict[str, Any]]:
    """Run one stage in a fresh worker; return the stage and the worker's environment."""
    key = new_key()
    reader = Reader(key)
    collector = _Collector(plan, shapes)
    limit_s = stage_limit_s(plan, shapes, options)
    job = {
        "key": key,
        "contestant": contestant.to_dict(),
        "mode": plan.mode,
        "secret": plan.secret,
        "shapes_path": str(shapes.path.resolve()),
        "device": options.device,
        "compat": options.compat,
        "profiler": options.profiler,
        "timing": options.timing,
    }
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    status: str | None = None
    reason = ""
    output = _Tail()
    proc = subprocess.Popen(
        [sys.executable, "-m", "evaluator.worker", str(write_fd)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        pass_fds=(write_fd,), env=_worker_env(options), start_new_session=True,
    )
    os.close(write_fd)
    assert proc.stdin is not None
    assert proc.stdout is not None
    out_fd = proc.stdout.fileno()
    try:
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    open_fds = [read_fd, out_fd]
    try:
        while read_fd in open_fds:
            remaining = limit_s - (time.monotonic() - started)
            if remaining <= 0:
                status, reason = "timeout", f"exceeded the {limit_s:.0f} s limit of {plan.mode} mode"
                break
            ready, _, _ = select.select(open_fds, [], [], min(remaining, 1.0))
            messages = []
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    open_fds.remove(fd)
                elif fd == out_fd:
                    output.add(chunk)
                else:
                    messages += reader.feed(chunk)
            for message in messages:
                collector.take(message)
                if message.get("event") == "case" and on_case is not None:
                    on_case(collector.stage(None, "", time.monotonic() - started, shapes))
                elif message.get("event") == "progress" and on_progress is not None:
                    on_progress(plan.name, message["progress"])
    except ChannelError as exc:
        status, reason = "fail", rule_message("result-channel", str(exc))
    finally:
        os.close(read_fd)  # first: a worker still writing results gets EPIPE, not a 5 s wait
        _stop(proc, out_fd, output)
    if status is None:
        if collector.error:
            status, reason = "error", collector.error
        elif not collector.done:
            status = "crash"
            tail = output.text()
            reason = f"{_death(proc.returncode)} before finishing"
            if tail:
                reason += f"; its output ended with:\n{tail}"
    stage = collector.stage(status, reason, time.monotonic() - started, shapes)
    return stage, collector.environment


def _stop(proc: subprocess.Popen[bytes], out_fd: int, output: _Tail) -> None:
    """Let a finished worker exit (draining its output), else kill its whole process group."""
    deadline = time.monotonic() + 5
    reading = True
    while proc.poll() is None and time.monotonic() < deadline:
        if not reading:
            time.sleep(0.02)
            continue
        ready, _, _ = select.select([out_fd], [], [], 0.1)
        if ready and not output.add(os.read(out_fd, 1 << 16)):
            reading = False
    with contextlib.suppress(ProcessLookupError, PermissionError):  # also ends what the worker left behind
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.stdout is not None
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
    for plan in plan_stages(mode, options.seed) if stages is None else stages:

        def publish(stage: StageResult, current: RunResult = run) -> None:
            if on_update is not None:
                on_update(current.with_stage(stage))

        stage, environment = run_stage(contestant, plan, shapes, options, publish, on_progress)
        run = run.with_stage(stage)
        if environment and not run.environment:
            run = replace(run, environment=environment)
        if on_update is not None:
            on_update(run)
        if not stage.passed:
            break
    return run
