"""``qrbench``: parse, call the library, print, exit with the contest's codes.

Exit codes: 0 everything passed, 112 a check failed (or a kernel crashed, hung or raised),
113 a bad shape file, 2 a usage error (unknown contestant, bad option).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from evaluator import __version__
from evaluator.contestant import CONTESTANTS_DIR, Contestant, ContestantError, discover_contestants, resolve_contestant
from evaluator.progress import ProgressLine
from evaluator.results import RunResult, write_results
from evaluator.runner import RunOptions, run_contestant
from evaluator.shapes import ShapeFileError, ShapeSet, resolve_shapes

__all__ = ["main"]

EXIT_OK, EXIT_USAGE, EXIT_FAILED, EXIT_BAD_SHAPES = 0, 2, 112, 113
REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "results"
REPORTS_DIR = REPO / "reports"
RUN_MODES = ("test", "benchmark", "leaderboard", "profile")


class UsageError(Exception):
    """Bad command line: reported with exit code 2."""


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _device(choice: str) -> str:
    if choice == "auto":
        return "cuda" if _cuda_available() else "cpu"
    if choice == "cuda" and not _cuda_available():
        raise UsageError("--device cuda: no CUDA device is available here")
    return choice


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shapes", help="bundled shape set name (qr_v2, smoke) or a shape file path "
                                    "(default: qr_v2 on CUDA, smoke on the CPU)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where kernels run (default: auto = CUDA when present)")
    p.add_argument("--seed", type=int, help="combine every spec seed with this seed, as the contest's POPCORN_SEED")
    p.add_argument("--json", type=Path, metavar="PATH",
                   help="results file (default: results/<time>-<mode>-<shapes>.json)")
    p.add_argument("--compat", action="store_true",
                   help="the contest's exact protocol: no hardening rules, published checker path")
    p.add_argument("--budget", type=float, metavar="S",
                   help="per-case time budget of timed passes in seconds (deviates from the contest's 10/30 s)")
    p.add_argument("--repeats", type=int, metavar="N", help="cap on timed repeats per case (deviates from the contest)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qrbench",
        description="Run, time, check and rank batched FP32 Householder QR kernels as the qr_v2 contest does.",
    )
    parser.add_argument("--version", action="version", version=f"qrbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mode in RUN_MODES:
        p = sub.add_parser(mode, help=f"run contestants in {mode} mode")
        p.set_defaults(func=_cmd_run)
        p.add_argument("contestants", nargs="+", metavar="CONTESTANT",
                       help="name under contestants/, a folder with submission.py, or a .py file")
        _add_run_options(p)
        if mode == "profile":
            p.add_argument("--profiler", action="store_true", help="also run under the torch profiler (CUDA)")
    p = sub.add_parser("rank", help="leaderboard run of contestants (default: all of contestants/) and a ranking")
    p.set_defaults(func=_cmd_rank)
    p.add_argument("contestants", nargs="*", metavar="CONTESTANT")
    _add_run_options(p)
    p.add_argument("--out", type=Path, default=REPORTS_DIR,
                   help="folder for the leaderboard Markdown (default: reports/)")
    from evaluator.report.command import register as register_report

    register_report(sub)
    from evaluator.cloud.command import register as register_modal

    register_modal(sub)
    return parser


def _timing_overrides(args: argparse.Namespace) -> dict[str, float | int]:
    overrides: dict[str, float | int] = {}
    if args.budget is not None:
        if args.budget <= 0:
            raise UsageError("--budget must be positive")
        overrides.update(benchmark_budget_s=args.budget, leaderboard_budget_s=args.budget)
    if args.repeats is not None:
        if args.repeats < 1:
            raise UsageError("--repeats must be at least 1")
        overrides.update(benchmark_repeats=args.repeats, leaderboard_repeats=args.repeats)
    return overrides


def _resolve_all(refs: Sequence[str]) -> list[Contestant]:
    try:
        if refs:
            return [resolve_contestant(r) for r in refs]
        found = discover_contestants()
    except ContestantError as exc:
        raise UsageError(str(exc)) from exc
    if not found:
        raise UsageError(f"no contestants found under {CONTESTANTS_DIR}")
    return found


def _results_path(args: argparse.Namespace, mode: str, shapes: ShapeSet) -> Path:
    if args.json is not None:
        return args.json
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return RESULTS_DIR / f"{stamp}-{mode}-{shapes.name}.json"


def _run_all(args: argparse.Namespace, mode: str) -> tuple[list[RunResult], Path]:
    """Run every contestant in turn, rewriting the results file after each finished case."""
    from evaluator.report.tables import render_run

    device = _device(args.device)
    shapes = resolve_shapes(args.shapes or ("qr_v2" if device == "cuda" else "smoke"))
    contestants = _resolve_all(args.contestants)
    options = RunOptions(device=device, seed=args.seed, compat=args.compat,
                         profiler=getattr(args, "profiler", False), timing=_timing_overrides(args))
    path = _results_path(args, mode, shapes)
    finished: list[RunResult] = []
    progress = ProgressLine()

    def save(current: RunResult) -> None:
        write_results(path, [*finished, current])

    for contestant in contestants:
        progress.start(contestant.name)
        run = run_contestant(contestant, mode, shapes, options, on_update=save, on_progress=progress)
        progress.done()
        finished.append(run)
        write_results(path, finished)
        print(render_run(run), end="\n\n", flush=True)
    return finished, path


def _cmd_run(args: argparse.Namespace) -> int:
    runs, path = _run_all(args, args.command)
    print(f"results: {path}")
    return EXIT_OK if all(r.passed for r in runs) else EXIT_FAILED


def _cmd_rank(args: argparse.Namespace) -> int:
    from evaluator.report.tables import render_leaderboard, timing_label
    from evaluator.score import rank

    runs, path = _run_all(args, "leaderboard")
    standings = rank(runs)
    table = render_leaderboard(standings)
    print(table)
    print(f"results: {path}")
    args.out.mkdir(parents=True, exist_ok=True)
    first = runs[0]
    md = args.out / f"leaderboard-{first.shapes['name']}-{first.device}.md"
    md.write_text(
        f"# Leaderboard: {first.shapes['name']} on {first.device}\n\n"
        f"{timing_label(first)}; torch {first.environment.get('torch')}, triton {first.environment.get('triton')}; "
        f"run {first.started_at}; results `{path.name}`.\n\n{render_leaderboard(standings, fmt='github')}\n"
    )
    print(f"leaderboard: {md}")
    return EXIT_OK if all(r.passed for r in runs) else EXIT_FAILED


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
