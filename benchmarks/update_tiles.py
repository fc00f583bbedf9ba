"""blocked_wy's trailing update (``wy_update``) timed per tile shape on the updates of each qr_v2 size.

One GPU run. For each matrix size, the factorisation's trailing updates (for every panel start j0:
n - j0 rows, n - j0 - nb columns, nb from the size's default plan, the benchmark's batch) are
timed one by one with ``triton.testing.do_bench_cudagraph`` (replayed from a CUDA graph, as ``qr``
runs them: GPU time without the host's launch work, which ``do_bench`` would count) and summed,
for every tile variant of ``VARIANTS``, for cuBLAS FP32 (the ``torch`` update) as the yardstick, and
for W by cuBLAS FP32 with the Triton subtraction (the ``mixed`` update, ``MIXED_VARIANTS``' tiles).
Sizes with many panels time every ``--every``-th update and scale the sum. Each variant's result on
the largest update is compared with a float64 product: a variant more than ``TOLERANCE`` off is
marked (split TF32 should match FP32 to a few ulps of the result's scale).

    python benchmarks/update_tiles.py [--sizes 512,1024] [--every 4] [--json out.json]

The last lines are a table: per size, ms summed over its updates, per variant.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_kernels.blocked_wy import default_plan
from reference_kernels.blocked_wy.products import UpdateTiles
from reference_kernels.blocked_wy.qr import _apply_qt, ieee_fp32

# Batch per size, as the qr_v2 benchmarks have them.
BATCHES = {176: 40, 352: 40, 512: 640, 1024: 60, 2048: 8, 4096: 2}
VARIANTS = {
    "default": UpdateTiles(),
    "warps=2": UpdateTiles(warps=2),
    "warps=8": UpdateTiles(warps=8),
    "pbm=16": UpdateTiles(project_bm=16),
    "pbm=64": UpdateTiles(project_bm=64),
    "bn=32": UpdateTiles(block_n=32),
    "bn=128": UpdateTiles(block_n=128),
    "sbm=32": UpdateTiles(subtract_bm=32),
    "sbm=128": UpdateTiles(subtract_bm=128),
    "stages=2": UpdateTiles(stages=2),
    "stages=4": UpdateTiles(stages=4),
    # One launch per update (what it gave against two: docs/kernel-log.md §W11).
    "fused": UpdateTiles(fused=True),
    "fused,warps=2": UpdateTiles(warps=2, fused=True),
    "fused,warps=8": UpdateTiles(warps=8, fused=True),
    "fused,bn=32": UpdateTiles(block_n=32, fused=True),
    "fused,sbm=32": UpdateTiles(subtract_bm=32, fused=True),
    "fused,sbm=128": UpdateTiles(subtract_bm=128, fused=True),
    "fused,pbm=64": UpdateTiles(project_bm=64, fused=True),
    "fused,stages=2": UpdateTiles(stages=2, fused=True),
    "fused,stages=4": UpdateTiles(stages=4, fused=True),
}
# The mixed update's tiles (what they gave at 512: docs/kernel-log.md §W10, §W-sweeps).
MIXED_VARIANTS = {
    "default": UpdateTiles(),
    "bn=32": UpdateTiles(block_n=32),
    "bn=32,sbm=128": UpdateTiles(block_n=32, subtract_bm=128),
    "bn=32,warps=8": UpdateTiles(block_n=32, warps=8),
    "bn=32,warps=2": UpdateTiles(block_n=32, warps=2),
}
TOLERANCE = 1e-5  # relative to the largest entry of the result


def updates(n: int, nb: int) -> list[tuple[int, int]]:
    """(rows, columns) of every trailing update of an n x n factorisation with nb-column panels."""
    return [(n - j0, n - j0 - nb) for j0 in range(0, n - nb, nb)]


def operands(batch: int, n: int, m: int, ncols: int, nb: int) -> tuple[torch.Tensor, ...]:
    """C as the factorisation has it (a view of a batch of n x n matrices), V and T small enough
    that repeated in-place updates leave C's scale unchanged."""
    h = torch.randn(batch, n, n, device="cuda")
    c = h[:, n - m :, n - ncols :]
    v = torch.randn(batch, m, nb, device="cuda") * 1e-3
    t = torch.triu(torch.randn(batch, nb, nb, device="cuda"))
    return c, v, t


def relative_error(update: Callable[..., None], batch: int, n: int, m: int, ncols: int, nb: int) -> float:
    """Max error of one update against float64, relative to the result's largest entry."""
    c, v, t = operands(batch, n, m, ncols, nb)
    v *= 1e3  # full-scale reflectors for the accuracy check
    exact = c.double() - v.double() @ (t.double().transpose(1, 2) @ (v.double().transpose(1, 2) @ c.double()))
    update(c, v, t)
    return ((c.double() - exact).abs().max() / exact.abs().max()).item()


def time_size(n: int, every: int, log: Callable[[str], None]) -> dict[str, tuple[float, float]]:
    """ms summed over the size's updates, and the relative error, per variant."""
    from triton.testing import do_bench_cudagraph

    batch, nb = BATCHES[n], default_plan(n).nb
    shapes = updates(n, nb)
    sampled = shapes[::every] if len(shapes) > 2 * every else shapes
    scale = len(shapes) / len(sampled)
    # qr's own update step: cuBLAS FP32 (the ``torch`` update), then the Triton one per tile variant.
    runs: dict[str, Callable[..., None]] = {"cublas-fp32": lambda c, v, t: _apply_qt(c, v, t, "torch")}
    # W by cuBLAS FP32 with the Triton subtraction (``mixed``), and the whole Triton update.
    for update, prefix, variants in (("mixed", "mixed,", MIXED_VARIANTS), ("tf32x3", "", VARIANTS)):
        runs |= {
            prefix + name: lambda c, v, t, u=update, tiles=tiles: _apply_qt(c, v, t, u, tiles=tiles)
            for name, tiles in variants.items()
        }
    out: dict[str, tuple[float, float]] = {}
    for name, update in runs.items():
        try:
            with ieee_fp32():
                error = relative_error(update, batch, n, *shapes[0], nb)
                total = 0.0
                for m, ncols in sampled:
                    c, v, t = operands(batch, n, m, ncols, nb)
                    call = lambda c=c, v=v, t=t, f=update: f(c, v, t)  # noqa: E731
                    total += do_bench_cudagraph(call, rep=20, return_mode="median")
        except Exception as error:  # noqa: BLE001 (a tile that does not compile: report, go on)
            log(f"  {batch}x{n} {name}: ERROR {error!r}"[:300])
            continue
        out[name] = (total * scale, error)
        flag = "  ** inaccurate" if error > TOLERANCE else ""
        ms = total * scale
        log(f"  {batch}x{n} nb={nb} {name:<12} {ms:8.3f} ms over {len(shapes)} updates  error {error:.1e}{flag}")
        torch.cuda.empty_cache()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="512,1024,4096,352,176", help="comma-separated n (default: %(default)s)")
    parser.add_argument("--every", type=int, default=4, help="time every k-th update of sizes with many (default: 4)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("update_tiles needs a CUDA GPU", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__}", flush=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {n: time_size(n, args.every, lambda line: print(line, flush=True)) for n in sizes}
    names = ["cublas-fp32", *(f"mixed,{name}" for name in MIXED_VARIANTS), *VARIANTS]
    rows = [[name, *(f"{results[n][name][0]:.3f}" if name in results[n] else "-" for n in sizes)] for name in names]
    print(tabulate(rows, headers=["variant", *(f"{BATCHES[n]}x{n} ms" for n in sizes)]))
    if args.json:
        args.json.write_text(json.dumps({str(n): r for n, r in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
