"""How close each timed case's claims came to what the parent's clock saw (rule ``parent-clock``).

``python -m benchmarks.parent_clock_margin RESULTS.json [...]`` reads hardened results files (schema
3 on: each timed case keeps its repeats' claims, witnesses and allowances) and prints, per run,
stage and case, the claim over the witness less the allowance, the quantity the rule bounds
below by its timer's ``PARENT_CLOCK_SHARE``: its median, 5th percentile and least value over the repeats
whose witness exceeded their allowance (the rule judges no other), and the median claim over
the bare witness; and the witness less the claim over the allowance (median and most), which
for an honest kernel is how much of the allowance its hand-over really took. For an honest
kernel the least share is how far the rule's share could rise on that machine before it failed
it, and the last column how far the allowance could shrink; a kernel that under-reports by a
factor shows its shares scaled by that factor, so the last column, the timer's share over the
median share, is the fraction of this kernel's claim below which a shaved claim is caught (in
most repeats: the witness is the real work's either way). CPU runs also keep the worker's CPU
time as the parent read it (:mod:`evaluator.measure.cpu_witness`): the last two columns give the
least claim over that less its allowance, and the most of that allowance the worker's own
bookkeeping took. On a loaded CPU host part of each wall witness is the host's stall (the waits for
a core of the parent and of the worker's main thread that no run time of the worker's accounts
for, :func:`evaluator.measure.cpu_witness.host_stall_ns`), which the shares leave out as the rule
does; the last column gives the most of it over the allowance, so a file shows how far the host
stretched the witness and whether the allowance alone would have covered it. The table comes from
the results as written, on any machine; each file's machine, versions, commit and date are
printed under it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from tabulate import tabulate

from evaluator.hardening.guards import PARENT_CLOCK_SHARE
from evaluator.results import ResultsError, RunResult, load_results

HEADERS = ["file", "contestant", "stage", "case", "repeats compared", "median share", "5th pct share", "least share",
           "median claim / witness", "unclaimed / allowance (median, most)", "caught below",
           "least CPU share", "CPU unclaimed / allowance (most)", "host stall / allowance (most)"]


def rows(path: Path, runs: Sequence[RunResult]) -> Iterator[list[object]]:
    """One row per witnessed timed case of ``runs`` (read from ``path``)."""
    for run in runs:
        for stage in run.stages:
            for case in stage.cases:
                witnessed = case.parent_clock
                if witnessed is None:
                    continue
                summary = witnessed.summary()
                shares = [f"{x:.3f}" for x in (summary.median, summary.p05, summary.least)] if summary else ["-"] * 3
                bare = statistics.median(witnessed.over_witness())
                used = witnessed.unclaimed_over_allowance()
                spent = f"{statistics.median(used):.3f}, {max(used):.3f}" if used else "-"
                caught = f"{PARENT_CLOCK_SHARE[run.timer] / summary.median:.2f}" if summary else "-"
                cpu_shares, cpu_used = witnessed.cpu_shares(), witnessed.cpu_unclaimed_over_allowance()
                stalls = witnessed.stall_over_allowance()
                yield [path.name, run.contestant["name"], stage.name, case.case.label,
                       summary.repeats if summary else 0, *shares, f"{bare:.3f}", spent, caught,
                       f"{min(cpu_shares):.3f}" if cpu_shares else "-", f"{max(cpu_used):.3f}" if cpu_used else "-",
                       f"{max(stalls):.3f}" if stalls else "-"]


def measured_on(path: Path, runs: Sequence[RunResult]) -> str:
    """Where and when the file's first run was measured: the figures mean little without it."""
    if not runs:
        return f"{path.name}: no runs"
    env, run = runs[0].environment, runs[0]
    machine = env.get("gpu_name") or env.get("cpu") or run.device
    return (f"{path.name}: {machine}, driver {env.get('driver_version', '-')}, torch {env.get('torch', '-')}, "
            f"triton {env.get('triton', '-')}, commit {str(env.get('git_commit', '-'))[:7]}, {run.started_at[:10]}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="hardened results files")
    args = parser.parse_args(argv)
    table: list[list[object]] = []
    sources: list[str] = []
    for path in args.results:
        try:
            runs = load_results(path)
        except ResultsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        table.extend(rows(path, runs))
        sources.append(measured_on(path, runs))
    if not table:
        print("no witnessed timed case in these files (hardened runs of schema 3 on keep them)", file=sys.stderr)
        return 1
    shares = ", ".join(f"{share} ({timer})" for timer, share in PARENT_CLOCK_SHARE.items())
    print(f"share = claim / (witness - allowance - host stall); rule parent-clock fails a case below its timer's "
          f"share, {shares}, in more than a quarter of its repeats")
    print(tabulate(table, headers=HEADERS, tablefmt="github"))
    print("\n".join(sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
