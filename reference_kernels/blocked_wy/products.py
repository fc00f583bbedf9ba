"""Triton products of the blocked factorisation: the trailing update and a leaf's work inside its panel.

Both exist because cuBLAS is slow at what they replace, not at products in general:

- ``wy_update``: ``C <- C - V (T^T (V^T C))`` with ``tl.dot`` at ``tf32x3`` (split TF32 on tensor
  cores, FP32-level accuracy, ~2x the FP32 rate), in one launch (a program per column strip forms
  W, then subtracts V W; the plans from 176 to 1024) or two (project, then subtract; programs split
  the rows where a small batch would leave the GPU short of work). cuBLAS has no split-TF32 mode,
  and its single-pass TF32 loses the factor gate on badly scaled inputs. ``wy_subtract`` is the
  second launch alone, for a W formed by cuBLAS FP32.
- ``leaf_step``: after a leaf of a tall panel is factored, apply its reflectors to the rest of the
  panel and merge its T into the panel's. cuBLAS spends six launches on that, each a product with
  a tiny output and a reduction over every row, which it runs serially in one block per matrix:
  on 2 x 4096 that was most of the time. Here the rows are split across programs (two launches).

Every ``tl.dot`` is ``tf32x3``: at ``ieee`` Triton multiplies FP32 tiles on the FMA units with whole
operand rows in registers, and these tiles spill kilobytes (ptxas, sm_90). The long row loop runs as
``for`` (software-pipelined) on the GPU and as ``while`` under the interpreter, which cannot take a
runtime ``range`` bound (numpy >= 2.4); the loop body is shared.
"""

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.kernels import _rows_aligned, matrix_start
from reference_kernels.blocked_wy.launch import INTERPRETED, ceil_div, pow2_at_least
from reference_kernels.blocked_wy.source import StorageAt, _base, storage

__all__ = [
    "DEFAULT_TILES", "UpdateTiles", "leaf_step", "project", "project_parts", "subtract_program", "w_columns",
    "wy_subtract", "wy_update",
]

# The fewest rows one program of the projection sums when the rows are split across programs (a
# batch too small to give every multiprocessor a few column strips).
MIN_PART_ROWS = 256


@dataclass(frozen=True)
class UpdateTiles:
    """Tile shapes of ``wy_update``'s launches (``qrbench sweep blocked_wy --axis project_bm=32,64`` times them).

    ``project_bm`` rows per step of the projection, ``block_n`` columns per strip (both launches),
    ``subtract_bm`` rows per tile of the subtraction, ``warps`` per program (None: 4 up to nb = 64,
    else 8), ``stages`` of the projection's software pipeline. ``fused``: one launch instead of two,
    a program per strip doing both (:func:`_fused_update_kernel`; the ``tf32x3`` update only).
    """

    project_bm: int = 32
    block_n: int = 64
    subtract_bm: int = 64
    warps: int | None = None
    stages: int = 3
    fused: bool = False


DEFAULT_TILES = UpdateTiles()


def project_parts(m: int, programs: int, multiprocessors: int) -> int:
    """Row parts per column strip of the projection (a power of two, at most 16): enough for about
    four programs per multiprocessor, each summing at least ``MIN_PART_ROWS`` rows."""
    parts = min(16, max(1, 4 * multiprocessors // max(1, programs)), max(1, m // MIN_PART_ROWS))
    return 1 << (parts.bit_length() - 1)


def _multiprocessors(device: torch.device) -> int:
    """The device's multiprocessor count (the interpreter: a nominal 4)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


@triton.jit
def _project_rows(acc, v_mat, v_row_stride, c_mat, c_row_stride, r0, m, ks, cols, col_ok, BM: tl.constexpr):
    r = r0 + tl.arange(0, BM)[:, None]
    vv = tl.load(v_mat + r * v_row_stride + ks[None, :], mask=r < m, other=0.0)
    cc = tl.load(c_mat + r * c_row_stride + cols[None, :], mask=(r < m) & col_ok, other=0.0)
    return tl.dot(tl.trans(vv), cc, acc, input_precision="tf32x3")


@triton.jit
def _t_transposed_times(t_mat, t_row_stride, ks, x):
    """T^T x for the NB x NB block T at ``t_mat`` (W = T^T (V^T C), by whichever kernel has V^T C whole)."""
    tt = tl.load(t_mat + ks[:, None] * t_row_stride + ks[None, :])
    return tl.dot(tl.trans(tt), x, input_precision="tf32x3")


@triton.jit
def _subtract_tile(src_mat, dst_mat, c_row_stride, rows, cols, inside, read, vv, ww):
    """dst = src - V W on one tile (``rows`` a BM x 1 column, ``cols`` a 1 x BN row, ``inside`` their
    mask), given V's rows ``vv`` and W's columns ``ww``; src is read only where ``read`` (zeros
    elsewhere)."""
    tile = rows * c_row_stride + cols
    cc = tl.load(src_mat + tile, mask=read, other=0.0)
    tl.store(dst_mat + tile, tl.dot(vv, -ww, cc, input_precision="tf32x3"), mask=inside)


# Offsets as _panel_kernel's; m and ncols stay specialised (the subtract kernel spilled without).
@triton.jit(do_not_specialize=["c_off", "v_off", "t_off", "part_rows"])
def _project_kernel(
    c,
    c_off,
    c_mat_stride,
    c_row_stride,
    v,
    v_off,
    v_mat_stride,
    v_row_stride,
    t,
    t_off,
    t_mat_stride,
    t_row_stride,
    w,
    w_mat_stride,
    m,
    ncols,
    part_rows,
    NB: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    SPLIT: tl.constexpr,
    ALIGNED: tl.constexpr,
    INTERPRETED: tl.constexpr,
    STAGES: tl.constexpr,
    SRC_AT_ADDRESS: tl.constexpr,
):
    """W[:, strip] = T^T (V^T C[:, strip]) for one BN-column strip of one matrix; with ``SPLIT``, the
    program sums ``part_rows`` rows only and stores its partial V^T C (T is applied by the subtract)."""
    pid_n = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    pid_p = tl.program_id(2)
    first = pid_p * part_rows
    end = tl.minimum(first + part_rows, m)
    cols = pid_n * BN + tl.arange(0, BN)
    ks = tl.arange(0, NB)
    c_mat = matrix_start(storage(c, SRC_AT_ADDRESS), c_off, pid_b, c_mat_stride, ALIGNED)
    v_mat = matrix_start(v, v_off, pid_b, v_mat_stride, ALIGNED)
    col_ok = cols[None, :] < ncols
    acc = tl.zeros([NB, BN], dtype=tl.float32)
    if INTERPRETED:
        r0 = first
        while r0 < end:
            acc = _project_rows(acc, v_mat, v_row_stride, c_mat, c_row_stride, r0, end, ks, cols, col_ok, BM)
            r0 += BM
    else:
        for r0 in tl.range(first, end, BM, num_stages=STAGES):
            acc = _project_rows(acc, v_mat, v_row_stride, c_mat, c_row_stride, r0, end, ks, cols, col_ok, BM)
    out_ptrs = w + pid_b * w_mat_stride + pid_p * NB * ncols + ks[:, None] * ncols + cols[None, :]
    if SPLIT:
        tl.store(out_ptrs, acc, mask=col_ok)
    else:
        tl.store(out_ptrs, _t_transposed_times(t + t_off + pid_b * t_mat_stride, t_row_stride, ks, acc), mask=col_ok)


@triton.jit
def w_columns(w_ptrs, col_ok, n_parts, part_stride, t_mat, t_row_stride, ks, SPLIT: tl.constexpr):
    """W's columns at ``w_ptrs`` (zeros outside ``col_ok``): as stored or, with SPLIT, T^T (at
    ``t_mat``) times the sum of the ``n_parts`` partial V^T C stored ``part_stride`` apart."""
    ww = tl.load(w_ptrs, mask=col_ok, other=0.0)
    if SPLIT:
        i = 1
        while i < n_parts:  # a few partials: not worth pipelining
            ww += tl.load(w_ptrs + i * part_stride, mask=col_ok, other=0.0)
            i += 1
        ww = _t_transposed_times(t_mat, t_row_stride, ks, ww)
    return ww


@triton.jit
def subtract_program(
    pid, pid_b, src, src_off, dst, dst_off, c_mat_stride, c_row_stride, v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride, w, w_mat_stride, w_ncols, n_parts, m, ncols,
    NB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr, ALIGNED: tl.constexpr,
    SRC_AT_ADDRESS: tl.constexpr, DST_AT_ADDRESS: tl.constexpr,
):
    """dst[tile] = src[tile] - V[rows] W[:, cols] for BM x BN tile ``pid`` of matrix ``pid_b`` (the
    tiles of ncols columns row-major); W's rows are ``w_ncols`` long (ncols, or more where c is the
    right part of W's columns). With ``SPLIT``, W[:, cols] = T^T (sum of the ``n_parts`` partial
    V^T C) first."""
    n_tiles = tl.cdiv(ncols, BN)
    rows = (pid // n_tiles) * BM + tl.arange(0, BM)[:, None]
    cols = (pid % n_tiles) * BN + tl.arange(0, BN)[None, :]
    ks = tl.arange(0, NB)
    src_mat = matrix_start(storage(src, SRC_AT_ADDRESS), src_off, pid_b, c_mat_stride, ALIGNED)
    dst_mat = matrix_start(storage(dst, DST_AT_ADDRESS), dst_off, pid_b, c_mat_stride, ALIGNED)
    v_mat = matrix_start(v, v_off, pid_b, v_mat_stride, ALIGNED)
    # V's rows are loaded before W here (not through _subtract_rows, which loads them after):
    # the order the measured plans were compiled with.
    inside = (rows < m) & (cols < ncols)
    vv = tl.load(v_mat + rows * v_row_stride + ks[None, :], mask=rows < m, other=0.0)
    ww = w_columns(w + pid_b * w_mat_stride + ks[:, None] * w_ncols + cols, cols < ncols, n_parts, NB * w_ncols,
                   t + t_off + pid_b * t_mat_stride, t_row_stride, ks, SPLIT)
    _subtract_tile(src_mat, dst_mat, c_row_stride, rows, cols, inside, inside, vv, ww)


@triton.jit(do_not_specialize=["src_off", "dst_off", "v_off", "t_off", "n_parts"])
def _subtract_kernel(
    src, src_off, dst, dst_off, c_mat_stride, c_row_stride, v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride, w, w_mat_stride, n_parts, m, ncols,
    NB: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr, ALIGNED: tl.constexpr,
    SRC_AT_ADDRESS: tl.constexpr, DST_AT_ADDRESS: tl.constexpr,
):
    """:func:`subtract_program` for tile ``program_id(0)`` of matrix ``program_id(1)``."""
    subtract_program(
        tl.program_id(0), tl.program_id(1).to(tl.int64), src, src_off, dst, dst_off, c_mat_stride, c_row_stride,
        v, v_off, v_mat_stride, v_row_stride, t, t_off, t_mat_stride, t_row_stride, w, w_mat_stride, ncols, n_parts,
        m, ncols, NB, BM, BN, SPLIT, ALIGNED, SRC_AT_ADDRESS, DST_AT_ADDRESS,
    )  # fmt: skip


@triton.jit
def _subtract_rows(src_mat, dst_mat, c_row_stride, v_mat, v_row_stride, r0, m, ks, cols, col_ok, col_read, ww,
                   BM: tl.constexpr):
    """The fused update's subtraction on the BM rows from r0 of its strip (``cols``): written where
    ``col_ok``, read where ``col_read``."""
    rows = r0 + tl.arange(0, BM)[:, None]
    inside = (rows < m) & col_ok
    vv = tl.load(v_mat + rows * v_row_stride + ks[None, :], mask=rows < m, other=0.0)
    _subtract_tile(src_mat, dst_mat, c_row_stride, rows, cols[None, :], inside, (rows < m) & col_read, vv, ww)


@triton.jit
def _update_strip(
    pid_n,
    pid_b,
    src,
    src_off,
    dst,
    dst_off,
    c_mat_stride,
    c_row_stride,
    v,
    v_off,
    v_mat_stride,
    v_row_stride,
    t,
    t_off,
    t_mat_stride,
    t_row_stride,
    m,
    ncols,
    widths,
    col0,
    NB: tl.constexpr,
    PBM: tl.constexpr,
    SBM: tl.constexpr,
    BN: tl.constexpr,
    ALIGNED: tl.constexpr,
    INTERPRETED: tl.constexpr,
    STAGES: tl.constexpr,
    SRC_AT_ADDRESS: tl.constexpr,
    DST_AT_ADDRESS: tl.constexpr,
    TRIM: tl.constexpr,
    FROM_SOURCE: tl.constexpr,
):
    """dst[:, strip] = src[:, strip] - V (T^T (V^T src[:, strip])) for one BN-column strip of one
    matrix in one program: W of the strip by sweeping its rows (PBM at a time), then the
    subtraction sweeping them again (SBM at a time) from the last, the rows most likely still in
    L2. Against the two launches: no W round trip through memory and, where L2 holds the strip,
    one pass over C fewer; but only strips x batch programs.

    With TRIM, column j of this view is column ``col0 + j`` of its matrix, which is read as zero
    from the matrix's width (``widths[b]``, tail.py) on: from the source (FROM_SOURCE) a strip
    wholly past it is written as zeros, in place (later updates, where those zeros are) it is
    left as it is."""
    cols = pid_n * BN + tl.arange(0, BN)
    ks = tl.arange(0, NB)
    dst_mat = matrix_start(storage(dst, DST_AT_ADDRESS), dst_off, pid_b, c_mat_stride, ALIGNED)
    col_ok = cols[None, :] < ncols
    col_read = col_ok
    if TRIM:
        # This view's columns the matrix keeps, a multiple of 16 (tail.py): a mask of whole
        # 16-column groups keeps the loads vectorised (a plain runtime bound made them scalar:
        # 15% slower at 640x512, reports/h200/2026-12-04-blocked_wy-compare-device-widths-scalar-masks.md).
        live = tl.multiple_of(tl.load(widths + pid_b) - col0, 16)
        if pid_n * BN >= live:
            if FROM_SOURCE:
                r0 = 0
                while r0 < m:
                    rows = r0 + tl.arange(0, SBM)[:, None]
                    tl.store(dst_mat + rows * c_row_stride + cols[None, :], tl.zeros([SBM, BN], dtype=tl.float32),
                             mask=(rows < m) & col_ok)
                    r0 += SBM
            return
        if FROM_SOURCE:  # in place, the columns past the width are zeros already
            col_read = col_ok & (cols[None, :] < live)
    src_mat = matrix_start(storage(src, SRC_AT_ADDRESS), src_off, pid_b, c_mat_stride, ALIGNED)
    v_mat = matrix_start(v, v_off, pid_b, v_mat_stride, ALIGNED)
    acc = tl.zeros([NB, BN], dtype=tl.float32)
    last = (m - 1) // SBM * SBM
    if INTERPRETED:
        r0 = 0
        while r0 < m:
            acc = _project_rows(acc, v_mat, v_row_stride, src_mat, c_row_stride, r0, m, ks, cols, col_read, PBM)
            r0 += PBM
        ww = _t_transposed_times(t + t_off + pid_b * t_mat_stride, t_row_stride, ks, acc)
        r0 = last
        while r0 >= 0:
            _subtract_rows(src_mat, dst_mat, c_row_stride, v_mat, v_row_stride, r0, m, ks, cols, col_ok, col_read, ww,
                           SBM)
            r0 -= SBM
    else:
        for r0 in tl.range(0, m, PBM, num_stages=STAGES):
            acc = _project_rows(acc, v_mat, v_row_stride, src_mat, c_row_stride, r0, m, ks, cols, col_read, PBM)
        ww = _t_transposed_times(t + t_off + pid_b * t_mat_stride, t_row_stride, ks, acc)
        for i in tl.range(0, m, SBM, num_stages=STAGES):
            _subtract_rows(src_mat, dst_mat, c_row_stride, v_mat, v_row_stride, last - i, m, ks, cols, col_ok, col_read,
                           ww, SBM)


@triton.jit(do_not_specialize=["src_off", "dst_off", "v_off", "t_off", "col0"])
def _fused_update_kernel(
    src,
    src_off,
    dst,
    dst_off,
    c_mat_stride,
    c_row_stride,
    v,
    v_off,
    v_mat_stride,
    v_row_stride,
    t,
    t_off,
    t_mat_stride,
    t_row_stride,
    m,
    ncols,
    widths,
    col0,
    NB: tl.constexpr,
    PBM: tl.constexpr,
    SBM: tl.constexpr,
    BN: tl.constexpr,
    ALIGNED: tl.constexpr,
    INTERPRETED: tl.constexpr,
    STAGES: tl.constexpr,
    SRC_AT_ADDRESS: tl.constexpr,
    DST_AT_ADDRESS: tl.constexpr,
    TRIM: tl.constexpr,
    FROM_SOURCE: tl.constexpr,
):
    """A program per (strip, matrix): :func:`_update_strip`."""
    _update_strip(
        tl.program_id(0), tl.program_id(1).to(tl.int64), src, src_off, dst, dst_off, c_mat_stride, c_row_stride,
        v, v_off, v_mat_stride, v_row_stride, t, t_off, t_mat_stride, t_row_stride, m, ncols, widths, col0,
        NB, PBM, SBM, BN, ALIGNED, INTERPRETED, STAGES, SRC_AT_ADDRESS, DST_AT_ADDRESS, TRIM, FROM_SOURCE,
    )  # fmt: skip


def wy_update(
    c: torch.Tensor | StorageAt,
    v: torch.Tensor,
    t: torch.Tensor,
    src: torch.Tensor | StorageAt | None = None,
    tiles: UpdateTiles = DEFAULT_TILES,
    trim: tuple[torch.Tensor, int] | None = None,
) -> None:
    """``c <- s - V (T^T (V^T s))`` with ``s = src`` (default ``c`` itself, in place), at split TF32.

    V is b x m x nb, T b x nb x nb (nb a power of two >= 16), c and src b x m x ncols views sharing
    one layout, every last dimension of unit stride. The first launch forms W = T^T V^T s (one
    program per column strip and row part, sweeping the rows; a small batch splits the rows
    into parts whose partial sums the second launch adds), the second subtracts V W tile by tile.
    With ``tiles.fused`` one launch does both, a program per column strip.

    ``trim = (widths, col0)`` (fused tiles only): c's first column is column col0 (a multiple of
    16) of its matrix, and each matrix's columns from its width (int32 ``widths[b]``, a multiple
    of 16, :mod:`.tail`) on are read as zeros; their strips are written as zeros from a source,
    left alone in place. ``c`` and ``src`` may be :class:`.source.StorageAt`.
    """
    batch, m, ncols = c.shape
    nb = v.shape[-1]
    if trim is not None and (not tiles.fused or trim[1] % 16):
        raise ValueError(f"a trimmed update needs the fused tiles and a first column on 16, got {trim[1]}")
    from_source = src is not None
    src = _checked_source(c, v, src, "t", t, (batch, nb, nb))
    src_base, src_off = _base(src)
    v_base, v_off = _base(v)
    t_base, t_off = _base(t)
    aligned = _rows_aligned(c, src, v)
    strips = ceil_div(ncols, tiles.block_n)
    t_args = (t_base, t_off, t.stride(0), t.stride(1))
    if tiles.fused:
        c_base, c_off = _base(c)
        _fused_update_kernel[(strips, batch)](
            src_base, src_off, c_base, c_off, c.stride(0), c.stride(1),
            v_base, v_off, v.stride(0), v.stride(1),
            *t_args,
            m, ncols, *(trim or (None, 0)),
            NB=nb, PBM=tiles.project_bm, SBM=tiles.subtract_bm, BN=tiles.block_n, ALIGNED=aligned,
            INTERPRETED=INTERPRETED, STAGES=tiles.stages, SRC_AT_ADDRESS=isinstance(src, StorageAt),
            DST_AT_ADDRESS=isinstance(c, StorageAt), TRIM=trim is not None,
            FROM_SOURCE=from_source and trim is not None, num_warps=_update_warps(tiles, nb),
        )  # fmt: skip
        return
    work, parts = project(src, v, t_args, tiles, aligned)
    _subtract(src, c, v, t_args, work, parts, tiles, aligned)


def project(
    src: torch.Tensor | StorageAt, v: torch.Tensor, t_args: tuple[object, ...], tiles: UpdateTiles, aligned: bool
) -> tuple[torch.Tensor, int]:
    """The first of :func:`wy_update`'s two launches: ``(work, parts)``, where work (b x parts x nb
    x ncols) holds W = T^T V^T src if parts == 1, else that many partial V^T src over row parts (a
    batch too small to fill the GPU splits the rows), which the subtraction sums and multiplies by
    T^T."""
    batch, m, ncols = src.shape
    nb = v.shape[-1]
    src_base, src_off = _base(src)
    v_base, v_off = _base(v)
    strips = ceil_div(ncols, tiles.block_n)
    part_rows = ceil_div(m, project_parts(m, strips * batch, _multiprocessors(v.device)))
    part_rows = ceil_div(part_rows, tiles.project_bm) * tiles.project_bm
    parts = ceil_div(m, part_rows)
    work = v.new_empty(batch, parts, nb, ncols)
    _project_kernel[(strips, batch, parts)](
        src_base, src_off, src.stride(0), src.stride(1),
        v_base, v_off, v.stride(0), v.stride(1),
        *t_args,
        work, work.stride(0),
        m, ncols, part_rows,
        NB=nb, BM=tiles.project_bm, BN=tiles.block_n, SPLIT=parts > 1, ALIGNED=aligned, INTERPRETED=INTERPRETED,
        STAGES=tiles.stages, SRC_AT_ADDRESS=isinstance(src, StorageAt), num_warps=_update_warps(tiles, nb),
    )  # fmt: skip
    return work, parts


def wy_subtract(
    c: torch.Tensor | StorageAt,
    v: torch.Tensor,
    w: torch.Tensor,
    src: torch.Tensor | StorageAt | None = None,
    tiles: UpdateTiles = DEFAULT_TILES,
) -> None:
    """``c <- s - V W`` at split TF32 with ``s = src`` (default ``c`` itself, in place), W (b x nb x
    ncols, contiguous) formed elsewhere: the second launch of :func:`wy_update` alone, for the
    ``mixed`` update whose W comes from cuBLAS FP32."""
    batch, _, ncols = c.shape
    src = _checked_source(c, v, src, "w", w, (batch, v.shape[-1], ncols))
    if not w.is_contiguous():
        raise ValueError("w needs to be contiguous")
    v_base, _ = _base(v)
    no_t = (v_base, 0, 0, 0)  # T is applied by the caller: the kernel reads it only for row parts
    _subtract(src, c, v, no_t, w, 1, tiles, _rows_aligned(c, src, v))


def _checked_source(
    c: torch.Tensor | StorageAt,
    v: torch.Tensor,
    src: torch.Tensor | StorageAt | None,
    name: str,
    other: torch.Tensor,
    other_shape: tuple[int, ...],
) -> torch.Tensor | StorageAt:
    """``src`` (default ``c``), once c, v, src and the other operand (T or W, called ``name``) are
    shaped and laid out as the update's launches take them: V b x m x nb with nb a power of two
    >= 16, c and src one shape and layout, every last dimension of unit stride."""
    batch, m, _ = c.shape
    nb = v.shape[-1]
    src = c if src is None else src
    if v.shape != (batch, m, nb) or other.shape != other_shape or nb < 16 or nb & (nb - 1) or src.shape != c.shape:
        raise ValueError(f"bad WY shapes: c {tuple(c.shape)}, v {tuple(v.shape)}, {name} {tuple(other.shape)}")
    if any(x.stride(-1) != 1 for x in (c, v, other, src)) or src.stride() != c.stride():
        raise ValueError(f"c, src, v and {name} need unit stride along their last dimension; c and src one layout")
    return src


def _update_warps(tiles: UpdateTiles, nb: int) -> int:
    """Warps per program of the update's launches: ``tiles.warps``, else 4 up to nb = 64, else 8."""
    return tiles.warps or (4 if nb <= 64 else 8)


def _subtract(
    src: torch.Tensor | StorageAt,
    c: torch.Tensor | StorageAt,
    v: torch.Tensor,
    t_args: tuple[object, ...],
    w: torch.Tensor,
    parts: int,
    tiles: UpdateTiles,
    aligned: bool,
) -> None:
    """The subtraction launch: ``c = src - V W`` tile by tile; with ``parts`` > 1, w holds that many
    partial V^T C and W = T^T (their sum)."""
    batch, m, ncols = c.shape
    nb = v.shape[-1]
    src_base, src_off = _base(src)
    c_base, c_off = _base(c)
    v_base, v_off = _base(v)
    _subtract_kernel[(ceil_div(m, tiles.subtract_bm) * ceil_div(ncols, tiles.block_n), batch)](
        src_base, src_off, c_base, c_off, c.stride(0), c.stride(1),
        v_base, v_off, v.stride(0), v.stride(1),
        *t_args,
        w, w.stride(0), parts,
        m, ncols,
        NB=nb, BM=tiles.subtract_bm, BN=tiles.block_n, SPLIT=parts > 1, ALIGNED=aligned,
        SRC_AT_ADDRESS=isinstance(src, StorageAt), DST_AT_ADDRESS=isinstance(c, StorageAt),
        num_warps=_update_warps(tiles, nb),
    )  # fmt: skip


@triton.jit(do_not_specialize=["p_off", "v_off", "m", "c0", "e0", "w", "part_rows"])
def _leaf_gram_kernel(
    p,
    p_off,
    p_mat_stride,
    p_row_stride,
    v,
    v_off,
    v_mat_stride,
    v_row_stride,
    part,
    part_mat_stride,
    m,
    c0,
    e0,
    w,
    part_rows,
    BR: tl.constexpr,
    BL: tl.constexpr,
    BW: tl.constexpr,
    P_AT_ADDRESS: tl.constexpr,
):
    """One part's sum (``part_rows`` rows, BR at a time) of G = V_leaf^T [V_before | 0 | P_after].

    Rows are panel rows from c0 (where the leaf's reflectors start); columns are panel columns:
    before the leaf (< c0) from V, the leaf's own (c0 <= j < e0) zero, after it (>= e0) from the panel.
    """
    pid_r = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    ls = tl.arange(0, BL)[None, :]
    cols = tl.arange(0, BW)[None, :]
    v_mat = v + v_off + pid_b * v_mat_stride
    p_mat = storage(p, P_AT_ADDRESS) + p_off + pid_b * p_mat_stride
    g = tl.zeros([BL, BW], dtype=tl.float32)
    first = c0 + pid_r * part_rows
    end = tl.minimum(first + part_rows, m)
    r0 = first
    while r0 < end:  # a few blocks per part: not worth pipelining
        rows = r0 + tl.arange(0, BR)[:, None]
        row_ok = rows < end
        leaf = tl.load(v_mat + rows * v_row_stride + c0 + ls, mask=row_ok & (ls < e0 - c0), other=0.0)
        before = tl.load(v_mat + rows * v_row_stride + cols, mask=row_ok & (cols < c0), other=0.0)
        after = tl.load(p_mat + rows * p_row_stride + cols, mask=row_ok & (cols >= e0) & (cols < w), other=0.0)
        g = tl.dot(tl.trans(leaf), before + after, g, input_precision="tf32x3")
        r0 += BR
    out = part + pid_b * part_mat_stride + pid_r * BL * BW + tl.arange(0, BL)[:, None] * BW + cols
    tl.store(out, g)


@triton.jit(do_not_specialize=["p_off", "v_off", "t_off", "n_parts", "m", "c0", "e0", "w"])
def _leaf_apply_kernel(
    p,
    p_off,
    p_mat_stride,
    p_row_stride,
    v,
    v_off,
    v_mat_stride,
    v_row_stride,
    t,
    t_off,
    t_mat_stride,
    t_row_stride,
    part,
    part_mat_stride,
    n_parts,
    m,
    c0,
    e0,
    w,
    BR: tl.constexpr,
    BL: tl.constexpr,
    BW: tl.constexpr,
    MERGE_T: tl.constexpr,
    P_AT_ADDRESS: tl.constexpr,
):
    """Sum G's partials; P[rows, e0:] -= V_leaf (T_leaf^T G[:, e0:]) for one row block; program 0 also
    sets T[:c0, c0:e0] = -T[:c0, :c0] G[:, :c0]^T T_leaf (larft's merge of two reflector blocks)."""
    pid_r = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    ls = tl.arange(0, BL)
    cols = tl.arange(0, BW)
    parts = part + pid_b * part_mat_stride + ls[:, None] * BW + cols[None, :]
    g = tl.zeros([BL, BW], dtype=tl.float32)
    i = 0
    while i < n_parts:  # a few partials: not worth pipelining
        g += tl.load(parts + i * BL * BW)
        i += 1
    wl = e0 - c0
    t_mat = t + t_off + pid_b * t_mat_stride
    leaf_t = tl.load(
        t_mat + (c0 + ls[:, None]) * t_row_stride + c0 + ls[None, :],
        mask=(ls[:, None] < wl) & (ls[None, :] < wl),
        other=0.0,
    )
    rows = c0 + pid_r * BR + tl.arange(0, BR)[:, None]
    v_mat = v + v_off + pid_b * v_mat_stride
    p_mat = storage(p, P_AT_ADDRESS) + p_off + pid_b * p_mat_stride
    after = (cols[None, :] >= e0) & (cols[None, :] < w)
    coef = tl.dot(tl.trans(leaf_t), tl.where(after, g, 0.0), input_precision="tf32x3")
    leaf = tl.load(v_mat + rows * v_row_stride + c0 + ls[None, :], mask=(rows < m) & (ls[None, :] < wl), other=0.0)
    ptrs = p_mat + rows * p_row_stride + cols[None, :]
    inside = (rows < m) & after
    block = tl.load(ptrs, mask=inside, other=0.0)
    tl.store(ptrs, tl.dot(leaf, -coef, block, input_precision="tf32x3"), mask=inside)
    if MERGE_T:  # noqa: SIM102 (compile-time branch around a run-time one)
        if pid_r == 0:
            cross = tl.dot(tl.trans(tl.where(cols[None, :] < c0, g, 0.0)), leaf_t, input_precision="tf32x3")  # BW x BL
            prior = tl.load(
                t_mat + cols[:, None] * t_row_stride + cols[None, :],
                mask=(cols[:, None] < c0) & (cols[None, :] < c0),
                other=0.0,
            )
            merged = -tl.dot(prior, cross, input_precision="tf32x3")
            t_ptrs = t_mat + cols[:, None] * t_row_stride + c0 + ls[None, :]
            tl.store(t_ptrs, merged, mask=(cols[:, None] < c0) & (ls[None, :] < wl))


def leaf_step(panel: torch.Tensor | StorageAt, v: torch.Tensor, t: torch.Tensor, c0: int, e0: int, merge_t: bool
              ) -> None:
    """After panel columns [c0, e0) were factored into ``v`` and ``t[:, c0:e0, c0:e0]``: apply those
    reflectors to panel columns >= e0 and, with ``merge_t``, fill ``t[:, :c0, c0:e0]`` so that t is the
    panel's T up to column e0. ``panel`` and ``v`` are b x m x w, ``t`` b x w x w; V must be zero
    above each reflector's unit diagonal (rows < c0 of the leaf's columns are never read). ``panel``
    may be a :class:`.source.StorageAt`.
    """
    batch, m, w = panel.shape
    rows = m - c0
    block_w = max(16, pow2_at_least(w))
    block_l = max(16, pow2_at_least(e0 - c0))
    block_r = max(32, min(128, 8192 // block_w))  # an 8K-float tile of the panel per program
    # The first launch sums G over at most 16 parts of the rows; every program of the second sums the parts.
    part_rows = ceil_div(ceil_div(rows, 16), block_r) * block_r
    n_parts = ceil_div(rows, part_rows)
    part = v.new_empty(batch, n_parts, block_l, block_w)
    p_base, p_off = _base(panel)
    v_base, v_off = _base(v)
    t_base, t_off = _base(t)
    warps = 4 if block_r * block_w <= 4096 else 8
    at_address = isinstance(panel, StorageAt)
    common = (p_base, p_off, panel.stride(0), panel.stride(1), v_base, v_off, v.stride(0), v.stride(1))
    _leaf_gram_kernel[(n_parts, batch)](
        *common, part, part.stride(0), m, c0, e0, w, part_rows, BR=block_r // 2, BL=block_l, BW=block_w,
        P_AT_ADDRESS=at_address, num_warps=4,
    )  # fmt: skip
    blocks = ceil_div(rows, block_r) if e0 < w else 1  # only the T merge (program 0) is left to do
    _leaf_apply_kernel[(blocks, batch)](
        *common, t_base, t_off, t.stride(0), t.stride(1), part, part.stride(0), n_parts, m, c0, e0, w,
        BR=block_r, BL=block_l, BW=block_w, MERGE_T=merge_t and c0 > 0, P_AT_ADDRESS=at_address, num_warps=warps,
    )  # fmt: skip
