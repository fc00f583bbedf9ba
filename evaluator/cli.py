"""``qrbench``: parse, call the library, print, exit with the contest's codes.

Exit codes: 0 everything passed, 112 a check failed (or a kernel crashed, hung or raised, or the
contest service's submission gates refused a file), 113 a bad shape file, 2 a usage error
(unknown contestant, missing file, bad option).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from evaluator import __version__
from evaluator.cli_args import (
    EXIT_BAD_SHAPES,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    REPORTS_DIR,
    UsageError,
    add_kernelguard_option,
    add_run_options,
    pick_device,
    resolve_contestants,
    results_path,
    timing_overrides,
)
from evaluator.cloud.command import register as register_modal
from evaluator.modes import MODE_NAMES, Mode
from evaluator.precheck import Precheck, precheck_file
from evaluator.progress import ProgressLine
from evaluator.report.command import register as register_report
from evaluator.report.leaderboard import write_leaderboard
from evaluator.report.tables import render_leaderboard, render_run
from evaluator.results import RunResult, write_results
from evaluator.runner import RunOptions, run_contestant
from evaluator.score import rank
from evaluator.shapes import ShapeFileError, resolve_shapes

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qrbench",
        description="Run, time, check and rank batched FP32 Householder QR kernels as the qr_v2 contest does.",
    )
    parser.add_argument("--version", action="version", version=f"qrbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mode in Mode:
        p = sub.add_parser(mode, help=f"run contestants in {mode} mode")
        p.set_defaults(func=_cmd_run)
        p.add_argument("contestants", nargs="+", metavar="CONTESTANT",
                       help="name under contestants/, a folder with submission.py, or a .py file")
        add_run_options(p)
        if mode == Mode.PROFILE:
            p.add_argument("--profiler", action="store_true", help="also run under the torch profiler (CUDA)")
    p = sub.add_parser("rank", help="leaderboard run of contestants (default: all of contestants/) and a ranking")
    p.set_defaults(func=_cmd_rank)
    p.add_argument("contestants", nargs="*", metavar="CONTESTANT")
    add_run_options(p)
    p.add_argument("--out", type=Path, default=REPORTS_DIR,
                   help="folder for the leaderboard Markdown (default: reports/)")
    p = sub.add_parser("check", help="only the contest service's submission gates, per file (about a second each)")
    p.set_defaults(func=_cmd_check)
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="a submission file")
    p.add_argument("--mode", choices=MODE_NAMES, default=Mode.LEADERBOARD,
                   help="the submission mode to judge for: kernelguard guards all but test (default: leaderboard)")
    add_kernelguard_option(p)
    register_report(sub)
    register_modal(sub)
    return parser


def _run_all(args: argparse.Namespace, mode: str) -> tuple[list[RunResult], Path]:
    """Run every contestant in turn, rewriting the results file after each finished case."""
    device = pick_device(args.device)
    shapes = resolve_shapes(args.shapes or ("qr_v2" if device == "cuda" else "smoke"))
    if note := shapes.timing_note(device):
        print(note, file=sys.stderr)
    contestants = resolve_contestants(args.contestants)
    options = RunOptions(device=device, seed=args.seed, compat=args.compat,
                         profiler=getattr(args, "profiler", False), timing=timing_overrides(args),
                         precheck=args.precheck, kernelguard=args.kernelguard)
    path = results_path(args, mode, shapes)
    finished: list[RunResult] = []
    progress = ProgressLine()

    def save(current: RunResult) -> None:
        write_results(path, [*finished, current])

    for contestant in contestants:
        progress.start(contestant.name)
        run = run_contestant(contestant, mode, shapes, options, on_update=save, on_progress=progress)
        progress.done()
        if run.precheck is not None and run.precheck.passed and run.precheck.findings:
            print(_precheck_text(run.precheck), flush=True)
        finished.append(run)
        write_results(path, finished)
        print(render_run(run), end="\n\n", flush=True)
    return finished, path


def _cmd_run(args: argparse.Namespace) -> int:
    runs, path = _run_all(args, args.command)
    print(f"results: {path}")
    return EXIT_OK if all(r.passed for r in runs) else EXIT_FAILED


def _cmd_rank(args: argparse.Namespace) -> int:
    runs, path = _run_all(args, Mode.LEADERBOARD)
    standings = rank(runs)
    print(render_leaderboard(standings))
    print(f"results: {path}")
    print(f"leaderboard: {write_leaderboard(runs, standings, path, args.out)}")
    return EXIT_OK if all(r.passed for r in runs) else EXIT_FAILED


def _precheck_text(verdict: Precheck) -> str:
    """One file's verdict: which gates passed, refused, warned or did not run, then what they found."""
    outcomes = ", ".join(f"{rule} {outcome}" for rule, outcome in verdict.outcomes.items())
    result = (verdict.kernelguard or {}).get("result") or {}
    classified = f"; kernelguard: {result['classification']}" if "classification" in result else ""
    head = f"{verdict.file}: {'passed' if verdict.passed else 'REFUSED'} ({outcomes}{classified})"
    return "\n".join([head, *(f"  {finding.message}" for finding in verdict.findings)])


def _cmd_check(args: argparse.Namespace) -> int:
    missing = [str(f) for f in args.files if not f.is_file()]
    if missing:
        raise UsageError(f"no such file: {', '.join(missing)}")
    passed = True
    for file in args.files:
        try:
            verdict = precheck_file(file, args.mode, args.kernelguard)
        except OSError as exc:
            raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from exc
        print(_precheck_text(verdict), flush=True)
        passed = passed and verdict.passed
    return EXIT_OK if passed else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"qrbench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ShapeFileError as exc:
        print(f"qrbench: bad shape file: {exc}", file=sys.stderr)
        return EXIT_BAD_SHAPES
    except KeyboardInterrupt:
        print("\nqrbench: interrupted; finished cases are in the results file", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
