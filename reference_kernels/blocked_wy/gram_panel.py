"""Householder QR of a tall panel from its Gram matrix: the row work spread over many programs.

The panel kernel of :mod:`.kernels` gives each matrix one program, so a batch of two 4096 x 4096
matrices factors its tall panels on two multiprocessors, a column at a time. Here a panel
``P = [P1; P2]`` (``P1`` its first w rows) is factored by three launches:

1. many programs per matrix sum ``G = P2^T P2`` in float64 (each product of two float32 numbers
   is exact there), a part of the rows each;
2. one program per matrix runs LAPACK's column steps (``larfg`` reflectors, the same signs and
   scalars) on w x w float64 tiles only: the top rows ``P1`` explicitly, and the rows below as
   ``P2 @ M`` with ``M`` a w x w matrix, every inner product over those rows read off ``M^T G M``.
   It writes R, the top of V, tau, T and M's scaled columns (the coefficients of V's lower rows);
3. many programs per matrix write V's lower rows, ``P2 @ M``, over the panel and into V.

Step 2 can take the columns in pairs (``pairs``): column k + 1's sums after column k's reflector
follow from the sums before it by rank-one corrections, so a pair pays one round of reductions.

Gram-based products lose digits as Cholesky QR does. The column-step program bounds the rounding
of each squared norm it reads off ``G``: about ``m eps64 (sum_i |M[i, k]| ||P2[:, i]||)^2`` for
column k of an m-row panel, a bound that scales with the columns (scaling a column by a power of
two scales every rounding with it) and grows with M's cancellations, as in nearly collinear
columns. Where that bound exceeds ``GRAM_ERROR_LIMIT`` of the column's remaining squared norm, the
program factors its matrix's panel by plain Householder steps instead, one pass over the panel in
memory per column (slow, but rare); step 3 then leaves that matrix alone. A limit of 1e-9 keeps
the Gram route's errors far under float32's rounding (eps32 = 1.2e-7), and an exactly zero column
or block below the top, which rounds to nothing, never falls back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.column_steps import _add_pairs, _larft_column
from reference_kernels.blocked_wy.launch import INTERPRETED, ceil_div, pow2_at_least
from reference_kernels.blocked_wy.source import _base

__all__ = ["GRAM_ERROR_LIMIT", "MAX_LEAF", "GramSteps", "error_scale", "gram_column_program", "gram_panel"]

# Largest bound on a squared norm's relative rounding that the Gram route accepts (the docstring).
GRAM_ERROR_LIMIT = 1e-9
_EPS64 = 2.0**-53
# Rows per tl.dot step of the Gram launch, per program of the V launch, the most parts a matrix's
# Gram is split into, and rows per step of the fallback's passes. No float64 tl.dot here has more
# than 32 rows: one of 64 does not compile for compute capability 10.x (B200) under Triton before
# 3.8 (reports/cpu/2026-12-05-compile-targets.md), so the V launch takes 32 rows a program and the
# Gram of a 64-column leaf is summed as two 32-row halves.
_GRAM_ROWS = 64
_DOT_ROWS = 32
_V_ROWS = _DOT_ROWS  # the rows of its program's product
_MAX_PARTS = 16
_FALLBACK_ROWS = 64
# The widest leaf: the column-step program keeps four w x w float64 tiles in registers.
MAX_LEAF = 64


@triton.jit
def _gram_step(g, g_low, p_mat, p_row_stride, r0, end, cols, W: tl.constexpr, BW: tl.constexpr,
               BR: tl.constexpr, GR: tl.constexpr):
    """(g, g_low) plus the float64 Gram of rows r0 .. r0 + BR (those before ``end``): its first GR
    rows, and where BW = 2 GR its last GR rows too."""
    rows = r0 + tl.arange(0, BR)[:, None]
    inside = rows < end
    x = tl.load(p_mat + rows * p_row_stride + cols, mask=inside & (cols < W), other=0.0).to(tl.float64)
    if BW == GR:
        return tl.dot(tl.trans(x), x, g, out_dtype=tl.float64), g_low
    half = tl.arange(0, GR)[None, :]
    x_top = tl.load(p_mat + rows * p_row_stride + half, mask=inside & (half < W), other=0.0).to(tl.float64)
    x_low = tl.load(p_mat + rows * p_row_stride + GR + half, mask=inside & (half + GR < W), other=0.0).to(tl.float64)
    return (tl.dot(tl.trans(x_top), x, g, out_dtype=tl.float64),
            tl.dot(tl.trans(x_low), x, g_low, out_dtype=tl.float64))


@triton.jit(do_not_specialize=["p_off", "m", "part_rows"])
def _bottom_gram_kernel(
    p, p_off, p_mat_stride, p_row_stride, part, m, part_rows,
    W: tl.constexpr, BW: tl.constexpr, BR: tl.constexpr, GR: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """One part's ``P2^T P2`` (float64, BW x BW, padded with zeros), rows W + pid * part_rows on,
    summed GR rows of it at a time (BW = GR or 2 GR)."""
    pid_r = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    cols = tl.arange(0, BW)[None, :]
    p_mat = p + p_off + pid_b * p_mat_stride
    first = W + pid_r * part_rows
    end = tl.minimum(first + part_rows, m)
    g = tl.zeros([GR, BW], dtype=tl.float64)
    g_low = tl.zeros([GR, BW], dtype=tl.float64)  # rows GR on, where BW = 2 GR
    if INTERPRETED:  # the interpreter's range takes no tensor bounds
        r0 = first
        while r0 < end:
            g, g_low = _gram_step(g, g_low, p_mat, p_row_stride, r0, end, cols, W, BW, BR, GR)
            r0 += BR
    else:  # pipelined: the next rows' loads in flight during this step's product
        for r0 in tl.range(first, end, BR, num_stages=3):
            g, g_low = _gram_step(g, g_low, p_mat, p_row_stride, r0, end, cols, W, BW, BR, GR)
    out = part + (pid_b * tl.num_programs(0) + pid_r) * BW * BW
    gram_rows = tl.arange(0, GR)[:, None]
    tl.store(out + gram_rows * BW + cols, g)
    if BW > GR:
        tl.store(out + (gram_rows + GR) * BW + cols, g_low)


@triton.jit
def _add_triples64(a, b, c, d, e, f):
    return a + d, b + e, c + f


@triton.jit
def _add_quads64(a, b, c, d, e, f, g, h):
    return a + e, b + f, c + g, d + h


@triton.jit
def _reflector64(alpha, sig):
    """LAPACK's larfg from the leading entry and the squared norm below it, in float64 (column_steps'
    own is float32: its correctly rounded division takes float32 only): (beta, tau, scale),
    v = [1; x * scale]; a zero tail gives tau = 0 and beta = alpha."""
    nonzero = sig > 0
    norm = tl.sqrt(alpha * alpha + sig)
    beta = tl.where(alpha >= 0, -norm, norm)
    safe = tl.where(nonzero, beta, 1.0)
    tau = tl.where(nonzero, (beta - alpha) / safe, 0.0)
    scale = tl.where(nonzero, 1.0 / tl.where(nonzero, alpha - beta, 1.0), 0.0)
    return tl.where(nonzero, beta, alpha), tau, scale


@triton.jit
def _gram_row(x, r, cols, k):
    """``sum over rows i > k of x[i, k] x[i, j]`` for every column j of the float32 row block x
    (rows r), in float64."""
    xk = tl.where(r > k, tl.sum(tl.where(cols == k, x, 0.0), axis=1), 0.0)
    return tl.sum(x * xk[:, None], axis=0).to(tl.float64)


@triton.jit
def _reflect_rows(acc, p_mat, p_row_stride, r0, m, k, cols, scale32, uk, beta32, W: tl.constexpr, BR: tl.constexpr):
    """Rows r0 .. r0 + BR of the fallback's pass for column k: P[i, j] -= tau v_i u_j (j > k),
    column k becomes beta and v_k's tail; returns acc plus those rows' part of column k + 1's
    inner products (of the values as stored)."""
    r = r0 + tl.arange(0, BR)
    rows = r[:, None]
    inside = (rows < m) & (cols < W) & (rows >= k)
    x = tl.load(p_mat + rows * p_row_stride + cols, mask=inside, other=0.0)
    xk = tl.sum(tl.where(cols == k, x, 0.0), axis=1)
    vi = tl.where(r > k, scale32 * xk, tl.where(r == k, 1.0, 0.0))
    x = x - vi[:, None] * uk
    x = tl.where(cols == k, tl.where(rows == k, beta32, tl.where(rows > k, vi[:, None], x)), x)
    tl.store(p_mat + rows * p_row_stride + cols, x, mask=inside)
    return acc + _gram_row(x, r, cols, k + 1)


@triton.jit
def _householder_in_memory(
    p_mat, p_row_stride, v_mat, v_row_stride, m,
    W: tl.constexpr, BW: tl.constexpr, BR: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """Householder QR of one m x W panel in memory (the Gram route's fallback), one pass over its
    rows per column: the pass that applies column k's reflector also sums column k + 1's inner
    products with every column. Row blocks in float32 as the panel kernel works (float64 sums
    across blocks and float64 scalars). Returns (tau, T); writes the panel's R and V, and V."""
    idx = tl.arange(0, BW)
    cols = idx[None, :]
    col_ok = cols < W
    taus = tl.zeros([BW], dtype=tl.float64)
    tri = tl.zeros([BW, BW], dtype=tl.float64)
    # acc[j]: sum over rows i > k of P[i, k] P[i, j] (for j < k, P[:, j] holds v_j), here for k = 0.
    acc = tl.zeros([BW], dtype=tl.float64)
    r0 = 0
    while r0 < m:
        r = r0 + tl.arange(0, BR)
        x = tl.load(p_mat + r[:, None] * p_row_stride + cols, mask=(r[:, None] < m) & col_ok, other=0.0)
        acc += _gram_row(x, r, cols, 0)
        r0 += BR
    for k in range(W):
        rowk = tl.load(p_mat + k * p_row_stride + idx, mask=idx < W, other=0.0).to(tl.float64)
        alpha = tl.sum(tl.where(idx == k, rowk, 0.0))
        sig = tl.sum(tl.where(idx == k, acc, 0.0))
        beta, tau, scale = _reflector64(alpha, sig)
        u = rowk + scale * acc
        tri = _larft_column(tri, u, tau, k, idx)
        taus = tl.where(idx == k, tau, taus)
        uk = tl.where(idx > k, tau * u, 0.0).to(tl.float32)[None, :]
        scale32 = scale.to(tl.float32)
        beta32 = beta.to(tl.float32)
        tl.debug_barrier()  # the pass below overwrites rows other threads have read
        acc = tl.zeros([BW], dtype=tl.float64)
        if INTERPRETED:  # the interpreter's range takes no tensor bounds
            r0 = (k // BR) * BR
            while r0 < m:
                acc = _reflect_rows(acc, p_mat, p_row_stride, r0, m, k, cols, scale32, uk, beta32, W, BR)
                r0 += BR
        else:  # pipelined: the next rows' loads in flight (they are rows this step does not write)
            for r0 in tl.range((k // BR) * BR, m, BR, num_stages=2):
                acc = _reflect_rows(acc, p_mat, p_row_stride, r0, m, k, cols, scale32, uk, beta32, W, BR)
        tl.debug_barrier()
    r0 = 0
    while r0 < m:
        rows = r0 + tl.arange(0, BR)[:, None]
        inside = (rows < m) & col_ok
        x = tl.load(p_mat + rows * p_row_stride + cols, mask=inside, other=0.0)
        basis = tl.where(rows > cols, x, tl.where(rows == cols, 1.0, 0.0))
        tl.store(v_mat + rows * v_row_stride + cols, basis, mask=inside)
        r0 += BR
    return taus, tri


@triton.jit
def _finish_column(top, mix, gram, mk, g, ak, k, beta, tau_k, scale, u, idx):
    """The state after column k's reflector (u = v_k^T of every column): the columns after k
    updated, then column k finished (beta, v_k's top rows, its coefficients scaled)."""
    r2 = idx[:, None]
    c2 = idx[None, :]
    uk = tl.where(idx > k, u, 0.0)[None, :]
    v_top = tl.where(idx > k, scale * ak, tl.where(idx == k, 1.0, 0.0))
    top = top - (tau_k * v_top)[:, None] * uk
    mix = mix - (tau_k * scale * mk)[:, None] * uk
    gram = gram - (tau_k * scale * g)[:, None] * uk
    top = tl.where(c2 == k, tl.where(r2 == k, beta, tl.where(r2 > k, scale * ak[:, None], top)), top)
    mix = tl.where(c2 == k, mix * scale, mix)
    gram = tl.where(c2 == k, gram * scale, gram)
    return top, mix, gram


@triton.jit
def _gram_column(top, mix, gram, tri, taus, shaky, k, idx, lower_norms, rounding_scale, INTERPRETED: tl.constexpr):
    """One column step: its sums from the tiles, its reflector, the tiles updated."""
    r2 = idx[:, None]
    c2 = idx[None, :]
    # Column k of mix, G @ mix and top, then (below) every sum over the tiles' rows, each kind in one
    # reduction of several operands, which shares its block-wide barriers (3 a column at four warps,
    # ptxas sm_90; kernel-log §W21). Each operand is summed as tl.sum would.
    # low[j] = (P2 mix[:, j])^T (P2 mk), for j < k with v_j's coefficients in mix[:, j]; reach[j]
    # = sum_i |mix[i, j]| ||P2[:, i]||, whose square bounds the rounding of low[j] (about m eps64 of it).
    # high[j] = top's rows below k against column j; rowk = top's row k.
    if INTERPRETED:  # the same sums; the interpreter runs a custom combine in Python, per element
        mk = tl.sum(tl.where(c2 == k, mix, 0.0), axis=1)
        g = tl.sum(tl.where(c2 == k, gram, 0.0), axis=1)
        ak = tl.sum(tl.where(c2 == k, top, 0.0), axis=1)
        ak_below = tl.where(idx > k, ak, 0.0)
        low = tl.sum(mix * g[:, None], axis=0)
        reach = tl.sum(tl.abs(mix) * lower_norms[:, None], axis=0)
        high = tl.sum(top * ak_below[:, None], axis=0)
        rowk = tl.sum(tl.where(r2 == k, top, 0.0), axis=0)
    else:
        mk, g, ak = tl.reduce(
            (tl.where(c2 == k, mix, 0.0), tl.where(c2 == k, gram, 0.0), tl.where(c2 == k, top, 0.0)), 1, _add_triples64
        )
        ak_below = tl.where(idx > k, ak, 0.0)
        low, reach, high, rowk = tl.reduce(
            (mix * g[:, None], tl.abs(mix) * lower_norms[:, None], top * ak_below[:, None],
             tl.where(r2 == k, top, 0.0)), 0, _add_quads64,
        )
    at_k = idx == k
    alpha, sig, reach_k = tl.reduce(
        (tl.where(at_k, rowk, 0.0), tl.where(at_k, high + low, 0.0), tl.where(at_k, reach, 0.0)), 0, _add_triples64
    )
    beta, tau_k, scale = _reflector64(alpha, sig)
    shaky = shaky | (reach_k * reach_k * rounding_scale > alpha * alpha + sig)
    # u[j] = v_k^T (column j): w_j of the update for j > k, (V^T v_k)_j for j < k.
    u = rowk + scale * (high + low)
    tri = _larft_column(tri, u, tau_k, k, idx)
    taus = tl.where(at_k, tau_k, taus)
    top, mix, gram = _finish_column(top, mix, gram, mk, g, ak, k, beta, tau_k, scale, u, idx)
    return top, mix, gram, tri, taus, shaky


@triton.jit
def _add_fives64(a0, a1, a2, a3, a4, b0, b1, b2, b3, b4):
    return a0 + b0, a1 + b1, a2 + b2, a3 + b3, a4 + b4


@triton.jit
def _add_many(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14,
              b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14):
    return (a0 + b0, a1 + b1, a2 + b2, a3 + b3, a4 + b4, a5 + b5, a6 + b6, a7 + b7, a8 + b8, a9 + b9,
            a10 + b10, a11 + b11, a12 + b12, a13 + b13, a14 + b14)


@triton.jit
def _gram_pair(top, mix, gram, tri, taus, shaky, k, idx, lower_norms, rounding_scale, INTERPRETED: tl.constexpr):
    """Columns k and k1 = k + 1 from one round of sums over the tiles before either reflector:
    column k1's sums after column k's reflector follow from them (its column, row and inner
    products change by rank-one terms in u), so the pair pays each kind of reduction once."""
    r2 = idx[:, None]
    c2 = idx[None, :]
    k1 = k + 1
    if INTERPRETED:
        mk = tl.sum(tl.where(c2 == k, mix, 0.0), axis=1)
        m1 = tl.sum(tl.where(c2 == k1, mix, 0.0), axis=1)
        g = tl.sum(tl.where(c2 == k, gram, 0.0), axis=1)
        g1 = tl.sum(tl.where(c2 == k1, gram, 0.0), axis=1)
        ak = tl.sum(tl.where(c2 == k, top, 0.0), axis=1)
        ak1 = tl.sum(tl.where(c2 == k1, top, 0.0), axis=1)
    else:
        mk, m1, g, g1 = tl.reduce(
            (tl.where(c2 == k, mix, 0.0), tl.where(c2 == k1, mix, 0.0),
             tl.where(c2 == k, gram, 0.0), tl.where(c2 == k1, gram, 0.0)), 1, _add_quads64)
        ak, ak1 = tl.reduce((tl.where(c2 == k, top, 0.0), tl.where(c2 == k1, top, 0.0)), 1, _add_pairs)
    ak_below = tl.where(idx > k, ak, 0.0)
    ak_past = tl.where(idx > k1, ak, 0.0)
    ak1_below = tl.where(idx > k1, ak1, 0.0)
    # As in _gram_column, for both columns: low/low1 against mix, high/h1 against top's rows below
    # each, top's rows k and k1, and reach; past: top's rows below k1 against column k, summed
    # directly, not as high less row k1's term, so a tail that is exactly zero (nothing below row
    # k1) stays exactly zero whatever products the compiler fuses.
    if INTERPRETED:
        low = tl.sum(mix * g[:, None], axis=0)
        low1 = tl.sum(mix * g1[:, None], axis=0)
        high = tl.sum(top * ak_below[:, None], axis=0)
        h1 = tl.sum(top * ak1_below[:, None], axis=0)
        past = tl.sum(top * ak_past[:, None], axis=0)
        rowk = tl.sum(tl.where(r2 == k, top, 0.0), axis=0)
        row1 = tl.sum(tl.where(r2 == k1, top, 0.0), axis=0)
        reach = tl.sum(tl.abs(mix) * lower_norms[:, None], axis=0)
    else:
        low, low1, high, h1, past = tl.reduce(
            (mix * g[:, None], mix * g1[:, None], top * ak_below[:, None], top * ak1_below[:, None],
             top * ak_past[:, None]), 0, _add_fives64)
        rowk, row1, reach = tl.reduce(
            (tl.where(r2 == k, top, 0.0), tl.where(r2 == k1, top, 0.0), tl.abs(mix) * lower_norms[:, None]),
            0, _add_triples64)
    at_k = idx == k
    at_k1 = idx == k1
    # Every scalar both steps need, in one reduction: entries k and k1 of those sums.
    (alpha, high_k, low_k, rowk_k1, high_k1, low_k1, row1_k, row1_k1, low1_k, low1_k1, h1_k, h1_k1,
     past_k, past_k1, reach_k) = tl.reduce(
        (tl.where(at_k, rowk, 0.0), tl.where(at_k, high, 0.0), tl.where(at_k, low, 0.0),
         tl.where(at_k1, rowk, 0.0), tl.where(at_k1, high, 0.0), tl.where(at_k1, low, 0.0),
         tl.where(at_k, row1, 0.0), tl.where(at_k1, row1, 0.0), tl.where(at_k, low1, 0.0),
         tl.where(at_k1, low1, 0.0), tl.where(at_k, h1, 0.0), tl.where(at_k1, h1, 0.0),
         tl.where(at_k, past, 0.0), tl.where(at_k1, past, 0.0), tl.where(at_k, reach, 0.0)), 0, _add_many)
    sig = high_k + low_k
    beta, tau_k, scale = _reflector64(alpha, sig)
    shaky = shaky | (reach_k * reach_k * rounding_scale > alpha * alpha + sig)
    c = tau_k * scale
    u = rowk + scale * (high + low)
    u_k1 = rowk_k1 + scale * (high_k1 + low_k1)
    # Column k1's sums after column k's reflector (rank-one corrections; at j = k, where column k
    # is then v_k, each is scaled by ``scale``): row k1, its products with top's rows below k1, low.
    after = tl.where(idx > k, u, 0.0)
    on_k = tl.where(at_k, scale, 1.0)
    s_top = scale * past  # sum over rows i > k1 of top[i, j] v_k[i]
    s_k1 = scale * past_k1
    s_vv = scale * scale * past_k  # sum over rows i > k1 of v_k[i]^2
    row1 = (row1 - tau_k * scale * row1_k * after) * on_k
    h1 = (h1 - tau_k * u_k1 * s_top - tau_k * after * s_k1 + tau_k * tau_k * after * u_k1 * s_vv) * on_k
    low1 = (low1 - c * u_k1 * low - c * after * low1_k + c * c * after * u_k1 * low_k) * on_k
    alpha1 = row1_k1 - tau_k * scale * row1_k * u_k1
    t_top = tau_k * u_k1 * s_k1
    t_vv = tau_k * tau_k * u_k1 * u_k1 * s_vv
    t_low = c * u_k1 * (low_k1 + low1_k)
    t_ll = c * c * u_k1 * u_k1 * low_k
    sig1 = h1_k1 - 2.0 * t_top + t_vv + low1_k1 - t_low + t_ll
    beta1, tau_k1, scale1 = _reflector64(alpha1, sig1)
    m1 = m1 - c * u_k1 * mk  # column k1 of mix after column k's reflector
    reach1 = tl.sum(tl.abs(m1) * lower_norms)
    # sig1's terms cancel where column k took most of column k1, so its rounding scales with their
    # magnitudes: bounded with the Gram products' m eps64 (generous for a sum of six terms).
    spread = h1_k1 + 2.0 * tl.abs(t_top) + t_vv + tl.abs(low1_k1) + tl.abs(t_low) + tl.abs(t_ll)
    shaky = shaky | ((reach1 * reach1 + spread) * rounding_scale > alpha1 * alpha1 + sig1)
    u1 = row1 + scale1 * (h1 + low1)
    # Entry k of u1 (v_k1^T v_k), from the scalars: T's column k1 needs it.
    u1_k = scale * row1_k + scale1 * (scale * h1_k - tau_k * u_k1 * s_vv + scale * (low1_k - c * u_k1 * low_k))
    # T: columns k and k1 from T's columns before k (one reduction of both products).
    if INTERPRETED:
        tz = tl.sum(tri * tl.where(idx < k, u, 0.0)[None, :], axis=1)
        tz1 = tl.sum(tri * tl.where(idx < k, u1, 0.0)[None, :], axis=1)
    else:
        tz, tz1 = tl.reduce((tri * tl.where(idx < k, u, 0.0)[None, :], tri * tl.where(idx < k, u1, 0.0)[None, :]),
                            1, _add_pairs)
    t_k = tl.where(at_k, tau_k, tl.where(idx < k, -tau_k * tz, 0.0))
    t_k1 = tl.where(at_k1, tau_k1, tl.where(idx < k1, -tau_k1 * (tz1 + t_k * u1_k), 0.0))
    tri = tl.where(c2 == k, t_k[:, None], tl.where(c2 == k1, t_k1[:, None], tri))
    taus = tl.where(at_k, tau_k, tl.where(at_k1, tau_k1, taus))
    top, mix, gram = _finish_column(top, mix, gram, mk, g, ak, k, beta, tau_k, scale, u, idx)
    g1 = g1 - c * u_k1 * g
    ak1 = ak1 - tau_k * tl.where(idx > k, scale * ak, tl.where(at_k, 1.0, 0.0)) * u_k1  # top's column k1 now
    top, mix, gram = _finish_column(top, mix, gram, m1, g1, ak1, k1, beta1, tau_k1, scale1, u1, idx)
    return top, mix, gram, tri, taus, shaky


@triton.jit
def gram_column_program(
    pid, p, p_off, p_mat_stride, p_row_stride, v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride, tau, tau_off, tau_stride, part, n_parts, coef, fallback, m, rounding_scale,
    W: tl.constexpr, BW: tl.constexpr, BR: tl.constexpr, PAIRS: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """Step 2 of the module docstring for matrix ``pid`` (int64); PAIRS: columns two at a time."""
    idx = tl.arange(0, BW)
    r2 = idx[:, None]
    c2 = idx[None, :]
    inside = (r2 < W) & (c2 < W)
    p_mat = p + p_off + pid * p_mat_stride
    v_mat = v + v_off + pid * v_mat_stride
    gram = tl.zeros([BW, BW], dtype=tl.float64)
    parts = part + pid * n_parts * BW * BW + r2 * BW + c2
    if INTERPRETED:  # the interpreter's range takes no tensor bounds
        i = 0
        while i < n_parts:
            gram += tl.load(parts + i * BW * BW)
            i += 1
    else:  # pipelined: the parts' loads in flight together, not one round trip each
        for i in tl.range(0, n_parts, num_stages=4):
            gram += tl.load(parts + i * BW * BW)
    top = tl.load(p_mat + r2 * p_row_stride + c2, mask=inside, other=0.0).to(tl.float64)
    mix = tl.where((r2 == c2) & inside, 1.0, 0.0).to(tl.float64)  # the rows below are P2 @ mix
    lower_norms = tl.sqrt(tl.sum(tl.where(r2 == c2, gram, 0.0), axis=1))  # ||P2[:, i]||, by row of mix
    # From here ``gram`` is G @ mix (G while mix is I), updated with mix: its column k is G mk.
    tri = tl.zeros([BW, BW], dtype=tl.float64)
    taus = tl.zeros([BW], dtype=tl.float64)
    shaky = tl.zeros([], dtype=tl.int1)
    if PAIRS:
        for k in range(0, W - 1, 2):
            top, mix, gram, tri, taus, shaky = _gram_pair(
                top, mix, gram, tri, taus, shaky, k, idx, lower_norms, rounding_scale, INTERPRETED
            )
        if W % 2 == 1:
            top, mix, gram, tri, taus, shaky = _gram_column(
                top, mix, gram, tri, taus, shaky, W - 1, idx, lower_norms, rounding_scale, INTERPRETED
            )
    else:
        for k in range(W):
            top, mix, gram, tri, taus, shaky = _gram_column(
                top, mix, gram, tri, taus, shaky, k, idx, lower_norms, rounding_scale, INTERPRETED
            )
    tl.store(fallback + pid, shaky.to(tl.int32))
    if shaky:
        taus, tri = _householder_in_memory(p_mat, p_row_stride, v_mat, v_row_stride, m, W, BW, BR, INTERPRETED)
    else:
        tl.store(p_mat + r2 * p_row_stride + c2, top.to(tl.float32), mask=inside)
        basis = tl.where(r2 > c2, top, tl.where(r2 == c2, 1.0, 0.0))
        tl.store(v_mat + r2 * v_row_stride + c2, basis.to(tl.float32), mask=inside)
        tl.store(coef + pid * BW * BW + r2 * BW + c2, mix)
    tl.store(tau + tau_off + pid * tau_stride + idx, taus.to(tl.float32), mask=idx < W)
    tl.store(t + t_off + pid * t_mat_stride + r2 * t_row_stride + c2, tri.to(tl.float32), mask=inside)


@triton.jit(do_not_specialize=["p_off", "v_off", "t_off", "tau_off", "m", "n_parts"])
def _gram_householder_kernel(
    p, p_off, p_mat_stride, p_row_stride,
    v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride,
    tau, tau_off, tau_stride,
    part, n_parts, coef, fallback, m, rounding_scale,
    W: tl.constexpr, BW: tl.constexpr, BR: tl.constexpr, PAIRS: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """:func:`gram_column_program` for matrix ``program_id(0)``."""
    gram_column_program(
        tl.program_id(0).to(tl.int64), p, p_off, p_mat_stride, p_row_stride, v, v_off, v_mat_stride, v_row_stride,
        t, t_off, t_mat_stride, t_row_stride, tau, tau_off, tau_stride, part, n_parts, coef, fallback, m,
        rounding_scale, W, BW, BR, PAIRS, INTERPRETED,
    )  # fmt: skip


@triton.jit(do_not_specialize=["p_off", "v_off", "m"])
def _bottom_v_kernel(
    p, p_off, p_mat_stride, p_row_stride,
    v, v_off, v_mat_stride, v_row_stride,
    coef, fallback, m,
    W: tl.constexpr, BW: tl.constexpr, BR: tl.constexpr,
):
    """Step 3: rows W + pid * BR on of V = P2 @ coef, over the panel and into V."""
    pid_b = tl.program_id(1).to(tl.int64)
    if tl.load(fallback + pid_b) != 0:
        return
    rows = W + tl.program_id(0) * BR + tl.arange(0, BR)[:, None]
    cols = tl.arange(0, BW)[None, :]
    inside = (rows < m) & (cols < W)
    p_tile = p + p_off + pid_b * p_mat_stride + rows * p_row_stride + cols
    x = tl.load(p_tile, mask=inside, other=0.0).to(tl.float64)
    c = tl.load(coef + pid_b * BW * BW + tl.arange(0, BW)[:, None] * BW + cols)
    y = tl.dot(x, c, out_dtype=tl.float64).to(tl.float32)
    tl.store(p_tile, y, mask=inside)
    tl.store(v + v_off + pid_b * v_mat_stride + rows * v_row_stride + cols, y, mask=inside)


def error_scale(rows: int, error_limit: float) -> float:
    """What the column-step program multiplies a column's squared reach by before comparing it with
    the column's remaining squared norm: ``rows eps64 / error_limit`` (for a limit of 0, 1e200: any
    reach at all falls back, and a zero one, times it, is still zero)."""
    return max(rows, 1) * _EPS64 / error_limit if error_limit > 0 else 1e200


@dataclass
class GramSteps:
    """One panel's operands of the three steps and the buffers they pass on: the Gram in
    ``n_parts`` parts of ``part_rows`` rows below the top block (``part``, b x n_parts x BW x BW,
    float64), the coefficients of V's lower rows (``coef``) and the fallback flags."""

    panel: torch.Tensor
    v: torch.Tensor
    t: torch.Tensor
    tau: torch.Tensor
    block_w: int
    n_parts: int
    part_rows: int
    part: torch.Tensor
    coef: torch.Tensor
    fallback: torch.Tensor

    @classmethod
    def of(cls, panel: torch.Tensor, v: torch.Tensor, t: torch.Tensor, tau: torch.Tensor) -> GramSteps:
        batch, m, w = panel.shape
        if m < w or tau.shape != (batch, w) or v.shape != panel.shape or t.shape != (batch, w, w):
            raise ValueError(f"bad panel shapes: panel {tuple(panel.shape)}, tau {tuple(tau.shape)}, "
                             f"V {tuple(v.shape)}, T {tuple(t.shape)}")
        if w > MAX_LEAF:
            raise ValueError(f"a gram panel takes at most {MAX_LEAF} columns, got {w}")
        block_w = max(16, pow2_at_least(w))
        below = m - w
        n_parts = max(1, min(_MAX_PARTS, ceil_div(below, _GRAM_ROWS)))
        part_rows = ceil_div(ceil_div(max(below, 1), n_parts), _GRAM_ROWS) * _GRAM_ROWS
        return cls(
            panel, v, t, tau, block_w, n_parts, part_rows,
            part=panel.new_empty(batch, n_parts, block_w, block_w, dtype=torch.float64),
            coef=panel.new_empty(batch, block_w, block_w, dtype=torch.float64),
            fallback=panel.new_empty(batch, dtype=torch.int32),
        )  # fmt: skip

    @property
    def sizes(self) -> dict[str, int]:
        return {"W": self.panel.shape[-1], "BW": self.block_w}

    @property
    def p_args(self) -> tuple[object, ...]:
        return (*_base(self.panel), self.panel.stride(0), self.panel.stride(1))

    def column_args(self, error_limit: float = GRAM_ERROR_LIMIT) -> tuple[object, ...]:
        """The column-step program's arguments before its constants (:func:`gram_column_program`'s after pid)."""
        v, t, tau = self.v, self.t, self.tau
        m = self.panel.shape[1]
        return (*self.p_args, *_base(v), v.stride(0), v.stride(1), *_base(t), t.stride(0), t.stride(1),
                *_base(tau), tau.stride(0), self.part, self.n_parts, self.coef, self.fallback, m,
                error_scale(m, error_limit))

    def column_constants(self, pairs: bool) -> dict[str, object]:
        """The column-step program's constants."""
        return {"BR": _FALLBACK_ROWS, "PAIRS": pairs, "INTERPRETED": INTERPRETED, **self.sizes}

    def write_v(self) -> None:
        """Step 3: V's rows below the top block, where the column step took the Gram route."""
        batch, m, w = self.panel.shape
        if m > w:
            _bottom_v_kernel[(ceil_div(m - w, _V_ROWS), batch)](
                *self.p_args, *_base(self.v), self.v.stride(0), self.v.stride(1), self.coef, self.fallback, m,
                BR=_V_ROWS, num_warps=4, **self.sizes,
            )  # fmt: skip


def gram_panel(
    panel: torch.Tensor,
    tau: torch.Tensor,
    wy: tuple[torch.Tensor, torch.Tensor],
    warps: int = 4,
    error_limit: float = GRAM_ERROR_LIMIT,
    pairs: bool = False,
) -> torch.Tensor:
    """Householder QR of every b x m x w panel in place (m >= w): R and V's tails over the panel,
    ``tau`` (b x w), and ``wy = (V, T)`` as :func:`.kernels.factor_panel` writes them.

    Views need unit stride along their last dimension. ``warps``: the column-step program's;
    ``pairs``: it takes the columns two at a time (one round of reductions per pair).
    ``error_limit`` replaces ``GRAM_ERROR_LIMIT`` (0 sends every panel whose rows below hold anything
    down the fallback). Returns each matrix's int32 flag: 1 where the fallback ran.
    """
    steps = GramSteps.of(panel, *wy, tau)
    batch, m, _ = panel.shape
    _bottom_gram_kernel[(steps.n_parts, batch)](
        *steps.p_args, steps.part, m, steps.part_rows, BR=_GRAM_ROWS, GR=min(steps.block_w, _DOT_ROWS),
        INTERPRETED=INTERPRETED, num_warps=4, **steps.sizes,
    )
    _gram_householder_kernel[(batch,)](
        *steps.column_args(error_limit), num_warps=warps, **steps.column_constants(pairs),
    )
    steps.write_v()
    return steps.fallback
