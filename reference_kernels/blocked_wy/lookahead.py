"""A lookahead of one panel: after the first panel, one launch per panel does both the trailing update
and the next panel's factorisation.

The small batches (40 matrices at 176 and 352) keep most of the GPU idle while the panel kernel, one
program per matrix, factors a panel; then the trailing update runs alone. Here the launch that
applies panel k's reflectors gives each matrix one program that updates only the next panel's
columns (one strip of the fused update) and factors that panel at once (the panel kernel's
program), while the other programs update the columns beyond it: the update of the wide block
runs beside the next panel's column steps instead of after them, and a panel and an update share
one launch. The contest service's gate refuses a second queue in a submission, which is how a
library would overlap them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.kernels import _rows_aligned, _warps, halves_apply, panel_program, panel_tile
from reference_kernels.blocked_wy.launch import INTERPRETED, ceil_div, pow2_at_least
from reference_kernels.blocked_wy.products import UpdateTiles, _update_strip
from reference_kernels.blocked_wy.source import StorageAt, _base

__all__ = ["lookahead_step"]


@triton.jit(do_not_specialize=["src_off", "dst_off", "v_off", "t_off", "tau_off", "nv_off", "nt_off", "m", "ncols"])
def _lookahead_kernel(
    src, src_off, dst, dst_off, c_mat_stride, c_row_stride,
    v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride,
    tau, tau_off, tau_stride,
    nv, nv_off, nv_mat_stride, nv_row_stride,
    nt, nt_off, nt_mat_stride, nt_row_stride,
    m, ncols, batch, strips,
    NB: tl.constexpr, PW: tl.constexpr, PBN: tl.constexpr, PBM: tl.constexpr, SBM: tl.constexpr, BN: tl.constexpr,
    STAGES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr, ALIGNED: tl.constexpr,
    ONE_REDUCTION: tl.constexpr, TOP_TILE: tl.constexpr, TWO_COLUMNS: tl.constexpr, HALVES: tl.constexpr,
    INTERPRETED: tl.constexpr, SRC_AT_ADDRESS: tl.constexpr, DST_AT_ADDRESS: tl.constexpr,
):
    """The trailing block (m rows from the factored panel's first, ncols columns from the next
    panel's first) updated by the panel's V and T, read from ``src`` and written to ``dst``; the next
    panel (its first PW columns, from row NB down) factored into ``dst``, ``tau``, ``nv`` and ``nt``.
    Programs below ``batch``: one per matrix, the panel's strip then the panel; the others: the
    strips of BN columns beyond the panel, ``strips`` per matrix."""
    pid = tl.program_id(0)
    if pid < batch:
        b = pid.to(tl.int64)
        _update_strip(
            0, b, src, src_off, dst, dst_off, c_mat_stride, c_row_stride, v, v_off, v_mat_stride, v_row_stride,
            t, t_off, t_mat_stride, t_row_stride, m, PW, None, 0,
            NB, PBM, SBM, PBN, ALIGNED, INTERPRETED, STAGES, SRC_AT_ADDRESS, DST_AT_ADDRESS, False, False,
        )  # fmt: skip
        tl.debug_barrier()  # the panel's updated columns, stored by every thread, are read back by every thread
        panel = dst_off + NB * c_row_stride
        panel_program(
            b, dst, panel, dst, panel, c_mat_stride, c_row_stride, tau, tau_off, tau_stride,
            nv, nv_off, nv_mat_stride, nv_row_stride, nt, nt_off, nt_mat_stride, nt_row_stride, m - NB, None, 0,
            PW, BLOCK_M, BLOCK_W, True, ALIGNED, ONE_REDUCTION, TOP_TILE, TWO_COLUMNS, INTERPRETED, False,
            DST_AT_ADDRESS, HALVES,
        )  # fmt: skip
    else:
        q = pid - batch
        _update_strip(
            q % strips, (q // strips).to(tl.int64), src, src_off + PW, dst, dst_off + PW, c_mat_stride, c_row_stride,
            v, v_off, v_mat_stride, v_row_stride, t, t_off, t_mat_stride, t_row_stride, m, ncols - PW, None, 0,
            NB, PBM, SBM, BN, ALIGNED, INTERPRETED, STAGES, SRC_AT_ADDRESS, DST_AT_ADDRESS, False, False,
        )  # fmt: skip


def lookahead_step(
    c: torch.Tensor | StorageAt,
    v: torch.Tensor,
    t: torch.Tensor,
    tau: torch.Tensor | StorageAt,
    wy: tuple[torch.Tensor, torch.Tensor],
    src: torch.Tensor | StorageAt | None,
    tiles: UpdateTiles,
    panel_warps: int | None,
    one_reduction: bool = True,
    top_tile: bool = False,
    two_columns: bool = False,
    halves: bool = False,
    registers: int | None = None,
) -> None:
    """``c <- s - V (T^T (V^T s))`` (``s = src``, default c in place) at split TF32, as the fused
    :func:`.products.wy_update` does, and the next panel (c's first ``pw = tau.shape[1]`` columns,
    from row nb down) factored in the same launch as :func:`.kernels.factor_panel` does with ``wy``
    (its V, b x (m - nb) x pw, and T, b x pw x pw).

    c (b x m x ncols): the trailing block of a panel whose V (b x m x nb) and T (b x nb x nb) are given;
    ``c``, ``src`` and ``tau`` may be :class:`.source.StorageAt` (a graph's input and outputs), c
    and tau both or neither. The panel programs take ``panel_warps``; the strips share them, and
    ``registers`` caps the registers a thread of the launch takes (ptxas maxnreg; None: the
    compiler's choice).
    """
    batch, m, ncols = c.shape
    nb = v.shape[-1]
    pw = tau.shape[1]
    nv, nt = wy
    if pw > min(nb, ncols) or nv.shape != (batch, m - nb, pw) or nt.shape != (batch, pw, pw):
        raise ValueError(f"bad lookahead shapes: c {tuple(c.shape)}, v {tuple(v.shape)}, tau {tuple(tau.shape)}, "
                         f"next V {tuple(nv.shape)}, next T {tuple(nt.shape)}")
    if isinstance(c, StorageAt) != isinstance(tau, StorageAt):
        raise ValueError("c and tau are both tensors or both at an address")
    src = c if src is None else src
    if src.shape != c.shape or src.stride() != c.stride() or c.stride(-1) != 1:
        raise ValueError("c and src need one shape and layout, unit stride along their rows")
    tile = panel_tile(m - nb, pw)
    halves = halves and halves_apply(pw)
    strips = ceil_div(ncols - pw, tiles.block_n)
    tau_base, tau_off = _base(tau)
    _lookahead_kernel[(batch * (1 + strips),)](
        *_base(src), *_base(c), c.stride(0), c.stride(1),
        *_base(v), v.stride(0), v.stride(1),
        *_base(t), t.stride(0), t.stride(1),
        tau_base, tau_off, tau.stride(0),
        *_base(nv), nv.stride(0), nv.stride(1),
        *_base(nt), nt.stride(0), nt.stride(1),
        m, ncols, batch, strips,
        NB=nb, PW=pw, PBN=max(16, pow2_at_least(pw)), PBM=tiles.project_bm, SBM=tiles.subtract_bm, BN=tiles.block_n,
        STAGES=tiles.stages, BLOCK_M=tile[0], BLOCK_W=tile[1], ALIGNED=_rows_aligned(c, src, v, nv),
        ONE_REDUCTION=one_reduction, TOP_TILE=top_tile and m - nb >= 2 * pw and not halves,
        TWO_COLUMNS=two_columns and (one_reduction or top_tile), HALVES=halves, INTERPRETED=INTERPRETED,
        SRC_AT_ADDRESS=isinstance(src, StorageAt), DST_AT_ADDRESS=isinstance(c, StorageAt),
        num_warps=_warps(tile, panel_warps), maxnreg=registers,
    )  # fmt: skip
