"""Time the checker: batched compact-WY Q ("fast") against the contest's householder_product path.

Run on a GPU from the repo root: ``python -m benchmarks.checker_speed [--out reports/checker_speed.md]``.
For each shape the output of ``torch.geqrf`` (its H made row-major, the reference kernels' layout;
geqrf's own column-major H costs the fast path a transposing copy) is checked repeatedly with both paths (wall time
after a device synchronize, median of ``--repeats`` after one warm-up); the table shows whether
the verdicts agree and the largest difference between their diagnostics, in units of n·eps
(the gates are 20 and 100). Two more columns split the fast path: its check without the
reconstruction residual (``reconstruction=False``, what the evaluator's timed repeats run) and
the share of materialising Q alone (:func:`reference.q_kernels.fast_q`: split-TF32 Triton blocks
from 8 matrices of 128 up), and the float32 cuBLAS product
(:func:`reference.householder.householder_q`). Prints the table and writes it, with the GPU,
versions and date, as Markdown. ``--largest-tile 32`` caps the residual kernels' tiles at 32 rows,
as a B200 under Triton before 3.8 runs them (``reference.checker_kernels.largest_tile``), to see
their cost on the GPU at hand.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

import reference.checker_kernels as checker_kernels
from benchmarks.note import machine_line, publish
from reference import generate_input, verdict
from reference.householder import householder_q
from reference.q_kernels import fast_q

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
    parser.add_argument("--largest-tile", type=int, choices=(16, 32, 64),
                        help="cap the residual kernels' tiles (default: what largest_tile picks for this GPU)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    if args.largest_tile:
        checker_kernels.largest_tile = lambda capability: args.largest_tile
    tiles = checker_kernels.largest_tile(torch.cuda.get_device_capability())

    rows = []
    for batch, n in SHAPES:
        a = generate_input(batch, n, 2, 1234)
        h, tau = torch.geqrf(a)
        out = (h.contiguous(), tau)  # row-major H, as the reference kernels return it
        published_ms, published = _time_ms(lambda a=a, out=out: verdict(a, out, "published"), args.repeats)
        fast_ms, fast = _time_ms(lambda a=a, out=out: verdict(a, out, "fast"), args.repeats)
        same = published.passed == fast.passed
        worst_abs = max(abs(fast.diagnostics[k] - published.diagnostics[k]) for k in KEYS) if same else float("nan")
        gates_ms, gates = _time_ms(lambda a=a, out=out: verdict(a, out, "fast", reconstruction=False), args.repeats)
        q_ms, _ = _time_ms(lambda out=out: fast_q(*out), args.repeats)
        float32_q_ms, _ = _time_ms(lambda out=out: householder_q(*out), args.repeats)
        same = same and gates.passed == published.passed
        rows.append([f"{batch}x{n}", f"{published_ms:.1f}", f"{fast_ms:.2f}", f"{published_ms / fast_ms:.1f}x",
                     "yes" if same else "NO", f"{worst_abs:.3f}", f"{gates_ms:.2f}", f"{q_ms:.2f}",
                     f"{float32_q_ms:.2f}"])
        del a, h, tau, out
        torch.cuda.empty_cache()

    headers = ["shape", "published (ms)", "fast (ms)", "speedup", "same verdict", "max diagnostic diff (n·eps)",
               "fast, gates only (ms)", "of which Q (ms)", "Q, float32 products (ms)"]
    table = tabulate(rows, headers=headers, tablefmt="github")
    header = (f"Checker time per check of torch.geqrf's output (median of {args.repeats}, after a warm-up; "
              f"residual tiles of at most {tiles} rows), {machine_line()}.")
    command = "python -m benchmarks.checker_speed"
    if args.largest_tile:
        command += f" --largest-tile {args.largest_tile}"
    publish("Checker speed", header, table, command, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
