"""Triton panel factorisation: Householder QR of a tall b x m x w panel, one program per matrix.

The whole panel lives in registers, so each of its w columns costs a few block-wide reductions and
no memory traffic; that is why the panel is narrow (the orchestration in ``qr.py`` picks w so that
the tile stays within ``MAX_TILE`` floats, at most 64 per thread). Optionally the program also writes
the panel's compact-WY factors: V explicitly (unit diagonal, zeros above) and T as LAPACK's ``larft``
builds it, so that the trailing update is plain matrix products.

Reflectors follow LAPACK ``larfg``: beta = -sign(alpha) * norm(alpha, x), tau = (beta - alpha) / beta,
v = x / (alpha - beta), v[0] = 1; tau = 0 and the column left as it is when x is all zero.
The kernel runs unchanged under ``TRITON_INTERPRET=1``.
"""

import torch
import triton
import triton.language as tl

# INTERPRETED: under TRITON_INTERPRET=1 a few constructs take a form the interpreter runs fast (same arithmetic).
from reference_kernels.blocked_wy.launch import INTERPRETED, launch, pow2_at_least

__all__ = ["MAX_TILE", "factor_matrices", "factor_panel", "matrix_start", "panel_tile"]

# Largest tile one program holds: 32768 floats is 64 per thread at 16 warps.
MAX_TILE = 32768


def panel_tile(m: int, w: int) -> tuple[int, int]:
    """Power-of-two register tile (BLOCK_M, BLOCK_W) covering an m x w panel."""
    return max(16, pow2_at_least(m)), max(4, pow2_at_least(w))


def _warps(tile: tuple[int, int], warps: int | None = None) -> int:
    """By default 32 floats per thread up to 16 warps (64 at ``MAX_TILE``); one warp for small tiles
    keeps every reduction inside a warp. ``warps`` asks for that many, as far as the tile has a
    float per thread for each."""
    if warps is None:
        return max(1, min(16, tile[0] * tile[1] // 1024))
    return max(1, min(warps, tile[0] * tile[1] // 32))


@triton.jit
def _add_pairs(a, b, c, d):
    return a + c, b + d


@triton.jit
def matrix_start(base, off, pid, mat_stride, ALIGNED: tl.constexpr):
    """Address of matrix ``pid`` of a batched view given by its storage and offset. With ALIGNED
    (every matrix starts on 16 bytes) the compiler is told so: without it, blind to the offsets'
    alignment, it gives each lane one column and replicates every row vector across the warp
    (no vector loads, and spills)."""
    start = base + off + pid * mat_stride
    if ALIGNED:
        start = tl.multiple_of(start, 16)
    return start


@triton.jit
def _reflector(alpha, sigma):
    """larfg's scalars for a column with entry alpha and squared tail norm sigma: whether it
    reflects (tau = 0 and the column left as it is when the tail is exactly zero), beta and tau."""
    reflect = sigma > 0.0
    norm = tl.sqrt_rn(alpha * alpha + sigma)
    beta = tl.where(reflect, tl.where(alpha >= 0.0, -norm, norm), alpha)
    tau_k = tl.where(reflect, tl.div_rn(beta - alpha, tl.where(reflect, beta, 1.0)), 0.0)
    return reflect, beta, tau_k


@triton.jit
def _larft_column(tri, s, tau_k, k, cols):
    """larft's column k of T: T[:k, k] = -tau_k T[:k, :k] z, T[k, k] = tau_k, with z = V^T v the
    entries of s = v^T X at the finished columns j < k (each holds its own reflector)."""
    tz = tl.sum(tri * tl.where(cols < k, s, 0.0)[None, :], axis=1)
    return tl.where(cols[None, :] == k, tl.where(cols == k, tau_k, -tau_k * tz)[:, None], tri)


@triton.jit
def _one_reduction_column(x, taus, tri, k, rows, cols, WRITE_WY: tl.constexpr, INTERPRETED: tl.constexpr):
    """Column k's reflector applied to the tile with one block-wide reduction: the tail's products
    with every column (sigma is its own one) and row k (alpha and the v[k] = 1 term), so s = v^T X
    follows without a second pass once beta is known: s_j = X[k, j] + (tail . X_j) / (alpha - beta)."""
    r2 = rows[:, None]
    c2 = cols[None, :]
    col = tl.sum(tl.where(c2 == k, x, 0.0), axis=1)
    tail = tl.where(rows > k, col, 0.0)
    if INTERPRETED:  # the same sums; the interpreter runs a custom combine in Python, per element
        dots = tl.sum(tail[:, None] * x, axis=0)
        row_k = tl.sum(tl.where(r2 == k, x, 0.0), axis=0)
    else:  # one reduction of both: 3 barriers per column where two tl.sum take 6 (ptxas, sm_90)
        dots, row_k = tl.reduce((tail[:, None] * x, tl.where(r2 == k, x, 0.0)), 0, _add_pairs)
    alpha = tl.sum(tl.where(cols == k, row_k, 0.0), axis=0)
    sigma = tl.sum(tl.where(cols == k, dots, 0.0), axis=0)
    reflect, beta, tau_k = _reflector(alpha, sigma)
    # LAPACK's dlarfg scales x by 1 / (alpha - beta) too: one division per column, not per row.
    scale = tl.where(reflect, tl.div_rn(1.0, tl.where(reflect, alpha - beta, 1.0)), 1.0)
    vk = tl.where(rows == k, 1.0, tail * scale)
    s = row_k + dots * scale
    x = x - vk[:, None] * tl.where(cols > k, tau_k * s, 0.0)[None, :]
    x = tl.where(c2 == k, tl.where(rows < k, col, tl.where(rows == k, beta, vk))[:, None], x)
    taus = tl.where(cols == k, tau_k, taus)
    if WRITE_WY:
        tri = _larft_column(tri, s, tau_k, k, cols)
    return x, taus, tri


@triton.jit
def _three_reduction_column(x, taus, tri, k, rows, cols, WRITE_WY: tl.constexpr):
    """Column k's reflector applied to the tile with three reductions (alpha, sigma, then s = v^T X)
    and a division per row: the first column step, kept for comparison."""
    c2 = cols[None, :]
    col = tl.sum(tl.where(c2 == k, x, 0.0), axis=1)
    tail = tl.where(rows > k, col, 0.0)
    alpha = tl.sum(tl.where(rows == k, col, 0.0), axis=0)
    sigma = tl.sum(tail * tail, axis=0)
    reflect, beta, tau_k = _reflector(alpha, sigma)
    vk = tl.where(rows == k, 1.0, tl.div_rn(tail, tl.where(reflect, alpha - beta, 1.0)))
    # v vanishes above row k, where every finished column j < k holds its own reflector, so
    # one reduction gives v^T X for the trailing columns and larft's z = V^T v for the finished ones.
    s = tl.sum(vk[:, None] * x, axis=0)
    x = x - vk[:, None] * tl.where(cols > k, tau_k * s, 0.0)[None, :]
    x = tl.where(c2 == k, tl.where(rows < k, col, tl.where(rows == k, beta, vk))[:, None], x)
    taus = tl.where(cols == k, tau_k, taus)
    if WRITE_WY:
        tri = _larft_column(tri, s, tau_k, k, cols)
    return x, taus, tri


@triton.jit
def _top_tile_column(x, top, scales, taus, tri, k, rows, cols, WRITE_WY: tl.constexpr):
    """Column k's reflector with the panel's first W rows also in the small tile ``top`` (row k is
    read there) and the big tile's finished columns kept unscaled (their tails; ``scales`` holds
    the factors applied once at the end)."""
    c2 = cols[None, :]
    t2 = cols[:, None]
    col = tl.sum(tl.where(c2 == k, x, 0.0), axis=1)
    tail = tl.where(rows > k, col, 0.0)
    dots = tl.sum(tail[:, None] * x, axis=0)
    row_k = tl.sum(tl.where(t2 == k, top, 0.0), axis=0)
    alpha = tl.sum(tl.where(cols == k, row_k, 0.0), axis=0)
    sigma = tl.sum(tl.where(cols == k, dots, 0.0), axis=0)
    reflect, beta, tau_k = _reflector(alpha, sigma)
    scale = tl.where(reflect, tl.div_rn(1.0, tl.where(reflect, alpha - beta, 1.0)), 1.0)
    # v^T X_j = X[k, j] + scale (tail . X_j); a finished column j < k holds tail_j = v_j / scale_j.
    s = row_k + dots * scale * tl.where(cols < k, scales, 1.0)
    coef = tl.where(cols > k, tau_k * s, 0.0)
    step = -(coef * scale)  # an explicit fma in both tiles: no contraction choice can split them
    x = tl.fma(tail[:, None], step[None, :], x)
    # The same operations on the small tile's rows > k keep both copies of them bit for bit
    # equal (sigma came from the big tile; V's top rows are stored from the small one);
    # row k, where v is 1, is the small tile's alone.
    top_col = tl.sum(tl.where(c2 == k, top, 0.0), axis=1)
    top_tail = tl.where(cols > k, top_col, 0.0)
    top = tl.fma(top_tail[:, None], step[None, :], top)
    top = top - tl.where(t2 == k, coef[None, :], 0.0)
    finished = tl.where(cols < k, top_col, tl.where(cols == k, beta, top_tail * scale))
    top = tl.where(c2 == k, finished[:, None], top)
    scales = tl.where(cols == k, scale, scales)
    taus = tl.where(cols == k, tau_k, taus)
    if WRITE_WY:
        tri = _larft_column(tri, s, tau_k, k, cols)
    return x, top, scales, taus, tri


@triton.jit
def _add_quads(a, b, c, d, e, f, g, h):
    return a + e, b + f, c + g, d + h


@triton.jit
def _two_columns(x, taus, tri, k, rows, cols, WRITE_WY: tl.constexpr, INTERPRETED: tl.constexpr):
    """Columns k and k + 1 with one block-wide reduction (half the reductions' latency per column).

    The reduction gathers, below row k + 1, column k's and column k + 1's products with every column
    (p, q), and rows k and k + 1. Column k's step follows as in :func:`_one_reduction_column`, its
    tail sums being p plus row k + 1's term. Column k + 1 after that step is c = X_{k+1} - v1 g;
    its squared tail norm, v2 and s2 = v2^T (H_k X) expand into the same sums. The norm is a
    difference, exact only without cancellation: where it loses more than a factor 4 against its
    terms (nearly collinear columns) the two columns are done one by one instead.
    """
    r2 = rows[:, None]
    c2 = cols[None, :]
    k2 = k + 1
    col1 = tl.sum(tl.where(c2 == k, x, 0.0), axis=1)
    col2 = tl.sum(tl.where(c2 == k2, x, 0.0), axis=1)
    below1 = tl.where(rows > k2, col1, 0.0)
    below2 = tl.where(rows > k2, col2, 0.0)
    if INTERPRETED:  # the same sums; the interpreter runs a custom combine in Python, per element
        p = tl.sum(below1[:, None] * x, axis=0)
        q = tl.sum(below2[:, None] * x, axis=0)
        row1 = tl.sum(tl.where(r2 == k, x, 0.0), axis=0)
        row2 = tl.sum(tl.where(r2 == k2, x, 0.0), axis=0)
    else:
        p, q, row1, row2 = tl.reduce(
            (below1[:, None] * x, below2[:, None] * x, tl.where(r2 == k, x, 0.0), tl.where(r2 == k2, x, 0.0)),
            0,
            _add_quads,
        )
    x21 = tl.sum(tl.where(cols == k, row2, 0.0), axis=0)  # X[k + 1, k]
    dots1 = p + x21 * row2  # column k's tail (rows > k) . X_j
    alpha1 = tl.sum(tl.where(cols == k, row1, 0.0), axis=0)
    sigma1 = tl.sum(tl.where(cols == k, dots1, 0.0), axis=0)
    reflect1, beta1, tau1 = _reflector(alpha1, sigma1)
    sc1 = tl.where(reflect1, tl.div_rn(1.0, tl.where(reflect1, alpha1 - beta1, 1.0)), 1.0)
    s1 = row1 + dots1 * sc1
    u = tl.where(cols > k, tau1 * s1, 0.0)  # H_k X = X - v1 u^T
    g = tl.sum(tl.where(cols == k2, u, 0.0), axis=0)
    # Below row k + 1: xx = |X_{k+1}|^2, vx = v1 . X_{k+1}, vv = |v1|^2.
    xx = tl.sum(tl.where(cols == k2, q, 0.0), axis=0)
    vx = sc1 * tl.sum(tl.where(cols == k2, p, 0.0), axis=0)
    vv = sc1 * sc1 * tl.sum(tl.where(cols == k, p, 0.0), axis=0)
    sigma2 = xx - 2.0 * g * vx + g * g * vv
    if sigma2 >= 0.25 * (xx + 2.0 * tl.abs(g * vx) + g * g * vv):
        v1_k2 = x21 * sc1
        alpha2 = tl.sum(tl.where(cols == k2, row2, 0.0), axis=0) - v1_k2 * g
        reflect2, beta2, tau2 = _reflector(alpha2, sigma2)
        sc2 = tl.where(reflect2, tl.div_rn(1.0, tl.where(reflect2, alpha2 - beta2, 1.0)), 1.0)
        # s2_j = (H_k X)[k + 1, j] + sc2 (c's tail . (X_j - v1 u_j)); column k holds v1 = sc1 X_k below row k.
        s2 = row2 - v1_k2 * u + sc2 * (q - (g * sc1) * p - u * vx + (g * vv) * u)
        s2 = tl.where(cols == k, sc1 * s2, s2)
        # Only col1 and col2 stay live beside the tile: v1, v2 and both finished columns derive from them.
        v1 = tl.where(rows == k, 1.0, tl.where(rows > k, col1 * sc1, 0.0))
        col2 = col2 - v1 * g  # column k + 1 after H_k
        v2 = tl.where(rows == k2, 1.0, tl.where(rows > k2, col2 * sc2, 0.0))
        x = x - v1[:, None] * u[None, :] - v2[:, None] * tl.where(cols > k2, tau2 * s2, 0.0)[None, :]
        x = tl.where(c2 == k, tl.where(rows <= k, tl.where(rows == k, beta1, col1), v1)[:, None], x)
        x = tl.where(c2 == k2, tl.where(rows <= k2, tl.where(rows == k2, beta2, col2), v2)[:, None], x)
        taus = tl.where(cols == k, tau1, tl.where(cols == k2, tau2, taus))
        if WRITE_WY:
            tri = _larft_column(tri, s1, tau1, k, cols)
            tri = _larft_column(tri, s2, tau2, k2, cols)
    else:
        x, taus, tri = _one_reduction_column(x, taus, tri, k, rows, cols, WRITE_WY, INTERPRETED)
        x, taus, tri = _one_reduction_column(x, taus, tri, k2, rows, cols, WRITE_WY, INTERPRETED)
    return x, taus, tri


@triton.jit
def _two_columns_top(x, top, scales, taus, tri, k, rows, cols, WRITE_WY: tl.constexpr, INTERPRETED: tl.constexpr):
    """:func:`_two_columns` for :func:`_top_tile_column`'s tiles: rows k and k + 1 come from the
    small tile, the big tile's finished columns are unscaled (their sums take ``scales``), and the
    rows below k + 1 that both tiles hold take the same two fmas in both, so they stay equal."""
    c2 = cols[None, :]
    t2 = cols[:, None]
    k2 = k + 1
    col1 = tl.sum(tl.where(c2 == k, x, 0.0), axis=1)
    col2 = tl.sum(tl.where(c2 == k2, x, 0.0), axis=1)
    below1 = tl.where(rows > k2, col1, 0.0)
    below2 = tl.where(rows > k2, col2, 0.0)
    if INTERPRETED:
        p = tl.sum(below1[:, None] * x, axis=0)
        q = tl.sum(below2[:, None] * x, axis=0)
    else:
        p, q = tl.reduce((below1[:, None] * x, below2[:, None] * x), 0, _add_pairs)
    unscaled = tl.where(cols < k, scales, 1.0)
    p = p * unscaled
    q = q * unscaled
    row1 = tl.sum(tl.where(t2 == k, top, 0.0), axis=0)
    row2 = tl.sum(tl.where(t2 == k2, top, 0.0), axis=0)
    x21 = tl.sum(tl.where(cols == k, row2, 0.0), axis=0)
    dots1 = p + x21 * row2
    alpha1 = tl.sum(tl.where(cols == k, row1, 0.0), axis=0)
    sigma1 = tl.sum(tl.where(cols == k, dots1, 0.0), axis=0)
    reflect1, beta1, tau1 = _reflector(alpha1, sigma1)
    sc1 = tl.where(reflect1, tl.div_rn(1.0, tl.where(reflect1, alpha1 - beta1, 1.0)), 1.0)
    s1 = row1 + dots1 * sc1
    u = tl.where(cols > k, tau1 * s1, 0.0)
    g = tl.sum(tl.where(cols == k2, u, 0.0), axis=0)
    xx = tl.sum(tl.where(cols == k2, q, 0.0), axis=0)
    vx = sc1 * tl.sum(tl.where(cols == k2, p, 0.0), axis=0)
    vv = sc1 * sc1 * tl.sum(tl.where(cols == k, p, 0.0), axis=0)
    sigma2 = xx - 2.0 * g * vx + g * g * vv
    if sigma2 >= 0.25 * (xx + 2.0 * tl.abs(g * vx) + g * g * vv):
        v1_k2 = x21 * sc1
        alpha2 = tl.sum(tl.where(cols == k2, row2, 0.0), axis=0) - v1_k2 * g
        reflect2, beta2, tau2 = _reflector(alpha2, sigma2)
        sc2 = tl.where(reflect2, tl.div_rn(1.0, tl.where(reflect2, alpha2 - beta2, 1.0)), 1.0)
        s2 = row2 - v1_k2 * u + sc2 * (q - (g * sc1) * p - u * vx + (g * vv) * u)
        s2 = tl.where(cols == k, sc1 * s2, s2)
        coef2 = tl.where(cols > k2, tau2 * s2, 0.0)
        step1 = -(u * sc1)
        step2 = -(coef2 * sc2)
        step1_k2 = tl.sum(tl.where(cols == k2, step1, 0.0), axis=0)
        # Big tile: rows above k + 1 are read no more. c = column k + 1 after H_k, as the fma leaves it.
        x = tl.fma(below1[:, None], step1[None, :], x)
        c = tl.where(rows > k2, tl.fma(col1, step1_k2, col2), 0.0)
        x = tl.fma(c[:, None], step2[None, :], x)
        # Small tile: the same fmas on rows > k (v1) and > k + 1 (v2); rows k and k + 1, where v is 1, by hand.
        top_col1 = tl.sum(tl.where(c2 == k, top, 0.0), axis=1)
        top_tail1 = tl.where(cols > k, top_col1, 0.0)
        top = tl.fma(top_tail1[:, None], step1[None, :], top)
        top = top - tl.where(t2 == k, u[None, :], 0.0)
        top_col2 = tl.sum(tl.where(c2 == k2, top, 0.0), axis=1)
        top_c = tl.where(cols > k2, top_col2, 0.0)
        top = tl.fma(top_c[:, None], step2[None, :], top)
        top = top - tl.where(t2 == k2, coef2[None, :], 0.0)
        finished1 = tl.where(cols < k, top_col1, tl.where(cols == k, beta1, top_tail1 * sc1))
        finished2 = tl.where(cols < k2, top_col2, tl.where(cols == k2, beta2, top_c * sc2))
        top = tl.where(c2 == k, finished1[:, None], tl.where(c2 == k2, finished2[:, None], top))
        scales = tl.where(cols == k, sc1, tl.where(cols == k2, sc2, scales))
        taus = tl.where(cols == k, tau1, tl.where(cols == k2, tau2, taus))
        if WRITE_WY:
            tri = _larft_column(tri, s1, tau1, k, cols)
            tri = _larft_column(tri, s2, tau2, k2, cols)
    else:
        x, top, scales, taus, tri = _top_tile_column(x, top, scales, taus, tri, k, rows, cols, WRITE_WY)
        x, top, scales, taus, tri = _top_tile_column(x, top, scales, taus, tri, k2, rows, cols, WRITE_WY)
    return x, top, scales, taus, tri


# Offsets and heights vary per panel: specialising on them (divisibility by 16) would compile a
# variant per panel position for nothing, since alignment comes from ALIGNED and the row stride.
@triton.jit(do_not_specialize=["src_off", "dst_off", "tau_off", "v_off", "t_off", "m"])
def _panel_kernel(
    src, src_off, dst, dst_off, mat_stride, row_stride,
    tau, tau_off, tau_stride,
    v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride,
    m,
    W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr, WRITE_WY: tl.constexpr, ALIGNED: tl.constexpr,
    ONE_REDUCTION: tl.constexpr, TOP_TILE: tl.constexpr, TWO_COLUMNS: tl.constexpr, INTERPRETED: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    src_mat = matrix_start(src, src_off, pid, mat_stride, ALIGNED)
    dst_mat = matrix_start(dst, dst_off, pid, mat_stride, ALIGNED)
    v_mat = matrix_start(v, v_off, pid, v_mat_stride, ALIGNED)
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_W)
    r2 = rows[:, None]
    c2 = cols[None, :]
    inside = (r2 < m) & (c2 < W)
    tile = r2 * row_stride + c2  # int32: a 64-bit pointer per element would double the live registers
    x = tl.load(src_mat + tile, mask=inside, other=0.0)
    taus = tl.zeros([BLOCK_W], dtype=tl.float32)
    tri = tl.zeros([BLOCK_W, BLOCK_W], dtype=tl.float32)
    if TOP_TILE:
        # A tall panel's first W rows, where every row k of a column step lives, also sit in a
        # W x W tile of their own: reading row k there spares the big tile a select per element.
        # The big tile keeps each finished column unscaled (its tail, rows > k) and is scaled by
        # ``scales`` once at the end: no write-back per column either. Its rows < W go stale
        # (only rows > k are read at step k) and are stored from the small tile.
        t2 = cols[:, None]
        top = tl.load(src_mat + t2 * row_stride + c2, mask=(t2 < W) & (c2 < W), other=0.0)
        scales = tl.full([BLOCK_W], 1.0, tl.float32)

    if TWO_COLUMNS and TOP_TILE:
        for k in range(0, W - 1, 2):
            x, top, scales, taus, tri = _two_columns_top(
                x, top, scales, taus, tri, k, rows, cols, WRITE_WY, INTERPRETED
            )
        if W % 2 == 1:
            x, top, scales, taus, tri = _top_tile_column(x, top, scales, taus, tri, W - 1, rows, cols, WRITE_WY)
    elif TWO_COLUMNS:
        for k in range(0, W - 1, 2):
            x, taus, tri = _two_columns(x, taus, tri, k, rows, cols, WRITE_WY, INTERPRETED)
        if W % 2 == 1:
            x, taus, tri = _one_reduction_column(x, taus, tri, W - 1, rows, cols, WRITE_WY, INTERPRETED)
    else:
        for k in range(W):
            if TOP_TILE:
                x, top, scales, taus, tri = _top_tile_column(x, top, scales, taus, tri, k, rows, cols, WRITE_WY)
            elif ONE_REDUCTION:
                x, taus, tri = _one_reduction_column(x, taus, tri, k, rows, cols, WRITE_WY, INTERPRETED)
            else:
                x, taus, tri = _three_reduction_column(x, taus, tri, k, rows, cols, WRITE_WY)

    if TOP_TILE:
        x = x * scales[None, :]
        inside = inside & (r2 >= W)
        top_inside = (t2 < W) & (c2 < W)
        tl.store(dst_mat + t2 * row_stride + c2, top, mask=top_inside)
        if WRITE_WY:
            basis = tl.where(t2 > c2, top, tl.where(t2 == c2, 1.0, 0.0))
            tl.store(v_mat + t2 * v_row_stride + c2, basis, mask=top_inside)
    tl.store(dst_mat + tile, x, mask=inside)
    tl.store(tau + tau_off + pid * tau_stride + cols, taus, mask=cols < W)
    if WRITE_WY:
        basis = tl.where(r2 > c2, x, tl.where(r2 == c2, 1.0, 0.0))
        tl.store(v_mat + r2 * v_row_stride + c2, basis, mask=inside)
        t_rows = cols[:, None]
        t_mask = (t_rows < W) & (c2 < W)
        tl.store(t + t_off + pid * t_mat_stride + t_rows * t_row_stride + c2, tri, mask=t_mask)


def _base(view: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The view's storage from element 0 (an allocation, so aligned), and the view's offset into it."""
    if view.storage_offset() == 0:
        return view, 0  # the kernel reads only the address: no new view needed (host time)
    return view.as_strided((1,), (1,), 0), view.storage_offset()


def _rows_aligned(*views: torch.Tensor) -> bool:
    """Whether every row of every view starts on a 16-byte boundary (float4 loads and stores)."""
    for view in views:  # plain loops: half the host time of nested generators, per launch
        if _base(view)[0].data_ptr() % 16 or view.storage_offset() % 4:
            return False
        for stride in view.stride()[:-1]:
            if stride % 4:
                return False
    return True


_Launch = tuple[tuple[int], tuple[object, ...], dict[str, object]]


def _panel_launch(
    src: torch.Tensor,
    dst: torch.Tensor,
    tau: torch.Tensor,
    wy: tuple[torch.Tensor, torch.Tensor] | None,
    one_reduction: bool,
    top_tile: bool,
    warps: int | None,
    two_columns: bool = False,
) -> _Launch:
    """The panel kernel's grid, arguments and keyword options for :func:`factor_panel`."""
    batch, m, w = dst.shape
    if src.shape != dst.shape or m < w or tau.shape != (batch, w):
        raise ValueError(f"bad panel shapes: src {tuple(src.shape)}, dst {tuple(dst.shape)}, tau {tuple(tau.shape)}")
    if src.stride() != dst.stride():
        raise ValueError("src and dst must share one layout")
    tile = panel_tile(m, w)
    tau_base, tau_off = _base(tau)
    if wy is None:
        v_args = t_args = (tau_base, 0, 0, 0)
    else:
        v, t = wy
        v_args = (*_base(v), v.stride(0), v.stride(1))
        t_args = (*_base(t), t.stride(0), t.stride(1))
    args = (
        *_base(src), *_base(dst), dst.stride(0), dst.stride(1),
        tau_base, tau_off, tau.stride(0),
        *v_args,
        *t_args,
        m,
    )
    options = {
        "W": w, "BLOCK_M": tile[0], "BLOCK_W": tile[1], "WRITE_WY": wy is not None,
        "ALIGNED": _rows_aligned(src, dst, *(wy or ())),
        "ONE_REDUCTION": one_reduction,
        "TOP_TILE": top_tile and m >= 2 * w,
        "TWO_COLUMNS": two_columns and (one_reduction or (top_tile and m >= 2 * w)),
        "INTERPRETED": INTERPRETED,
        "num_warps": _warps(tile, warps),
    }
    return (batch,), args, options


def factor_panel(
    src: torch.Tensor,
    dst: torch.Tensor,
    tau: torch.Tensor,
    wy: tuple[torch.Tensor, torch.Tensor] | None = None,
    one_reduction: bool = True,
    top_tile: bool = True,
    warps: int | None = None,
    two_columns: bool = False,
) -> None:
    """Householder QR of every b x m x w panel ``src`` (m >= w), written to ``dst`` (may be ``src``).

    ``tau`` (b x w) receives the reflector scalars. With ``wy = (V, T)``, V (b x m x w) receives the
    reflectors with their unit diagonal and zeros above it, and T (b x w x w) the upper triangle with
    ``H_1 ... H_w = I - V T V^T``. Every view must have unit stride along its last dimension.
    ``one_reduction`` picks the column step with one block-wide reduction (else three, as before);
    ``top_tile`` (panels at least twice as tall as wide only) the step that keeps the first w rows
    in a tile of their own and scales the reflectors once at the end, which overrides it.
    ``warps`` overrides the kernel's warp count (see ``_warps``). ``two_columns`` (the one-reduction
    and top-tile steps) takes the columns in pairs, one block-wide reduction per pair.
    """
    grid, args, options = _panel_launch(src, dst, tau, wy, one_reduction, top_tile, warps, two_columns)
    _panel_kernel[grid](*args, **options)


def factor_matrices(
    a: torch.Tensor,
    h: torch.Tensor,
    tau: torch.Tensor,
    one_reduction: bool = True,
    warps: int | None = None,
    two_columns: bool = False,
) -> None:
    """:func:`factor_panel` of whole n x n matrices ``a`` into ``h`` (all three contiguous), the
    compiled kernel launched directly after a shape's first call (the small cases are host-bound)."""
    grid, args, options = _panel_launch(a, h, tau, None, one_reduction, False, warps, two_columns)
    key = (a.shape, one_reduction, warps, two_columns)
    launch(_panel_kernel, grid, args, options, key=key, tensors=(a, h, tau))
