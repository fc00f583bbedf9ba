"""Tensors at an address the kernels read when they run: a captured graph's input and outputs.

A graph replays fixed addresses, so a graph that read its input directly would read the first
call's input forever, and one that wrote its own buffers would have each call's outputs copied out
(a pass over memory: 671 MB each way at 640 x 512). Instead the kernels take a :class:`StorageAt`
for the input (the first panel's column copy and the first trailing update) and, where every launch
of a plan is such a kernel, for H and tau too: the address of each storage is one int64 in device
memory, which the caller sets before each replay and the kernels load when they run (:func:`storage`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from reference_kernels.blocked_wy.launch import ceil_div

__all__ = ["StorageAt", "copy_columns", "storage"]


@dataclass(frozen=True)
class StorageAt:
    """A view at element ``offset`` of a row-major float32 storage whose address is held by
    ``address`` (one int64 on the device). Shaped, strided and sliced like the tensor it stands for,
    so the launches' layout checks apply unchanged; the storage must start on 16 bytes."""

    address: torch.Tensor
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @classmethod
    def of(cls, address: torch.Tensor, like: torch.Tensor) -> StorageAt:
        """The whole of a contiguous storage shaped as ``like``."""
        return cls(address, tuple(like.shape), tuple(like.stride()))

    @property
    def device(self) -> torch.device:
        return self.address.device

    def stride(self, dim: int | None = None) -> tuple[int, ...] | int:
        return self.strides if dim is None else self.strides[dim]

    def storage_offset(self) -> int:
        return self.offset

    def __getitem__(self, index: tuple[slice, ...]) -> StorageAt:
        """The view of unit-step slices, one per leading dimension (``h[:, j0:, j0:j1]``)."""
        shape, offset = list(self.shape), self.offset
        for dim, part in enumerate(index):
            start, stop, step = part.indices(shape[dim])
            if step != 1:
                raise ValueError(f"a StorageAt takes unit-step slices only, got {part}")
            offset += start * self.strides[dim]
            shape[dim] = max(0, stop - start)
        return replace(self, shape=tuple(shape), offset=offset)


def _base(view: torch.Tensor | StorageAt) -> tuple[torch.Tensor, int]:
    """The view's storage from element 0 (an allocation, so aligned), and the view's offset into it;
    for a :class:`StorageAt`, the int64 holding the storage's address."""
    if isinstance(view, StorageAt):
        return view.address, view.offset
    if view.storage_offset() == 0:
        return view, 0  # the kernel reads only the address: no new view needed (host time)
    return view.as_strided((1,), (1,), 0), view.storage_offset()


@triton.jit
def storage(src, AT_ADDRESS: tl.constexpr):
    """The float32 storage a pointer argument names: ``src`` itself, or (AT_ADDRESS) the address
    stored in the int64 ``src`` points to, read now."""
    if AT_ADDRESS:
        return tl.load(src).to(tl.pointer_type(tl.float32), bitcast=True)
    else:  # Triton types every return it generates: one per branch, not one after the if
        return src


@triton.jit(do_not_specialize=["src_off", "dst_off"])
def _copy_kernel(src, src_off, dst, dst_off, mat_stride, row_stride, m, ncols, widths, BM: tl.constexpr,
                 BN: tl.constexpr, SRC_AT_ADDRESS: tl.constexpr, DST_AT_ADDRESS: tl.constexpr, TRIM: tl.constexpr):
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
    values = tl.load(storage(src, SRC_AT_ADDRESS) + src_off + start, mask=live, other=0.0)
    tl.store(storage(dst, DST_AT_ADDRESS) + dst_off + start, values, mask=inside)


def copy_columns(dst: torch.Tensor | StorageAt, src: torch.Tensor | StorageAt, widths: torch.Tensor | None = None
                 ) -> None:
    """``dst.copy_(src)`` for a b x m x w view of the leading columns (w <= 128), each a tensor or a
    :class:`StorageAt`; with ``widths`` (int32, one per matrix) each matrix's columns from its width
    on are zeros instead. Two tensors without widths are copied by torch, as they always were."""
    if isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and widths is None:
        dst.copy_(src)
        return
    batch, m, ncols = dst.shape
    if tuple(dst.stride()) != tuple(src.stride()) or tuple(src.shape) != tuple(dst.shape) or ncols > 128:
        raise ValueError(f"copy_columns: dst {tuple(dst.shape)} {dst.stride()} against {src}")
    block_n = max(16, triton.next_power_of_2(ncols))
    block_m = max(1, 4096 // block_n)
    _copy_kernel[(ceil_div(m, block_m), batch)](
        *_base(src), *_base(dst), dst.stride(0), dst.stride(1), m, ncols, widths,
        BM=block_m, BN=block_n, SRC_AT_ADDRESS=isinstance(src, StorageAt), DST_AT_ADDRESS=isinstance(dst, StorageAt),
        TRIM=widths is not None, num_warps=4,
    )  # fmt: skip
