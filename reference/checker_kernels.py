"""The fast checker's residual norms on the GPU: float64 products of float32 matrices, fused with their norms.

The fast checker needs, per matrix, the matrix 1-norms of ``R - Q^T A``, ``tril(Q^T A, -1)``,
``Q^T Q - I``, ``QR - A`` and ``A``. In torch that is float64 copies of A, Q and R, three float64
products in memory and a reduction pass over each (reports/checker_speed.md: about two thirds of a
check at 640x512). Here each product is computed a tile at a time in float64 registers straight
from the float32 inputs (every product of two float32 numbers is exact in float64, so this is the
torch path's arithmetic up to float64 rounding), and each tile leaves only its column sums of
magnitudes. Q^T Q is symmetric, so only its upper tiles are computed, each also giving the row
sums that stand in for the column sums of the tile below the diagonal; R is upper triangular,
so a tile of QR stops at R's last nonzero row.

Partial column sums go to slots that exactly one tile writes (no atomics: the result does not
depend on the order the tiles ran in) and are added up by torch. Runs on CUDA, or on the CPU
under ``TRITON_INTERPRET=1`` (the tests).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

__all__ = ["Residuals", "largest_tile", "residual_norms", "tile_size"]

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # kernels run in Python on the CPU
_TRITON = tuple(int(part) for part in triton.__version__.split(".")[:2])


class Residuals(NamedTuple):
    """Per-matrix 1-norms (float64, one value per matrix of the batch); ``reconstruction`` is
    None when it was not asked for."""

    a_norm: torch.Tensor
    factor: torch.Tensor
    triangular: torch.Tensor
    orthogonality: torch.Tensor
    reconstruction: torch.Tensor | None


def largest_tile(capability: tuple[int, int] | None) -> int:
    """The widest output tile the kernels take on a GPU of this compute capability (None: no GPU).

    64, the fastest float64 tile measured on an H200 (reports/checker_speed.md), except on compute
    capability 10.x (B200, B300) under Triton before 3.8: there a float64 ``tl.dot`` of 64 rows
    does not compile (its matmul pass aborts on a tensor-memory layout), one of 32 rows does
    (reports/cpu/2026-12-05-compile-targets.md). The contest ran on B200s, and torch 2.11, the
    build its runner pins, ships Triton 3.6.
    """
    if capability is not None and capability[0] == 10 and _TRITON < (3, 8):
        return 32
    return 64


def tile_size(n: int, largest: int = 64) -> int:
    """Square output tile: ``largest``, or the smallest power of two >= 16 that covers a smaller matrix."""
    return min(largest, max(16, 1 << max(0, n - 1).bit_length()))


def _capability(device: torch.device) -> tuple[int, int] | None:
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


@triton.jit
def _tile(n, BM: tl.constexpr):
    """This program's output tile (ti, tj) of matrix b: the matrix's first element and the tile's
    row and column indices."""
    ti = tl.program_id(0)
    tj = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    return ti, tj, b, b * n * n, ti * BM + tl.arange(0, BM), tj * BM + tl.arange(0, BM)


@triton.jit
def _transposed_step(acc, x, y, n, rows, cols, k):
    xt = tl.load(x + k[None, :] * n + rows[:, None], mask=(k[None, :] < n) & (rows[:, None] < n), other=0.0)
    yt = tl.load(y + k[:, None] * n + cols[None, :], mask=(k[:, None] < n) & (cols[None, :] < n), other=0.0)
    return tl.dot(xt.to(tl.float64), yt.to(tl.float64), acc, out_dtype=tl.float64)


@triton.jit
def _transposed_product(x, y, n, rows, cols, BM: tl.constexpr, BK: tl.constexpr, INTERPRETED: tl.constexpr):
    """``x[:, rows]^T y[:, cols]`` in float64, x and y n x n row-major float32."""
    ks = tl.arange(0, BK)
    acc = tl.zeros([BM, BM], dtype=tl.float64)
    if INTERPRETED:  # the interpreter's range takes no tensor bounds
        k0 = 0
        while k0 < n:
            acc = _transposed_step(acc, x, y, n, rows, cols, k0 + ks)
            k0 += BK
    else:
        for k0 in tl.range(0, n, BK):
            acc = _transposed_step(acc, x, y, n, rows, cols, k0 + ks)
    return acc


@triton.jit
def _factor_kernel(q, a, h, factor_part, lower_part, a_part, n, BM: tl.constexpr, BK: tl.constexpr,
                   INTERPRETED: tl.constexpr):
    """Tile (ti, tj) of ``Q^T A``: column sums of ``|R - Q^T A|``, of its strictly lower part, and
    of ``|A|`` over the same tile (its rows were just streamed through, so mostly L2 hits)."""
    ti, _, b, start, rows, cols = _tile(n, BM)
    projected = _transposed_product(q + start, a + start, n, rows, cols, BM, BK, INTERPRETED)
    upper = (rows[:, None] <= cols[None, :]) & (cols[None, :] < n)
    r = tl.load(h + start + rows[:, None] * n + cols[None, :], mask=upper, other=0.0).to(tl.float64)
    lower = tl.where(rows[:, None] > cols[None, :], tl.abs(projected), 0.0)
    inside = (rows[:, None] < n) & (cols[None, :] < n)
    at = tl.load(a + start + rows[:, None] * n + cols[None, :], mask=inside, other=0.0).to(tl.float64)
    slot = (b * tl.num_programs(0) + ti) * n + cols
    tl.store(factor_part + slot, tl.sum(tl.abs(r - projected), axis=0), mask=cols < n)
    tl.store(lower_part + slot, tl.sum(lower, axis=0), mask=cols < n)
    tl.store(a_part + slot, tl.sum(tl.abs(at), axis=0), mask=cols < n)


@triton.jit
def _orthogonality_kernel(q, part, n, BM: tl.constexpr, BK: tl.constexpr, INTERPRETED: tl.constexpr):
    """Tile (ti, tj), ti <= tj, of ``Q^T Q - I``: its column sums (slot ti of columns tj) and, off
    the diagonal, its row sums, the column sums of the mirror tile (slot tj of columns ti)."""
    ti, tj, b, start, rows, cols = _tile(n, BM)
    if ti > tj:
        return
    gram = _transposed_product(q + start, q + start, n, rows, cols, BM, BK, INTERPRETED)
    eye = (rows[:, None] == cols[None, :]) & (cols[None, :] < n)
    residual = tl.abs(gram - tl.where(eye, 1.0, 0.0).to(tl.float64))
    tiles = tl.num_programs(0)
    tl.store(part + (b * tiles + ti) * n + cols, tl.sum(residual, axis=0), mask=cols < n)
    if ti < tj:
        tl.store(part + (b * tiles + tj) * n + rows, tl.sum(residual, axis=1), mask=rows < n)


@triton.jit
def _triangular_step(acc, q, h, n, rows, cols, k):
    qt = tl.load(q + rows[:, None] * n + k[None, :], mask=(rows[:, None] < n) & (k[None, :] < n), other=0.0)
    upper = (k[:, None] <= cols[None, :]) & (cols[None, :] < n)  # R = triu(H)
    rt = tl.load(h + k[:, None] * n + cols[None, :], mask=upper, other=0.0)
    return tl.dot(qt.to(tl.float64), rt.to(tl.float64), acc, out_dtype=tl.float64)


@triton.jit
def _reconstruction_kernel(q, h, a, recon_part, n, BM: tl.constexpr, BK: tl.constexpr, INTERPRETED: tl.constexpr):
    """Tile (ti, tj) of ``QR - A`` (R = triu(H), so rows of R past the tile's last column are
    skipped): column sums of its magnitudes."""
    ti, tj, b, start, rows, cols = _tile(n, BM)
    ks = tl.arange(0, BK)
    acc = tl.zeros([BM, BM], dtype=tl.float64)
    end = tl.minimum(n, (tj + 1) * BM)
    if INTERPRETED:  # the interpreter's range takes no tensor bounds
        k0 = 0
        while k0 < end:
            acc = _triangular_step(acc, q + start, h + start, n, rows, cols, k0 + ks)
            k0 += BK
    else:
        for k0 in tl.range(0, end, BK):
            acc = _triangular_step(acc, q + start, h + start, n, rows, cols, k0 + ks)
    inside = (rows[:, None] < n) & (cols[None, :] < n)
    at = tl.load(a + start + rows[:, None] * n + cols[None, :], mask=inside, other=0.0).to(tl.float64)
    slot = (b * tl.num_programs(0) + ti) * n + cols
    tl.store(recon_part + slot, tl.sum(tl.abs(acc - at), axis=0), mask=cols < n)


def residual_norms(a: torch.Tensor, h: torch.Tensor, q: torch.Tensor, reconstruction: bool = True) -> Residuals:
    """The fast checker's per-matrix 1-norms for input ``a``, output ``h`` (R is its upper
    triangle) and the materialised ``q``, all batch x n x n float32 on one device.

    Without ``reconstruction`` the ``QR - A`` product (a diagnostic, no gate) is skipped.
    """
    for name, x in (("a", a), ("h", h), ("q", q)):
        if x.dim() != 3 or x.shape != a.shape or x.shape[-1] != x.shape[-2] or x.dtype != torch.float32:
            raise ValueError(f"{name} must be a batch x n x n float32 tensor shaped as a, "
                             f"got {x.dtype} {tuple(x.shape)}")
    a, h, q = a.contiguous(), h.contiguous(), q.contiguous()
    batch, n, _ = a.shape
    bm = tile_size(n, largest_tile(_capability(a.device)))
    tiles = triton.cdiv(n, bm)
    parts = torch.empty(5 if reconstruction else 4, batch, tiles, n, dtype=torch.float64, device=a.device)
    grid = (tiles, tiles, batch)
    # 64 x 64 tiles where they compile, 16-deep steps, three stages: the fastest of the variants
    # timed on an H200 (reports/checker_speed.md).
    options = {"BM": bm, "BK": 16, "INTERPRETED": INTERPRETED, "num_warps": 4, "num_stages": 3}
    _factor_kernel[grid](q, a, h, parts[0], parts[1], parts[3], n, **options)
    _orthogonality_kernel[grid](q, parts[2], n, **options)
    if reconstruction:
        _reconstruction_kernel[grid](q, h, a, parts[4], n, **options)
    norms = parts.sum(dim=2).amax(dim=-1)  # per part and matrix: the largest column sum
    return Residuals(norms[3], norms[0], norms[1], norms[2], norms[4] if reconstruction else None)

