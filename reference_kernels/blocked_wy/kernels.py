"""Triton panel factorisation: Householder QR of a tall b x m x w panel, one program per matrix.

The whole panel lives in registers, so each of its w columns costs a few block-wide reductions and
no memory traffic; that is why the panel is narrow (the orchestration in ``qr.py`` picks w so that
the tile stays within ``MAX_TILE`` floats, at most 64 per thread). Optionally the program also writes
the panel's compact-WY factors: V explicitly (unit diagonal, zeros above) and T as LAPACK's ``larft``
builds it, so that the trailing update is plain matrix products. The column steps (LAPACK ``larfg``
reflectors) are in ``column_steps.py``. The kernel runs unchanged under ``TRITON_INTERPRET=1``
(``INTERPRETED``: a few constructs take a form the interpreter runs fast, same arithmetic).
"""

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.column_steps import (
    one_reduction_column,
    three_reduction_column,
    top_tile_column,
    two_columns,
    two_columns_top,
)
from reference_kernels.blocked_wy.launch import INTERPRETED, Launch, launch, pow2_at_least
from reference_kernels.blocked_wy.source import StorageAt, _base, storage

__all__ = ["MAX_TILE", "factor_matrices", "factor_panel", "halves_apply", "matrix_start", "panel_tile"]

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
def _factor_columns(x, taus, tri, rows, cols, W: tl.constexpr, ONE_REDUCTION: tl.constexpr,
                    TWO_COLUMNS: tl.constexpr, WRITE_WY: tl.constexpr, INTERPRETED: tl.constexpr):
    """Columns 0 to W - 1 of the register tile, each (or each pair, ``TWO_COLUMNS``) by its column
    step; row k of step k is the tile row whose entry of ``rows`` is k, so a caller whose first tile
    row is row r0 of its matrix passes ``rows - r0``."""
    if TWO_COLUMNS:
        for k in range(0, W - 1, 2):
            x, taus, tri = two_columns(x, taus, tri, k, rows, cols, WRITE_WY, INTERPRETED)
        if W % 2 == 1:
            x, taus, tri = one_reduction_column(x, taus, tri, W - 1, rows, cols, WRITE_WY, INTERPRETED)
    else:
        for k in range(W):
            if ONE_REDUCTION:
                x, taus, tri = one_reduction_column(x, taus, tri, k, rows, cols, WRITE_WY, INTERPRETED)
            else:
                x, taus, tri = three_reduction_column(x, taus, tri, k, rows, cols, WRITE_WY)
    return x, taus, tri


@triton.jit
def _unit_lower(x, r2, c2):
    """V of a factored tile: its reflectors below the diagonal, ones on it, zeros above."""
    return tl.where(r2 > c2, x, tl.where(r2 == c2, 1.0, 0.0))


@triton.jit
def _halves_product(left_mat, right_mat, row_stride, m, right_width, SHIFT: tl.constexpr, HALF: tl.constexpr,
                    BLOCK_M: tl.constexpr, RB: tl.constexpr):
    """``V1^T Y`` (HALF x HALF) over the panel's rows, RB at a time from memory: V1 the unit lower part
    of the stored left half, Y the right half at ``right_mat`` (its first ``right_width`` columns), as
    it lies or, with ``SHIFT``, as the unit lower part of a factored right half (V2, diagonal at row
    HALF). Read back in row blocks, not taken from the register tiles: a product over every row of
    the tiles holds whole operand rows per thread (kilobytes of spills in a tall panel)."""
    cols = tl.arange(0, HALF)[None, :]
    acc = tl.zeros([HALF, HALF], dtype=tl.float32)
    for r0 in range(0, BLOCK_M, RB):
        rows = r0 + tl.arange(0, RB)[:, None]
        block = rows * row_stride + cols
        v1 = _unit_lower(tl.load(left_mat + block, mask=rows < m, other=0.0), rows, cols)
        y = tl.load(right_mat + block, mask=(rows < m) & (cols < right_width), other=0.0)
        if SHIFT:
            y = _unit_lower(y, rows - HALF, cols)
        acc = tl.dot(tl.trans(v1), y, acc, input_precision="ieee")
    return acc


@triton.jit
def _factor_halves(src_mat, dst_mat, row_stride, tau_row, v_mat, v_row_stride, t_mat, t_row_stride, m,
                   W: tl.constexpr, BLOCK_M: tl.constexpr, HALF: tl.constexpr, WRITE_WY: tl.constexpr,
                   ONE_REDUCTION: tl.constexpr, TWO_COLUMNS: tl.constexpr, INTERPRETED: tl.constexpr):
    """The panel as two register tiles of HALF columns (HALF < W <= 2 HALF, HALF >= 16): the left
    half factored with its T and stored, its block reflector applied to the right half (X2 -= V1 W,
    W = T1^T V1^T X2), then the right half factored from row HALF down; with ``WRITE_WY`` the
    panel's T merged from the halves' (T12 = -T1 V1^T V2 T2). Each column step works on a tile
    half as wide as the panel's, which halves the per-element work that sets a narrow panel's time
    (docs/kernel-log.md §W26). Every product is IEEE float32; those over the rows read the stored
    halves back (:func:`_halves_product`)."""
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HALF)
    r2 = rows[:, None]
    c2 = cols[None, :]
    left = r2 * row_stride + c2
    left_ok = (r2 < m) & (c2 < HALF)
    right_ok = (r2 < m) & (c2 < W - HALF)
    taus = tl.zeros([HALF], dtype=tl.float32)
    tri = tl.zeros([HALF, HALF], dtype=tl.float32)
    x1 = tl.load(src_mat + left, mask=left_ok, other=0.0)
    x1, taus1, t1 = _factor_columns(x1, taus, tri, rows, cols, HALF, ONE_REDUCTION, TWO_COLUMNS, True, INTERPRETED)
    tl.store(dst_mat + left, x1, mask=left_ok)
    tl.debug_barrier()  # the stored left half is read back by every thread
    rb: tl.constexpr = min(BLOCK_M, 32)
    projected = _halves_product(dst_mat, src_mat + HALF, row_stride, m, W - HALF, False, HALF, BLOCK_M, rb)
    w = tl.dot(tl.trans(t1), projected, input_precision="ieee")
    x2 = tl.load(src_mat + HALF + left, mask=right_ok, other=0.0)
    x2 = tl.dot(_unit_lower(x1, r2, c2), -w, x2, input_precision="ieee")
    x2, taus2, t2 = _factor_columns(x2, taus, tri, rows - HALF, cols, W - HALF, ONE_REDUCTION, TWO_COLUMNS, WRITE_WY,
                                    INTERPRETED)
    tl.store(dst_mat + HALF + left, x2, mask=right_ok)
    tl.store(tau_row + cols, taus1)
    tl.store(tau_row + HALF + cols, taus2, mask=cols < W - HALF)
    if WRITE_WY:
        v_tile = r2 * v_row_stride + c2
        tl.store(v_mat + v_tile, _unit_lower(x1, r2, c2), mask=left_ok)
        tl.store(v_mat + HALF + v_tile, _unit_lower(x2, r2 - HALF, c2), mask=right_ok)
        tl.debug_barrier()  # the stored right half is read back by every thread
        cross = _halves_product(dst_mat, dst_mat + HALF, row_stride, m, W - HALF, True, HALF, BLOCK_M, rb)
        t12 = -tl.dot(tl.dot(t1, cross, input_precision="ieee"), t2, input_precision="ieee")
        t_rows = cols[:, None]
        right_cols = c2 < W - HALF
        lower_rows = t_rows < W - HALF
        t_tile = t_rows * t_row_stride + c2
        tl.store(t_mat + t_tile, t1)
        tl.store(t_mat + HALF + t_tile, t12, mask=right_cols)
        tl.store(t_mat + HALF * t_row_stride + t_tile, tl.zeros([HALF, HALF], dtype=tl.float32), mask=lower_rows)
        tl.store(t_mat + HALF * t_row_stride + HALF + t_tile, t2, mask=lower_rows & right_cols)


# Offsets and heights vary per panel: specialising on them (divisibility by 16) would compile a
# variant per panel position for nothing, since alignment comes from ALIGNED and the row stride.
@triton.jit(do_not_specialize=["src_off", "dst_off", "tau_off", "v_off", "t_off", "m", "col0"])
def _panel_kernel(
    src, src_off, dst, dst_off, mat_stride, row_stride,
    tau, tau_off, tau_stride,
    v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride,
    m, widths, col0,
    W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr, WRITE_WY: tl.constexpr, ALIGNED: tl.constexpr,
    ONE_REDUCTION: tl.constexpr, TOP_TILE: tl.constexpr, TWO_COLUMNS: tl.constexpr, INTERPRETED: tl.constexpr,
    TRIM: tl.constexpr, AT_ADDRESS: tl.constexpr, HALVES: tl.constexpr,
):
    """A program per matrix: :func:`panel_program`."""
    panel_program(
        tl.program_id(0).to(tl.int64), src, src_off, dst, dst_off, mat_stride, row_stride, tau, tau_off, tau_stride,
        v, v_off, v_mat_stride, v_row_stride, t, t_off, t_mat_stride, t_row_stride, m, widths, col0,
        W, BLOCK_M, BLOCK_W, WRITE_WY, ALIGNED, ONE_REDUCTION, TOP_TILE, TWO_COLUMNS, INTERPRETED, TRIM, AT_ADDRESS,
        HALVES,
    )  # fmt: skip


@triton.jit
def panel_program(
    pid, src, src_off, dst, dst_off, mat_stride, row_stride,
    tau, tau_off, tau_stride,
    v, v_off, v_mat_stride, v_row_stride,
    t, t_off, t_mat_stride, t_row_stride,
    m, widths, col0,
    W: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr, WRITE_WY: tl.constexpr, ALIGNED: tl.constexpr,
    ONE_REDUCTION: tl.constexpr, TOP_TILE: tl.constexpr, TWO_COLUMNS: tl.constexpr, INTERPRETED: tl.constexpr,
    TRIM: tl.constexpr, AT_ADDRESS: tl.constexpr, HALVES: tl.constexpr,
):
    """The panel of matrix ``pid`` (int64). AT_ADDRESS: src, dst and tau are int64s holding their
    storages' addresses (source.py). HALVES: the panel in two tiles of BLOCK_W / 2 columns
    (:func:`_factor_halves`)."""
    src = storage(src, AT_ADDRESS)
    dst = storage(dst, AT_ADDRESS)
    tau = storage(tau, AT_ADDRESS)
    cols = tl.arange(0, BLOCK_W)
    if TRIM:  # noqa: SIM102 (compile-time branch around a run-time one)
        # A panel wholly past the matrix's width (its first column is column ``col0``) holds zeros
        # and stays so: tau = 0, and neither V nor T is read for this matrix again (tail.py).
        if col0 >= tl.load(widths + pid):
            tl.store(tau + tau_off + pid * tau_stride + cols, tl.zeros([BLOCK_W], dtype=tl.float32), mask=cols < W)
            return
    src_mat = matrix_start(src, src_off, pid, mat_stride, ALIGNED)
    dst_mat = matrix_start(dst, dst_off, pid, mat_stride, ALIGNED)
    if WRITE_WY:  # without it the V and T arguments are None (constexprs): fewer to pass per launch
        v_mat = matrix_start(v, v_off, pid, v_mat_stride, ALIGNED)
    if HALVES:
        tau_row = tau + tau_off + pid * tau_stride
        if WRITE_WY:
            _factor_halves(src_mat, dst_mat, row_stride, tau_row, v_mat, v_row_stride, t + t_off + pid * t_mat_stride,
                           t_row_stride, m, W, BLOCK_M, BLOCK_W // 2, True, ONE_REDUCTION, TWO_COLUMNS, INTERPRETED)
        else:
            _factor_halves(src_mat, dst_mat, row_stride, tau_row, None, None, None, None, m, W, BLOCK_M, BLOCK_W // 2,
                           False, ONE_REDUCTION, TWO_COLUMNS, INTERPRETED)
        return
    rows = tl.arange(0, BLOCK_M)
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
            x, top, scales, taus, tri = two_columns_top(
                x, top, scales, taus, tri, k, rows, cols, WRITE_WY, INTERPRETED
            )
        if W % 2 == 1:
            x, top, scales, taus, tri = top_tile_column(x, top, scales, taus, tri, W - 1, rows, cols, WRITE_WY)
    elif TOP_TILE:
        for k in range(W):
            x, top, scales, taus, tri = top_tile_column(x, top, scales, taus, tri, k, rows, cols, WRITE_WY)
    else:
        x, taus, tri = _factor_columns(x, taus, tri, rows, cols, W, ONE_REDUCTION, TWO_COLUMNS, WRITE_WY, INTERPRETED)

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


@triton.jit
def _unit_lower(x, r2, c2):
    """V of a factored tile: its reflectors below the diagonal, ones on it, zeros above."""
    return tl.where(r2 > c2, x, tl.where(r2 == c2, 1.0, 0.0))


def _rows_aligned(*views: torch.Tensor | StorageAt) -> bool:
    """Whether every row of every view starts on a 16-byte boundary (float4 loads and stores); a
    :class:`StorageAt`'s storage starts on one by its contract, wherever its address is held."""
    for view in views:  # plain loops: half the host time of nested generators, per launch
        if view.storage_offset() % 4 or (not isinstance(view, StorageAt) and _base(view)[0].data_ptr() % 16):
            return False
        for stride in view.stride()[:-1]:
            if stride % 4:
                return False
    return True


def _panel_launch(
    src: torch.Tensor | StorageAt,
    dst: torch.Tensor | StorageAt,
    tau: torch.Tensor | StorageAt,
    wy: tuple[torch.Tensor, torch.Tensor] | None,
    one_reduction: bool,
    top_tile: bool,
    warps: int | None,
    two_columns: bool = False,
    trim: tuple[torch.Tensor, int] | None = None,
    halves: bool = False,
) -> Launch:
    """The panel kernel's grid, arguments and keyword options for :func:`factor_panel`."""
    batch, m, w = dst.shape
    if src.shape != dst.shape or m < w or tau.shape != (batch, w):
        raise ValueError(f"bad panel shapes: src {tuple(src.shape)}, dst {tuple(dst.shape)}, tau {tuple(tau.shape)}")
    if src.stride() != dst.stride():
        raise ValueError("src and dst must share one layout")
    at_address = isinstance(dst, StorageAt)
    if isinstance(src, StorageAt) != at_address or isinstance(tau, StorageAt) != at_address:
        raise ValueError("src, dst and tau are all tensors or all at an address")
    tile = panel_tile(m, w)
    halves = halves and halves_apply(w)
    top_tile = top_tile and m >= 2 * w and not halves  # the top tile needs a panel at least twice as tall as wide
    tau_base, tau_off = _base(tau)
    if wy is None:
        v_args = t_args = (None, None, None, None)  # constexprs the kernel never reads
    else:
        v, t = wy
        v_args = (*_base(v), v.stride(0), v.stride(1))
        t_args = (*_base(t), t.stride(0), t.stride(1))
    args = (
        *_base(src), *_base(dst), dst.stride(0), dst.stride(1),
        tau_base, tau_off, tau.stride(0),
        *v_args,
        *t_args,
        m, *(trim or (None, 0)),
    )
    options = {
        "W": w, "BLOCK_M": tile[0], "BLOCK_W": tile[1], "WRITE_WY": wy is not None,
        "ALIGNED": _rows_aligned(src, dst, *(wy or ())),
        "ONE_REDUCTION": one_reduction,
        "TOP_TILE": top_tile,
        "TWO_COLUMNS": two_columns and (one_reduction or top_tile),
        "INTERPRETED": INTERPRETED,
        "TRIM": trim is not None,
        "AT_ADDRESS": at_address,
        "HALVES": halves,
        "num_warps": _warps(tile, warps),
    }
    return (batch,), args, options


def factor_panel(
    src: torch.Tensor | StorageAt,
    dst: torch.Tensor | StorageAt,
    tau: torch.Tensor | StorageAt,
    wy: tuple[torch.Tensor, torch.Tensor] | None = None,
    one_reduction: bool = True,
    top_tile: bool = True,
    warps: int | None = None,
    two_columns: bool = False,
    trim: tuple[torch.Tensor, int] | None = None,
    halves: bool = False,
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
    ``trim = (widths, col0)``: the panel's first column is column col0 of its matrix, and the
    programs of matrices whose width (int32 ``widths[b]``, :mod:`.tail`) it reaches only set tau to 0.
    ``src``, ``dst`` and ``tau`` may all be :class:`.source.StorageAt` (a graph writing its outputs
    where each call's lie). ``halves`` (where :func:`halves_apply` to w) holds the panel as two tiles of
    half its columns, the left half's block reflector applied to the right half between them; it
    overrides ``top_tile``.
    """
    grid, args, options = _panel_launch(src, dst, tau, wy, one_reduction, top_tile, warps, two_columns, trim, halves)
    _panel_kernel[grid](*args, **options)


def halves_apply(w: int) -> bool:
    """Whether ``halves`` splits a panel (or whole matrix) w columns wide: each half of its register
    tile must be at least 16 columns wide (``tl.dot``)."""
    return panel_tile(w, w)[1] >= 32


def factor_matrices(
    a: torch.Tensor,
    one_reduction: bool = True,
    warps: int | None = None,
    two_columns: bool = False,
    halves: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`factor_panel` of the whole n x n matrices of ``a`` (contiguous) into fresh ``(H, tau)``,
    the compiled kernel launched directly after a shape's first call (the small cases are host-bound:
    the outputs being this call's own allocations, only ``a`` is checked for it). ``halves``: as
    :func:`factor_panel` takes it."""
    batch, n, _ = a.shape
    h = torch.empty_like(a)
    tau = a.new_empty(batch, n)
    key = (batch, n, one_reduction, warps, two_columns, halves)
    make = lambda: _panel_launch(a, h, tau, None, one_reduction, False, warps, two_columns, halves=halves)  # noqa: E731
    launch(_panel_kernel, make, key, (a, h, tau), fresh=2)
    return h, tau
