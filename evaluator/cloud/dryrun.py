"""``--dry-run``'s account: the containers a ranking would start, and what they would cost."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from evaluator.cloud import container
from evaluator.cloud.jobs import (
    CONTAINER_MARGIN_S,
    STAGE_START_ESTIMATE_S,
    START_ESTIMATE_S,
    TEST_CASE_ESTIMATE_S,
    Job,
)
from evaluator.cloud.pricing import ContainerPrice

__all__ = ["render_plan"]


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def _money(seconds: float, price: ContainerPrice | None) -> str:
    return f"${seconds * price.usd_per_s:.2f}" if price is not None else "no price"


def render_plan(jobs: Sequence[Job], gpu: str | None, price: ContainerPrice | None) -> str:
    """What would run on Modal ``gpu`` (None: this machine, ``--local``): each container's stages,
    cases, time limit and estimated GPU time, and the bill: the estimate, and the cap should every
    container use its whole limit."""
    first = jobs[0]
    shapes, options = first.shapes, first.request.options
    rows = [
        [job.contestant.name, job.part,
         ", ".join(plan.name for plan in job.request.stages),
         " + ".join(str(len(shapes.cases(plan.mode))) for plan in job.request.stages),
         f"{job.timeout_s} s", f"{job.estimate_s:.0f} s", _money(job.estimate_s, price)]
        for job in jobs
    ]
    table = tabulate(rows, headers=["contestant", "container", "stages", "cases", "limit", "estimate", "cost"])
    estimate = sum(job.estimate_s for job in jobs)
    cap = sum(job.timeout_s for job in jobs)
    timing = options.timing_for(shapes)
    where = f"Modal {gpu}" if gpu is not None else "this machine (--local)"
    if price is not None:
        price_line = f"price: {price.describe()}"
    elif gpu is None:
        price_line = "price: none, this machine bills nothing"
    else:
        price_line = f"price: none listed for {gpu!r}; pass --gpu-price USD_PER_S to bill it"
    lines = [
        f"dry run: nothing is started. {len(jobs)} container{'s' if len(jobs) > 1 else ''} on {where}, "
        f"mode {first.request.mode}, device {options.device}, seed {'none' if options.seed is None else options.seed}"
        + (", --compat" if options.compat else ""),
        f"shapes: {shapes.name} ({shapes.path}): {len(shapes.tests)} tests, {len(shapes.benchmarks)} benchmarks; "
        f"limits {', '.join(f'{mode} {s:.0f} s' for mode, s in shapes.timeouts_s.items())}",
        f"image: {container.CUDA_BASE_IMAGE}, Python {container.PYTHON_VERSION}, torch {container.TORCH_VERSION} "
        f"({container.TORCH_INDEX_URL}), triton {container.TRITON_VERSION}; network blocked" if gpu is not None
        else "image: none, the jobs run in this process's Python",
        "",
        table,
        "",
        f"GPU time: estimate {_hours(estimate)} ({_money(estimate, price)}), "
        f"cap {_hours(cap)} ({_money(cap, price)})",
        price_line,
        f"estimate per container: {START_ESTIMATE_S:.0f} s start-up + per stage {STAGE_START_ESTIMATE_S:.0f} s "
        f"+ test: {TEST_CASE_ESTIMATE_S:.0f} s a case; benchmark: {timing.benchmark_warmup_s:g} s warm-up "
        f"+ {timing.benchmark_budget_s:g} s a case; leaderboard: "
        f"{timing.leaderboard_warmup_s:g} + {timing.leaderboard_budget_s:g} s a case (full budgets); "
        f"cap: the stages' limits + {CONTAINER_MARGIN_S} s",
    ]
    return "\n".join(lines)
