"""The input as a captured CUDA graph reads it: in place, wherever each replay's input lies.

A graph replays fixed addresses, so a graph that read its input directly would read the first
call's input forever; copying each input into the graph's own buffer first costs a pass over
memory (671 MB each way at 640 x 512). Instead the kernels that read the input (the first
panel's column copy and the first trailing update) take a :class:`SourceAt`: the address of the
input's storage is one int64 in device memory, which the caller sets before each replay and the
kernels load when they run (:func:`storage`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.launch import ceil_div

__all__ = ["SourceAt", "columns", "copy_columns", "storage"]


@dataclass(frozen=True)
class SourceAt:
    """A b x m x w view, at element ``offset`` of a row-major b x n x n float32 storage whose address
    is held by ``address`` (one int64 on the device). Shaped and strided like the tensor it stands
    for, so the launches' layout checks apply unchanged; the storage must start on 16 bytes."""

    address: torch.Tensor
    shape: tuple[int, int, int]
    strides: tuple[int, int, int]
    offset: int = 0

    @classmethod
    def of(cls, address: torch.Tensor, like: torch.Tensor) -> SourceAt:
        """The whole of a contiguous storage shaped as ``like``."""
        return cls(address, tuple(like.shape), tuple(like.stride()))

    def stride(self, dim: int | None = None) -> tuple[int, ...] | int:
        return self.strides if dim is None else self.strides[dim]

    def storage_offset(self) -> int:
        return self.offset


def _base(view: torch.Tensor | SourceAt) -> tuple[torch.Tensor, int]:
    """The view's storage from element 0 (an allocation, so aligned), and the view's offset into it;
    for a :class:`SourceAt`, the int64 holding the storage's address."""
    if isinstance(view, SourceAt):
        return view.address, view.offset
    if view.storage_offset() == 0:
        return view, 0  # the kernel reads only the address: no new view needed (host time)
    return view.as_strided((1,), (1,), 0), view.storage_offset()


def columns(src: torch.Tensor | SourceAt, start: int, stop: int | None = None) -> torch.Tensor | SourceAt:
    """``src[:, :, start:stop]``, for a tensor or a :class:`SourceAt`."""
    if isinstance(src, torch.Tensor):
        return src[:, :, start:stop]
    stop = src.shape[2] if stop is None else stop
    return replace(src, shape=(src.shape[0], src.shape[1], stop - start), offset=src.offset + start)


@triton.jit
def storage(src, AT_ADDRESS: tl.constexpr):
    """The float32 storage a source argument names: ``src`` itself, or (AT_ADDRESS) the address
    stored in the int64 ``src`` points to, read now."""
    if AT_ADDRESS:
        return tl.load(src).to(tl.pointer_type(tl.float32), bitcast=True)
    else:  # Triton types every return it generates: one per branch, not one after the if
        return src


@triton.jit(do_not_specialize=["src_off", "dst_off"])
def _copy_kernel(src, src_off, dst, dst_off, mat_stride, row_stride, m, ncols, widths, BM: tl.constexpr,
                 BN: tl.constexpr, AT_ADDRESS: tl.constexpr, TRIM: tl.constexpr):
    """dst[rows, :ncols] = src[rows, :ncols] for BM rows of one matrix (both views one layout); with
    TRIM, the matrix's columns from ``widths[b]`` on are written as zeros."""
    pid_b = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    cols = tl.arange(0, BN)[None, :]
    inside = (rows < m) & (cols < ncols)
    live = inside
    if TRIM:
        live = inside & (cols < tl.multiple_of(tl.load(widths + pid_b), 16))  # whole 16-column groups
    start = pid_b * mat_stride + rows * row_stride + cols
    values = tl.load(storage(src, AT_ADDRESS) + src_off + start, mask=live, other=0.0)
    tl.store(dst + dst_off + start, values, mask=inside)


def copy_columns(dst: torch.Tensor, src: torch.Tensor | SourceAt, widths: torch.Tensor | None = None) -> None:
    """``dst.copy_(src)`` for a b x m x w view of the leading columns (w <= 128), from either kind
    of source; with ``widths`` (int32, one per matrix) each matrix's columns from its width on are
    zeros instead. A tensor source without widths is copied by torch, as it always was."""
    if isinstance(src, torch.Tensor) and widths is None:
        dst.copy_(src)
        return
    batch, m, ncols = dst.shape
    if tuple(dst.stride()) != tuple(src.stride()) or tuple(src.shape) != tuple(dst.shape) or ncols > 128:
        raise ValueError(f"copy_columns: dst {tuple(dst.shape)} {dst.stride()} against {src}")
    block_n = max(16, triton.next_power_of_2(ncols))
    block_m = max(1, 4096 // block_n)
    _copy_kernel[(ceil_div(m, block_m), batch)](
        *_base(src), *_base(dst), dst.stride(0), dst.stride(1), m, ncols, widths,
        BM=block_m, BN=block_n, AT_ADDRESS=isinstance(src, SourceAt), TRIM=widths is not None, num_warps=4,
    )  # fmt: skip
