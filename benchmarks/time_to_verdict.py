"""Time to verdict: one contestant's full ranked submission, hardened and under ``--compat``.

``python -m benchmarks.time_to_verdict [CONTESTANT] [--shapes NAME] [--json PATH]`` runs the
leaderboard mode (tests, benchmark, ranked and secret-seed passes) twice in this process tree,
once hardened and once with the contest's protocol, and prints each run's wall time, where each
stage's went (hardened stages record it), and the ratio of the two walls (issue #20 asks for a
hardened ranked submission in a third of the contest's). Both runs go to one results file.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tabulate import tabulate

from evaluator.cli_args import pick_device
from evaluator.contestant import resolve_contestant
from evaluator.ledger import ACTIVITIES
from evaluator.results import RunResult, write_results
from evaluator.runner import RunOptions, run_contestant
from evaluator.shapes import resolve_shapes


def _timed_run(contestant: str, shapes_name: str, device: str, compat: bool) -> tuple[RunResult, float]:
    shapes = resolve_shapes(shapes_name)
    start = time.monotonic()
    options = RunOptions(device=device, compat=compat)
    run = run_contestant(resolve_contestant(contestant), "leaderboard", shapes, options)
    return run, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contestant", nargs="?", default="geqrf")
    parser.add_argument("--shapes", default=None, help="default: qr_v2 on a GPU, smoke on the CPU")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path, default=Path("results/time-to-verdict.json"))
    args = parser.parse_args(argv)
    device = pick_device(args.device)
    shapes = args.shapes or ("qr_v2" if device == "cuda" else "smoke")
    runs = {compat: _timed_run(args.contestant, shapes, device, compat) for compat in (False, True)}
    write_results(args.json, [run for run, _ in runs.values()])
    rows = [[("--compat" if compat else "hardened"), stage.name, stage.status, f"{stage.wall_s:.1f}",
             *(f"{stage.breakdown_s[a]:.1f}" if stage.breakdown_s else "-" for a in ACTIVITIES)]
            for compat, (run, _) in runs.items() for stage in run.stages]
    print(tabulate(rows, headers=["protocol", "stage", "status", "wall s", *ACTIVITIES], tablefmt="github"))
    hardened, compat = runs[False][1], runs[True][1]
    print(f"\n{args.contestant} on {shapes} ({device}): hardened {hardened:.1f} s, --compat {compat:.1f} s, "
          f"ratio {hardened / compat:.2f} (the goal is 0.33 or less); results: {args.json}")
    return 0 if all(run.passed for run, _ in runs.values()) else 112


if __name__ == "__main__":
    raise SystemExit(main())
