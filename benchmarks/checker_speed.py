"""Time the checker: batched compact-WY Q ("fast") against the contest's householder_product path.

Run on a GPU from the repo root: ``python -m benchmarks.checker_speed [--out reports/checker_speed.md]``.
For each shape the output of ``torch.geqrf`` is checked repeatedly with both paths (wall time
after a device synchronize, median of ``--repeats`` after one warm-up); the table shows whether
the verdicts agree and the largest difference between their diagnostics, in units of n·eps
(the gates are 20 and 100). ``--blocks 1,2,4`` adds the fast path's time with each number of
column blocks in its symmetric and triangular products (the evidence behind
``reference.checker.product_blocks``). Prints the table and writes it, with the GPU, versions
and date, as Markdown.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

from benchmarks.note import machine_line, publish
from reference import checker, generate_input, verdict

SHAPES = ((640, 512), (60, 1024), (8, 2048), (2, 4096), (40, 352), (40, 176))
KEYS = ("scaled_factor_residual", "scaled_reconstruction_residual", "scaled_triangular_residual",
        "scaled_orthogonality_residual")


def _time_ms(fn, repeats: int) -> tuple[float, object]:
    result = fn()  # warm-up
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="Markdown file to write the table to")
    parser.add_argument("--blocks", type=lambda text: [int(k) for k in text.split(",")], default=[],
                        help="comma-separated column-block counts to time the fast path with")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2

    rows = []
    for batch, n in SHAPES:
        a = generate_input(batch, n, 2, 1234)
        out = torch.geqrf(a)
        published_ms, published = _time_ms(lambda a=a, out=out: verdict(a, out, "published"), args.repeats)
        fast_ms, fast = _time_ms(lambda a=a, out=out: verdict(a, out, "fast"), args.repeats)
        same = published.passed == fast.passed
        worst_abs = max(abs(fast.diagnostics[k] - published.diagnostics[k]) for k in KEYS) if same else float("nan")
        per_blocks = [_time_ms(lambda a=a, out=out, k=k: checker._fast_clear_pass(a, *out, k), args.repeats)[0]
                      for k in args.blocks]
        rows.append([f"{batch}x{n}", f"{published_ms:.1f}", f"{fast_ms:.1f}", f"{published_ms / fast_ms:.1f}x",
                     "yes" if same else "NO", f"{worst_abs:.3f}", *(f"{ms:.2f}" for ms in per_blocks)])
        del a, out
        torch.cuda.empty_cache()

    headers = ["shape", "published (ms)", "fast (ms)", "speedup", "same verdict", "max diagnostic diff (n·eps)",
               *(f"fast, {k} blocks (ms)" for k in args.blocks)]
    table = tabulate(rows, headers=headers, tablefmt="github")
    header = (f"Checker time per check of torch.geqrf's output (median of {args.repeats}, after a warm-up), "
              f"{machine_line()}.")
    publish("Checker speed", header, table, "python -m benchmarks.checker_speed", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
