"""The panel kernel's column steps: one column's (or a pair's) Householder reflector applied to the
register tile, as ``@triton.jit`` functions that ``kernels._panel_kernel`` inlines.

Every step follows LAPACK ``larfg``: beta = -sign(alpha) * norm(alpha, x), tau = (beta - alpha) / beta,
v = x / (alpha - beta), v[0] = 1; tau = 0 and the column left as it is when x is all zero. With
``WRITE_WY`` a step also adds its column of T as ``larft`` builds it. The variants:

- ``one_reduction_column``: one block-wide reduction per column (the default);
- ``three_reduction_column``: alpha, sigma and s by three reductions, the first step, kept for comparison;
- ``top_tile_column``: for tall panels, the first W rows also in a small tile and scaling deferred;
- ``two_columns`` / ``two_columns_top``: the first and third taking columns in pairs.
"""

import triton
import triton.language as tl

__all__ = ["one_reduction_column", "three_reduction_column", "top_tile_column", "two_columns", "two_columns_top"]


@triton.jit
def _add_pairs(a, b, c, d):
    return a + c, b + d


@triton.jit
def _reflector(alpha, sigma):
    """larfg's scalars for a column with entry alpha and squared tail norm sigma: whether it
    reflects (tau = 0 and the column left as it is when the tail is exactly zero), beta, tau, and
    the tail's scale 1 / (alpha - beta) (1 without a reflection): LAPACK's dlarfg scales by the
    reciprocal too, one division per column, not per row."""
    reflect = sigma > 0.0
    norm = tl.sqrt_rn(alpha * alpha + sigma)
    beta = tl.where(reflect, tl.where(alpha >= 0.0, -norm, norm), alpha)
    tau_k = tl.where(reflect, tl.div_rn(beta - alpha, tl.where(reflect, beta, 1.0)), 0.0)
    scale = tl.where(reflect, tl.div_rn(1.0, tl.where(reflect, alpha - beta, 1.0)), 1.0)
    return reflect, beta, tau_k, scale


@triton.jit
def _larft_column(tri, s, tau_k, k, cols):
    """larft's column k of T: T[:k, k] = -tau_k T[:k, :k] z, T[k, k] = tau_k, with z = V^T v the
    entries of s = v^T X at the finished columns j < k (each holds its own reflector)."""
    tz = tl.sum(tri * tl.where(cols < k, s, 0.0)[None, :], axis=1)
    return tl.where(cols[None, :] == k, tl.where(cols == k, tau_k, -tau_k * tz)[:, None], tri)


@triton.jit
def _apply_reflector(x, taus, tri, k, col, vk, beta, tau_k, s, rows, cols, WRITE_WY: tl.constexpr):
    """The tile after column k's reflector v (``vk``, v^T X = ``s``): the trailing columns updated,
    column k finished (R above, beta, v below), tau and T's column k recorded."""
    x = x - vk[:, None] * tl.where(cols > k, tau_k * s, 0.0)[None, :]
    x = tl.where(cols[None, :] == k, tl.where(rows < k, col, tl.where(rows == k, beta, vk))[:, None], x)
    taus = tl.where(cols == k, tau_k, taus)
    if WRITE_WY:
        tri = _larft_column(tri, s, tau_k, k, cols)
    return x, taus, tri


@triton.jit
def one_reduction_column(x, taus, tri, k, rows, cols, WRITE_WY: tl.constexpr, INTERPRETED: tl.constexpr):
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
    _, beta, tau_k, scale = _reflector(alpha, sigma)
    vk = tl.where(rows == k, 1.0, tail * scale)
    s = row_k + dots * scale
    return _apply_reflector(x, taus, tri, k, col, vk, beta, tau_k, s, rows, cols, WRITE_WY)


@triton.jit
def three_reduction_column(x, taus, tri, k, rows, cols, WRITE_WY: tl.constexpr):
    """Column k's reflector applied to the tile with three reductions (alpha, sigma, then s = v^T X)
    and a division per row: the first column step, kept for comparison."""
    c2 = cols[None, :]
    col = tl.sum(tl.where(c2 == k, x, 0.0), axis=1)
    tail = tl.where(rows > k, col, 0.0)
    alpha = tl.sum(tl.where(rows == k, col, 0.0), axis=0)
    sigma = tl.sum(tail * tail, axis=0)
    reflect, beta, tau_k, _ = _reflector(alpha, sigma)
    vk = tl.where(rows == k, 1.0, tl.div_rn(tail, tl.where(reflect, alpha - beta, 1.0)))
    # v vanishes above row k, where every finished column j < k holds its own reflector, so
    # one reduction gives v^T X for the trailing columns and larft's z = V^T v for the finished ones.
    s = tl.sum(vk[:, None] * x, axis=0)
    return _apply_reflector(x, taus, tri, k, col, vk, beta, tau_k, s, rows, cols, WRITE_WY)


@triton.jit
def top_tile_column(x, top, scales, taus, tri, k, rows, cols, WRITE_WY: tl.constexpr):
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
    _, beta, tau_k, scale = _reflector(alpha, sigma)
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
def _pair_reflectors(p, q, row1, row2, k, cols):
    """Both reflectors of the pair (k, k + 1) from its sums, and whether they are exact.

    p and q: below row k + 1, column k's and column k + 1's products with every column (a finished
    column as its reflector); row1, row2: rows k and k + 1. Column k's step is the one-column
    step's, its tail sums being p plus row k + 1's term; H_k X = X - v1 u^T. Column k + 1 after it
    is c = X_{k+1} - v1 g (g = u[k + 1]); |c|^2, v2 and s2 = v2^T (H_k X) expand into the same
    sums. |c|^2 is a difference: exact only where it keeps a quarter of its terms' magnitudes
    (the caller does nearly collinear pairs one by one instead).
    """
    k2 = k + 1
    # Every scalar of the pair, read off the sums at once: each is a block-wide reduction, and none
    # waits for another (sigma1 and g, entries of vectors formed below, are formed from these too).
    at_k = cols == k
    at_k2 = cols == k2
    x21 = tl.sum(tl.where(at_k, row2, 0.0), axis=0)  # X[k + 1, k]
    alpha1 = tl.sum(tl.where(at_k, row1, 0.0), axis=0)
    p_k = tl.sum(tl.where(at_k, p, 0.0), axis=0)
    p_k2 = tl.sum(tl.where(at_k2, p, 0.0), axis=0)
    xx = tl.sum(tl.where(at_k2, q, 0.0), axis=0)
    row1_k2 = tl.sum(tl.where(at_k2, row1, 0.0), axis=0)
    row2_k2 = tl.sum(tl.where(at_k2, row2, 0.0), axis=0)
    dots1 = p + x21 * row2  # column k's tail (rows > k) . X_j
    sigma1 = p_k + x21 * x21  # dots1[k]
    _, beta1, tau1, sc1 = _reflector(alpha1, sigma1)
    s1 = row1 + dots1 * sc1
    u = tl.where(cols > k, tau1 * s1, 0.0)
    g = tau1 * (row1_k2 + (p_k2 + x21 * row2_k2) * sc1)  # u[k + 1], as u's own arithmetic has it
    # Below row k + 1: xx = |X_{k+1}|^2, vx = v1 . X_{k+1}, vv = |v1|^2.
    vx = sc1 * p_k2
    vv = sc1 * sc1 * p_k
    sigma2 = xx - 2.0 * g * vx + g * g * vv
    exact = sigma2 >= 0.25 * (xx + 2.0 * tl.abs(g * vx) + g * g * vv)
    v1_k2 = x21 * sc1
    alpha2 = row2_k2 - v1_k2 * g
    _, beta2, tau2, sc2 = _reflector(alpha2, tl.maximum(sigma2, 0.0))
    # s2_j = (H_k X)[k + 1, j] + sc2 (c's tail . (X_j - v1 u_j)); column k holds v1 = sc1 X_k below row k.
    s2 = row2 - v1_k2 * u + sc2 * (q - (g * sc1) * p - u * vx + (g * vv) * u)
    s2 = tl.where(cols == k, sc1 * s2, s2)
    return exact, beta1, tau1, sc1, s1, u, g, beta2, tau2, sc2, s2


@triton.jit
def two_columns(x, taus, tri, k, rows, cols, WRITE_WY: tl.constexpr, INTERPRETED: tl.constexpr):
    """Columns k and k + 1 with one block-wide reduction (half the reductions' latency per column):
    the reduction gathers the pair's sums, :func:`_pair_reflectors` makes both reflectors, one
    rank-2 update applies them; a pair whose reflectors are not exact is done one by one."""
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
    exact, beta1, tau1, sc1, s1, u, g, beta2, tau2, sc2, s2 = _pair_reflectors(p, q, row1, row2, k, cols)
    if exact:
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
        x, taus, tri = one_reduction_column(x, taus, tri, k, rows, cols, WRITE_WY, INTERPRETED)
        x, taus, tri = one_reduction_column(x, taus, tri, k2, rows, cols, WRITE_WY, INTERPRETED)
    return x, taus, tri


@triton.jit
def two_columns_top(x, top, scales, taus, tri, k, rows, cols, WRITE_WY: tl.constexpr, INTERPRETED: tl.constexpr):
    """:func:`two_columns` for :func:`top_tile_column`'s tiles: rows k and k + 1 come from the
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
    exact, beta1, tau1, sc1, s1, u, g, beta2, tau2, sc2, s2 = _pair_reflectors(p, q, row1, row2, k, cols)
    if exact:
        coef2 = tl.where(cols > k2, tau2 * s2, 0.0)
        step1 = -(u * sc1)
        step2 = -(coef2 * sc2)
        step1_k2 = -(g * sc1)  # step1[k + 1]
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
        x, top, scales, taus, tri = top_tile_column(x, top, scales, taus, tri, k, rows, cols, WRITE_WY)
        x, top, scales, taus, tri = top_tile_column(x, top, scales, taus, tri, k2, rows, cols, WRITE_WY)
    return x, top, scales, taus, tri
