"""The GPU check of ``qrbench compare`` (issue #21): paired against separate runs, from their files.

On the GPU, one comparison of blocked_wy against itself and against a copy slowed by 3%
(``tests/contestants/blocked_wy_slowed.py``), and two separate benchmark runs of blocked_wy::

    qrbench compare blocked_wy blocked_wy tests/contestants/blocked_wy_slowed.py --shapes qr_v2 \\
        --budget 4 --repeats 400 --json results/compare.json
    qrbench benchmark blocked_wy blocked_wy --shapes qr_v2 --budget 1 --repeats 100 --json results/separate.json
    python -m benchmarks.compare_h200 results/compare.json results/separate.json

(Two results files can stand for the separate runs too, the first run of each: e.g. the committed
``reports/h200/2026-12-01-blocked_wy-benchmark-qr_v2.json.gz`` and ``...-leaderboard-qr_v2.json.gz``.)

This prints, with one rule (:class:`~evaluator.paired_stats.RatioRule`'s defaults), each
candidate's geometric-mean time ratio to the baseline with its interval: paired over the
comparison's blocks, and for the two separate runs as separate runs allow (each run's repeats
resampled on its own: the interval holds the noise inside each run, none of the drift between
them). Then the issue's three checks: blocked_wy against itself holds 1, with an interval narrower
than the separate runs'; the slowed copy reads slower. The exit code is 0 when all three hold.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tabulate import tabulate

from evaluator.paired_results import load_comparison
from evaluator.paired_stats import SLOWER, RatioEstimate, RatioRule
from evaluator.results import load_results


def _row(what: str, estimate: RatioEstimate) -> list[str]:
    if estimate.low is None or estimate.high is None:
        return [what, f"{estimate.time_ratio:.4f}", "-", "-", estimate.verdict]
    return [what, f"{estimate.time_ratio:.4f}", f"[{estimate.low:.4f}, {estimate.high:.4f}]",
            f"{estimate.high - estimate.low:.4f}", estimate.verdict]


def _width(estimate: RatioEstimate | None) -> float:
    if estimate is None or estimate.low is None or estimate.high is None:
        return float("inf")
    return estimate.high - estimate.low


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("comparison", type=Path, help="qrbench compare's results file")
    parser.add_argument("separate", type=Path, nargs="+",
                        help="the two separate runs of the baseline: one results file holding both, or two files "
                             "(the first run of each); each run's scored stage (ranked, else benchmark) is used")
    args = parser.parse_args(argv)
    rule = RatioRule()
    comparison = load_comparison(args.comparison)
    base = comparison.runs[0]
    rows, self_paired, slowed = [], None, None
    for run, summary in zip(comparison.runs[1:], comparison.summary(rule), strict=True):
        if summary.geomean is None:
            rows.append([f"paired: {summary.label}", "-", "-", "-", run.status])
            continue
        rows.append(_row(f"paired: {summary.label} / {base.contestant['name']}", summary.geomean))
        if run.contestant["sha256"] == base.contestant["sha256"]:
            self_paired = summary.geomean
        else:
            slowed = summary.geomean
    runs = [r for path in args.separate for r in load_results(path)[: 2 if len(args.separate) == 1 else 1]]
    stages = [run.scored_stage for run in runs]
    if len(stages) != 2 or any(s is None or not s.passed for s in stages):
        raise SystemExit(f"{', '.join(map(str, args.separate))}: need two separate runs, each with a timed stage "
                         "that passed")
    pairs = [(a.samples_ns, b.samples_ns) for a, b in zip(stages[0].cases, stages[1].cases, strict=True)]
    separate = rule.geomean_ratio(pairs, paired=False)
    rows.append(_row("separate runs: second / first", separate))
    print(tabulate(rows, headers=["geomean time ratio", "ratio", f"{rule.confidence:.0%} CI", "width", "verdict"],
                   tablefmt="github", disable_numparse=True))
    checks = {
        "blocked_wy against itself: the interval holds 1": self_paired is not None
        and self_paired.low is not None and self_paired.high is not None and self_paired.low <= 1 <= self_paired.high,
        "... and is narrower than the separate runs'": _width(self_paired) < _width(separate),
        "the 3%-slowed copy reads slower": slowed is not None and slowed.verdict == SLOWER,
    }
    for check, held in checks.items():
        print(f"{'holds' if held else 'FAILS'}: {check}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
