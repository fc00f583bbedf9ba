"""Host side of the reference kernels' Triton launches, kept cheap: the small cases are host-bound.

In triton 3.6 ``triton.next_power_of_2`` and ``triton.cdiv`` are constexpr functions costing about
2 us per call from Python, and a launch through the JIT binds every argument, derives the
specialisation key and looks the compiled kernel up on every call, tens of microseconds for a
kernel of 25 parameters: as long as the GPU work of a 20 x 32 batch. ``launch`` skips that work
for calls its caller vouches are specialised alike, and most of the compiled kernel's own Python
launch layers too (:class:`_QuickRun`).

Private names relied on. Triton: the JIT's ``kernel[grid](...)`` returns the ``CompiledKernel``,
whose ``[grid]`` runner takes every parameter in order, constexprs included; on triton 3.6 only,
that runner's body (``CompiledKernel.__getitem__``), the kernel's ``run`` (the CUDA launcher object:
``launch``, ``launch_cooperative_grid``, ``launch_pdl``, the scratch sizes), ``function``,
``packed_metadata`` and ``launch_metadata``, and the launch hooks' ``HookChain.calls``.
Torch: ``torch._C._cuda_getDevice`` (``torch.cuda.current_device`` without its Python layer).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import torch
import triton

__all__ = ["INTERPRETED", "Launch", "ceil_div", "launch", "pow2_at_least"]

# Under TRITON_INTERPRET=1 kernels run in Python on the CPU: no compiled kernel to launch.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# The triton whose runner and C launcher :class:`_QuickRun` stands in for (checked on an H200).
QUICK_RUN = triton.__version__.startswith("3.6.")


def pow2_at_least(x: int) -> int:
    """The smallest power of two >= x (>= 1)."""
    return 1 << max(0, x - 1).bit_length()


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up (positive b)."""
    return -(-a // b)


def _addresses(tensors: Sequence[torch.Tensor], checked: int) -> tuple[int, list[int]] | None:
    """(current CUDA device, each tensor's address) where a kernel compiled and loaded there for
    other tensors of these shapes runs on these, else None. The JIT specialises pointers on 16-byte
    alignment and strides on their values, and loads the kernel for one device; the address takes
    any storage offset in. Only ``tensors[:checked]`` are checked: the caller vouches for the rest."""
    if INTERPRETED or not tensors or not tensors[0].is_cuda:
        return None
    device = torch._C._cuda_getDevice()
    addresses = [x.data_ptr() for x in tensors]
    for i in range(checked):
        x = tensors[i]
        if addresses[i] % 16 or x.get_device() != device or not x.is_contiguous():
            return None
    return device, addresses


class _QuickRun:
    """Stands in for a compiled CUDA kernel in its own runner (triton 3.6's ``CompiledKernel.__getitem__``),
    which finds the caller's current CUDA queue and hands it to :meth:`run` with the launch hooks.
    With no hook registered (a profiler's), ``run`` calls the C launcher as the kernel's launcher
    object would: the launch metadata built for the hooks, the scratch buffers sized (none here)
    and the two empty hook chains called from C cost about 4 us a call on an H200 host."""

    def __init__(self, compiled: Any) -> None:
        launcher = compiled.run
        self.compiled, self.c_launch = compiled, launcher.launch
        self.function, self.packed_metadata = compiled.function, compiled.packed_metadata
        self.cooperative, self.pdl = launcher.launch_cooperative_grid, launcher.launch_pdl

    @staticmethod
    def fits(compiled: Any) -> bool:
        """Whether the quick launch is the kernel's own: triton 3.6's CUDA launcher, no scratch buffers."""
        launcher = compiled.run if QUICK_RUN else None
        return type(launcher).__name__ == "CudaLauncher" and not (
            launcher.global_scratch_size or launcher.profile_scratch_size
        )

    def _init_handles(self) -> None:
        """The runner's first step: the kernel is loaded already."""

    def launch_metadata(self, *_: object) -> None:
        """The runner's second step: only hooks read launch metadata, and :meth:`run` builds it for them."""

    def run(self, x: int, y: int, z: int, queue: int, function: int, metadata: Any, _: None, enter: Any, leave: Any,
            *args: object) -> None:
        """The launch, as the runner hands it to the kernel's launcher object."""
        if getattr(enter, "calls", True) or getattr(leave, "calls", True):  # hooks: the kernel's own launch
            compiled = self.compiled
            launch_metadata = compiled.launch_metadata((x, y, z), queue, *args)
            compiled.run(x, y, z, queue, function, metadata, launch_metadata, enter, leave, *args)
            return
        # grid, queue, function, flags, no scratch buffers, metadata, no launch metadata and no hooks
        self.c_launch(x, y, z, queue, function, self.cooperative, self.pdl, None, None, metadata, None, None, None,
                      *args)


def _runner(compiled: Any, grid: tuple[int, int, int]) -> Callable[..., None]:
    """The compiled kernel's runner for ``grid`` (every parameter in order, constexprs included),
    with :class:`_QuickRun` standing in for the kernel where it fits."""
    run = compiled[grid]  # loads the kernel on the current device
    if not _QuickRun.fits(compiled):
        return run
    return type(compiled).__getitem__(_QuickRun(compiled), grid)


Launch = tuple[tuple[int, ...], tuple[object, ...], dict[str, object]]


class _Direct(NamedTuple):
    """A compiled kernel ready to launch: its runner for the grid, the first call's arguments followed
    by the constexpr values (tensors left out), and the (position, index into ``tensors``) of each
    tensor argument."""

    run: Callable[..., None]
    args: tuple[object, ...]
    places: tuple[tuple[int, int], ...]


# (id of the kernel, device, caller's key) -> the compiled kernel and what its launches need. The id,
# not the kernel: a JITFunction hashes its source's cache key under a lock (~0.5 us a call); the
# entry's runner holds the compiled kernel, which holds the kernel, so the id stays its own.
_COMPILED: dict[tuple[int, int, Hashable], _Direct] = {}


def _direct(kernel: Any, compiled: Any, made: Launch, tensors: Sequence[torch.Tensor]) -> _Direct:
    """What later calls need to launch ``compiled`` as the JIT did with ``made`` (grid, args, options)."""
    grid, args, options = made
    places = tuple((i, j) for i, arg in enumerate(args) for j, x in enumerate(tensors) if arg is x)
    if sum(isinstance(arg, torch.Tensor) for arg in args) != len(places):
        raise ValueError(f"{kernel.__name__}: every tensor argument must be one of the tensors given")
    constexprs = tuple(options[name] for name in kernel.arg_names[len(args) :])
    kept = tuple(None if isinstance(arg, torch.Tensor) else arg for arg in args)  # holds no tensor
    return _Direct(_runner(compiled, (*grid, 1, 1)[:3]), (*kept, *constexprs), places)


def launch(
    kernel: Any,
    make: Callable[[], Launch],
    key: Hashable = None,
    tensors: Sequence[torch.Tensor] = (),
    fresh: int = 0,
) -> None:
    """``kernel[grid](*args, **options)`` with ``(grid, args, options) = make()``, launched directly
    where the caller allows it (queued in the caller's current CUDA order either way).

    ``key`` is the caller's promise that every call with it launches alike but for the tensors:
    same grid, options and non-tensor arguments, and ``tensors`` (every tensor argument) in the
    same places, of the same shapes. The last ``fresh`` of them are the caller's own new
    allocations like the first tensor (``torch.empty_like``, ``new_empty``: its device, contiguous,
    aligned), which are not checked. When the others are on the current device, contiguous and
    16-byte aligned, the first call with the key (and no storage offsets) goes through the JIT
    and keeps the compiled kernel and its arguments; later calls skip ``make`` and hand the
    compiled kernel's runner the kept arguments with their tensors' addresses in their places, and
    the constexprs, as the JIT's own launch does. Otherwise every call takes the JIT.
    """
    found = None if key is None else _addresses(tensors, len(tensors) - fresh)
    if found is None:
        grid, args, options = make()
        kernel[grid](*args, **options)
        return
    device, addresses = found
    slot = (id(kernel), device, key)  # a compiled kernel is loaded for one device
    direct = _COMPILED.get(slot)
    if direct is None:
        made = make()
        grid, args, options = made
        compiled = kernel[grid](*args, **options)
        if all(x.storage_offset() == 0 for x in tensors):  # else views of the storages may stand in
            _COMPILED[slot] = _direct(kernel, compiled, made, tensors)
        return
    args = list(direct.args)
    for i, j in direct.places:
        args[i] = addresses[j]
    direct.run(*args)
