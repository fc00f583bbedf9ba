"""Honest kernels on a loaded CPU host: rule ``parent-clock`` with and without the host's stall.

``python -m benchmarks.loaded_host [CONTESTANT ...] [--runs N] [--hogs N] [--rounds N] [--out DIR]``
starts ``--hogs`` busy processes, then ``--runs`` concurrent hardened ``qrbench leaderboard``
runs of each contestant on the CPU smoke set (every results file under ``--out``), ``--rounds``
times over. It then judges every timed case of every file by rule parent-clock twice, from the
repeats the file recorded: as the evaluator does, the wall witness less the host's stall
(:func:`evaluator.measure.cpu_witness.host_stall_ns`), and with the stall left in, as the rule
stood before it. One row per contestant: runs, how many ended with any failure, timed cases
judged, cases timed again (a first attempt rule parent-clock failed, set aside: every figure
here is the second attempt's), cases each way of judging fails, and the most a witness exceeded
its claim and allowance, in allowances, with and without the stall. An honest kernel should fail nothing the
first way whatever the load; the second way shows what the load alone did.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tabulate import tabulate

from evaluator.hardening.guards import PARENT_CLOCK_SHARE, parent_clock_problem
from evaluator.results import RunResult, load_results

HEADERS = ["contestant", "runs", "runs failed", "timed cases", "timed again", "parent-clock fails (stall out)",
           "parent-clock fails (stall in)", "most unexplained / allowance (stall out)",
           "most unexplained / allowance (stall in)"]
_HOG = "while True: pass"


@dataclass
class Tally:
    """One contestant's runs, judged both ways."""

    runs: int = 0
    runs_failed: int = 0
    cases: int = 0
    retimed: int = 0
    fails_out: int = 0
    fails_in: int = 0
    most_out: float = 0.0
    most_in: float = 0.0

    def add(self, run: RunResult) -> None:
        self.runs += 1
        self.runs_failed += any(stage.status != "pass" for stage in run.stages)
        share = PARENT_CLOCK_SHARE[run.timer]
        for stage in run.stages:
            for case in stage.cases:
                if case.parent_clock is None:
                    continue
                repeats = case.parent_clock.measurements()
                self.cases += 1
                self.retimed += bool(case.retimed)
                self.fails_out += parent_clock_problem(repeats, share) is not None
                self.fails_in += parent_clock_problem([replace(m, stall_ns=0.0) for m in repeats], share) is not None
                for m in repeats:
                    unexplained = (m.witness_ns - m.elapsed_ns) / m.allowance_ns
                    self.most_in = max(self.most_in, unexplained)
                    self.most_out = max(self.most_out, unexplained - m.stall_ns / m.allowance_ns)

    def row(self, name: str) -> list[object]:
        return [name, self.runs, self.runs_failed, self.cases, self.retimed, self.fails_out, self.fails_in,
                f"{self.most_out:.2f}", f"{self.most_in:.2f}"]


def _round(contestants: Sequence[str], runs: int, hogs: int, out: Path, index: int) -> list[Path]:
    """One round: the hogs, and every contestant's concurrent runs; returns their results files."""
    busy = [subprocess.Popen([sys.executable, "-c", _HOG]) for _ in range(hogs)]
    files, procs = [], []
    try:
        for name in contestants:
            for i in range(runs):
                path = out / f"{name}-round{index}-run{i}.json"
                files.append(path)
                procs.append(subprocess.Popen(
                    ["qrbench", "leaderboard", name, "--device", "cpu", "--shapes", "smoke", "--json", str(path),
                     "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for proc in procs:
            proc.wait()
    finally:
        for hog in busy:
            hog.kill()
            hog.wait()
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contestants", nargs="*", default=["geqrf"], help="contestants (default: geqrf)")
    parser.add_argument("--runs", type=int, default=4, help="concurrent runs per contestant and round")
    parser.add_argument("--hogs", type=int, default=4, help="busy processes beside them")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("results/loaded_host"), help="folder for the results files")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    tallies = {name: Tally() for name in args.contestants}
    for index in range(args.rounds):
        print(f"round {index + 1} of {args.rounds}: {args.hogs} hogs, {args.runs} runs of each contestant",
              file=sys.stderr)
        for path in _round(args.contestants, args.runs, args.hogs, args.out, index):
            if not path.exists():
                print(f"error: {path} was not written (its run crashed)", file=sys.stderr)
                return 1
            for run in load_results(path):
                tallies[run.contestant["name"]].add(run)
    print(tabulate([t.row(name) for name, t in tallies.items()], headers=HEADERS, tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
