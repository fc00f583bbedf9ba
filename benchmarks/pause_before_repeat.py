"""What runs before a timed repeat moves its time: one kernel, one process, different pauses.

Run on a GPU from the repo root: ``python -m benchmarks.pause_before_repeat [CONTESTANT]
[--cases 60x1024,40x352] [--out PATH]``. Each case of the contest's shape set named by
``--cases`` is timed with the contest's timer (L2 flush queued before the start event, no
drain), one call per repeat and, where the contest uses more, with its number of inputs per
repeat; before every repeat the host does one of a fixed list of things (nothing, spin, sleep,
keep the GPU busy with float64 products). Each variant runs twice (two rounds, interleaved) to
show what is noise. The contest's protocol pauses for its published check before each repeat,
a hardened parent for its fast one: this is how much that alone can move a case
(reports/h200/2026-12-01-pause-before-repeat.md). Prints the table and writes it as Markdown.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tabulate import tabulate

from benchmarks.note import machine_line, publish
from evaluator.contestant import contest_modules, load_kernel, resolve_contestant
from evaluator.measure.timing import CudaEventTimer
from evaluator.shapes import Timing, resolve_shapes
from reference import generate_input

REPEATS = 12
DISCARDED = 2


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _pauses(device: torch.device) -> list[tuple[str, Callable[[], None]]]:
    block = torch.randn(4096, 4096, dtype=torch.float64, device=device)

    def float64_work(ms: float) -> None:  # about 1.1 ms per product on an H200
        for _ in range(int(ms / 1.1)):
            block @ block
        torch.cuda.synchronize()

    return [
        ("nothing (back to back)", lambda: None),
        ("host spins 1 ms", lambda: _spin(0.001)),
        ("host spins 5 ms", lambda: _spin(0.005)),
        ("host spins 30 ms", lambda: _spin(0.03)),
        ("host sleeps 30 ms", lambda: time.sleep(0.03)),
        ("30 ms of float64 products", lambda: float64_work(30)),
        ("30 ms of float64 products, then 5 ms idle", lambda: (float64_work(30), _spin(0.005))),
    ]


def _per_call_ms(kernel: Callable, inputs: list[torch.Tensor], pause: Callable[[], None],
                 timer: CudaEventTimer) -> float:
    times = []
    for _ in range(REPEATS):
        pause()
        measurement, _ = timer.time(lambda: [kernel(a) for a in inputs])
        times.append(measurement.elapsed_ns / len(inputs) / 1e6)
    return statistics.mean(times[DISCARDED:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contestant", nargs="?", default="blocked_wy")
    parser.add_argument("--cases", default="60x1024,40x352", help="comma-separated BATCHxN of qr_v2 benchmark cases")
    parser.add_argument("--out", type=Path, help="Markdown file to write the table to")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    wanted = args.cases.split(",")
    cases = [c for c in resolve_shapes("qr_v2").benchmarks if f"{c.batch}x{c.n}" in wanted and c.case is None]
    contestant = resolve_contestant(args.contestant)
    timer = CudaEventTimer(device, drain=False, flush=True)
    pauses = _pauses(device)
    columns: list[tuple[str, list[str]]] = []
    with contest_modules(contestant.path.parent):
        kernel = load_kernel(contestant)
        for case in cases:
            for count in sorted({1, Timing().input_count(case)}):
                inputs = [generate_input(case.batch, case.n, case.cond, case.seed + 42 * (k + 1)) for k in range(count)]
                for a in inputs:
                    kernel(a)
                torch.cuda.synchronize()
                rounds = [[_per_call_ms(kernel, inputs, pause, timer) for _, pause in pauses] for _ in range(2)]
                cells = [f"{r0:.3f}, {r1:.3f}" for r0, r1 in zip(*rounds, strict=True)]
                columns.append((f"{case.batch}x{case.n} x{count} (ms per call)", cells))
                print(f"{case.batch}x{case.n} x{count} done", flush=True)
    rows = [[name, *(cells[i] for _, cells in columns)] for i, (name, _) in enumerate(pauses)]
    table = tabulate(rows, headers=["before each repeat", *(title for title, _ in columns)], tablefmt="github")
    header = (f"{contestant.name}, mean of {REPEATS - DISCARDED} repeats after {DISCARDED} discarded, two rounds; "
              f"{machine_line()}.")
    publish("Pause before a timed repeat", header, table, "python -m benchmarks.pause_before_repeat", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
