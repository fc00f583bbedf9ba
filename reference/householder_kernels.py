"""The fast checker's Q on the GPU: each block of reflectors applied by one Triton launch, its
products in float64, Q rounded to float32 once per block.

:func:`reference.householder.householder_q_f64_steps` is the specification (torch float64
products, the same rounding points); this is its CUDA path. Q's float32 products through cuBLAS were the larger
half of a check at 640x512 (7.6 of 13.4 ms on an H100, ``reports/checker_speed.md``): float32
products there run on the FMA units, float64 ones on the tensor cores (``DMMA``), as the residual
kernels of :mod:`reference.checker_kernels` do.

Each program owns a strip of ``BN`` columns of one matrix's trailing block ``Q[j0:, j0:]`` and
computes ``Q <- Q - V (T (V^T Q))`` for it in two passes over the strip's rows (the second mostly
from L2): ``W = V^T Q`` accumulated in float64, ``T W`` in float64, then each row tile of Q
updated in float64 and stored in float32. V is read straight from H (below the diagonal, a one on
it, zero above), so no copy of V is made. Runs on CUDA, or on the CPU under ``TRITON_INTERPRET=1``
(the tests).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

__all__ = ["apply_blocks"]

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # kernels run in Python on the CPU
ROWS = 32  # rows of V and Q a program reads per step
WARPS = 4


@triton.jit
def _reflectors(h, r, c, n):
    """V at rows ``r`` and columns ``c`` (broadcast index tensors), in float64: H strictly below
    the diagonal, 1 on it, 0 above it and outside the n x n matrix."""
    inside = (r < n) & (c < n)
    v = tl.load(h + r * n + c, mask=inside & (r > c), other=0.0).to(tl.float64)
    return tl.where(inside & (r == c), 1.0, v)


@triton.jit
def _strip(q, r, cols, n):
    return q + r[:, None] * n + cols[None, :], (r[:, None] < n) & (cols[None, :] < n)


@triton.jit
def _block_step_kernel(q, h, t, t_stride, n, j0, RB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                       INTERPRETED: tl.constexpr):
    """``Q[j0:, strip] -= V (T (V^T Q[j0:, strip]))`` for block ``j0 .. j0 + RB`` of reflectors,
    strip ``program_id(0)`` of matrix ``program_id(1)``; ``t`` points at this block's RB x RB T
    of the first matrix, ``t_stride`` apart from one matrix to the next."""
    b = tl.program_id(1).to(tl.int64)
    q += b * n * n
    h += b * n * n
    k = j0 + tl.arange(0, RB)
    cols = j0 + tl.program_id(0) * BN + tl.arange(0, BN)
    steps = tl.arange(0, BK)
    w = tl.zeros([RB, BN], dtype=tl.float64)
    r0 = j0
    if INTERPRETED:  # the interpreter's range takes no tensor bounds
        while r0 < n:
            r = r0 + steps
            ptrs, mask = _strip(q, r, cols, n)
            w = tl.dot(_reflectors(h, r[None, :], k[:, None], n), tl.load(ptrs, mask=mask, other=0.0).to(tl.float64),
                       w, out_dtype=tl.float64)
            r0 += BK
    else:
        for r0 in tl.range(j0, n, BK):
            r = r0 + steps
            ptrs, mask = _strip(q, r, cols, n)
            w = tl.dot(_reflectors(h, r[None, :], k[:, None], n), tl.load(ptrs, mask=mask, other=0.0).to(tl.float64),
                       w, out_dtype=tl.float64)
    ti = tl.arange(0, RB)
    tt = tl.load(t + b * t_stride + ti[:, None] * RB + ti[None, :]).to(tl.float64)
    w = tl.dot(tt, w, out_dtype=tl.float64)
    r0 = j0
    if INTERPRETED:
        while r0 < n:
            r = r0 + steps
            ptrs, mask = _strip(q, r, cols, n)
            qt = tl.load(ptrs, mask=mask, other=0.0).to(tl.float64)
            qt -= tl.dot(_reflectors(h, r[:, None], k[None, :], n), w, out_dtype=tl.float64)
            tl.store(ptrs, qt.to(tl.float32), mask=mask)
            r0 += BK
    else:
        for r0 in tl.range(j0, n, BK):
            r = r0 + steps
            ptrs, mask = _strip(q, r, cols, n)
            qt = tl.load(ptrs, mask=mask, other=0.0).to(tl.float64)
            qt -= tl.dot(_reflectors(h, r[:, None], k[None, :], n), w, out_dtype=tl.float64)
            tl.store(ptrs, qt.to(tl.float32), mask=mask)


def apply_blocks(q: torch.Tensor, h: torch.Tensor, t: torch.Tensor) -> None:
    """Fold every block of reflectors into ``q`` (in place, right to left): on entry the
    identity, on return ``H_1 ... H_n``. ``h`` holds the reflectors as geqrf leaves them and
    ``t`` each block's T (batch x blocks x RB x RB float32, RB >= 16 a power of two: ``tl.dot``'s
    least width); all contiguous, on one device."""
    batch, n, _ = h.shape
    blocks, rb = t.shape[1], t.shape[-1]
    strip = rb  # square tiles of W: the widths the residual kernels' float64 products run at
    for j in reversed(range(blocks)):
        j0 = j * rb
        grid = (triton.cdiv(n - j0, strip), batch)
        _block_step_kernel[grid](q, h, t[:, j], t.stride(0), n, j0, RB=rb, BN=strip, BK=ROWS,
                                 INTERPRETED=INTERPRETED, num_warps=WARPS, num_stages=2)
