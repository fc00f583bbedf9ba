"""Clocks for timed repeats: CUDA events on a GPU, a monotonic clock on the CPU.

A timer times one repeat, ``timer.time(run) -> (Measurement, result)``: it settles the device,
flushes the L2 cache outside the timed region, times ``run()`` and returns its result.

The functions a timer calls (the device synchronize, the event class, the host clock) are
bound when this module is imported, which the worker does before it imports any contestant: a
kernel that later replaces ``torch.cuda.synchronize``, ``torch.cuda.Event`` or
``time.perf_counter_ns`` does not change what these timers measure (the tripwire reports such
a kernel separately, see :mod:`evaluator.tripwire`). The synchronize is the C function itself:
``torch.cuda.synchronize`` looks names up each time it runs, and one of them could be swapped
for a no-op.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

__all__ = [
    "CONTEST_FLUSH_BYTES",
    "CopyStream",
    "CpuClockTimer",
    "CudaEventTimer",
    "L2Flush",
    "Measurement",
    "Timer",
    "copy_stream",
    "make_timer",
    "synchronize",
]

T = TypeVar("T")

CONTEST_FLUSH_BYTES = 32 * 1024 * 1024 * 8  # the contest's 32 x 1024 x 1024 int64 fill

_perf_counter_ns = time.perf_counter_ns
_cuda_available = torch.cuda.is_available()
# Waits for all work on the current device (the worker's only device). CPU builds lack it.
_cuda_synchronize = getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize)
# Reading and setting the current stream, the C functions torch.cuda.stream() itself ends in.
_get_current_stream = getattr(torch._C, "_cuda_getCurrentStream", None)
_set_current_stream = getattr(torch._C, "_cuda_setStream", None)
_CudaEvent = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed_ms = torch.cuda.Event.elapsed_time


@dataclass(frozen=True)
class Measurement:
    """One timed repeat. ``tail_ns`` is how long the device stayed busy after the kernel's own
    stream had finished (only a draining CUDA timer measures it; it is zero otherwise)."""

    elapsed_ns: float
    tail_ns: float = 0.0


class Timer(Protocol):
    #: How results timed with this timer are labelled ("cuda-events" or "cpu-clock").
    kind: str

    def time(self, run: Callable[[], T]) -> tuple[Measurement, T]:
        """Time one repeat of ``run``; also return what ``run`` returned."""
        ...


def synchronize() -> None:
    """Wait for every queued device operation; nothing to wait for without CUDA."""
    if _cuda_available:
        _cuda_synchronize()


class CopyStream:
    """A CUDA stream of the evaluator's own, made current for a ``with`` block.

    The evaluator copies a kernel's outputs on it the moment the clock stops: work someone
    queued on the current stream after the device drained is then not waited for, so it cannot
    slip into the copies. Entered through the bound C functions, so no Python a kernel could
    have replaced runs between the end of the timed region and the copies.
    """

    def __init__(self, device: torch.device) -> None:
        self._stream = torch.cuda.Stream(device)
        self._ids = (self._stream.stream_id, self._stream.device_index, self._stream.device_type)
        self._previous: tuple[int, int, int] = self._ids

    def __enter__(self) -> None:
        self._previous = _get_current_stream(self._ids[1])
        _set_current_stream(stream_id=self._ids[0], device_index=self._ids[1], device_type=self._ids[2])

    def __exit__(self, *exc: object) -> None:
        stream_id, device_index, device_type = self._previous
        _set_current_stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def copy_stream(device: torch.device) -> CopyStream | nullcontext[None]:
    """Where to copy outputs on ``device``: a :class:`CopyStream` on CUDA, the caller's thread
    (a no-op context) on the CPU."""
    return CopyStream(device) if device.type == "cuda" else nullcontext()


class L2Flush:
    """Evicts the device's L2 cache by overwriting a buffer larger than it.

    Allocated once per device: at least the contest's 256 MiB, and twice the L2 where a
    device's cache is larger than half of that.
    """

    def __init__(self, device: torch.device) -> None:
        l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        nbytes = max(CONTEST_FLUSH_BYTES, 2 * int(l2_bytes))
        self.nbytes = nbytes
        self._buffer = torch.empty(nbytes // 8, dtype=torch.int64, device=device)

    def __call__(self) -> None:
        self._buffer.fill_(42)


class CudaEventTimer:
    """CUDA events around the repeat, L2 flushed before the start event.

    ``drain=True`` (the hardened default) makes the timed region end only once the whole device
    is idle: a device-wide synchronize precedes the end event, so work a kernel leaves on
    other streams, or still queued when it returns, is inside the measurement. The contest
    records the end event straight after the calls (``drain=False``, ``--compat``).
    """

    kind = "cuda-events"

    def __init__(self, device: torch.device, drain: bool = True) -> None:
        self.device = device
        self.drain = drain
        self._flush = L2Flush(device)

    def time(self, run: Callable[[], T]) -> tuple[Measurement, T]:
        _cuda_synchronize()
        self._flush()  # queued before the start event: its time is never inside the region
        start, mid, end = (_CudaEvent(enable_timing=True) for _ in range(3))
        _event_record(start)
        result = run()
        if not self.drain:
            _event_record(end)
            _cuda_synchronize()
            return Measurement(_event_elapsed_ms(start, end) * 1e6), result
        _event_record(mid)
        _cuda_synchronize()
        _event_record(end)
        _cuda_synchronize()
        return Measurement(_event_elapsed_ms(start, end) * 1e6, _event_elapsed_ms(mid, end) * 1e6), result


class CpuClockTimer:
    """The monotonic host clock, for CPU runs (no cache flush: there is no device cache to
    settle, and CPU figures are labelled as CPU timings wherever they appear)."""

    kind = "cpu-clock"

    def time(self, run: Callable[[], T]) -> tuple[Measurement, T]:
        start = _perf_counter_ns()
        result = run()
        return Measurement(float(_perf_counter_ns() - start)), result


def make_timer(device: torch.device, drain: bool = True) -> Timer:
    """The timer for ``device``: CUDA events on a GPU, the host clock on the CPU."""
    if device.type == "cuda":
        return CudaEventTimer(device, drain=drain)
    return CpuClockTimer()
