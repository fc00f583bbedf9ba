"""The reference kernels against torch.geqrf on the contest's benchmark set, in one run.

Run on a GPU from the repo root::

    python -m benchmarks.kernel_table [--budget S] [--json PATH] [--out reports/kernels-h200.md]

Each contestant goes through the evaluator's ``benchmark`` mode (its own worker, the hardened
protocol, every timed output checked); the table gives per-case means, the speedup over
geqrf, the fraction of the FP32 floor reached (4/3 n^3 flops per matrix at the datasheet FP32
rate, as in docs/problem.md §6), the worst scaled factor residual seen, and geometric means, with
the GPU, versions and date. ``--from RESULTS.json...`` renders the table from earlier runs
(the benchmark stage of each, e.g. of leaderboard runs) instead of running.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from tabulate import tabulate

from evaluator.contestant import resolve_contestant
from evaluator.modes import Mode
from evaluator.report.tables import timing_label
from evaluator.report.units import format_ns, format_s
from evaluator.results import RunResult, load_results
from evaluator.run_command import Setup, run_here
from evaluator.runner import RunOptions
from evaluator.shapes import resolve_shapes

FP32_FLOPS_PER_S = 67e12  # H200 datasheet FP32 (non-tensor) rate, the floor docs/problem.md §6 uses
KERNELS = ("geqrf", "blocked_wy", "cholesky_orhr")


def _run(names: list[str], shapes_name: str, budget: float | None, json_path: Path) -> list[RunResult]:
    """``qrbench benchmark`` of the contestants on CUDA, in one results file."""
    options = RunOptions(device="cuda", timing={"benchmark_budget_s": budget} if budget else {})
    plan = Setup(Mode.BENCHMARK, resolve_shapes(shapes_name), [resolve_contestant(n) for n in names], options)
    runs, stop = run_here(plan, json_path)
    if stop is not None:
        raise stop
    return runs


def render_table(runs: list[RunResult]) -> str:
    """Markdown: one row per case, a column group per contestant, geomeans last."""
    base = runs[0]
    stages = [r.stage("benchmark") for r in runs]
    header = ["case"] + [f"{r.contestant['name']}" for r in runs]
    rows = []
    for i, case in enumerate(stages[0].cases):
        floor_ns = case.case.flops / FP32_FLOPS_PER_S * 1e9
        row = [case.case.label]
        base_mean = case.stats.mean_ns if case.stats else None
        for stage in stages:
            c = stage.cases[i]
            if not (c.passed and c.stats):
                row.append(f"{c.status}: {c.message.splitlines()[0][:60] if c.message else ''}")
                continue
            cell = format_ns(c.stats.mean_ns)
            if stage is not stages[0] and base_mean:
                cell += f" ({base_mean / c.stats.mean_ns:.1f}x)"
            cell += f", {100 * floor_ns / c.stats.mean_ns:.2g}% of floor"
            cell += f", resid {c.diagnostics.get('scaled_factor_residual', float('nan')):.2g}"
            row.append(cell)
        rows.append(row)
    geo = ["**geometric mean**"]
    for run, stage in zip(runs, stages, strict=True):
        g = stage.geomean_s()
        cell = format_s(g) if g is not None else f"not scored ({run.status})"
        if g is not None and stage is not stages[0] and stages[0].geomean_s():
            cell += f" ({stages[0].geomean_s() / g:.1f}x)"
        geo.append(f"**{cell}**")
    rows.append(geo)
    env = base.environment
    stamp = base.started_at[:10] or datetime.now(UTC).strftime("%Y-%m-%d")
    caption = (
        f"{timing_label(base)}; driver {env.get('driver_version')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, "
        f"triton {env.get('triton')}; {stamp}. Cells: mean per call (speedup over {base.contestant['name']}), "
        f"share of the FP32 floor (4/3 n^3 flops per matrix at {FP32_FLOPS_PER_S / 1e12:.0f} TFLOP/s), "
        "worst scaled factor residual over every checked output (gate 20)."
    )
    budgets = "; ".join(
        f"{r.contestant['name']} {r.shapes.get('timing', {}).get('benchmark_budget_s')} s, "
        f"at most {r.shapes.get('timing', {}).get('benchmark_repeats')} repeats, run {r.started_at}"
        for r in runs
    )
    note = f"Timed passes per case (the contest's: 10 s, at most 200 repeats): {budgets}."
    return f"{caption}\n\n{tabulate(rows, headers=header, tablefmt='github')}\n\n{note}\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contestants", default=",".join(KERNELS))
    p.add_argument("--shapes", default="qr_v2")
    p.add_argument("--budget", type=float, help="per-case budget in s (default: the contest's 10 s)")
    p.add_argument("--json", type=Path, default=Path("results/kernel_table.json"))
    p.add_argument("--out", type=Path, default=Path("reports/kernels-h200.md"))
    p.add_argument("--from", dest="sources", type=Path, nargs="+", metavar="RESULTS.json",
                   help="render from existing results files instead (first run = the baseline column)")
    args = p.parse_args(argv)
    if args.sources:
        runs = [run for path in args.sources for run in load_results(path)]
    else:
        runs = _run(args.contestants.split(","), args.shapes, args.budget, args.json)
    table = render_table(runs)
    origin = "`python -m benchmarks.kernel_table`"
    if args.sources:
        origin += " --from " + " ".join(f"`{p}`" for p in args.sources)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"# Reference kernels on {runs[0].shapes['name']}\n\n{table}\nProduced by {origin}.\n")
    print(table)
    return 0 if all(r.passed for r in runs) else 112


if __name__ == "__main__":
    sys.exit(main())
