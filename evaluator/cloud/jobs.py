"""What a cloud ranking runs: one job per container, what it ships, its time limit and GPU time.

A contestant's run becomes one job, or two in leaderboard mode: the public stages (tests,
benchmark, ranked pass) and the secret-seed ranked pass, which then runs beside them in a
container of its own. :func:`combine` puts the two back together as one local run would have
been: the secret pass counts only when every public stage passed, as a local run only starts it
then. A job carries its request (everything the container needs: the contestant's files, the
shape set as JSON data, the run options) and, for this side only, the resolved contestant and shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from evaluator.contestant import SUBMISSION_FILE, Contestant, ContestantError
from evaluator.environment import git_state
from evaluator.modes import SECRET_STAGE, Mode
from evaluator.results import RunResult, StageResult
from evaluator.runner import RunOptions, StagePlan, new_run, plan_stages, stage_limit_s
from evaluator.shapes import ShapeSet

__all__ = [
    "Job",
    "RunRequest",
    "combine",
    "estimate_s",
    "pack_contestant",
    "plan_jobs",
]

MAX_SHIPPED_BYTES = 32 * 1024 * 1024
# A job's container limit is the sum of its stages' limits plus this: unpacking the request and
# stopping each stage's worker happen outside the runner's per-stage clocks.
CONTAINER_MARGIN_S = 60
# The GPU-time estimate: container start-up (imports, fingerprint), a worker's start per stage,
# a test case's generate-run-check; timed cases are counted at their full time budget.
START_ESTIMATE_S = 60.0
STAGE_START_ESTIMATE_S = 15.0
TEST_CASE_ESTIMATE_S = 2.0


@dataclass(frozen=True)
class RunRequest:
    """Everything a container needs to run some stages of one contestant, and nothing local.

    ``files`` maps paths relative to the submission's folder to their bytes; ``entry`` is the
    submission among them. ``contestant`` is the local identity the result is recorded under;
    ``shapes`` the shape set as :meth:`ShapeSet.to_dict` data, its local path included, validated
    again in the container; ``provenance`` is the checkout's git state (a container has no ``.git``).
    """

    contestant: dict[str, str]
    entry: str
    files: dict[str, bytes]
    mode: str
    stages: tuple[StagePlan, ...]
    shapes: dict[str, Any]
    options: RunOptions
    provenance: dict[str, Any]


@dataclass(frozen=True)
class Job:
    """One container's work. ``needs`` is the position of the job whose failure makes this one
    moot (the public stages, for a secret pass); ``index`` the contestant's position."""

    index: int
    part: str
    contestant: Contestant
    shapes: ShapeSet
    request: RunRequest
    timeout_s: int
    estimate_s: float
    needs: int | None = None

    @property
    def label(self) -> str:
        return f"{self.contestant.name} · {self.part}"

    def failed_run(self, reason: str) -> RunResult:
        """This job's run when no container ever returned one: its first stage errs with ``reason``."""
        first = self.request.stages[0]
        run = new_run(self.contestant, self.request.mode, self.shapes, self.request.options)
        return run.with_stage(StageResult(first.name, first.mode, "error", seed=first.secret, reason=reason))


def pack_contestant(contestant: Contestant) -> tuple[str, dict[str, bytes]]:
    """The submission's file, with its folder's other files when it is a folder contestant
    (``<folder>/submission.py`` may import helpers beside it). Hidden files and caches stay home."""
    path = contestant.path
    if path.name != SUBMISSION_FILE:
        return path.name, {path.name: path.read_bytes()}
    folder = path.parent
    files: dict[str, bytes] = {}
    for item in sorted(folder.rglob("*")):
        relative = item.relative_to(folder)
        if not item.is_file() or any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue
        files[relative.as_posix()] = item.read_bytes()
    size = sum(len(data) for data in files.values())
    if size > MAX_SHIPPED_BYTES:
        raise ContestantError(f"{contestant.name}: folder {folder} holds {size / 2**20:.0f} MiB; "
                              f"at most {MAX_SHIPPED_BYTES // 2**20} MiB is shipped to a container")
    return SUBMISSION_FILE, files


def estimate_s(stages: Sequence[StagePlan], shapes: ShapeSet, options: RunOptions) -> float:
    """Seconds a container is expected to hold its GPU: start-ups, test cases, and timed cases
    at their full budgets (the contest's stopping rule often ends a case sooner)."""
    timing = options.timing_for(shapes)
    total = START_ESTIMATE_S
    for plan in stages:
        cases = len(shapes.cases(plan.mode))
        total += STAGE_START_ESTIMATE_S
        if plan.mode == Mode.TEST:
            total += cases * TEST_CASE_ESTIMATE_S
        elif plan.mode == Mode.BENCHMARK:
            total += timing.benchmark_warmup_s + cases * timing.benchmark_budget_s
        elif plan.mode == Mode.LEADERBOARD:
            total += cases * (timing.leaderboard_warmup_s + timing.leaderboard_budget_s)
    return total


def _job_timeout_s(stages: Sequence[StagePlan], shapes: ShapeSet, options: RunOptions) -> int:
    return math.ceil(sum(stage_limit_s(plan, shapes, options) for plan in stages) + CONTAINER_MARGIN_S)


def plan_jobs(contestants: Sequence[Contestant], mode: str, shapes: ShapeSet, options: RunOptions,
              split_secret: bool = True) -> list[Job]:
    """The jobs of a ranking: every contestant's public job first, then the secret passes (so a
    secret pass queued behind others can be skipped once its public stages have failed)."""
    shapes_data = shapes.to_dict()
    provenance = git_state()
    first: list[Job] = []
    second: list[Job] = []
    for index, contestant in enumerate(contestants):
        entry, files = pack_contestant(contestant)
        stages = plan_stages(mode, options.seed)
        parts = [("all", stages)]
        if split_secret and any(plan.name == SECRET_STAGE for plan in stages):
            parts = [("public", [p for p in stages if p.name != SECRET_STAGE]),
                     ("secret", [p for p in stages if p.name == SECRET_STAGE])]
        for part, plans in parts:
            request = RunRequest(contestant.to_dict(), entry, files, mode, tuple(plans), shapes_data, options,
                                 provenance)
            timeout_s = _job_timeout_s(plans, shapes, options)
            job = Job(index, part, contestant, shapes, request, timeout_s,
                      min(estimate_s(plans, shapes, options), timeout_s))
            if part == "secret":
                second.append(replace(job, needs=len(first) - 1))
            else:
                first.append(job)
    return first + second


def combine(parts: Sequence[RunResult]) -> RunResult:
    """One contestant's run from its jobs' runs, public part first. The secret pass's stage joins
    only when everything before passed; its container's environment is kept beside the first's."""
    run = parts[0]
    for extra in parts[1:]:
        if not run.no_stage_failed:
            break
        for stage in extra.stages:
            run = run.with_stage(stage)
        if extra.environment:
            run = replace(run, environment={**run.environment, "secret_pass_environment": extra.environment})
    return run
