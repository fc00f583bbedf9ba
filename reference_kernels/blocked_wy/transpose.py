"""The column-major working layout's way in and out: a batch of matrices transposed into a new one.

Plans with ``columns`` factor A^T's storage (each matrix column-major), where the trailing update's
reduction over rows runs along contiguous memory. The copy into and out of that layout is one
Triton launch each, square tiles read along rows and written along columns (the compiler routes
each tile through shared memory, so both sides are coalesced), in place of the plain copies the
row-major graph makes anyway.
"""

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.launch import ceil_div

__all__ = ["transpose_into", "transposed"]

_TILE = 64


@triton.jit
def _transpose_kernel(src, dst, rows, cols, TILE: tl.constexpr):
    """dst[j, i] = src[i, j] for one TILE x TILE tile of one rows x cols matrix (both contiguous)."""
    pid_i = tl.program_id(0)
    pid_j = tl.program_id(1)
    mat = tl.program_id(2).to(tl.int64) * rows * cols
    i = pid_i * TILE + tl.arange(0, TILE)[:, None]
    j = pid_j * TILE + tl.arange(0, TILE)[None, :]
    inside = (i < rows) & (j < cols)
    tile = tl.load(src + mat + i * cols + j, mask=inside)
    tl.store(dst + mat + j * rows + i, tile, mask=inside)


def transpose_into(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out`` (contiguous, b x c x r) set to each matrix of the b x r x c tensor ``x`` transposed."""
    x = x.contiguous()
    batch, rows, cols = x.shape
    if out.shape != (batch, cols, rows) or not out.is_contiguous():
        raise ValueError(f"cannot transpose {tuple(x.shape)} into a {tuple(out.shape)} tensor (or not contiguous)")
    if x.numel():
        _transpose_kernel[(ceil_div(rows, _TILE), ceil_div(cols, _TILE), batch)](x, out, rows, cols, TILE=_TILE)
    return out


def transposed(x: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor holding each matrix of the b x r x c tensor ``x`` transposed."""
    return transpose_into(x, x.new_empty(x.shape[0], x.shape[2], x.shape[1]))
