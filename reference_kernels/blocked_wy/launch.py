"""Host side of the reference kernels' Triton launches, kept cheap: the small cases are host-bound.

In triton 3.6 ``triton.next_power_of_2`` and ``triton.cdiv`` are constexpr functions costing about
2 us per call from Python, and a launch through the JIT binds every argument, derives the
specialisation key and looks the compiled kernel up on every call, tens of microseconds for a
kernel of 25 parameters: as long as the GPU work of a 20 x 32 batch. ``launch`` skips that work
for calls its caller vouches are specialised alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import torch

__all__ = ["INTERPRETED", "Launch", "ceil_div", "launch", "launchable_directly", "pow2_at_least"]

# Under TRITON_INTERPRET=1 kernels run in Python on the CPU: no compiled kernel to launch.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def pow2_at_least(x: int) -> int:
    """The smallest power of two >= x (>= 1)."""
    return 1 << max(0, x - 1).bit_length()


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up (positive b)."""
    return -(-a // b)


def launchable_directly(*tensors: torch.Tensor) -> bool:
    """Whether a kernel the JIT compiled for other tensors of the same shapes runs on these, handed
    these tensors in their places: the JIT specialises pointers on 16-byte alignment, the compiled
    kernel is loaded for one device, and a tensor with a storage offset would be passed as its base
    and an offset (an argument that changes from call to call)."""
    if INTERPRETED or not tensors:
        return False
    device = torch.cuda.current_device() if tensors[0].is_cuda else -1
    for x in tensors:
        if not (x.is_cuda and x.is_contiguous() and x.storage_offset() == 0 and x.data_ptr() % 16 == 0):
            return False
        if x.get_device() != device:
            return False
    return True


Launch = tuple[tuple[int, ...], tuple[object, ...], dict[str, object]]


class _Direct(NamedTuple):
    """A compiled kernel ready to launch: its launcher for the grid, the first call's arguments
    (tensors left out), the (position, index into ``tensors``) of each tensor argument, and the
    constexpr values."""

    run: Callable[..., None]
    args: tuple[object, ...]
    places: tuple[tuple[int, int], ...]
    constexprs: tuple[object, ...]


# (kernel, device, caller's key) -> the compiled kernel and what its launches need.
_COMPILED: dict[tuple[Any, int, Hashable], _Direct] = {}


def launch(
    kernel: Any,
    make: Callable[[], Launch],
    key: Hashable = None,
    tensors: Sequence[torch.Tensor] = (),
) -> None:
    """``kernel[grid](*args, **options)`` with ``(grid, args, options) = make()``, launched directly
    where the caller allows it.

    ``key`` is the caller's promise that every call with it launches alike but for the tensors:
    same grid, options and non-tensor arguments, and ``tensors`` (every tensor argument) in the
    same places. When the tensors are :func:`launchable_directly`, the first call with the key goes
    through the JIT and keeps the compiled kernel and its arguments; later calls skip ``make`` and
    hand the compiled kernel the kept arguments with this call's tensors in their places, and the
    constexprs, as the JIT's own launch does. Otherwise every call takes the JIT.
    """
    if key is None or not launchable_directly(*tensors):
        grid, args, options = make()
        kernel[grid](*args, **options)
        return
    slot = (kernel, tensors[0].get_device(), key)  # a compiled kernel is loaded for one device
    direct = _COMPILED.get(slot)
    if direct is None:
        grid, args, options = make()
        compiled = kernel[grid](*args, **options)
        places = tuple((i, j) for i, arg in enumerate(args) for j, x in enumerate(tensors) if arg is x)
        if sum(isinstance(arg, torch.Tensor) for arg in args) != len(places):
            raise ValueError(f"{kernel.__name__}: every tensor argument must be one of the tensors given")
        constexprs = tuple(options[name] for name in kernel.arg_names[len(args) :])
        kept = tuple(None if isinstance(arg, torch.Tensor) else arg for arg in args)  # holds no tensor
        _COMPILED[slot] = _Direct(compiled[(*grid, 1, 1)[:3]], kept, places, constexprs)
        return
    args = list(direct.args)
    for i, j in direct.places:
        args[i] = tensors[j]
    direct.run(*args, *direct.constexprs)
