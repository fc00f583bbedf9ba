"""``qrbench report``: a Markdown report with plots from results files (a thin door onto
:func:`~evaluator.report.compare.build_report` and :func:`~evaluator.report.markdown.write_report`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evaluator.cli_args import RESULTS_DIR, UsageError
from evaluator.report.compare import NoiseRule, build_report
from evaluator.results import RunResult, load_results

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``report`` subcommand to the ``qrbench`` parser."""
    p = subparsers.add_parser("report", help="Markdown report and PNG plots from results files")
    p.set_defaults(func=_cmd_report)
    p.add_argument("results", nargs="+", type=Path, metavar="RESULT.json",
                   help="results files: the latest run of each contestant is reported, every run goes "
                        "into the history")
    p.add_argument("--baseline", metavar="NAME|RESULT.json",
                   help="a reported contestant (speedups over it) or an earlier results file "
                        "(each contestant against its own run there)")
    p.add_argument("--out", type=Path, default=RESULTS_DIR / "report",
                   help="folder for report.md and the plots (default: results/report/)")
    p.add_argument("--min-change", type=float, default=NoiseRule.min_change, metavar="FRACTION",
                   help="smallest change a verdict calls faster or slower (default: %(default)s)")


def _load(paths: list[Path]) -> list[RunResult]:
    return [run for path in paths for run in load_results(path)]


def _baseline(choice: str | None) -> str | list[RunResult] | None:
    if choice is None or not (choice.endswith(".json") or Path(choice).is_file()):
        return choice
    return _load([Path(choice)])


def _cmd_report(args: argparse.Namespace) -> int:
    from evaluator.report.markdown import write_report

    try:
        rule = NoiseRule(min_change=args.min_change)
        report = build_report(_load(args.results), _baseline(args.baseline), rule,
                              sources=[str(p) for p in args.results])
    except ValueError as exc:  # a results file that cannot be read, a bad baseline or rule
        raise UsageError(str(exc)) from exc
    if report.nothing_compared:  # asked for speedups, would get a report of dashes
        raise UsageError(f"--baseline {args.baseline}: nothing to compare: {report.nothing_compared}")
    margins = [f"{e.label} ({e.run.mode}): {e.run.margin_warning}" for e in report.entries if e.run.margin_warning]
    for warning in ([report.warning] if report.warning else []) + list(report.notes) + margins:
        print(f"qrbench: WARNING: {warning}", file=sys.stderr)
    print(f"report: {write_report(report, args.out)}")
    return 0
