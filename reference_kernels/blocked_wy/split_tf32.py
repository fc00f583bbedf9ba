"""The trailing update on cuBLAS tensor cores at FP32-level accuracy: split TF32 in one product.

``C <- C - V W`` with ``W = T^T (V^T C)`` costs two products of equal size. The second, a rank-nb
update of the whole trailing matrix, is where cuBLAS's FP32 kernels are slowest (inner dimension
nb = 32-128). Here it runs as one TF32 tensor-core product of inner dimension 3 nb,

    C <- C - [Vh Vh Vl] [Wh; Wl; Wh],

where ``Xh`` is X rounded to TF32 (10 mantissa bits: exact on tensor cores) and ``Xl = X - Xh``
(exact in FP32, then rounded to TF32 by the hardware). Vh Wh is exact in FP32; the TF32 rounding
of the low parts and the dropped Vl Wl are about 2^-21 of V W: FP32-level, as the 3xTF32 schemes of
CUTLASS and Triton's ``tf32x3``. Accumulation is FP32 throughout. W itself (a small nb x ncols
output) is formed by the caller with FP32 cuBLAS: splitting C too would cost two extra passes over
memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.launch import ceil_div
from reference_kernels.blocked_wy.source import _base

__all__ = ["fp32_precision", "split_tf32", "split_tf32_subtract"]


@contextmanager
def fp32_precision(value: str) -> Iterator[None]:
    """FP32 library products at ``value`` ("ieee" or "tf32") for the duration, restored afterwards.
    Uses the ``fp32_precision`` API: reading the legacy ``allow_tf32`` raises once anything in the
    process has used the new one. Only CUDA's matmul changes for "tf32"; "ieee" sets oneDNN's too."""
    backends = [torch.backends.cuda.matmul]
    if value == "ieee":
        backends.append(torch.backends.mkldnn.matmul)
    saved = [b.fp32_precision for b in backends]
    try:
        for b in backends:
            b.fp32_precision = value
        yield
    finally:
        for b, old in zip(backends, saved, strict=True):
            b.fp32_precision = old


@triton.jit(do_not_specialize=["x_off"])
def _split_kernel(
    x, x_off, out, per_matrix, width, out_row, slab, LO_SLAB: tl.constexpr, BLOCK: tl.constexpr
):  # fmt: skip
    """Three copies of one matrix's elements (``width`` per row, contiguous), ``slab`` apart in
    ``out``: hi in every slab but ``LO_SLAB``, which takes lo."""
    pid = tl.program_id(0)
    mat = tl.program_id(1).to(tl.int64)
    e = pid * BLOCK + tl.arange(0, BLOCK)
    inside = e < per_matrix
    value = tl.load(x + x_off + mat * per_matrix + e, mask=inside, other=0.0)
    # Round to nearest on the magnitude: add half of the 13 dropped bits' unit, then clear them.
    hi = ((value.to(tl.int32, bitcast=True) + 0x1000) & -0x2000).to(tl.float32, bitcast=True)
    lo = value - hi
    dst = out + mat * 3 * per_matrix + (e // width) * out_row + e % width
    tl.store(dst, tl.where(LO_SLAB == 0, lo, hi), mask=inside)
    tl.store(dst + slab, tl.where(LO_SLAB == 1, lo, hi), mask=inside)
    tl.store(dst + 2 * slab, tl.where(LO_SLAB == 2, lo, hi), mask=inside)


def split_tf32(x: torch.Tensor, dim: int, lo_slab: int) -> torch.Tensor:
    """x (b x r x s) split into hi and lo TF32 parts, as three slabs concatenated along ``dim``
    (1 or 2): hi in slabs other than ``lo_slab``, lo there; b x 3r x s or b x r x 3s."""
    x = x.contiguous()
    batch, r, s = x.shape
    per_matrix = r * s
    if dim == 1:
        out = x.new_empty(batch, 3 * r, s)
        out_row, slab = s, per_matrix
    else:
        out = x.new_empty(batch, r, 3 * s)
        out_row, slab = 3 * s, s
    block = 1024
    x_base, x_off = _base(x)
    _split_kernel[(ceil_div(per_matrix, block), batch)](
        x_base, x_off, out, per_matrix, s, out_row, slab, LO_SLAB=lo_slab, BLOCK=block, num_warps=4
    )
    return out


def split_tf32_subtract(c: torch.Tensor, v: torch.Tensor, w: torch.Tensor) -> None:
    """``c <- c - V W`` by one split-TF32 cuBLAS product, ``[Vh Vh Vl] [Wh; Wl; Wh]``: V is b x m x nb,
    W b x nb x ncols (formed by the caller, at FP32), c b x m x ncols."""
    pair_v = split_tf32(v, dim=2, lo_slab=2)  # [Vh Vh Vl]
    pair_w = split_tf32(w, dim=1, lo_slab=1)  # [Wh; Wl; Wh]
    with fp32_precision("tf32"):
        c.baddbmm_(pair_v, pair_w, alpha=-1.0)
