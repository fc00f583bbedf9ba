"""``qrbench test|benchmark|leaderboard|profile|rank``: run contestants one after another, keep every
finished case on disk, show progress, print each run and a summary. The ranking flow
(:func:`rank_with`) is also ``qrbench modal rank``'s, with the runs dispatched to containers.

Imported only when one of these commands runs (it brings torch), so ``qrbench --help`` stays fast.
A Ctrl-C (or a reader of the output that went away) saves the run as interrupted and stops.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from evaluator.cli_args import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    OutputClosed,
    UsageError,
    measurement_options,
    pick_device,
    precheck_text,
    resolve_contestants,
    results_path,
    timing_overrides,
)
from evaluator.contestant import Contestant
from evaluator.modes import Mode, stage_mode
from evaluator.progress import feedback, use_color
from evaluator.report.leaderboard import write_leaderboard
from evaluator.report.tables import render_leaderboard, render_run
from evaluator.results import INCOMPLETE, INTERRUPTED, RUNNING, RunResult, StageResult, write_results
from evaluator.runner import RunOptions, new_run, run_contestant
from evaluator.score import rank
from evaluator.shapes import ShapeSet, resolve_shapes

__all__ = ["Dispatch", "Setup", "cmd_rank", "cmd_run", "interrupted", "rank_with", "run_here", "run_options", "setup",
           "stopped", "summary"]


def interrupted(run: RunResult) -> RunResult:
    """The run as it stood when the user stopped it: the stage that was running, or else the next
    one it had left, is interrupted; a finished, failed or refused run stays as it was."""
    running = [s for s in run.stages if s.status == RUNNING]
    if running:  # stopped while the runner could not record it (a second Ctrl-C as it cleaned up)
        return run.with_stage(replace(running[0], status=INTERRUPTED, reason="interrupted"))
    if run.status != INCOMPLETE:
        return run
    name = run.missing_stages[0]
    return run.with_stage(StageResult(name, stage_mode(name), INTERRUPTED, reason="interrupted before it started"))


def summary(runs: list[RunResult]) -> str:
    """One line per contestant under a count: the end of a multi-contestant command."""
    lines = [f"summary: {sum(r.passed for r in runs)} of {len(runs)} contestants passed"]
    for r in runs:
        why = (r.reason.strip().splitlines() or [""])[0]
        lines.append(f"  {r.contestant['name']}: {r.status}" + ("" if r.passed else f": {why}"))
    return "\n".join(lines)


@dataclass(frozen=True)
class Setup:
    """What a run command resolves from its arguments before anything runs."""

    mode: str
    shapes: ShapeSet
    contestants: list[Contestant]
    options: RunOptions


def run_options(args: argparse.Namespace, device: str) -> RunOptions:
    """The :class:`RunOptions` the shared run options (:func:`~evaluator.cli_args.add_run_options`) ask for."""
    return RunOptions(device=device, seed=args.seed, compat=args.compat,
                      profiler=getattr(args, "profiler", False), timing=timing_overrides(args),
                      precheck=args.precheck, kernelguard=args.kernelguard, **measurement_options(args))


def setup(args: argparse.Namespace, mode: str, device: str) -> Setup:
    """The shape set (qr_v2 on CUDA, smoke on the CPU unless ``--shapes``), the contestants (all of
    ``contestants/`` unless named) and the options; a CPU run of a set without timing is noted."""
    shapes = resolve_shapes(args.shapes or ("qr_v2" if device == "cuda" else "smoke"))
    if note := shapes.timing_note(device):
        print(note, file=sys.stderr)
    return Setup(mode, shapes, resolve_contestants(args.contestants), run_options(args, device))


# Where runs come from: every contestant's run, each saved into the results file as it finishes,
# and the interrupt that stopped them early, if one did.
Dispatch = Callable[[Setup, Path], tuple[list[RunResult], KeyboardInterrupt | None]]


def run_here(plan: Setup, path: Path) -> tuple[list[RunResult], KeyboardInterrupt | None]:
    """Run every contestant in turn in this process tree, rewriting the results file after each
    finished case, with progress on stderr and each run printed as it ends."""
    mode, shapes, options = plan.mode, plan.shapes, plan.options
    finished: list[RunResult] = []
    latest: list[RunResult] = []  # the current contestant's run as last saved
    shown = feedback()

    def save(current: RunResult) -> None:
        latest[:] = [current]
        write_results(path, [*finished, current])
        shown.update(current)

    for contestant in plan.contestants:
        shown.start(contestant.name)
        latest.clear()
        try:
            run = run_contestant(contestant, mode, shapes, options, on_update=save, on_progress=shown)
        except KeyboardInterrupt as stop:
            finished.append(interrupted(latest[0] if latest else new_run(contestant, mode, shapes, options)))
            write_results(path, finished)
            with contextlib.suppress(OutputClosed):
                shown.done(finished[-1])
            return finished, stop
        finished.append(run)
        write_results(path, finished)
        shown.done(run)
        if run.precheck is not None and run.precheck.passed and run.precheck.findings:
            print(precheck_text(run.precheck), flush=True)
        print(render_run(run, color=use_color(sys.stdout)), end="\n\n", flush=True)
    return finished, None


def stopped(stop: KeyboardInterrupt, path: Path) -> int:
    """The exit of a command the user stopped: say where what was measured is (a reader that went
    away is re-raised: the CLI's entry exits quietly)."""
    if isinstance(stop, OutputClosed):
        raise stop
    print(f"\nqrbench: interrupted; what was measured is in {path}", file=sys.stderr)
    return EXIT_INTERRUPTED


def cmd_run(args: argparse.Namespace) -> int:
    plan = setup(args, args.command, pick_device(args.device))
    if getattr(args, "estimate", False):
        return estimate_only(plan)
    path = results_path(args, plan.mode, plan.shapes)
    runs, stop = run_here(plan, path)
    if stop is not None:
        return stopped(stop, path)
    if len(runs) > 1:
        print(summary(runs))
    print(f"results: {path}")
    return EXIT_OK if all(r.passed for r in runs) else EXIT_FAILED


def estimate_only(plan: Setup) -> int:
    """``--estimate``: a pilot per contestant and the predicted stages, nothing saved or ranked."""
    from evaluator.estimate import estimate_run, render_estimate

    if plan.options.compat:
        raise UsageError("--estimate predicts both protocols from a hardened pilot; leave out --compat")
    for contestant in plan.contestants:
        print(render_estimate(estimate_run(contestant, plan.mode, plan.shapes, plan.options)), flush=True)
    return EXIT_OK


def rank_with(args: argparse.Namespace, plan: Setup, dispatch: Dispatch) -> int:
    """The one ranking flow, whoever runs the runs (this machine: :func:`run_here`; Modal:
    ``qrbench modal rank``): the results file, the leaderboard on stdout, a summary, and in
    leaderboard mode the leaderboard page under ``--out``."""
    path = results_path(args, plan.mode, plan.shapes)
    runs, stop = dispatch(plan, path)
    if stop is not None:
        return stopped(stop, path)
    standings = rank(runs)
    print(render_leaderboard(standings))
    if len(runs) > 1:
        print(summary(runs))
    print(f"results: {path}")
    if plan.mode == Mode.LEADERBOARD:
        print(f"leaderboard: {write_leaderboard(runs, standings, path, args.out, force=args.force)}")
    return EXIT_OK if all(r.passed for r in runs) else EXIT_FAILED


def cmd_rank(args: argparse.Namespace) -> int:
    return rank_with(args, setup(args, Mode.LEADERBOARD, pick_device(args.device)), run_here)
