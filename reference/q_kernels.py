"""The fast checker's Q on the GPU: compact-WY blocks applied by split-TF32 tensor-core products.

:func:`reference.householder.householder_q` builds Q with float32 cuBLAS products, which run on the
FMA units: most of a check at 640x512 (reports/h100/2026-12-07-checker-float64-steps.md: 7.6 of
13.8 ms). Here the same blocks (``I - V T V^T``, applied right to left) run as Triton ``tl.dot`` at
``tf32x3``: each operand split into a TF32 head and a TF32 tail, three tensor-core products whose
error is of the order of float32's. The figures the checker reads from such a Q move from the
published Q's as little as the float32 product's do (reports/cpu/2026-12-07-q-split-tf32.md), and
the fast path trusts only passes under half a gate anyway (:mod:`reference.checker`).

V is read from H in place (its strictly lower part, a unit diagonal), never copied; each block's
Gram matrix ``V^T V`` comes from one launch, T from it by :func:`reference.householder.triangles_from_gram`,
and each block's update from one launch whose programs own a strip of Q's columns: ``W = T (V^T Q)``
over the strip's rows, then ``Q -= V W`` on the same rows. Runs on CUDA, or on the CPU under
``TRITON_INTERPRET=1`` (the tests; the interpreter multiplies in plain float32).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from reference.householder import default_block, householder_q, triangles_from_gram

__all__ = ["MIN_TRITON_N", "split_tf32_q", "triton_block"]

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # kernels run in Python on the CPU
# Reflectors per block: tl.dot takes 16 at least, and 64 keeps a strip's W (64 x 64) and its
# operands in registers at four warps.
MIN_BLOCK, MAX_BLOCK = 16, 64
MIN_TRITON_N = 128  # from here default_block(n) >= 16; smaller matrices keep the cuBLAS product
BM, BN = 32, 64  # rows per step, Q columns per program


def triton_block(n: int) -> int:
    """Reflectors per block of the Triton Q for n x n matrices (``default_block``, at most 64)."""
    return min(MAX_BLOCK, default_block(n))


@triton.jit
def _v_rows(h_mat, n, rows, j0, ks):
    """Rows ``rows`` (a BM x 1 column) of the block's V, columns ``j0 + ks``: H's strictly lower
    part, ones on the diagonal, zeros above it and past the last row or column."""
    cols = j0 + ks[None, :]
    below = (rows > cols) & (rows < n) & (cols < n)
    v = tl.load(h_mat + rows * n + cols, mask=below, other=0.0)
    return tl.where(rows == cols, 1.0, v)


@triton.jit
def _gram_kernel(h, grams, n, NB: tl.constexpr, BM: tl.constexpr, INTERPRETED: tl.constexpr):
    """``V^T V`` of block ``program_id(0)`` of matrix ``program_id(1)``, from the block's first row down."""
    j = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    h_mat = h + b * n * n
    j0 = j * NB
    ks = tl.arange(0, NB)
    acc = tl.zeros([NB, NB], dtype=tl.float32)
    if INTERPRETED:  # the interpreter's range takes no tensor bounds
        r0 = j0
        while r0 < n:
            v = _v_rows(h_mat, n, r0 + tl.arange(0, BM)[:, None], j0, ks)
            acc = tl.dot(tl.trans(v), v, acc, input_precision="tf32x3")
            r0 += BM
    else:
        for r0 in tl.range(j0, n, BM):
            v = _v_rows(h_mat, n, r0 + tl.arange(0, BM)[:, None], j0, ks)
            acc = tl.dot(tl.trans(v), v, acc, input_precision="tf32x3")
    out = grams + (b * tl.num_programs(0) + j) * NB * NB
    tl.store(out + ks[:, None] * NB + ks[None, :], acc)


@triton.jit
def _project_step(acc, h_mat, q_mat, n, r0, j0, ks, cols, BM: tl.constexpr):
    rows = r0 + tl.arange(0, BM)[:, None]
    v = _v_rows(h_mat, n, rows, j0, ks)
    q = tl.load(q_mat + rows * n + cols[None, :], mask=(rows < n) & (cols[None, :] < n), other=0.0)
    return tl.dot(tl.trans(v), q, acc, input_precision="tf32x3")


@triton.jit
def _subtract_step(h_mat, q_mat, n, r0, j0, ks, cols, w, BM: tl.constexpr):
    rows = r0 + tl.arange(0, BM)[:, None]
    v = _v_rows(h_mat, n, rows, j0, ks)
    tile = q_mat + rows * n + cols[None, :]
    inside = (rows < n) & (cols[None, :] < n)
    q = tl.load(tile, mask=inside, other=0.0)
    tl.store(tile, tl.dot(v, -w, q, input_precision="tf32x3"), mask=inside)


@triton.jit(do_not_specialize=["j"])
def _apply_kernel(q, h, t, j, blocks, n, NB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                  INTERPRETED: tl.constexpr):
    """``Q[j0:, strip] -= V (T (V^T Q[j0:, strip]))`` for block j (first column ``j0 = j NB``) and
    the strip of BN columns from ``j0 + program_id(0) BN`` of matrix ``program_id(1)``.

    Rows and columns before j0 are untouched: V is zero above row j0, and every block to the
    right has so far changed only ``Q[j0 + NB:, j0 + NB:]``."""
    b = tl.program_id(1).to(tl.int64)
    h_mat = h + b * n * n
    q_mat = q + b * n * n
    j0 = j * NB
    ks = tl.arange(0, NB)
    cols = j0 + tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros([NB, BN], dtype=tl.float32)
    if INTERPRETED:
        r0 = j0
        while r0 < n:
            acc = _project_step(acc, h_mat, q_mat, n, r0, j0, ks, cols, BM)
            r0 += BM
    else:
        for r0 in tl.range(j0, n, BM):
            acc = _project_step(acc, h_mat, q_mat, n, r0, j0, ks, cols, BM)
    t_mat = t + (b * blocks + j) * NB * NB
    tt = tl.load(t_mat + ks[:, None] * NB + ks[None, :])
    w = tl.dot(tt, acc, input_precision="tf32x3")
    if INTERPRETED:
        r0 = j0
        while r0 < n:
            _subtract_step(h_mat, q_mat, n, r0, j0, ks, cols, w, BM)
            r0 += BM
    else:
        for r0 in tl.range(j0, n, BM):
            _subtract_step(h_mat, q_mat, n, r0, j0, ks, cols, w, BM)


def split_tf32_q(h: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Q = H_1 H_2 ... H_n for each matrix of a contiguous batch x n x n float32 ``h``, by split-TF32
    products (``torch.linalg.householder_product``'s contract for square h); matrices smaller than
    ``MIN_TRITON_N`` get :func:`reference.householder.householder_q`'s float32 product."""
    if h.dim() != 3 or h.shape[-1] != h.shape[-2] or h.dtype != torch.float32 or not h.is_contiguous():
        raise ValueError(f"h must be a contiguous batch x n x n float32 tensor, got {h.dtype} {tuple(h.shape)}")
    if tau.shape != h.shape[:2]:
        raise ValueError(f"tau must be {tuple(h.shape[:2])}, got {tuple(tau.shape)}")
    batch, n, _ = h.shape
    if n < MIN_TRITON_N:
        return householder_q(h, tau)
    nb = triton_block(n)
    blocks = triton.cdiv(n, nb)
    options = {"NB": nb, "BM": BM, "INTERPRETED": INTERPRETED, "num_warps": 4}
    grams = torch.empty(batch, blocks, nb, nb, dtype=torch.float32, device=h.device)
    _gram_kernel[(blocks, batch)](h, grams, n, **options)
    padded = torch.zeros(batch, blocks * nb, dtype=torch.float32, device=h.device)
    padded[:, :n] = tau
    t = triangles_from_gram(grams, padded.view(batch, blocks, nb))  # batch x blocks x nb x nb, contiguous
    q = torch.zeros_like(h)
    q.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    for j in reversed(range(blocks)):
        strips = triton.cdiv(n - j * nb, BN)
        _apply_kernel[(strips, batch)](q, h, t, j, blocks, n, BN=BN, **options)
    return q
