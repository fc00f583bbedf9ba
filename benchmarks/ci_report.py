"""Regression report: every contestant through the contest's ranked submission (or only its
benchmark pass, ``--mode benchmark``), then the Markdown report with plots. Exits 112 when any
contestant fails a check (a correctness regression), 0 otherwise; timings never fail it.

Run from the repo root. CI (CPU, the smoke set, into ``reports/ci/``)::

    python -m benchmarks.ci_report

On a GPU, the full contest set, with the committed GPU results as history::

    python -m benchmarks.ci_report --device cuda --out reports/h200 --history reports/h200/*.json.gz
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from evaluator.contestant import discover_contestants
from evaluator.report.compare import build_report, run_label
from evaluator.report.markdown import write_report
from evaluator.results import load_results
from evaluator.run_command import Setup, run_here, stopped
from evaluator.runner import RunOptions
from evaluator.shapes import resolve_shapes

EXIT_OK, EXIT_FAILED = 0, 112
REPO = Path(__file__).resolve().parents[1]


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ci_report",
                                description="Run every contestant, write the report, exit 112 if any failed.")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where kernels run (default: cpu)")
    p.add_argument("--shapes", help="shape set (default: smoke on the CPU, qr_v2 on CUDA)")
    p.add_argument("--mode", choices=("leaderboard", "benchmark"), default="leaderboard",
                   help="leaderboard: the ranked submission (tests, benchmark, ranked and secret-seed passes); "
                        "benchmark: the timed cases only, each timed output checked (about 4x quicker)")
    p.add_argument("--out", type=Path, default=REPO / "reports" / "ci", help="report folder (default: reports/ci/)")
    p.add_argument("--baseline", default="geqrf", help="contestant the others are compared with (default: geqrf)")
    p.add_argument("--history", type=Path, nargs="*", default=[], metavar="RESULT.json",
                   help="earlier results files for the history")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    shapes = resolve_shapes(args.shapes or ("qr_v2" if args.device == "cuda" else "smoke"))
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%M%SZ")
    results = args.out / f"{stamp}-{args.mode}-{shapes.name}.json.gz"
    runs, stop = run_here(Setup(args.mode, shapes, discover_contestants(), RunOptions(device=args.device)), results)
    if stop is not None:
        return stopped(stop, results)
    history = [run for path in args.history for run in load_results(path)]
    baseline = args.baseline if any(run_label(r) == args.baseline for r in runs) else None
    report = build_report([*history, *runs], baseline, sources=[*map(str, args.history), str(results)])
    if report.warning:
        print(f"WARNING: {report.warning}", file=sys.stderr)
    print(f"results: {results}\nreport: {write_report(report, args.out)}")
    failed = [run_label(r) for r in runs if not r.passed]
    if failed:
        print(f"correctness regression: {', '.join(failed)} failed (see the report's Correctness section)",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
