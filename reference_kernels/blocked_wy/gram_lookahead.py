"""A lookahead of one Gram-route panel: the next panel's column steps run beside the trailing update.

On a batch of two 4096 x 4096 matrices, :func:`.gram_panel.gram_panel`'s column-step launch has one
program per matrix, so for that step the other multiprocessors idle; then the two-launch update
runs alone. Here, per panel after the first (panel k's V and T given, the next panel being the
first ``pw`` columns of the trailing block from row nb down):

1. the projection, :func:`.products.project`: partial V^T C over the whole trailing block;
2. the next panel's strip: programs per (Gram part, matrix) subtract V W from their rows of its
   columns and sum those rows' part of its Gram matrix (gram_panel's first step, on the values as
   they are stored);
3. one launch: a program per matrix runs the next panel's column steps (gram_panel's second step)
   while the others subtract V W from the columns beyond the panel (the update's second launch):
   the column steps are placed first in the grid, so they start with the first wave;
4. the next panel's V rows (gram_panel's third step).

Four launches a panel instead of five, and the column steps off the critical path where the update
is long enough to cover them. The contest service's gate refuses a second queue in a submission,
which is how a library would overlap the two.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.gram_panel import GramSteps, gram_column_program
from reference_kernels.blocked_wy.kernels import _rows_aligned, matrix_start
from reference_kernels.blocked_wy.launch import INTERPRETED, ceil_div
from reference_kernels.blocked_wy.products import (
    UpdateTiles,
    _checked_source,
    _update_warps,
    project,
    subtract_program,
    w_columns,
)
from reference_kernels.blocked_wy.source import StorageAt, _base, storage

__all__ = ["MAX_GRAM_LOOKAHEAD", "gram_lookahead_step"]

# The widest panel: the strip launch sums its rows' Gram in one float64 tl.dot of at most 32 rows
# (one of 64 does not compile for compute capability 10.x under Triton before 3.8; gram_panel.py).
MAX_GRAM_LOOKAHEAD = 32
# Rows per step of the strip launch.
_STRIP_ROWS = 64


@triton.jit
def _strip_rows(src_mat, dst_mat, c_row_stride, v_mat, v_row_stride, r0, end, gram_from, ks, cols, col_ok, ww, g,
                GRAM: tl.constexpr, BM: tl.constexpr):
    """Rows r0 .. r0 + BM (those before ``end``) of the strip: dst = src - V W; with GRAM, returns g
    plus the float64 Gram of the rows from ``gram_from`` on, as stored."""
    rows = r0 + tl.arange(0, BM)[:, None]
    ok = (rows < end) & col_ok
    vv = tl.load(v_mat + rows * v_row_stride + ks[None, :], mask=rows < end, other=0.0)
    tile = rows * c_row_stride + cols
    y = tl.dot(vv, -ww, tl.load(src_mat + tile, mask=ok, other=0.0), input_precision="tf32x3")
    tl.store(dst_mat + tile, y, mask=ok)
    if GRAM:
        x = tl.where(ok & (rows >= gram_from), y, 0.0).to(tl.float64)
        g = tl.dot(tl.trans(x), x, g, out_dtype=tl.float64)
    return g


@triton.jit(do_not_specialize=["src_off", "dst_off", "v_off", "t_off", "w_parts", "m", "part_rows"])
def _strip_kernel(
    src, src_off, dst, dst_off, c_mat_stride, c_row_stride,
    v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride,
    work, w_mat_stride, w_ncols, w_parts, part, m, part_rows,
    NB: tl.constexpr, PW: tl.constexpr, BW: tl.constexpr, BM: tl.constexpr, SPLIT: tl.constexpr,
    ALIGNED: tl.constexpr, SRC_AT_ADDRESS: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """Step 2 of the module docstring for Gram part ``program_id(0)`` of matrix ``program_id(1)``:
    its rows of the next panel's first PW columns (the part's rows below the panel's top block;
    part 0 also every row above them), and their Gram into ``part`` as gram_panel's first step
    lays it out."""
    pid_p = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    ks = tl.arange(0, NB)
    cols = tl.arange(0, BW)[None, :]
    col_ok = cols < PW
    ww = w_columns(work + pid_b * w_mat_stride + ks[:, None] * w_ncols + cols, col_ok, w_parts, NB * w_ncols,
                   t + t_off + pid_b * t_mat_stride, t_row_stride, ks, SPLIT)
    src_mat = matrix_start(storage(src, SRC_AT_ADDRESS), src_off, pid_b, c_mat_stride, ALIGNED)
    dst_mat = matrix_start(dst, dst_off, pid_b, c_mat_stride, ALIGNED)
    v_mat = matrix_start(v, v_off, pid_b, v_mat_stride, ALIGNED)
    gram_from = NB + PW  # the panel's rows below its top block
    g = tl.zeros([BW, BW], dtype=tl.float64)
    if pid_p == 0:
        r0 = 0
        while r0 < gram_from:
            g = _strip_rows(src_mat, dst_mat, c_row_stride, v_mat, v_row_stride, r0, gram_from, gram_from, ks, cols,
                            col_ok, ww, g, False, BM)
            r0 += BM
    first = gram_from + pid_p * part_rows
    end = tl.minimum(first + part_rows, m)
    if INTERPRETED:  # the interpreter's range takes no tensor bounds
        r0 = first
        while r0 < end:
            g = _strip_rows(src_mat, dst_mat, c_row_stride, v_mat, v_row_stride, r0, end, gram_from, ks, cols, col_ok,
                            ww, g, True, BM)
            r0 += BM
    else:  # pipelined: the next rows' loads in flight during this step's products
        for r0 in tl.range(first, end, BM, num_stages=2):
            g = _strip_rows(src_mat, dst_mat, c_row_stride, v_mat, v_row_stride, r0, end, gram_from, ks, cols, col_ok,
                            ww, g, True, BM)
    gram_rows = tl.arange(0, BW)[:, None]
    tl.store(part + (pid_b * tl.num_programs(0) + pid_p) * BW * BW + gram_rows * BW + cols, g)


@triton.jit(do_not_specialize=["p_off", "nv_off", "nt_off", "tau_off", "n_parts", "pm", "src_off", "dst_off", "v_off",
                               "t_off", "w_parts"])
def _gram_lookahead_kernel(
    p, p_off, p_mat_stride, p_row_stride,
    nv, nv_off, nv_mat_stride, nv_row_stride,
    nt, nt_off, nt_mat_stride, nt_row_stride,
    tau, tau_off, tau_stride,
    part, n_parts, coef, fallback, pm, rounding_scale,
    src, src_off, dst, dst_off, c_mat_stride, c_row_stride,
    v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride,
    work, w_mat_stride, w_ncols, w_parts, m, ncols, batch,
    W: tl.constexpr, BW: tl.constexpr, BR: tl.constexpr, PAIRS: tl.constexpr, INTERPRETED: tl.constexpr,
    NB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr, ALIGNED: tl.constexpr,
    SRC_AT_ADDRESS: tl.constexpr,
):
    """Step 3 of the module docstring: programs below ``batch`` run the next panel's column steps
    (``p``: the panel, pm rows), the others subtract V W from the ncols columns beyond it (``src``
    and ``dst`` from there on, W's rows ``w_ncols`` long)."""
    pid = tl.program_id(0)
    if pid < batch:
        gram_column_program(
            pid.to(tl.int64), p, p_off, p_mat_stride, p_row_stride, nv, nv_off, nv_mat_stride, nv_row_stride,
            nt, nt_off, nt_mat_stride, nt_row_stride, tau, tau_off, tau_stride, part, n_parts, coef, fallback, pm,
            rounding_scale, W, BW, BR, PAIRS, INTERPRETED,
        )  # fmt: skip
    else:
        q = pid - batch
        tiles = tl.cdiv(m, BM) * tl.cdiv(ncols, BN)
        subtract_program(
            q % tiles, (q // tiles).to(tl.int64), src, src_off, dst, dst_off, c_mat_stride, c_row_stride,
            v, v_off, v_mat_stride, v_row_stride, t, t_off, t_mat_stride, t_row_stride, work, w_mat_stride, w_ncols,
            w_parts, m, ncols, NB, BM, BN, SPLIT, ALIGNED, SRC_AT_ADDRESS, False,
        )  # fmt: skip


def gram_lookahead_step(
    c: torch.Tensor,
    v: torch.Tensor,
    t: torch.Tensor,
    tau: torch.Tensor,
    wy: tuple[torch.Tensor, torch.Tensor],
    src: torch.Tensor | StorageAt | None,
    tiles: UpdateTiles,
    warps: int = 4,
    pairs: bool = False,
    registers: int | None = None,
) -> torch.Tensor:
    """``c <- s - V (T^T (V^T s))`` (``s = src``, default c in place) at split TF32, as the
    two-launch :func:`.products.wy_update` does, and the next panel (c's first ``pw = tau.shape[1]``
    columns, from row nb down) factored by the Gram route as :func:`.gram_panel.gram_panel` does
    with ``wy`` (its V, b x (m - nb) x pw, and T, b x pw x pw), in four launches.

    c (b x m x ncols): the trailing block of a panel whose V (b x m x nb) and T (b x nb x nb) are
    given; ``src`` may be a :class:`.source.StorageAt` (a graph's input). ``warps``: the column-step
    programs'; the subtraction's programs share them, and ``registers`` caps the registers a thread
    of that launch takes (ptxas maxnreg; None: the compiler's choice). Returns the next panel's
    fallback flags.
    """
    batch, m, ncols = c.shape
    nb = v.shape[-1]
    pw = tau.shape[1]
    if pw > min(nb, ncols, MAX_GRAM_LOOKAHEAD):
        raise ValueError(f"bad gram lookahead shapes: c {tuple(c.shape)}, v {tuple(v.shape)}, "
                         f"tau {tuple(tau.shape)} (a panel of at most {MAX_GRAM_LOOKAHEAD} columns)")
    src = _checked_source(c, v, src, "t", t, (batch, nb, nb))  # the update's operands, as wy_update checks them
    steps = GramSteps.of(c[:, nb:, :pw], *wy, tau)
    t_args = (*_base(t), t.stride(0), t.stride(1))
    aligned = _rows_aligned(c, src, v, wy[0])
    work, w_parts = project(src, v, t_args, tiles, aligned)
    src_base, src_off = _base(src)
    c_base, c_off = _base(c)
    c_args = (c.stride(0), c.stride(1), *_base(v), v.stride(0), v.stride(1), *t_args)
    at_address = isinstance(src, StorageAt)
    _strip_kernel[(steps.n_parts, batch)](
        src_base, src_off, c_base, c_off, *c_args, work, work.stride(0), ncols, w_parts, steps.part, m,
        steps.part_rows, NB=nb, PW=pw, BW=steps.block_w, BM=_STRIP_ROWS, INTERPRETED=INTERPRETED,
        SPLIT=w_parts > 1, ALIGNED=aligned, SRC_AT_ADDRESS=at_address, num_warps=_update_warps(tiles, nb),
    )  # fmt: skip
    beyond = ncols - pw
    strips = ceil_div(m, tiles.subtract_bm) * ceil_div(beyond, tiles.block_n)
    _gram_lookahead_kernel[(batch * (1 + strips),)](
        *steps.column_args(), src_base, src_off + pw, c_base, c_off + pw, *c_args,
        work[..., pw:], work.stride(0), ncols, w_parts, m, beyond, batch,
        NB=nb, BM=tiles.subtract_bm, BN=tiles.block_n, SPLIT=w_parts > 1, ALIGNED=aligned and pw % 4 == 0,
        SRC_AT_ADDRESS=at_address, num_warps=warps, maxnreg=registers, **steps.column_constants(pairs),
    )  # fmt: skip
    steps.write_v()
    return steps.fallback
