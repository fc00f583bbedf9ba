"""The parent's side of a hardened run: a worker that holds nothing but the kernel.

The parent makes every input and writes it into memory it owns and the worker maps
(:mod:`evaluator.handover`), flushes the L2 itself, asks the worker for one call or one timed
repeat at a time, and reads the outputs back from its own buffers (:mod:`evaluator.delivery`).
The worker reports only what it cannot help reporting: the CUDA-event time of a repeat (events
must be recorded by the process that launches the work) and the form of each output. Every
reported time is checked against the parent's own clock (:meth:`RemoteExecutor.timed`, rule
``parent-clock``), with a hand-over allowance measured before the kernel was imported, when the
worker was still the evaluator's own code.

Commands go to the worker's stdin as length-prefixed pickles (the parent only ever writes
pickles, never reads one); replies come back on the authenticated result channel as JSON.
"""

from __future__ import annotations

import functools
import json
import math
import os
import pickle
import select
import signal
import struct
import subprocess
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any, TypeVar

import torch

from evaluator.delivery import received, snapshot_all
from evaluator.execution import Handed, KernelError, Profile, Returned, WorkerGone
from evaluator.handover import HandoverArena
from evaluator.hardening.channel import ChannelError, Reader
from evaluator.hardening.guards import rule_message
from evaluator.measure.cpu_witness import CpuReading, MainThreadClock, alone, host_stall_ns
from evaluator.measure.ledger import Ledger
from evaluator.measure.timing import L2Flush, Measurement, synchronize
from evaluator.workers import SPAWNED

T = TypeVar("T")

__all__ = ["Allowance", "OutputTail", "RemoteExecutor", "WorkerLink", "copy_ns_per_byte", "frame"]

_TAIL_BYTES = 4000
# Messages read ahead of the parent: a hardened worker answers one command at a time, a compat
# worker streams a case's progress; far more than that is a worker exhausting the parent's memory.
_MAX_PENDING = 10_000
_CALIBRATION_REPEATS = 12
_CALIBRATION_INPUTS = 32
# Each calibrated figure is a round's 75th percentile, measured again until a round confirms the
# quietest before it (within this factor) or the rounds run out; the quietest is kept. A burst of
# host load only ever lengthens a round; one round alone let an exploit's 1 ns claims against
# 31 ms repeats through on CI's two-core machine (docs/hardening.md, "One timed repeat, hardened").
_CALIBRATION_ROUNDS = 4
_CALIBRATION_AGREEMENT = 1.25
# The allowance is this many times the hand-over the parent measured (its 75th percentile), plus
# a floor for host scheduling.
_ALLOWANCE_FACTOR = 2.0
_ALLOWANCE_FLOOR_NS = {"cuda": 200e3, "cpu": 10e6}  # host scheduling: a loaded 2-core CPU box is slow
# The bytes term: inputs in at a plain copy's rate, outputs back at a transposing copy's (an
# output in LAPACK's column-major layout, as torch.geqrf returns, is copied back transposing),
# each timed on a buffer past the L2 (an L2-sized one reads fast) and counted this many times over:
# the heavy cases' hand-overs on an H200, row-major and column-major, in
# reports/h200/2026-12-02-handover-probe.md.
_COPY_FACTOR = 1.25
_COPY_BYTES = {"cuda": 256 << 20, "cpu": 16 << 20}
# The drain's round trip is calibrated with the device busy for about a millisecond, so the host
# waits in its synchronize as it does behind a real kernel; the allowance is twice its 75th
# percentile plus a floor (reports/h200/2026-12-01-drain-latency.md).
_DRAIN_BUSY_CYCLES = 2_000_000
_DRAIN_FLOOR_NS = 20e3
# The CPU witness's allowance (CPU runs): twice the main thread's calibrated run time per repeat
# and per call, and its outputs' copy at the transposing rate, plus this floor for what a loaded
# host's interrupts and cache misses add. Honest bookkeeping under a concurrent test suite took at
# most 31% of it (reports/cpu/2026-12-03-main-thread-witness.md; docs/hardening.md, "A second
# witness on the CPU").
_CPU_ALLOWANCE_FLOOR_NS = 1e6


def frame(message: dict[str, Any]) -> bytes:
    """One command as the worker reads it: a 4-byte length, then the pickle."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack("<I", len(body)) + body


class OutputTail:
    """The last few kilobytes of a worker's stdout and stderr (a kernel may print megabytes)."""

    def __init__(self) -> None:
        self._data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> int:
        self.total += len(chunk)
        self._data += chunk
        del self._data[:-_TAIL_BYTES]
        return len(chunk)

    def text(self) -> str:
        text = self._data.decode(errors="replace").strip()
        return ("..." if self.total > _TAIL_BYTES else "") + text


class WorkerLink:
    """Commands to one worker and its replies, within the stage's deadline.

    Every failure of the link itself (the worker died, went silent past the deadline, or broke
    the channel) raises :class:`WorkerGone`, which ends the stage rather than one case.
    """

    def __init__(self, proc: subprocess.Popen[bytes], channel_fd: int, key: str, deadline: float,
                 limit_s: float, mode: str) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        self.proc = proc
        self.output = OutputTail()
        self._channel_fd = channel_fd
        self._out_fd = proc.stdout.fileno()
        self._reader = Reader(key)
        self._pending: list[dict[str, Any]] = []
        self._deadline = deadline
        self._limit = f"exceeded the {limit_s:.0f} s limit of {mode} mode"
        # Called after each second the worker stays silent: the caller's progress clock keeps ticking.
        self.on_wait: Callable[[], None] | None = None
        self._interrupted: KeyboardInterrupt | None = None

    def ready(self) -> None:
        """Wait for the worker's first message: its imports are done."""
        message = self.receive()
        if message.get("event") != "ready":
            raise WorkerGone("fail", rule_message("result-channel", f"expected 'ready', got {message!r:.80}"))

    def send_line(self, job: dict[str, Any]) -> None:
        """The job, the worker's first stdin line (JSON)."""
        self._write((json.dumps(job) + "\n").encode())

    def send(self, message: dict[str, Any]) -> None:
        self._write(frame(message))

    def _write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise self._gone() from None

    def receive(self) -> dict[str, Any]:
        """The next message; a kernel's exception comes back as :class:`KernelError`. A Ctrl-C while
        waiting is raised again by every later wait, so cleanup that talks to the worker (a release
        in a ``finally``) cannot wait on a hung kernel until the time limit."""
        if self._interrupted is not None:
            raise self._interrupted
        while not self._pending:
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerGone("timeout", self._limit)
            try:
                ready, _, _ = select.select([self._channel_fd, self._out_fd], [], [], min(remaining, 1.0))
                if not ready and self.on_wait is not None:
                    self.on_wait()
            except KeyboardInterrupt as stop:
                self._interrupted = stop
                raise
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                if fd == self._out_fd:
                    self.output.add(chunk)
                    continue
                if not chunk:
                    raise self._gone()
                try:
                    self._pending += self._reader.feed(chunk)
                except ChannelError as exc:
                    raise WorkerGone("fail", rule_message("result-channel", str(exc))) from None
                if len(self._pending) > _MAX_PENDING:
                    raise WorkerGone("fail", rule_message("result-channel", "the worker floods the channel"))
        message = self._pending.pop(0)
        if message.get("event") == "raised":
            raise KernelError(str(message.get("message", "the kernel raised")))
        if message.get("event") == "error":
            raise WorkerGone("error", str(message.get("message", "worker error")))
        if message.get("event") == "refused":
            raise WorkerGone("fail", str(message.get("message", rule_message("sandbox", "refused"))))
        return message

    def ask(self, message: dict[str, Any], expect: str) -> dict[str, Any]:
        self.send(message)
        reply = self.receive()
        if reply.get("event") != expect:
            raise WorkerGone("fail", rule_message("result-channel", f"expected a {expect!r} reply, got {reply!r:.80}"))
        return reply

    def _gone(self) -> WorkerGone:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            reason = "the worker closed its result channel"
        elif code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            reason = f"the worker was killed by {name}"
        else:
            reason = f"the worker exited with code {code}"
        tail = self.output.text()
        return WorkerGone("crash", f"{reason} before finishing" + (f"; its output ended with:\n{tail}" if tail else ""))


@dataclass(frozen=True)
class Allowance:
    """The hand-over share of a repeat the parent witnesses, measured before the kernel was
    imported: a fixed part (flush, messages, events), a part per call (the worker's bookkeeping
    and delivery of one output), and the bytes moved: fresh inputs in (``input_ns_per_byte``)
    and outputs back (``output_ns_per_byte``, a transposing copy's rate).
    ``drain_ns`` is the host's round trip through the worker's device drain when nothing is
    left running (zero without CUDA): a tail beyond it is work the kernel left behind."""

    fixed_ns: float
    per_call_ns: float
    input_ns_per_byte: float
    output_ns_per_byte: float
    drain_ns: float = 0.0
    cpu_fixed_ns: float = 0.0
    cpu_per_call_ns: float = 0.0

    def of(self, calls: int, input_bytes: int, output_bytes: int) -> float:
        return (self.fixed_ns + calls * self.per_call_ns + input_bytes * self.input_ns_per_byte
                + output_bytes * self.output_ns_per_byte)

    def cpu_of(self, calls: int, output_bytes: int) -> float:
        """The worker's own CPU time in a repeat beside the kernel's: its bookkeeping and the
        copy of the outputs into the parent's buffers (the parent writes the inputs itself)."""
        return self.cpu_fixed_ns + calls * self.cpu_per_call_ns + output_bytes * self.output_ns_per_byte


@functools.cache
def copy_ns_per_byte(device: torch.device) -> tuple[float, float]:
    """Nanoseconds per byte written by a plain and by a transposing copy on ``device``, each the
    best of three, on matrices past the L2 (an L2-sized buffer copies faster than memory does).
    A property of the device: measured once per process, its buffers given back to the device."""
    side = math.isqrt(_COPY_BYTES[device.type] // 64)  # 16 float32 matrices
    src = torch.empty(16, side, side, device=device)
    dst = torch.empty_like(src)
    rates = _best_copy_ns(dst, src) / dst.nbytes, _best_copy_ns(dst, src.mT) / dst.nbytes
    del src, dst
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rates


def _best_copy_ns(dst: torch.Tensor, src: torch.Tensor) -> float:
    best = float("inf")
    for _ in range(3):
        synchronize()
        start = time.perf_counter_ns()
        dst.copy_(src)
        synchronize()
        best = min(best, time.perf_counter_ns() - start)
    return max(best, 1.0)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _quietest(repeat: Callable[[], tuple[float, ...]]) -> tuple[float, ...]:
    """Per figure ``repeat`` returns, the 75th percentile of ``_CALIBRATION_REPEATS`` calls, from
    the quietest round: rounds are measured until the first figure of one agrees with the
    quietest before it within ``_CALIBRATION_AGREEMENT`` (the quiet level seen twice), at most
    ``_CALIBRATION_ROUNDS``."""
    least: tuple[float, ...] | None = None
    for _ in range(_CALIBRATION_ROUNDS):
        figures = list(zip(*(repeat() for _ in range(_CALIBRATION_REPEATS)), strict=True))
        latest = tuple(_quantile(f, 0.75) for f in figures)
        if least is None:
            least = latest
            continue
        agrees = latest[0] <= _CALIBRATION_AGREEMENT * least[0] and least[0] <= _CALIBRATION_AGREEMENT * latest[0]
        least = tuple(map(min, least, latest))
        if agrees:
            break
    assert least is not None
    return least


class RemoteExecutor:
    """Runs the kernel in a worker (see the module docstring) for the run modes."""

    def __init__(self, link: WorkerLink, device: torch.device, arena: HandoverArena, rules: bool,
                 clock: Callable[[], int] = time.perf_counter_ns, ledger: Ledger | None = None,
                 mirror: bool = False) -> None:
        self.link = link
        self.mirror = mirror
        self.mirror_declined: str | None = None  # why the worker first declined a mirror check
        self.ledger = ledger or Ledger()
        self.device = device
        self.arena = arena
        self.rules = rules
        self.timer_kind = "cuda-events" if device.type == "cuda" else "cpu-clock"
        self._flush = L2Flush(device) if device.type == "cuda" else None
        self._clock = clock
        self._cpu = MainThreadClock.of(link.proc.pid) if device.type == "cpu" else None
        self._ids = count()
        self.allowance: Allowance | None = None

    # -- before the kernel is imported -------------------------------------------------------

    def calibrate(self) -> Allowance:
        """Time the hand-over while the worker is still only the evaluator: null repeats, and
        repeats of a built-in kernel over many small inputs (for the per-call part)."""
        with self.ledger.timing("calibration"):
            return self._calibrate()

    def _calibrate(self) -> Allowance:
        fixed, cpu_fixed = _quietest(lambda: self._witness(None, lambda: None, deliver=False).times)
        tiny = self.hand([torch.zeros(1, 4, 4, device=self.device)] * _CALIBRATION_INPUTS)
        try:
            busy, cpu_busy = _quietest(lambda: self._witness(tiny, lambda: None, deliver=True, builtin=True).times)
        finally:
            self.release(tiny)
        per_call = max(0.0, busy - fixed) / _CALIBRATION_INPUTS
        cpu_per_call = max(0.0, cpu_busy - cpu_fixed) / _CALIBRATION_INPUTS
        floor = _ALLOWANCE_FLOOR_NS[self.device.type]
        plain, transposing = copy_ns_per_byte(self.device)
        self.allowance = Allowance(_ALLOWANCE_FACTOR * fixed + floor, _ALLOWANCE_FACTOR * per_call,
                                   _COPY_FACTOR * plain, _COPY_FACTOR * transposing, self._drain_round_trip(),
                                   _ALLOWANCE_FACTOR * cpu_fixed + _CPU_ALLOWANCE_FLOOR_NS,
                                   _ALLOWANCE_FACTOR * cpu_per_call)
        return self.allowance

    def _drain_round_trip(self) -> float:
        """The drain's tail behind a device kept busy by the worker's built-in kernel, which
        leaves nothing behind: the host's round trip alone (zero off CUDA, where nothing drains)."""
        if self.device.type != "cuda":
            return 0.0
        one = self.hand([torch.zeros(1, 4, 4, device=self.device)])
        try:
            (tail,) = _quietest(lambda: (_duration(self._witness(one, lambda: None, deliver=False, builtin=True,
                                                                 busy_cycles=_DRAIN_BUSY_CYCLES).reply, "tail_ns"),))
        finally:
            self.release(one)
        return _ALLOWANCE_FACTOR * tail + _DRAIN_FLOOR_NS

    def load(self, contestant: dict[str, str]) -> None:
        """Import the kernel in the worker (its sandbox closes first); a kernel that cannot be
        loaded ends the stage with the worker's message."""
        with self.ledger.timing("load"):
            handover = self.arena.folder
            self.link.ask({"op": "load", "contestant": contestant,
                           "handover": str(handover) if handover else None}, "loaded")

    def axes(self) -> dict[str, Any]:
        """The loaded kernel's plan axes, or the ``problem`` with them, as the worker reads them
        (:func:`evaluator.axes.axes_reply`): data for the parent to check, never trusted as code."""
        return self.link.ask({"op": "axes"}, "axes")

    def configure(self, params: dict[str, Any]) -> None:
        """Set the kernel's knobs for the calls that follow (a sweep's next variant); a
        ``configure`` that raises comes back as :class:`KernelError`."""
        with self.ledger.timing("load"):
            self.link.ask({"op": "configure", "params": params}, "configured")

    # -- the Executor interface ---------------------------------------------------------------

    def hand(self, tensors: Sequence[torch.Tensor]) -> Handed:
        inputs, specs, outputs, out_specs = [], [], [], []
        for t in tensors:
            buffer, spec = self.arena.new(tuple(t.shape))
            buffer.copy_(t)
            inputs.append(buffer)
            specs.append(spec)
            batch, n = t.shape[0], t.shape[-1]
            (h, h_spec), (tau, tau_spec) = self.arena.new((batch, n, n)), self.arena.new((batch, n))
            outputs.append((h, tau))
            out_specs.append((h_spec, tau_spec))
        synchronize()
        token = next(self._ids)
        self.link.ask({"op": "hand", "id": token, "inputs": specs, "outputs": out_specs}, "handed")
        kept = list(zip(inputs, specs, strict=True))
        for pair, spec_pair in zip(outputs, out_specs, strict=True):
            kept += zip(pair, spec_pair, strict=True)
        return Handed(inputs, _Binding(token, outputs, kept))

    def call(self, handed: Handed, index: int, profile: Profile = "") -> Returned:
        binding = _binding(handed)
        reply = self.link.ask({"op": "call", "id": binding.token, "index": index, "profile": profile,
                               "rules": self.rules}, "returned")
        returned = self._returned(reply["form"], binding.outputs[index])
        returned.table = str(reply.get("table", ""))
        return returned

    def timed(self, handed: Handed, install: Callable[[], None], deliver: bool) -> tuple[Measurement, list[Returned]]:
        """One timed repeat of ``handed``'s calls (``install`` lays its fresh content in first).
        With ``deliver`` the outputs come back to be checked; with ``mirror`` too, before the repeat
        the worker runs the last check again in its own process (a mirror check; it declines off
        CUDA), as the contest's process has just checked there: outside the witness, so the rule
        ``parent-clock`` does not see it."""
        if deliver and self.mirror:
            with self.ledger.timing("mirror_check"):
                mirrored = self.link.ask({"op": "mirror", "id": _binding(handed).token}, "mirrored")
            if not mirrored.get("ran") and self.mirror_declined is None:
                self.mirror_declined = str(mirrored.get("why", "no reason given"))
                warnings.warn(f"--mirror-check: the worker declined a mirror check ({self.mirror_declined}); "
                              "a repeat without one times as a plain hardened repeat", RuntimeWarning, stacklevel=2)
        witnessed = self._witness(handed, install, deliver)
        reply = witnessed.reply
        binding = _binding(handed)
        with self.ledger.timing("check"):
            outputs = self._timed_outputs(reply, binding) if deliver else []
        input_bytes = sum(t.nbytes for t in handed.tensors)
        output_bytes = sum(h.nbytes + tau.nbytes for h, tau in binding.outputs) if deliver else 0
        assert self.allowance is not None, "calibrate() first"
        tail_ns = _duration(reply, "tail_ns")
        # device-drain: the kernel's stream region, plus whatever the device still ran beyond the
        # host's own round trip through the drain (work left on other streams counts).
        elapsed_ns = _duration(reply, "elapsed_ns") + max(0.0, tail_ns - self.allowance.drain_ns)
        allowance_ns = self.allowance.of(len(handed.tensors), input_bytes, output_bytes)
        cpu_allowance_ns = self.allowance.cpu_of(len(handed.tensors), output_bytes)
        witness_ns = witnessed.wall_ns
        stall_ns = 0.0 if witnessed.readings is None else host_stall_ns(*witnessed.readings, elapsed_ns)
        if stall_ns and not self._alone(witnessed.readings[0]):
            stall_ns = 0.0
        measurement = Measurement(elapsed_ns, tail_ns, witness_ns, allowance_ns, self.allowance.drain_ns,
                                  witnessed.cpu_ns, cpu_allowance_ns, stall_ns)
        kernel_ns = min(measurement.elapsed_ns, witness_ns)
        self.ledger.add("kernel", kernel_ns / 1e9)
        self.ledger.add("flush", witnessed.flush_ns / 1e9)
        self.ledger.add("handover", max(0.0, witness_ns - kernel_ns - witnessed.flush_ns) / 1e9)
        return measurement, outputs

    def _timed_outputs(self, reply: dict[str, Any], binding: _Binding) -> list[Returned]:
        """The repeat's outputs, copied at once: what a worker still writes after reporting
        shows as a difference from these copies (rule ``settled``)."""
        forms = reply.get("forms", [])
        if not isinstance(forms, list) or len(forms) != len(binding.outputs):
            raise WorkerGone("fail", rule_message("result-channel", "a repeat reported the wrong number of outputs"))
        returned = [self._returned(f, out) for f, out in zip(forms, binding.outputs, strict=True)]
        for r, copy in zip(returned, snapshot_all([r.output for r in returned]), strict=True):
            r.snapshot = copy
        synchronize()
        return returned

    def release(self, handed: Handed) -> None:
        binding = _binding(handed)
        self.link.ask({"op": "release", "id": binding.token}, "released")
        handed.tensors.clear()
        binding.outputs.clear()
        for tensor, spec in binding.buffers:
            self.arena.give_back(tensor, spec)
        binding.buffers.clear()

    # -- helpers ------------------------------------------------------------------------------

    def _witness(self, handed: Handed | None, install: Callable[[], None], deliver: bool,
                 builtin: bool = False, busy_cycles: int = 0) -> _Witnessed:
        """One timed repeat and the parent's own clock around it: from before the fresh inputs
        start to land (so work done ahead of the worker's clock counts) to the report; on a CPU
        also the run time of the worker's main thread from the command to the report (it waits
        for its commands asleep there, so none of that wait is counted), and the scheduler's
        clocks around the whole repeat (:func:`~evaluator.measure.cpu_witness.host_stall_ns`)."""
        synchronize()  # the parent's own queued work (making the inputs, checking) is not the worker's
        start = self._clock()
        first = self._reading()  # inside the witness, so that every wait it counts is the witness's
        install()
        flush_ns = 0.0
        if self._flush is not None:
            flush_start = self._clock()
            self._flush()  # the parent's own flush: the worker cannot skip it
            synchronize()
            flush_ns = float(self._clock() - flush_start)
        token = None if handed is None else _binding(handed).token
        cpu_before = self._cpu_now()
        reply = self.link.ask({"op": "timed", "id": token, "deliver": deliver, "builtin": builtin,
                               "busy_cycles": busy_cycles, "rules": self.rules}, "timed")
        last = self._reading()
        wall_ns = float(self._clock() - start)
        cpu_ns = None if cpu_before is None or last is None else float(last.main_run_ns - cpu_before)
        return _Witnessed(reply, wall_ns, flush_ns, cpu_ns, None if first is None or last is None else (first, last))

    def _read(self, read: Callable[[MainThreadClock], T]) -> T | None:
        """``read`` of the worker's scheduler clocks; None off the CPU, or once they cannot be read
        (the worker gone, a restricted ``/proc``)."""
        if self._cpu is None:
            return None
        try:
            return read(self._cpu)
        except (OSError, ValueError, IndexError):
            return None

    def _cpu_now(self) -> int | None:
        """The worker's main-thread run time so far."""
        return self._read(MainThreadClock.read)

    def _reading(self) -> CpuReading | None:
        """The scheduler's clocks of the worker and of this thread."""
        return self._read(MainThreadClock.reading)

    def _alone(self, first: CpuReading) -> bool:
        """Whether the worker ran no process of its own in a repeat that began at ``first``: none
        is alive or a zombie now, nothing else was re-parented to us, and no child it reaped
        since ran for a clock tick (read after the scan, so one reaped during it counts too)."""
        return bool(self._read(lambda clock: alone(self.link.proc.pid, SPAWNED)
                               and clock.children_ticks() == first.children_ticks))

    def _returned(self, form: Any, buffers: tuple[torch.Tensor, torch.Tensor]) -> Returned:
        if not isinstance(form, dict):
            raise WorkerGone("fail", rule_message("result-channel", "a malformed output form"))
        try:
            output, problem = received(form, buffers)
        except (KeyError, TypeError, ValueError) as exc:
            raise WorkerGone("fail", rule_message("result-channel", f"a malformed output form: {exc}")) from None
        return Returned(output, problem)


def _duration(reply: dict[str, Any], key: str) -> float:
    """A time the worker reported: a finite, non-negative number of nanoseconds."""
    value = reply.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise WorkerGone("fail", rule_message("result-channel", f"the worker reported {key} = {value!r}"))
    return float(value)


@dataclass(frozen=True)
class _Witnessed:
    """One repeat as the parent saw it (ns): the worker's reply, the wall-clock witness, the
    parent's flush within it, the worker's CPU time, and the scheduler's clocks at the witness's
    two ends (both None off the CPU or where unreadable)."""

    reply: dict[str, Any]
    wall_ns: float
    flush_ns: float
    cpu_ns: float | None
    readings: tuple[CpuReading, CpuReading] | None = None

    @property
    def times(self) -> tuple[float, float]:
        """The witnesses calibration measures: wall and CPU (zero where there is no CPU witness)."""
        return self.wall_ns, self.cpu_ns or 0.0


@dataclass
class _Binding:
    token: int
    outputs: list[tuple[torch.Tensor, torch.Tensor]]
    buffers: list[tuple[torch.Tensor, Any]]


def _binding(handed: Handed) -> _Binding:
    if not isinstance(handed.token, _Binding):
        raise TypeError("these inputs were not handed over by this executor")
    return handed.token
