"""``qrbench modal rank``: the ranking of ``qrbench rank``, its runs fanned out over cloud GPUs.

A thin door: parse, plan the jobs (:mod:`evaluator.cloud.jobs`), print the plan and its bill
(``--dry-run``) or run them (:func:`evaluator.cloud.dispatch.run_ranking`) on Modal or, with
``--local``, in this process; then write the same results file and leaderboard as a local
ranking. Only a Modal run imports modal (:mod:`evaluator.cloud.modal_app`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from evaluator.cli_args import (
    EXIT_FAILED,
    EXIT_OK,
    REPORTS_DIR,
    UsageError,
    add_run_options,
    measurement_options,
    pick_device,
    resolve_contestants,
    results_path,
    timing_overrides,
)
from evaluator.cloud import container
from evaluator.cloud.dispatch import Dispatcher, DispatchError, LocalDispatcher, run_ranking
from evaluator.cloud.dryrun import render_plan
from evaluator.cloud.jobs import plan_jobs
from evaluator.cloud.pricing import container_price
from evaluator.contestant import ContestantError
from evaluator.modes import Mode
from evaluator.report.leaderboard import write_leaderboard
from evaluator.report.tables import render_leaderboard, render_run
from evaluator.results import RunResult, write_results
from evaluator.runner import RunOptions
from evaluator.score import rank
from evaluator.shapes import resolve_shapes

__all__ = ["register"]

# A cloud run is a ranking; a profile ranks nothing, so it is the one mode not offered.
MODES = tuple(mode.value for mode in Mode if mode is not Mode.PROFILE)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``modal`` and its ``rank`` subcommand to the ``qrbench`` parser."""
    modal = subparsers.add_parser("modal", help="run rankings on Modal cloud GPUs (B200 by default)")
    commands = modal.add_subparsers(dest="modal_command", required=True, metavar="COMMAND")
    p = commands.add_parser(
        "rank", help="rank contestants with one container per run on Modal GPUs",
        description="The ranking of `qrbench rank`, each contestant's run in its own Modal container "
                    "(and, in leaderboard mode, its secret-seed pass in another). --device auto means "
                    "CUDA in the container, or what this machine has with --local.")
    p.set_defaults(func=_cmd_rank)
    p.add_argument("contestants", nargs="*", metavar="CONTESTANT",
                   help="name under contestants/, a folder with submission.py, or a .py file (default: all)")
    add_run_options(p)
    p.add_argument("--gpu", default=container.DEFAULT_GPU,
                   help="Modal GPU request: B200, H200, H100!, ... (default: %(default)s)")
    p.add_argument("--mode", choices=MODES, default=Mode.LEADERBOARD, help="run mode (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the containers, stages, cases, time limits and estimated bill; run nothing")
    p.add_argument("--local", action="store_true",
                   help="run the same job bodies in this process (no Modal, no credentials)")
    p.add_argument("--one-container", action="store_true",
                   help="run the secret-seed pass in the contestant's container, after its other stages")
    p.add_argument("--parallel", type=int, default=10, metavar="N",
                   help="containers at once (default: %(default)s, the GPU limit of Modal's Starter plan)")
    p.add_argument("--attempts", type=int, default=3, metavar="N",
                   help="tries per container when Modal's machinery fails (default: %(default)s)")
    p.add_argument("--gpu-price", type=float, metavar="USD_PER_S",
                   help="bill the GPU at this rate per second instead of the listed price")
    p.add_argument("--out", type=Path, default=REPORTS_DIR,
                   help="folder for the leaderboard Markdown (default: reports/)")


def _check(args: argparse.Namespace) -> None:
    if args.parallel < 1:
        raise UsageError("--parallel must be at least 1")
    if args.attempts < 1:
        raise UsageError("--attempts must be at least 1")
    if args.gpu_price is not None and args.gpu_price < 0:
        raise UsageError("--gpu-price must not be negative")


def _stderr_lines(always: bool) -> Callable[[str], None]:
    """A line logger on stderr; progress (``always`` False) stays quiet unless stderr is a terminal."""
    if not (always or sys.stderr.isatty()):
        return lambda _line: None
    return lambda line: print(f"qrbench: {line}", file=sys.stderr, flush=True)


def _dispatcher(args: argparse.Namespace) -> Dispatcher:
    if args.local:
        return LocalDispatcher()
    try:
        from evaluator.cloud.modal_app import ModalDispatcher
    except ImportError as exc:
        raise UsageError(f"the modal package is not installed ({exc}): pip install -e '.[modal]', "
                         "or rank with --local") from exc
    return ModalDispatcher(args.gpu, args.parallel, show_output=sys.stderr.isatty())


def _cmd_rank(args: argparse.Namespace) -> int:
    _check(args)
    device = pick_device(args.device) if args.local else ("cuda" if args.device == "auto" else args.device)
    shapes = resolve_shapes(args.shapes or ("qr_v2" if device == "cuda" else "smoke"))
    options = RunOptions(device=device, seed=args.seed, compat=args.compat, timing=timing_overrides(args),
                         precheck=args.precheck, kernelguard=args.kernelguard, **measurement_options(args))
    try:
        jobs = plan_jobs(resolve_contestants(args.contestants), args.mode, shapes, options,
                         split_secret=not args.one_container)
    except ContestantError as exc:
        raise UsageError(str(exc)) from exc
    if args.dry_run:
        gpu = None if args.local else args.gpu
        print(render_plan(jobs, gpu, None if gpu is None else container_price(gpu, args.gpu_price)))
        return EXIT_OK

    path = results_path(args, args.mode, shapes)
    finished: dict[int, RunResult] = {}

    def save(index: int, run: RunResult) -> None:
        finished[index] = run
        write_results(path, [finished[i] for i in sorted(finished)])
        print(render_run(run), end="\n\n", flush=True)

    try:
        runs = run_ranking(jobs, _dispatcher(args), attempts=args.attempts, progress=_stderr_lines(always=False),
                           warn=_stderr_lines(always=True), on_run=save)
    except DispatchError as exc:
        raise UsageError(str(exc)) from exc
    standings = rank(runs)
    print(render_leaderboard(standings))
    print(f"results: {path}")
    if args.mode == Mode.LEADERBOARD:
        print(f"leaderboard: {write_leaderboard(runs, standings, path, args.out, force=args.force)}")
    return EXIT_OK if all(r.passed for r in runs) else EXIT_FAILED
