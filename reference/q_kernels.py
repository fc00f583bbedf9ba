"""The fast checker's Q on the GPU: compact-WY blocks applied by split-TF32 tensor-core products.

:func:`reference.householder.householder_q` builds Q with float32 cuBLAS products, which run on the
FMA units: most of a check at 640x512 (reports/h100/2026-12-07-checker-float64-steps.md: 7.6 of
13.8 ms). Here the same blocks (``I - V T V^T``, applied right to left) run as Triton ``tl.dot`` at
``tf32x3``: each operand split into a TF32 head and a TF32 tail, three tensor-core products whose
error is of the order of float32's. The figures the checker reads from such a Q stay closer to the
GPU's published Q (cuSOLVER) than the float32 product's do: largest differences 0.032 and 0.34 n·eps
against 0.034 and 0.50 (reports/h100/2026-12-07-checker-split-tf32-q.md; the CPU emulation before
it, reports/cpu/2026-12-07-q-split-tf32.md), and the fast path trusts only passes under half a gate.

V is read from H in place (its strictly lower part, a unit diagonal), never copied; each block's
Gram matrix ``V^T V`` comes from one launch, T from it by :func:`reference.householder.triangles_from_gram`,
and each block's update from one launch whose programs own a strip of Q's columns: ``W = T (V^T Q)``
over the strip's rows, then ``Q -= V W`` on the same rows. :func:`fast_q` picks this product or the
float32 one where each was measured faster. Runs on CUDA, or on the CPU under ``TRITON_INTERPRET=1``
(the tests; the interpreter multiplies in plain float32).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from reference.checker_kernels import INTERPRETED
from reference.householder import (
    _identity_like,
    _padded_tau,
    default_block,
    householder_q,
    triangles_from_gram,
)

__all__ = ["DEFAULT_Q_TILES", "MIN_TRITON_BATCH", "MIN_TRITON_N", "QTiles", "fast_q", "split_tf32_q"]

MIN_TRITON_N = 128  # from here default_block(n) >= 16, tl.dot's least
# Programs own one matrix's column strips, so a small batch leaves most multiprocessors idle while
# each sweeps thousands of rows: 2x4096 took 11.2 ms against cuBLAS's 10.7, where 8x2048 took 5.2
# against 5.8 and every larger batch measured gained (reports/h100/2026-12-07-checker-split-tf32-q.md).
MIN_TRITON_BATCH = 8


@dataclass(frozen=True)
class QTiles:
    """Launch shapes of :func:`split_tf32_q`: at most ``block`` reflectors per block (``default_block(n)``
    below that), ``rows`` per step of a strip, ``cols`` Q columns per program, ``warps`` and
    software-pipeline ``stages`` per program. The defaults: the fastest of thirteen variants on an
    H100, 0.81 of cuBLAS's time at 640x512 and 0.59 over five shapes
    (reports/h100/2026-12-07-checker-split-tf32-q.md)."""

    block: int = 64
    rows: int = 64
    cols: int = 64
    warps: int = 4
    stages: int = 3

    def block_for(self, n: int) -> int:
        return min(self.block, default_block(n))


DEFAULT_Q_TILES = QTiles()


@triton.jit
def _v_triangle(h_mat, n, j0, ks):
    """The block's first NB rows of V (rows and columns ``j0 + ks``): H's strictly lower part, ones
    on the diagonal, zeros above it and past the last row or column."""
    rows = j0 + ks[:, None]
    cols = j0 + ks[None, :]
    v = tl.load(h_mat + rows * n + cols, mask=(rows > cols) & (rows < n), other=0.0)
    return tl.where((rows == cols) & (rows < n), 1.0, v)


@triton.jit
def _v_rows(h_mat, n, r0, j0, ks, BM: tl.constexpr):
    """V's BM rows from r0 >= j0 + NB, wholly below the triangle: H's columns ``j0 + ks`` as they are
    (every one is inside the matrix, as row r0 is)."""
    rows = r0 + tl.arange(0, BM)[:, None]
    return tl.load(h_mat + rows * n + j0 + ks[None, :], mask=rows < n, other=0.0)


@triton.jit
def _gram_kernel(h, grams, n, NB: tl.constexpr, BM: tl.constexpr, STAGES: tl.constexpr, INTERPRETED: tl.constexpr):
    """``V^T V`` of block ``program_id(0)`` of matrix ``program_id(1)``, from the block's first row down."""
    j = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    h_mat = h + b * n * n
    j0 = j * NB
    ks = tl.arange(0, NB)
    top = _v_triangle(h_mat, n, j0, ks)
    acc = tl.dot(tl.trans(top), top, input_precision="tf32x3")
    if INTERPRETED:  # the interpreter's range takes no tensor bounds
        r0 = j0 + NB
        while r0 < n:
            v = _v_rows(h_mat, n, r0, j0, ks, BM)
            acc = tl.dot(tl.trans(v), v, acc, input_precision="tf32x3")
            r0 += BM
    else:
        for r0 in tl.range(j0 + NB, n, BM, num_stages=STAGES):
            v = _v_rows(h_mat, n, r0, j0, ks, BM)
            acc = tl.dot(tl.trans(v), v, acc, input_precision="tf32x3")
    out = grams + (b * tl.num_programs(0) + j) * NB * NB
    tl.store(out + ks[:, None] * NB + ks[None, :], acc)


@triton.jit
def _project_step(acc, v, q_mat, n, rows, cols):
    q = tl.load(q_mat + rows * n + cols[None, :], mask=(rows < n) & (cols[None, :] < n), other=0.0)
    return tl.dot(tl.trans(v), q, acc, input_precision="tf32x3")


@triton.jit
def _subtract_step(v, q_mat, n, rows, cols, w):
    tile = q_mat + rows * n + cols[None, :]
    inside = (rows < n) & (cols[None, :] < n)
    q = tl.load(tile, mask=inside, other=0.0)
    tl.store(tile, tl.dot(v, -w, q, input_precision="tf32x3"), mask=inside)


@triton.jit(do_not_specialize=["j"])
def _apply_kernel(q, h, t, j, blocks, n, NB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                  STAGES: tl.constexpr, INTERPRETED: tl.constexpr):
    """``Q[j0:, strip] -= V (T (V^T Q[j0:, strip]))`` for block j (first column ``j0 = j NB``) and
    the strip of BN columns from ``j0 + program_id(0) BN`` of matrix ``program_id(1)``: the
    triangle's NB rows, then the rest BM at a time, twice.

    Rows and columns before j0 are untouched: V is zero above row j0, and every block to the
    right has so far changed only ``Q[j0 + NB:, j0 + NB:]``."""
    b = tl.program_id(1).to(tl.int64)
    h_mat = h + b * n * n
    q_mat = q + b * n * n
    j0 = j * NB
    ks = tl.arange(0, NB)
    cols = j0 + tl.program_id(0) * BN + tl.arange(0, BN)
    steps = tl.arange(0, BM)[:, None]
    top = j0 + ks[:, None]
    acc = _project_step(tl.zeros([NB, BN], dtype=tl.float32), _v_triangle(h_mat, n, j0, ks), q_mat, n, top, cols)
    if INTERPRETED:
        r0 = j0 + NB
        while r0 < n:
            acc = _project_step(acc, _v_rows(h_mat, n, r0, j0, ks, BM), q_mat, n, r0 + steps, cols)
            r0 += BM
    else:
        for r0 in tl.range(j0 + NB, n, BM, num_stages=STAGES):
            acc = _project_step(acc, _v_rows(h_mat, n, r0, j0, ks, BM), q_mat, n, r0 + steps, cols)
    tt = tl.load(t + (b * blocks + j) * NB * NB + ks[:, None] * NB + ks[None, :])
    w = tl.dot(tt, acc, input_precision="tf32x3")
    _subtract_step(_v_triangle(h_mat, n, j0, ks), q_mat, n, top, cols, w)  # read again: fewer live registers
    if INTERPRETED:
        r0 = j0 + NB
        while r0 < n:
            _subtract_step(_v_rows(h_mat, n, r0, j0, ks, BM), q_mat, n, r0 + steps, cols, w)
            r0 += BM
    else:
        for r0 in tl.range(j0 + NB, n, BM, num_stages=STAGES):
            _subtract_step(_v_rows(h_mat, n, r0, j0, ks, BM), q_mat, n, r0 + steps, cols, w)


def split_tf32_q(h: torch.Tensor, tau: torch.Tensor, tiles: QTiles = DEFAULT_Q_TILES) -> torch.Tensor:
    """Q = H_1 H_2 ... H_n for each matrix of a contiguous batch x n x n float32 ``h`` (n at least
    ``MIN_TRITON_N``), by split-TF32 products (``torch.linalg.householder_product``'s contract for
    square h)."""
    if h.dim() != 3 or h.shape[-1] != h.shape[-2] or h.dtype != torch.float32 or not h.is_contiguous():
        raise ValueError(f"h must be a contiguous batch x n x n float32 tensor, got {h.dtype} {tuple(h.shape)}")
    if tau.shape != h.shape[:2]:
        raise ValueError(f"tau must be {tuple(h.shape[:2])}, got {tuple(tau.shape)}")
    batch, n, _ = h.shape
    if n < MIN_TRITON_N:
        raise ValueError(f"split_tf32_q takes n >= {MIN_TRITON_N} (blocks of 16 reflectors at least), got {n}")
    nb = tiles.block_for(n)
    blocks = triton.cdiv(n, nb)
    options = {"NB": nb, "BM": tiles.rows, "STAGES": tiles.stages, "INTERPRETED": INTERPRETED,
               "num_warps": tiles.warps}
    grams = torch.empty(batch, blocks, nb, nb, dtype=torch.float32, device=h.device)
    _gram_kernel[(blocks, batch)](h, grams, n, **options)
    t = triangles_from_gram(grams, _padded_tau(tau, blocks * nb).view(batch, blocks, nb))  # contiguous
    q = _identity_like(h)
    for j in reversed(range(blocks)):
        strips = triton.cdiv(n - j * nb, tiles.cols)
        _apply_kernel[(strips, batch)](q, h, t, j, blocks, n, BN=tiles.cols, **options)
    return q


def fast_q(h: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Q for the fast check of a contiguous float32 batch: :func:`split_tf32_q` for batches of at least
    ``MIN_TRITON_BATCH`` matrices of n >= ``MIN_TRITON_N``, else the float32 cuBLAS product."""
    batch, n = h.shape[0], h.shape[-1]
    if n >= MIN_TRITON_N and batch >= MIN_TRITON_BATCH:
        return split_tf32_q(h, tau)
    return householder_q(h, tau)
