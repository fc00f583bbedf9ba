"""The hardening rules: each closes one hole of the contest's evaluator (docs/problem.md §5).

Every rule has a short name that appears in the message of the failure it causes, so a
rejected kernel learns which rule it broke. A check returns that message, or None.
``--compat`` turns every protocol rule off and runs the contest's exact protocol. Rules enforced
elsewhere: ``result-channel`` by the parent reading :mod:`evaluator.hardening.channel`, ``sandbox`` by the
worker's audit hook and the parent's checks around each worker (:mod:`evaluator.hardening.sandbox`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

__all__ = [
    "RULES",
    "Hardening",
    "PhysicalFloor",
    "aliasing_problem",
    "input_mutation_problem",
    "output_type_problem",
    "parent_clock_problem",
    "plain_output",
    "rule_message",
    "settled_problem",
    "stream_join_problem",
]

# name -> what the rule demands (docs/hardening.md lists the same names).
RULES: dict[str, str] = {
    "fresh-inputs": "every timed repeat runs on fresh input content, made outside the timed region "
    "from seeds drawn at that moment; its outputs must pass the check",
    "device-drain": "the timed region ends only when the whole device is idle",
    "stream-join": "no work may still run on another stream once the kernel's own stream is done",
    "exact-tensor": "the output must be a real tuple of exactly torch.Tensor (no subclass or wrapper)",
    "no-alias": "H and tau must not alias or view the input",
    "input-unchanged": "the kernel must leave its input unchanged",
    "settled": "outputs must not change once they have been handed back (the kernel returned, the device drained)",
    "parent-clock": "a timed repeat the worker reports must account for what the parent's own clock saw of it, "
    "from the moment its inputs landed to the report, less the hand-over measured before the kernel was imported",
    "sandbox": "the kernel's process may not install trace or profile hooks, walk the garbage collector, fork, "
    "signal processes it did not start, write outside its scratch folder, or leave processes behind",
    "result-channel": "only the evaluator writes to the result channel (authenticated, in-order messages)",
    "physical-floor": "a case's mean time must not be below what the device's measured bandwidth "
    "and arithmetic rate allow",
}

# Bound at import: in a compat worker the kernel shares the process and may rebind names.
_detach = torch.Tensor.detach
_untyped_storage = torch.Tensor.untyped_storage
_tuple_len = tuple.__len__
_tuple_item = tuple.__getitem__
_equal = torch.equal


def rule_message(rule: str, detail: str) -> str:
    """A failure message that names the rule it enforces."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}")
    return f"[rule {rule}] {detail}"


@dataclass(frozen=True)
class Hardening:
    """Which rules are on. The default is all of them; :meth:`compat` is the contest's protocol.

    ``output_rules`` covers exact-tensor, no-alias, input-unchanged and settled, which all
    look at one call's input and output. ``isolated`` runs the kernel in a worker that holds
    nothing but the kernel, behind the parent's own inputs, checks and clock (``parent-clock``)
    and the worker's sandbox; off, the whole protocol runs in the kernel's process, as the
    contest's does.
    """

    fresh_inputs: bool = True
    device_drain: bool = True
    output_rules: bool = True
    parent_clock: bool = True
    isolated: bool = True
    physical_floor: bool = True

    @classmethod
    def compat(cls) -> Hardening:
        return cls(**{f.name: False for f in fields(cls)})

    @property
    def is_compat(self) -> bool:
        return self == Hardening.compat()


def _is_pair(output: object) -> bool:
    return issubclass(type(output), tuple) and _tuple_len(output) == 2


def output_type_problem(output: object) -> str | None:
    """exact-tensor: ``isinstance`` admits subclasses and lazy wrappers; demand the real types.

    A pair must be a real tuple (a subclass such as a namedtuple is fine: its items are read
    with ``tuple``'s own accessors) and hold exactly ``torch.Tensor`` objects. Other shapes of
    output are left to the checker, which rejects them with the contest's message.
    """
    if isinstance(output, tuple) and not issubclass(type(output), tuple):
        return rule_message("exact-tensor", f"the output is a {type(output).__qualname__} posing as a tuple")
    if not _is_pair(output):
        return None
    for i, name in enumerate(("H", "tau")):
        value = _tuple_item(output, i)
        if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
            kind = f"{type(value).__module__}.{type(value).__qualname__}"
            return rule_message("exact-tensor", f"{name} is a {kind}, not a torch.Tensor")
    return None


def plain_output(output: object) -> object:
    """The output as the evaluator checks it once :func:`output_type_problem` has passed.

    A pair becomes a plain tuple of new tensor objects over the same memory, so nothing the
    kernel attached to its objects (instance attributes shadowing tensor methods, a tuple
    subclass's ``__iter__``) runs while the evaluator checks them. Anything else is returned
    as it is, for the checker to reject.
    """
    if not _is_pair(output):
        return output
    items = (_tuple_item(output, 0), _tuple_item(output, 1))
    return tuple(_detach(v) if type(v) is torch.Tensor else v for v in items)


def _span(t: torch.Tensor) -> tuple[int, int]:
    storage = _untyped_storage(t)
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def aliasing_problem(inputs: Sequence[torch.Tensor], output: object) -> str | None:
    """no-alias: an output that shares memory with the input changes when the input does.

    ``inputs`` are every tensor object standing for this call's input (the evaluator's and the
    one the kernel was handed, which the kernel could have re-pointed); ``output`` has been
    through :func:`plain_output`.
    """
    if not isinstance(output, tuple):
        return None
    spans = [_span(t) for t in inputs]
    for name, value in zip(("H", "tau"), output, strict=False):
        if type(value) is not torch.Tensor or not value.numel():
            continue
        start, stop = _span(value)
        pairs = zip(inputs, spans, strict=True)
        if any(value.device == t.device and start < hi and lo < stop for t, (lo, hi) in pairs):
            return rule_message("no-alias", f"{name} shares memory with the input")
    return None


def input_mutation_problem(inputs: torch.Tensor, pristine: torch.Tensor) -> str | None:
    """input-unchanged: the contest times repeats on the same input tensors."""
    if not _equal(inputs, pristine):
        return rule_message("input-unchanged", "the kernel modified its input")
    return None


def settled_problem(snapshot: Sequence[torch.Tensor], live: Sequence[torch.Tensor]) -> str | None:
    """settled: outputs still being written after return mean work was deferred past the timer.

    ``snapshot`` holds copies taken as soon as the timed region ended; ``live`` the outputs now.
    """
    for i, (before, after) in enumerate(zip(snapshot, live, strict=True)):
        if not _equal(before, after):
            return rule_message("settled", f"output {i} changed after it was handed back")
    return None


# stream-join thresholds. A repeat's tail (device busy after the kernel's stream finished) is
# at least the host's wake-up from a device synchronize: microseconds, rarely more under load.
STREAM_JOIN_MIN_NS = 100e3
STREAM_JOIN_SHARE = 0.1
STREAM_JOIN_MIN_REPEATS = 3


def stream_join_problem(tails_ns: Sequence[float], repeats_ns: Sequence[float]) -> str | None:
    """stream-join: in every repeat the device stayed busy long after the kernel's own stream.

    ``tails_ns[i]`` is how long after the current stream's last work the device became idle in
    repeat i, and ``repeats_ns[i]`` that repeat's whole elapsed time (all calls). A repeat is
    unjoined when its tail exceeds both 100 us and a tenth of the repeat. The rule fires only
    when every one of at least three repeats is unjoined: host latency is only ever added, and
    it is not added to every repeat, while work left on a side stream is there every time.
    The figure is right either way (the timed region ends with a device drain); the rule
    names the pattern so a kernel author can join the stream.
    """
    if len(tails_ns) < STREAM_JOIN_MIN_REPEATS:
        return None
    excess = [tail - max(STREAM_JOIN_MIN_NS, STREAM_JOIN_SHARE * whole)
              for tail, whole in zip(tails_ns, repeats_ns, strict=True)]
    if min(excess) <= 0:
        return None
    least = min(tails_ns)
    return rule_message(
        "stream-join",
        f"in every repeat the device kept working at least {least / 1e3:.0f} us after the kernel's stream was "
        "done; join side streams into the current stream before returning",
    )


# parent-clock thresholds: a repeat is unaccounted for when the worker claims less than its
# timer's share of what the parent's clock saw beyond the hand-over allowance; the rule fires
# when more than PARENT_CLOCK_REPEATS of a case's repeats (and at least two) are. A host hiccup
# only ever lengthens what the parent sees, in a few repeats; a worker that under-reports does it
# where it gains. An honest claim is the witness less the hand-over, so its share is at least 1
# wherever the hand-over fits its allowance. The CPU's share is fitted: honest blocked_wy and
# cholesky_orhr on the smoke set, under a concurrent test suite, read 1.002 at least, their
# hand-overs 74% of the allowance at most (reports/cpu/2026-12-02-parent-clock-margins.md). The
# GPU's is set from honest row-major and column-major kernels' hand-overs on qr_v2
# (reports/h200/2026-12-02-handover-probe.md) and confirmed by their hardened runs there
# (reports/h200/2026-12-02-parent-clock-margins.md).
PARENT_CLOCK_SHARE = {"cpu-clock": 0.95, "cuda-events": 0.95}
PARENT_CLOCK_REPEATS = 0.25
# The worker's main-thread run time judges a case only from this many witnessed repeats: a host
# that stalls a running thread stretches it, claim and bookkeeping alike, for a burst of repeats,
# and with few repeats a burst of two is past the quarter above (docs/hardening.md, "A second
# witness on the CPU", where the honest run it failed and the exploit it still catches are).
PARENT_CLOCK_CPU_MIN_REPEATS = 8


def parent_clock_problem(measurements: Sequence[Any], share: float) -> str | None:
    """parent-clock: the times a worker reports must fit what the parent's own clock saw.

    Each measurement carries the worker's claim (``elapsed_ns``), the parent's witness of the
    same repeat (``witness_ns``: from the moment its fresh inputs started to land to the
    worker's report, so work done ahead of the worker's clock is inside it) and the hand-over
    share of that (``allowance_ns``, measured before the kernel was imported); on a CPU also the
    host's stall within the witness (``stall_ns``, taken out of it), the run time of the worker's
    main thread, which calls the kernel (``cpu_witness_ns``: a loaded host does not stretch it),
    and its bookkeeping's share of that (``cpu_allowance_ns``). A
    claim below ``share`` of either witness less its allowance (:data:`PARENT_CLOCK_SHARE`, by
    timer) is unaccounted for; the CPU witness counts from :data:`PARENT_CLOCK_CPU_MIN_REPEATS`
    witnessed repeats.
    """
    witnessed = [m for m in measurements if m.witness_ns is not None]
    by_cpu = len(witnessed) >= PARENT_CLOCK_CPU_MIN_REPEATS
    short = [(m, fit) for m in witnessed if (fit := _least_fit(m, by_cpu))[0] < share]
    if len(short) < 2 or len(short) <= PARENT_CLOCK_REPEATS * len(witnessed):
        return None
    worst, (_, cpu) = min(short, key=lambda pair: pair[1][0])
    if cpu:
        saw = (f"in which the worker's main thread ran for {worst.cpu_witness_ns / 1e3:.1f} us of CPU time, "
               f"{worst.cpu_allowance_ns / 1e3:.1f} us of it its bookkeeping")
    else:
        stall = f" and {worst.stall_ns / 1e3:.1f} us the host's stall" if worst.stall_ns else ""
        saw = (f"the parent's clock saw take {worst.witness_ns / 1e3:.1f} us, "
               f"{worst.allowance_ns / 1e3:.1f} us of it the hand-over{stall}")
    return rule_message(
        "parent-clock",
        f"in {len(short)} of {len(witnessed)} repeats the worker reported less than the parent saw: e.g. "
        f"{worst.elapsed_ns / 1e3:.1f} us claimed for a repeat {saw}",
    )


def _least_fit(m: Any, by_cpu: bool) -> tuple[float, bool]:
    """The claim over each witness less its allowance (the wall's also less the host's stall;
    the CPU witness's only ``by_cpu``), the lesser of the two (inf where neither exceeds its
    allowance), and whether it was the CPU witness's."""
    unexplained = m.witness_ns - m.allowance_ns - m.stall_ns
    wall = m.elapsed_ns / unexplained if unexplained > 0 else math.inf
    cpu = math.inf
    if by_cpu and m.cpu_witness_ns is not None and m.cpu_witness_ns > m.cpu_allowance_ns:
        cpu = m.elapsed_ns / (m.cpu_witness_ns - m.cpu_allowance_ns)
    return (cpu, True) if cpu < wall else (wall, False)


@dataclass(frozen=True)
class PhysicalFloor:
    """The least time a case can take on this device, from measured ceilings.

    ``bytes_per_s`` is a measured device-to-device copy rate (bytes read plus written per
    second) and ``flops_per_s`` the fastest arithmetic rate a kernel could use (see
    :meth:`measure`). The floor is the larger of (input bytes / bandwidth) and
    (QR flops / rate), divided by ``slack``. Only the input is counted: it was evicted from
    the L2 before the timed region, so it must come from memory, while a small output can stay
    in the L2 past the end event. No honest kernel comes near the floor; a cached or precomputed
    answer returns in microseconds and falls far below it.
    """

    bytes_per_s: float
    flops_per_s: float
    slack: float = 2.0

    def floor_ns(self, flops: float, input_bytes: float) -> float:
        return max(input_bytes / self.bytes_per_s, flops / self.flops_per_s) * 1e9 / self.slack

    def problem(self, mean_ns: float, flops: float, input_bytes: float) -> str | None:
        floor = self.floor_ns(flops, input_bytes)
        if mean_ns < floor:
            return rule_message(
                "physical-floor",
                f"mean {_ns_text(mean_ns)} is below the physical floor of {_ns_text(floor)} "
                f"for this case on this device (implausible)",
            )
        return None

    @classmethod
    def measure(cls, device: torch.device) -> PhysicalFloor:
        """Measure copy bandwidth and a matrix product's rate on ``device`` (well under a second).

        Run before any kernel is imported. Lower precision is allowed inside a kernel, so the
        arithmetic ceiling is a multiple of the measured rate: on a GPU four times the bf16 rate
        (FP4 products where a device has them), with a copy past the L2. On a CPU see
        :meth:`_measure_host`.
        """
        if device.type != "cuda":
            return cls._measure_host()
        src = torch.empty(256 << 20, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
        dst.copy_(src)
        a @ b
        copy_s = _best_cuda_s(lambda: dst.copy_(src))
        gemm_s = _best_cuda_s(lambda: a @ b)
        return cls(bytes_per_s=2 * src.numel() / copy_s, flops_per_s=4 * 2 * 4096**3 / gemm_s)

    @classmethod
    def _measure_host(cls) -> PhysicalFloor:
        """A CPU's ceilings, from one thread times every CPU of the host: a parallel copy or
        product on a loaded host waits for its slowest thread's turn (a 1 MB copy took 7.7 ms
        instead of 17 us beside a test suite on two cores), which would raise the floor past
        honest kernels. The copy stays in the cache (a CPU run flushes nothing between repeats);
        the product is FP32, counted 32 times over (int8 matrix units such as AMX run up to 32
        times a core's FP32 vector rate)."""
        cpus = os.cpu_count() or 1
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            src = torch.empty(1 << 20, dtype=torch.uint8)
            dst = torch.empty_like(src)
            a, b = torch.randn(512, 512), torch.randn(512, 512)
            dst.copy_(src)
            a @ b
            copy_s = _best_host_s(lambda: dst.copy_(src))
            gemm_s = _best_host_s(lambda: a @ b)
        finally:
            torch.set_num_threads(threads)
        return cls(bytes_per_s=cpus * 2 * src.numel() / copy_s, flops_per_s=cpus * 32 * 2 * 512**3 / gemm_s)


def _ns_text(ns: float) -> str:
    """A duration readable at any scale: a cached answer's mean can be a nanosecond."""
    return f"{ns:.1f} ns" if ns < 1e3 else f"{ns / 1e3:.1f} us"


def _best_cuda_s(fn: Callable[[], object], reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return min(times)


def _best_host_s(fn: Callable[[], object], reps: int = 9) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return max(min(times), 1e-9)
