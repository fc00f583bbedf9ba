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
from typing import Any

import torch

__all__ = ["INTERPRETED", "ceil_div", "launch", "launchable_directly", "pow2_at_least"]

# Under TRITON_INTERPRET=1 kernels run in Python on the CPU: no compiled kernel to launch.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def pow2_at_least(x: int) -> int:
    """The smallest power of two >= x (>= 1)."""
    return 1 << max(0, x - 1).bit_length()


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up (positive b)."""
    return -(-a // b)


def launchable_directly(*tensors: torch.Tensor) -> bool:
    """Whether a kernel the JIT compiled for other tensors of the same shapes runs on these: the JIT
    specialises pointers on 16-byte alignment, and the compiled kernel is loaded for one device."""
    if INTERPRETED:
        return False
    for x in tensors:
        if not (x.is_cuda and x.is_contiguous() and x.data_ptr() % 16 == 0):
            return False
        if x.get_device() != torch.cuda.current_device():
            return False
    return bool(tensors)


# (kernel, device, caller's key) -> the compiled kernel's launcher for the grid, and its constexpr values.
_COMPILED: dict[tuple[Any, int, Hashable], tuple[Callable[..., None], tuple[object, ...]]] = {}


def launch(
    kernel: Any,
    grid: tuple[int, ...],
    args: Sequence[object],
    options: dict[str, object],
    key: Hashable = None,
    tensors: Sequence[torch.Tensor] = (),
) -> None:
    """``kernel[grid](*args, **options)``, launched directly where the caller allows it.

    ``key`` is the caller's promise that every call with it specialises alike (same grid, shapes,
    dtypes and integer arguments; ``options`` fixed), and ``tensors`` are the call's tensor
    arguments: when they are :func:`launchable_directly`, the first call with the key goes through
    the JIT and keeps the compiled kernel, and later calls hand it every parameter of the signature
    in order, constexprs included, as the JIT's own launch does. Otherwise every call takes the JIT.
    """
    if key is None or not launchable_directly(*tensors):
        kernel[grid](*args, **options)
        return
    slot = (kernel, tensors[0].get_device(), key)  # a compiled kernel is loaded for one device
    entry = _COMPILED.get(slot)
    if entry is None:
        compiled = kernel[grid](*args, **options)
        constexprs = tuple(options[name] for name in kernel.arg_names[len(args):])
        _COMPILED[slot] = (compiled[(*grid, 1, 1)[:3]], constexprs)
        return
    run, constexprs = entry
    run(*args, *constexprs)
