"""Triton kernels of the Cholesky-ORHR QR: the small, sequential pieces, one program per matrix.

Everything with real arithmetic volume (Gram matrices, Schur complements, products with inverses)
is a batched matrix product in ``cholqr.py`` / ``orhr.py``; what is left for Triton is

- ``classify``: per column, "any non-zero at all" and "any non-zero below the diagonal" (routing);
- ``cholesky_block``: Cholesky factor and its inverse of one diagonal block (a recursion leaf);
- ``lu_block``: the ORHR sign-choosing LU of one diagonal block, with both triangular inverses;
- ``assemble``: H = strict-lower(V) + S R and tau (or H = A for the triangular route), one pass;
- ``whole_qr``: for n <= 32, all of the above for one matrix in one program (products by FP64
  ``tl.dot``), which removes the launches and host synchronisations that dominate small problems.

Leaf tiles live in registers and are worked on in FP64 whatever the storage type: a leaf is at most
64 x 64, so the extra register pressure is small and its pivots and inverses come out correctly
rounded. Loops are ``while`` loops because the interpreter (numpy >= 2.4) cannot index with a
runtime ``range`` variable; every kernel runs unchanged under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.launch import ceil_div, launch, pow2_at_least

__all__ = [
    "DEFAULT_LEAF",
    "MAX_LEAF",
    "MAX_WHOLE",
    "assemble",
    "cholesky_block",
    "classify",
    "lu_block",
    "whole_qr",
]

# Widest diagonal block a leaf kernel holds (a few 64 x 64 FP64 tiles in registers at 8 warps).
MAX_LEAF = 64
# Largest n the whole-matrix kernel takes (a handful of 32 x 32 FP64 tiles at 4 warps).
MAX_WHOLE = 32
# Default leaf: 32 x 32 FP64 tiles need four warps and no spills, so several programs share an SM
# and the column-by-column latency of one matrix overlaps that of others.
DEFAULT_LEAF = 32


def _tile(k: int) -> int:
    """Power-of-two register tile edge for a k x k leaf (>= 16 so layouts stay regular)."""
    return max(16, pow2_at_least(k))


def _warps(tile: int) -> int:
    """About 8 FP64 values per thread and tile, at most 8 warps. ptxas (sm_90a): the 32-wide leaves
    take ~190-225 registers without spills at 4 warps; the 64-wide ones 255 with some spills."""
    return max(1, min(8, tile * tile // 256))


def _check_contiguous(*tensors: torch.Tensor) -> None:
    """The kernels address contiguous tensors by row-major index arithmetic (leaves: a block of a
    whole buffer by an unspecialised offset, one compiled variant per tile shape however many block
    positions a recursion visits)."""
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError("the kernels need contiguous tensors")


# ---------------------------------------------------------------------------------------------
# Routing: which columns are non-zero, and which have non-zeros below the diagonal.


@triton.jit
def _classify_kernel(a, nonzero, below, n, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    any_nz = tl.zeros([BLOCK_C], dtype=tl.int32)
    any_below = tl.zeros([BLOCK_C], dtype=tl.int32)
    r0 = 0
    while r0 < n:
        rows = r0 + tl.arange(0, BLOCK_R)
        inside = (rows[:, None] < n) & (cols[None, :] < n)
        x = tl.load(a + pid * n * n + rows[:, None] * n + cols[None, :], mask=inside, other=0.0)
        nz = tl.where(x != 0.0, 1, 0)  # NaN counts as non-zero
        any_nz = tl.maximum(any_nz, tl.max(nz, axis=0))
        any_below = tl.maximum(any_below, tl.max(tl.where(rows[:, None] > cols[None, :], nz, 0), axis=0))
        r0 += BLOCK_R
    tl.store(nonzero + pid * n + cols, any_nz.to(tl.int8), mask=cols < n)
    tl.store(below + pid * n + cols, any_below.to(tl.int8), mask=cols < n)


def classify(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per matrix and column of a contiguous b x n x n ``a``: (any non-zero, any non-zero below
    the diagonal), as b x n bool tensors, from one read of ``a``."""
    _check_contiguous(a)
    batch, n, _ = a.shape
    nonzero = torch.empty((batch, n), dtype=torch.int8, device=a.device)
    below = torch.empty((batch, n), dtype=torch.int8, device=a.device)
    block_c = 32
    _classify_kernel[(batch, ceil_div(n, block_c))](a, nonzero, below, n, BLOCK_R=64, BLOCK_C=block_c)
    return nonzero.bool(), below.bool()


# ---------------------------------------------------------------------------------------------
# Register sweeps shared by the leaves and the whole-matrix kernel.


@triton.jit
def _cholesky_sweep(t, rows, cols, kb):
    """(R, R^-1, failed) for the symmetric FP64 tile ``t`` = R^T R (identity past ``kb``).

    G = L D L^T by elimination; the same row operations applied to E = I leave E = L^-1, so that
    R = D^1/2 L^T and R^-1 = E^T D^-1/2 come out of one sweep. ``failed`` is 1 when a pivot was not
    positive (the sweep carries on with pivot 1; its results are then meaningless).
    """
    r2 = rows[:, None]
    c2 = cols[None, :]
    e = tl.where(r2 == c2, 1.0, 0.0).to(tl.float64)
    r = e
    rsqrt_d = tl.full([t.shape[0]], 1.0, dtype=tl.float64)
    failed = tl.zeros([], dtype=tl.int32)
    j = 0
    while j < kb:
        row = tl.sum(tl.where(r2 == j, t, 0.0), axis=0)
        col = tl.sum(tl.where(c2 == j, t, 0.0), axis=1)
        e_row = tl.sum(tl.where(r2 == j, e, 0.0), axis=0)
        pivot = tl.sum(tl.where(cols == j, row, 0.0), axis=0)
        ok = pivot > 0.0  # false for NaN too
        failed = tl.maximum(failed, tl.where(ok, 0, 1))
        pivot = tl.where(ok, pivot, 1.0)
        scale = 1.0 / tl.sqrt(pivot)
        mult = tl.where(rows > j, col / pivot, 0.0)
        t = t - mult[:, None] * tl.where(cols > j, row, 0.0)[None, :]
        e = e - mult[:, None] * e_row[None, :]
        r = tl.where(r2 == j, tl.where(cols >= j, row * scale, 0.0)[None, :], r)
        rsqrt_d = tl.where(cols == j, scale, rsqrt_d)
        j += 1
    return r, tl.trans(e) * rsqrt_d[None, :], failed


@triton.jit
def _lu_sweep(t, rows, cols, kb, zero_last, INVERSES: tl.constexpr):
    """ORHR LU of the FP64 tile ``t`` (identity past ``kb``): (LU, L^-1, U^-1, tau, s).

    With d_j the running diagonal, s_j = -sign(d_j) makes |U_jj| = 1 + |d_j| >= 1 and tau_j =
    -U_jj s_j = 1 + |d_j|. The last column of a square Q needs no reflector (d is +-1 there): with
    ``zero_last`` it takes s = sign(d), so U_jj ~ 0 and tau = 0 as geqrf has it; its pivot is
    recorded as 1, since nothing below it is ever divided. LU holds L strictly below the diagonal
    and U on and above it. With ``INVERSES``, the row operations of the elimination applied to
    E = I leave E = L^-1, and the column operations that reduce U to its diagonal, applied to F = I,
    leave F = (D^-1 U)^-1, so U^-1 = F D^-1; without, both come back as the identity.
    """
    r2 = rows[:, None]
    c2 = cols[None, :]
    e = tl.where(r2 == c2, 1.0, 0.0).to(tl.float64)
    f = e
    lu = e
    inv_pivots = tl.full([t.shape[0]], 1.0, dtype=tl.float64)
    taus = tl.zeros([t.shape[0]], dtype=tl.float64)
    signs = tl.zeros([t.shape[0]], dtype=tl.float64)
    j = 0
    while j < kb:
        row = tl.sum(tl.where(r2 == j, t, 0.0), axis=0)
        col = tl.sum(tl.where(c2 == j, t, 0.0), axis=1)
        d = tl.sum(tl.where(cols == j, row, 0.0), axis=0)
        last = (zero_last != 0) & (j == kb - 1)
        s = tl.where(d >= 0.0, -1.0, 1.0)
        s = tl.where(last, -s, s)
        u_jj = d - s
        pivot = tl.where(last, 1.0, u_jj)
        l_col = tl.where(rows > j, col / pivot, 0.0)
        u_row = tl.where(cols > j, row, 0.0)
        t = t - l_col[:, None] * u_row[None, :]
        if INVERSES:
            e_row = tl.sum(tl.where(r2 == j, e, 0.0), axis=0)
            f_col = tl.sum(tl.where(c2 == j, f, 0.0), axis=1)
            e = e - l_col[:, None] * e_row[None, :]
            f = f - f_col[:, None] * (u_row / pivot)[None, :]
        lu = tl.where(c2 == j, tl.where(r2 > j, l_col[:, None], lu), lu)
        lu = tl.where(r2 == j, tl.where(c2 == j, pivot, tl.where(c2 > j, u_row[None, :], lu)), lu)
        inv_pivots = tl.where(cols == j, 1.0 / pivot, inv_pivots)
        taus = tl.where(cols == j, tl.where(last, 0.0, -u_jj * s), taus)
        signs = tl.where(cols == j, s, signs)
        j += 1
    return lu, e, f * inv_pivots[None, :], taus, signs


# ---------------------------------------------------------------------------------------------
# Cholesky leaf: G = R^T R for one diagonal block, and R^-1.


@triton.jit(do_not_specialize=["off", "kb"])
def _cholesky_kernel(g, x, info, off, mat_stride, row_stride, kb, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    r2 = rows[:, None]
    c2 = cols[None, :]
    inside = (r2 < kb) & (c2 < kb)
    base = off + pid * mat_stride
    # Only the upper triangle is trusted (products leave the two halves a few ulps apart): mirror it.
    upper = tl.load(g + base + r2 * row_stride + c2, mask=inside & (r2 <= c2), other=0.0)
    mirror = tl.load(g + base + c2 * row_stride + r2, mask=inside & (r2 > c2), other=0.0)
    t = tl.where(inside, (upper + mirror).to(tl.float64), tl.where(r2 == c2, 1.0, 0.0))
    r, inv, failed = _cholesky_sweep(t, rows, cols, kb)
    tl.store(g + base + r2 * row_stride + c2, r.to(g.dtype.element_ty), mask=inside)
    tl.store(x + base + r2 * row_stride + c2, inv.to(x.dtype.element_ty), mask=inside)
    tl.store(info + pid, failed, mask=failed > 0)


def cholesky_block(g: torch.Tensor, x: torch.Tensor, failed: torch.Tensor, lo: int, kb: int) -> None:
    """Factor the diagonal block [lo, lo+kb) of every matrix in ``g`` in place.

    The upper triangle of the block is read; the block becomes R (zeros below the diagonal), the
    same block of ``x`` becomes R^-1. ``failed[b]`` is set to 1 when a pivot is not positive (the
    factorisation carries on with pivot 1, its results meaningless); never cleared.
    ``g`` and ``x`` are b x k x k with one layout.
    """
    _check_contiguous(g, x)
    if kb > MAX_LEAF or g.shape != x.shape:
        raise ValueError(f"bad Cholesky leaf: kb={kb}, shapes {tuple(g.shape)} / {tuple(x.shape)}")
    k = g.shape[-1]
    tile = _tile(kb)
    _cholesky_kernel[(g.shape[0],)](g, x, failed, lo * (k + 1), k * k, k, kb, BLOCK=tile, num_warps=_warps(tile))


# ---------------------------------------------------------------------------------------------
# ORHR leaf: LU without pivoting of (Q - S) for one diagonal block, S chosen on the fly.


@triton.jit(do_not_specialize=["off", "vec_off", "kb", "zero_last"])
def _lu_kernel(
    w, linv, uinv, tau, sign,
    off, mat_stride, linv_mat_stride, row_stride,
    vec_off, vec_stride,
    kb, zero_last,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    r2 = rows[:, None]
    c2 = cols[None, :]
    inside = (r2 < kb) & (c2 < kb)
    base = off + pid * mat_stride
    t = tl.load(w + base + r2 * row_stride + c2, mask=inside, other=0.0).to(tl.float64)
    t = tl.where(inside, t, tl.where(r2 == c2, 1.0, 0.0))
    lu, l_inv, u_inv, taus, signs = _lu_sweep(t, rows, cols, kb, zero_last, INVERSES=True)
    tl.store(w + base + r2 * row_stride + c2, lu.to(w.dtype.element_ty), mask=inside)
    tl.store(linv + off + pid * linv_mat_stride + r2 * row_stride + c2, l_inv.to(linv.dtype.element_ty), mask=inside)
    tl.store(uinv + pid * kb * kb + r2 * kb + c2, u_inv.to(uinv.dtype.element_ty), mask=inside)
    vec = vec_off + pid * vec_stride + cols
    tl.store(tau + vec, taus.to(tau.dtype.element_ty), mask=cols < kb)
    tl.store(sign + vec, signs.to(sign.dtype.element_ty), mask=cols < kb)


def lu_block(
    w: torch.Tensor, linv: torch.Tensor, tau: torch.Tensor, sign: torch.Tensor, lo: int, kb: int, zero_last: bool
) -> torch.Tensor:
    """ORHR LU (see ``_lu_sweep``) of the diagonal block [lo, lo+kb) of every matrix of ``w``
    (b x m x k), in place: the block becomes L (strictly below the diagonal, unit diagonal implied)
    and U (on and above it); ``tau[:, lo+j]`` and ``sign[:, lo+j]`` get tau_j and s_j; with
    ``zero_last`` the block's last column is the last of a square matrix. The block of ``linv``
    (same layout as ``w``, b x k x k) gets L^-1; the returned b x kb x kb tensor holds U^-1.
    """
    _check_contiguous(w, linv, tau, sign)
    batch, m, k = w.shape
    if kb > MAX_LEAF or linv.shape != (batch, k, k) or tau.shape != (batch, k) or sign.shape != (batch, k):
        raise ValueError(f"bad LU leaf: kb={kb}, shapes {tuple(w.shape)} / {tuple(linv.shape)}")
    uinv = torch.empty((batch, kb, kb), dtype=w.dtype, device=w.device)
    tile = _tile(kb)
    _lu_kernel[(batch,)](
        w, linv, uinv, tau, sign,
        lo * (k + 1), m * k, k * k, k,
        lo, k,
        kb, int(zero_last),
        BLOCK=tile, num_warps=_warps(tile),
    )
    return uinv


# ---------------------------------------------------------------------------------------------
# Whole small matrices: the full algorithm in one program per matrix.


@triton.jit
def _whole_kernel(a, h, tau, done, n, tight, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    r2 = rows[:, None]
    c2 = cols[None, :]
    inside = (r2 < n) & (c2 < n)
    eye = tl.where(r2 == c2, 1.0, 0.0).to(tl.float64)
    x = tl.load(a + pid * n * n + r2 * n + c2, mask=inside, other=0.0).to(tl.float64)
    # The Gram route's preconditions (else the general path routes the matrix): something below
    # the diagonal, and no zero column.
    nonzero = tl.where(x != 0.0, 1, 0)
    lower = tl.max(tl.max(tl.where(r2 > c2, nonzero, 0), axis=1), axis=0)
    empty_column = tl.max(tl.where((cols < n) & (tl.max(nonzero, axis=0) == 0), 1, 0), axis=0)
    x = tl.where(inside, x, eye)  # identity padding: the padded matrix is diag(A, I)
    # One FP64 CholeskyQR pass and the exact loss of orthogonality ||Q^T Q - I||_F.
    r, r_inv, failed = _cholesky_sweep(tl.dot(tl.trans(x), x, input_precision="ieee"), rows, cols, n)
    q = tl.dot(x, r_inv, input_precision="ieee")
    loss = tl.dot(tl.trans(q), q, input_precision="ieee") - eye
    loss = tl.sqrt(tl.sum(tl.sum(tl.where(inside, loss * loss, 0.0), axis=1), axis=0))
    ok = (lower > 0) & (empty_column == 0) & (failed == 0) & (loss <= tight)  # NaN loss: not ok
    lu, _, _, taus, signs = _lu_sweep(q, rows, cols, n, 1, INVERSES=False)
    out = tl.where(r2 > c2, lu, signs[:, None] * r)
    tl.store(h + pid * n * n + r2 * n + c2, out.to(h.dtype.element_ty), mask=tl.where(ok, inside, False))
    tl.store(tau + pid * n + cols, taus.to(tau.dtype.element_ty), mask=tl.where(ok, cols < n, False))
    tl.store(done + pid, tl.where(ok, 1, 0).to(tl.int8))


def whole_qr(a: torch.Tensor, h: torch.Tensor, tau: torch.Tensor, tight: float) -> torch.Tensor:
    """The whole algorithm for each small matrix of ``a`` (b x n x n, n <= ``MAX_WHOLE``) in one
    program: FP64 CholeskyQR, ORHR, H and tau written to ``h``/``tau``, but only where the matrix has
    something below its diagonal, no zero column, a successful Cholesky and ||Q^T Q - I||_F <=
    ``tight``. Returns the b flags (int8, 1: done) of the matrices; the others are left untouched."""
    batch, n, _ = a.shape
    if n > MAX_WHOLE:
        raise ValueError(f"whole-matrix kernel takes n <= {MAX_WHOLE}, got {n}")
    _check_contiguous(a, h, tau)
    done = torch.empty(batch, dtype=torch.int8, device=a.device)
    tile = _tile(n)
    options = {"BLOCK": tile, "num_warps": _warps(tile)}
    # Host-bound (20 x 32: one launch and a synchronisation): after a shape's first call the
    # compiled kernel is launched directly. ``tight`` depends on n only, so the key holds.
    make = lambda: ((batch,), (a, h, tau, done, n, tight), options)  # noqa: E731
    launch(_whole_kernel, make, key=(a.shape, tight), tensors=(a, h, tau, done))
    return done


# ---------------------------------------------------------------------------------------------
# Output assembly.


@triton.jit
def _assemble_kernel(w, r, sign, tau, index, width, a, h, tau_out, n, kw, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(2) * BLOCK + tl.arange(0, BLOCK)
    r2 = rows[:, None]
    c2 = cols[None, :]
    dst = tl.load(index + pid).to(tl.int64)
    k = tl.load(width + pid)
    inside = (r2 < n) & (c2 < n)
    lower = r2 > c2
    # Columns past the width are exact zeros of A: zero reflectors, zero R. The factors hold the
    # first kw columns only (kw >= every width the Gram route took).
    live = (c2 < k) & (c2 < kw)
    v = tl.load(w + pid * n * kw + r2 * kw + c2, mask=inside & lower & live, other=0.0)
    rr = tl.load(r + pid * kw * kw + r2 * kw + c2, mask=inside & (r2 <= c2) & live, other=0.0)
    s = tl.load(sign + pid * kw + rows, mask=rows < kw, other=0.0)
    out = tl.where(lower, v.to(tl.float64), s[:, None].to(tl.float64) * rr.to(tl.float64))
    # width < 0: nothing below the diagonal, geqrf's answer is H = A, tau = 0.
    original = tl.load(a + dst * n * n + r2 * n + c2, mask=tl.where(k < 0, inside, False), other=0.0)
    out = tl.where(k < 0, original.to(tl.float64), out)
    tl.store(h + pid * n * n + r2 * n + c2, out.to(h.dtype.element_ty), mask=inside)
    if tl.program_id(1) == 0:
        t = tl.load(tau + pid * kw + cols, mask=(cols < k) & (cols < kw), other=0.0)
        tl.store(tau_out + pid * n + cols, t, mask=cols < n)


def assemble(
    w: torch.Tensor,
    r: torch.Tensor,
    sign: torch.Tensor,
    tau: torch.Tensor,
    index: torch.Tensor,
    width: torch.Tensor,
    a: torch.Tensor,
    h: torch.Tensor,
    tau_out: torch.Tensor,
) -> None:
    """H[i] = strict-lower(W[i]) + S[i] R[i] on columns < width[i] and zero past them, tau_out[i] =
    tau[i] likewise; where width[i] < 0 instead H[i] = a[index[i]], tau_out[i] = 0. W (ORHR LU) is
    b x n x k, R b x k x k, S and tau b x k (the first k columns: every width[i] >= 0 is <= k),
    H b x n x n, tau_out b x n, ``index`` and ``width`` (int32) b, ``a`` b' x n x n. One pass, so the
    triangular route and the zero columns cost no extra copies."""
    _check_contiguous(w, r, sign, tau, index, width, a, h, tau_out)
    batch, n, k = w.shape
    block = 32
    grid = (batch, ceil_div(n, block), ceil_div(n, block))
    _assemble_kernel[grid](w, r, sign, tau, index, width, a, h, tau_out, n, k, BLOCK=block)
