"""The trailing columns a factorisation may leave out: too small for the checker's factor gate to see.

A run of trailing columns whose 2-norms are tiny next to ``||A||_1`` (a rank-deficient input's zero
columns, a clustered input's columns at 4 eps) needs no reflectors and no updates. ``qr`` factors
the columns before them as usual and leaves these zero in H, with tau = 0 (identity reflectors).
The factor gate's residual ``R - Q^T A`` then holds, in each such column j, exactly ``-Q^T a_j``
(R's column is zero), whose 1-norm is at most ``sqrt(n) ||Q||_2 ||a_j||_2``; the columns before
hold the usual factorisation's residual, and Q, built from the factored columns' reflectors
alone, is as orthogonal as ever. So a column is left out only while

    ``slack(n) * sqrt(n) * ||a_j||_2 <= SHARE * n * eps32 * L``

where ``L <= ||A||_1`` is the largest column sum of magnitudes the scan has read and ``slack(n)``
bounds ``||Q||_2`` for any Q within the orthogonality gate (``||Q^T Q - I||_1 <= 100 n eps``), with
1% more for the float64 sums' rounding: a left-out column's scaled factor residual (docs/problem.md
§3) is at most SHARE, a twentieth of the gate of 20. Columns that are exactly zero come out as the
full factorisation gives them (zero, tau = 0), bit for bit.

One program per matrix reads its first block of columns (for L), then blocks from the right until
one holds a column that counts, and writes the matrix's width to device memory: nothing waits for
it. The factorisation's kernels read each matrix's width where they run (a graph captures the scan
with them): the input's columns from it on are read as zeros, which every later step keeps zero
(tau = 0, no reflector), and the programs of panels and column strips wholly past it stop at once.
A dense input costs two blocks' reads; a batch of mixed inputs trims each matrix by its own width.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.launch import INTERPRETED, ceil_div
from reference_kernels.blocked_wy.source import StorageAt, _base, storage

__all__ = ["COLUMNS", "SHARE", "kept_widths", "negligible_ratio"]

SHARE = 1.0  # a left-out column's scaled factor residual is at most this (the gate: 20)
COLUMNS = 16  # columns per block of the scan: the kept width is a multiple of it (or n)
_ROWS = 128  # rows per load of the scan
_EPS32 = torch.finfo(torch.float32).eps
_ORTH_GATE = 100.0  # the orthogonality gate, in units of n eps


def negligible_ratio(n: int) -> float:
    """The largest ``||a_j||_2 / L`` a column of an n x n matrix may have and be left out."""
    slack = 1.01 * math.sqrt(1.0 + _ORTH_GATE * n * _EPS32)  # ||Q||_2^2 <= 1 + ||Q^T Q - I||_1
    return SHARE * n * _EPS32 / (slack * math.sqrt(n))


@triton.jit
def _sum_rows(a_mat, n, r, cols, s1, s2):
    x = tl.load(a_mat + r * n + cols[None, :], mask=(r < n) & (cols[None, :] < n), other=0.0).to(tl.float64)
    return s1 + tl.sum(tl.abs(x), axis=0), s2 + tl.sum(x * x, axis=0)


@triton.jit
def _column_sums(a_mat, n, col0, BR: tl.constexpr, BC: tl.constexpr, INTERPRETED: tl.constexpr):
    """Sums over every row of ``|a|`` and of ``a^2`` for columns col0 .. col0 + BC of one row-major
    n x n matrix, in float64 (no float32 input overflows them)."""
    cols = col0 + tl.arange(0, BC)
    rows = tl.arange(0, BR)[:, None]
    s1 = tl.zeros([BC], dtype=tl.float64)
    s2 = tl.zeros([BC], dtype=tl.float64)
    if INTERPRETED:  # the interpreter's range takes no runtime bound
        r0 = 0
        while r0 < n:
            s1, s2 = _sum_rows(a_mat, n, r0 + rows, cols, s1, s2)
            r0 += BR
    else:
        for r0 in tl.range(0, n, BR):
            s1, s2 = _sum_rows(a_mat, n, r0 + rows, cols, s1, s2)
    return s1, s2


@triton.jit
def _finite(sums):
    """1 if every sum is finite (their total is: float64 sums of float32 magnitudes cannot overflow), else 0."""
    total = tl.sum(sums, axis=0)
    return tl.where(total - total == 0.0, 1, 0)


@triton.jit(do_not_specialize=["a_off"])
def _tail_kernel(a, a_off, widths, n, blocks, ratio, BR: tl.constexpr, BC: tl.constexpr,
                 INTERPRETED: tl.constexpr, AT_ADDRESS: tl.constexpr):
    """``widths[b]``: the columns matrix b keeps, up to the end of the last block (from the right)
    holding a column with ``||a_j||_2 > ratio * L`` (every column when L is not finite), 0 when
    every column may go; a whole number of blocks, past n when the last block is ragged."""
    b = tl.program_id(0).to(tl.int64)
    a_mat = storage(a, AT_ADDRESS) + a_off + b * n * n
    s1, _ = _column_sums(a_mat, n, 0, BR, BC, INTERPRETED)
    seen = tl.max(s1, axis=0)  # the largest column sum read so far: a lower bound of ||A||_1
    finite = _finite(s1)  # 1 while every entry read is finite (tl.max passes NaN over)
    blk = blocks - 1
    kept = blocks * 0
    while blk >= 0:
        s1, s2 = _column_sums(a_mat, n, blk * BC, BR, BC, INTERPRETED)
        seen = tl.maximum(seen, tl.max(s1, axis=0))
        finite *= _finite(s1)
        limit = tl.where(finite > 0, ratio * seen, -1.0)  # a NaN or Inf read: every column counts
        counts = tl.max(tl.where(tl.sqrt(s2) <= limit, 0, 1), axis=0) > 0  # a NaN column counts too
        kept = tl.where(counts, (blk + 1) * BC, kept)
        blk = tl.where(counts, -1, blk - 1)
    tl.store(widths + b, kept)


def kept_widths(a: torch.Tensor | StorageAt) -> torch.Tensor:
    """The leading columns each matrix of the batch ``a`` (b x n x n float32, contiguous, or a graph's
    input read in place) must have factored: int32, one per matrix, a multiple of ``COLUMNS`` (so
    that the kernels' masks by it cover whole 16-column groups; n or more: every column), on
    ``a``'s device; queued, not waited for."""
    batch, n, _ = a.shape
    base, off = _base(a)
    widths = torch.empty(batch, dtype=torch.int32, device=base.device)
    _tail_kernel[(batch,)](
        base, off, widths, n, ceil_div(n, COLUMNS), negligible_ratio(n),
        BR=_ROWS, BC=COLUMNS, INTERPRETED=INTERPRETED, AT_ADDRESS=isinstance(a, StorageAt), num_warps=4,
    )  # fmt: skip
    return widths
