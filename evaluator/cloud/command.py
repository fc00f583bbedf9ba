"""``qrbench modal rank``: the ranking of ``qrbench rank``, its runs fanned out over cloud GPUs.

A thin door onto the one ranking flow (:func:`evaluator.run_command.rank_with`) with another
dispatch: plan the jobs (:mod:`evaluator.cloud.jobs`), print the plan and its bill (``--dry-run``)
or run them (:func:`evaluator.cloud.dispatch.run_ranking`) on Modal or, with ``--local``, in this
process; the flow then writes the same results file and leaderboard as ``qrbench rank``. Only a
Modal run imports modal (:mod:`evaluator.cloud.modal_app`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from evaluator.cli_args import EXIT_OK, REPORTS_DIR, UsageError, add_run_options, pick_device
from evaluator.cloud import container
from evaluator.cloud.dispatch import Dispatcher, DispatchError, LocalDispatcher, run_ranking
from evaluator.cloud.dryrun import render_plan
from evaluator.cloud.jobs import Job, plan_jobs
from evaluator.cloud.pricing import container_price
from evaluator.contestant import ContestantError
from evaluator.modes import Mode
from evaluator.report.tables import render_run
from evaluator.results import RunResult, write_results
from evaluator.run_command import Dispatch, Setup, rank_with, setup

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


def _on_modal(args: argparse.Namespace, jobs: list[Job]) -> Dispatch:
    """The ranking's runs from the jobs' containers (or, with ``--local``, the same job bodies in
    this process), each contestant's saved and printed as its last job ends."""

    def dispatch(plan: Setup, path: Path) -> tuple[list[RunResult], KeyboardInterrupt | None]:
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
        return runs, None

    return dispatch


def _cmd_rank(args: argparse.Namespace) -> int:
    _check(args)
    device = pick_device(args.device) if args.local else ("cuda" if args.device == "auto" else args.device)
    plan = setup(args, args.mode, device)
    try:
        jobs = plan_jobs(plan.contestants, plan.mode, plan.shapes, plan.options, split_secret=not args.one_container)
    except ContestantError as exc:
        raise UsageError(str(exc)) from exc
    if args.dry_run:
        gpu = None if args.local else args.gpu
        print(render_plan(jobs, gpu, None if gpu is None else container_price(gpu, args.gpu_price)))
        return EXIT_OK
    return rank_with(args, plan, _on_modal(args, jobs))
