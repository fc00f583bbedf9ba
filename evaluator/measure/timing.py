"""Clocks for timed repeats: CUDA events on a GPU, a monotonic clock on the CPU.

A timer times one repeat, ``timer.time(run) -> (Measurement, result)``: it settles the device,
flushes the L2 cache outside the timed region, times ``run()`` and returns its result.

The functions a timer calls (the device synchronize, the event class, the host clock) are
bound when this module is imported, which the worker does before it imports any contestant: a
kernel that later replaces ``torch.cuda.synchronize``, ``torch.cuda.Event`` or
``time.perf_counter_ns`` by name does not change what these timers measure. The synchronize is
the C function itself: ``torch.cuda.synchronize`` looks names up each time it runs. (A kernel
that reaches the timer's objects can still lie: in a hardened run the parent checks every time a
worker reports against its own clock, rule ``parent-clock``.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

__all__ = [
    "CONTEST_FLUSH_BYTES",
    "CpuClockTimer",
    "CudaEventTimer",
    "L2Flush",
    "Measurement",
    "Timer",
    "make_timer",
    "synchronize",
]

T = TypeVar("T")

CONTEST_FLUSH_BYTES = 32 * 1024 * 1024 * 8  # the contest's 32 x 1024 x 1024 int64 fill

_perf_counter_ns = time.perf_counter_ns
_cuda_available = torch.cuda.is_available()
# Waits for all work on the current device (the worker's only device). CPU builds lack it.
_cuda_synchronize = getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize)
_CudaEvent = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_query = torch.cuda.Event.query
_event_elapsed_ms = torch.cuda.Event.elapsed_time


@dataclass(frozen=True)
class Measurement:
    """One timed repeat. ``tail_ns`` is how long the device stayed busy after the kernel's own
    stream had finished (only a draining CUDA timer measures it; it is zero otherwise).
    ``witness_ns`` is what the parent's own clock saw of the repeat, from the moment its fresh
    inputs started to land until the worker reported, and ``allowance_ns`` the hand-over share
    of that the parent measured before the kernel was imported (rule ``parent-clock``); both
    are unset where the kernel runs in the evaluator's own process. ``drain_allowance_ns`` is
    the host's round trip through the drain that the parent calibrated, which a tail must
    exceed to count as work left behind (rule ``device-drain``). On a CPU ``cpu_witness_ns`` is
    the run time the parent read the worker's main thread get during the repeat
    (:mod:`evaluator.measure.cpu_witness`) and ``cpu_allowance_ns`` its bookkeeping's share of
    that; unset elsewhere. ``stall_ns`` (CPU runs) is the part of the wall witness the host's
    scheduler took from the parent or the worker's main thread and no run time of the worker's
    accounts for (:func:`evaluator.measure.cpu_witness.host_stall_ns`); zero elsewhere."""

    elapsed_ns: float
    tail_ns: float = 0.0
    witness_ns: float | None = None
    allowance_ns: float = 0.0
    drain_allowance_ns: float = 0.0
    cpu_witness_ns: float | None = None
    cpu_allowance_ns: float = 0.0
    stall_ns: float = 0.0


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

    ``drain=True`` (the hardened default) also follows the device until it is idle: after the
    kernel's stream is done (the ``mid`` event), a device-wide synchronize, then the end event.
    ``elapsed_ns`` is the start-to-mid region, the contest's own, and ``tail_ns`` how long the
    device took from ``mid`` to ``end``: work a kernel left on other streams, plus the host's
    round trip through the synchronize. That round trip is tens of microseconds with a tail of
    hundreds (``reports/h200/2026-12-01-drain-latency.md``), so it is kept out of the timed
    figure; the parent adds a tail beyond the round trip it calibrated (rule ``device-drain``).
    The host polls ``mid`` before the synchronize, so an idle device is seen at once rather
    than after a wake-up from a blocking wait. The contest records the end event straight
    after the calls (``drain=False``, ``--compat``).
    """

    kind = "cuda-events"

    def __init__(self, device: torch.device, drain: bool = True, flush: bool = True) -> None:
        self.device = device
        self.drain = drain
        self._flush = L2Flush(device) if flush else None

    def time(self, run: Callable[[], T]) -> tuple[Measurement, T]:
        _cuda_synchronize()
        if self._flush is not None:
            self._flush()  # queued before the start event: its time is never inside the region
        start, mid, end = (_CudaEvent(enable_timing=True) for _ in range(3))
        _event_record(start)
        result = run()
        if not self.drain:
            _event_record(end)
            _cuda_synchronize()
            return Measurement(_event_elapsed_ms(start, end) * 1e6), result
        _event_record(mid)
        while not _event_query(mid):
            pass
        _cuda_synchronize()
        _event_record(end)
        _cuda_synchronize()
        return Measurement(_event_elapsed_ms(start, mid) * 1e6, _event_elapsed_ms(mid, end) * 1e6), result


class CpuClockTimer:
    """The monotonic host clock, for CPU runs (no cache flush: there is no device cache to
    settle, and CPU figures are labelled as CPU timings wherever they appear)."""

    kind = "cpu-clock"

    def time(self, run: Callable[[], T]) -> tuple[Measurement, T]:
        start = _perf_counter_ns()
        result = run()
        return Measurement(float(_perf_counter_ns() - start)), result


def make_timer(device: torch.device, drain: bool = True, flush: bool = True) -> Timer:
    """The timer for ``device``: CUDA events on a GPU, the host clock on the CPU. Without
    ``flush`` the L2 is left alone (a hardened parent flushes it itself before each repeat)."""
    if device.type == "cuda":
        return CudaEventTimer(device, drain=drain, flush=flush)
    return CpuClockTimer()
