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

__all__ = ["MAX_TILE", "factor_panel", "panel_tile", "wy_update"]

# Largest tile one program holds: 32768 floats is 64 per thread at 16 warps.
MAX_TILE = 32768


def panel_tile(m: int, w: int) -> tuple[int, int]:
    """Power-of-two register tile (BLOCK_M, BLOCK_W) covering an m x w panel."""
    return max(16, triton.next_power_of_2(m)), max(4, triton.next_power_of_2(w))


def _warps(tile: tuple[int, int]) -> int:
    """32 floats per thread up to 16 warps (64 at ``MAX_TILE``); one warp for small tiles keeps every
    reduction inside a warp."""
    return max(1, min(16, tile[0] * tile[1] // 1024))


@triton.jit
def _panel_kernel(
    src, src_off, dst, dst_off, mat_stride, row_stride,
    tau, tau_off, tau_stride,
    v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride,
    m,
    W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr, WRITE_WY: tl.constexpr, ALIGNED: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    src_mat = src + src_off + pid * mat_stride
    dst_mat = dst + dst_off + pid * mat_stride
    v_mat = v + v_off + pid * v_mat_stride
    if ALIGNED:
        # Matrices start on 16 bytes. Without this the compiler, blind to the offsets' alignment,
        # gives each lane one column and replicates every row vector across the warp (spills).
        src_mat = tl.multiple_of(src_mat, 16)
        dst_mat = tl.multiple_of(dst_mat, 16)
        v_mat = tl.multiple_of(v_mat, 16)
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_W)
    r2 = rows[:, None]
    c2 = cols[None, :]
    inside = (r2 < m) & (c2 < W)
    tile = r2 * row_stride + c2  # int32: a 64-bit pointer per element would double the live registers
    x = tl.load(src_mat + tile, mask=inside, other=0.0)
    taus = tl.zeros([BLOCK_W], dtype=tl.float32)
    tri = tl.zeros([BLOCK_W, BLOCK_W], dtype=tl.float32)

    for k in range(W):
        col = tl.sum(tl.where(c2 == k, x, 0.0), axis=1)
        alpha = tl.sum(tl.where(rows == k, col, 0.0), axis=0)
        tail = tl.where(rows > k, col, 0.0)
        sigma = tl.sum(tail * tail, axis=0)
        reflect = sigma > 0.0
        norm = tl.sqrt_rn(alpha * alpha + sigma)
        beta = tl.where(reflect, tl.where(alpha >= 0.0, -norm, norm), alpha)
        tau_k = tl.where(reflect, tl.div_rn(beta - alpha, tl.where(reflect, beta, 1.0)), 0.0)
        vk = tl.where(rows == k, 1.0, tl.div_rn(tail, tl.where(reflect, alpha - beta, 1.0)))

        # v vanishes above row k, where every finished column j < k holds its own reflector, so one
        # reduction gives v^T X for the trailing columns and larft's z = V^T v for the finished ones.
        s = tl.sum(vk[:, None] * x, axis=0)
        x = x - vk[:, None] * tl.where(cols > k, tau_k * s, 0.0)[None, :]
        x = tl.where(c2 == k, tl.where(rows < k, col, tl.where(rows == k, beta, vk))[:, None], x)
        taus = tl.where(cols == k, tau_k, taus)
        if WRITE_WY:
            # larft: T[:k, k] = -tau_k T[:k, :k] z, T[k, k] = tau_k.
            tz = tl.sum(tri * tl.where(cols < k, s, 0.0)[None, :], axis=1)
            tri = tl.where(c2 == k, tl.where(cols == k, tau_k, -tau_k * tz)[:, None], tri)

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
    return view.as_strided((1,), (1,), 0), view.storage_offset()


def _rows_aligned(*views: torch.Tensor) -> bool:
    """Whether every row of every view starts on a 16-byte boundary (float4 loads and stores)."""
    return all(
        _base(view)[0].data_ptr() % 16 == 0 and all(x % 4 == 0 for x in (view.storage_offset(), *view.stride()[:-1]))
        for view in views
    )


def factor_panel(
    src: torch.Tensor,
    dst: torch.Tensor,
    tau: torch.Tensor,
    wy: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """Householder QR of every b x m x w panel ``src`` (m >= w), written to ``dst`` (may be ``src``).

    ``tau`` (b x w) receives the reflector scalars. With ``wy = (V, T)``, V (b x m x w) receives the
    reflectors with their unit diagonal and zeros above it, and T (b x w x w) the upper triangle with
    ``H_1 ... H_w = I - V T V^T``. Every view must have unit stride along its last dimension.
    """
    batch, m, w = dst.shape
    if src.shape != dst.shape or m < w or tau.shape != (batch, w):
        raise ValueError(f"bad panel shapes: src {tuple(src.shape)}, dst {tuple(dst.shape)}, tau {tuple(tau.shape)}")
    if src.stride() != dst.stride():
        raise ValueError("src and dst must share one layout")
    tile = panel_tile(m, w)
    src_base, src_off = _base(src)
    dst_base, dst_off = _base(dst)
    tau_base, tau_off = _base(tau)
    if wy is None:
        v_args = t_args = (tau_base, 0, 0, 0)
    else:
        v, t = wy
        v_args = (*_base(v), v.stride(0), v.stride(1))
        t_args = (*_base(t), t.stride(0), t.stride(1))
    _panel_kernel[(batch,)](
        src_base, src_off, dst_base, dst_off, dst.stride(0), dst.stride(1),
        tau_base, tau_off, tau.stride(0),
        *v_args,
        *t_args,
        m,
        W=w,
        BLOCK_M=tile[0], BLOCK_W=tile[1], WRITE_WY=wy is not None,
        ALIGNED=_rows_aligned(src, dst, *(wy or ())),
        num_warps=_warps(tile),
    )


@triton.jit
def _wy_update_kernel(
    c, c_off, c_mat_stride, c_row_stride,
    v, v_mat_stride, v_row_stride,
    t, t_mat_stride, t_row_stride,
    m, ncols,
    NB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, PRECISION: tl.constexpr, ALIGNED: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    cols = pid_n * BN + tl.arange(0, BN)
    ks = tl.arange(0, NB)
    rows = tl.arange(0, BM)
    c_mat = c + c_off + pid_b * c_mat_stride
    if ALIGNED:  # as in _panel_kernel: lets the compiler use vector loads
        c_mat = tl.multiple_of(c_mat, 16)
    v_mat = v + pid_b * v_mat_stride
    col_ok = cols[None, :] < ncols

    acc = tl.zeros([NB, BN], dtype=tl.float32)
    r0 = 0
    while r0 < m:  # while, not range(m): the interpreter (numpy >= 2.4) cannot index with a runtime int
        r = r0 + rows[:, None]
        vv = tl.load(v_mat + r * v_row_stride + ks[None, :], mask=r < m, other=0.0)
        cc = tl.load(c_mat + r * c_row_stride + cols[None, :], mask=(r < m) & col_ok, other=0.0)
        acc = tl.dot(tl.trans(vv), cc, acc, input_precision=PRECISION)
        r0 += BM
    tt = tl.load(t + pid_b * t_mat_stride + ks[:, None] * t_row_stride + ks[None, :])
    w = tl.dot(tl.trans(tt), acc, input_precision=PRECISION)
    r0 = 0
    while r0 < m:
        r = r0 + rows[:, None]
        vv = tl.load(v_mat + r * v_row_stride + ks[None, :], mask=r < m, other=0.0)
        ptrs = c_mat + r * c_row_stride + cols[None, :]
        cc = tl.load(ptrs, mask=(r < m) & col_ok, other=0.0)
        cc = cc - tl.dot(vv, w, input_precision=PRECISION)
        tl.store(ptrs, cc, mask=(r < m) & col_ok)
        r0 += BM


def wy_update(c: torch.Tensor, v: torch.Tensor, t: torch.Tensor, precision: str) -> None:
    """``c <- c - V (T^T (V^T c))`` for every matrix in one launch, ``tl.dot`` at ``precision``.

    Fuses the three products of a compact-WY trailing update: each program owns a strip of BN
    columns of one matrix, accumulates V^T C over the rows, multiplies by T^T and streams the
    rows again to subtract V W. ``precision`` is ``"ieee"`` (FP32 FMA) or ``"tf32x3"`` (split TF32
    on tensor cores, near-FP32 accuracy). V is b x m x nb, T b x nb x nb, nb a power of two >= 16.
    """
    batch, m, ncols = c.shape
    nb = v.shape[-1]
    if v.shape != (batch, m, nb) or t.shape != (batch, nb, nb) or nb < 16 or nb & (nb - 1):
        raise ValueError(f"bad WY shapes: c {tuple(c.shape)}, v {tuple(v.shape)}, t {tuple(t.shape)}")
    if v.stride(-1) != 1 or t.stride(-1) != 1 or c.stride(-1) != 1:
        raise ValueError("c, v and t need unit stride along their last dimension")
    # Register budget: the nb x BN accumulator and W, plus (for ieee) the FMA dot's operands.
    block_n = 64 if nb <= 32 else 32
    c_base, c_off = _base(c)
    _wy_update_kernel[(triton.cdiv(ncols, block_n), batch)](
        c_base, c_off, c.stride(0), c.stride(1),
        v, v.stride(0), v.stride(1),
        t, t.stride(0), t.stride(1),
        m, ncols,
        NB=nb, BM=64, BN=block_n, PRECISION=precision,
        ALIGNED=_rows_aligned(c),
        num_warps=4 if nb <= 32 else 8,
    )
