"""The hardening rules: each closes one hole of the contest's evaluator (SPEC §5).

Every rule has a short name that appears in the message of the failure it causes, so a
rejected kernel learns which rule it broke. A check returns that message, or None.
``--compat`` turns every rule off and runs the contest's exact protocol.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

import reference
import reference.checker

__all__ = [
    "RULES",
    "Hardening",
    "PhysicalFloor",
    "Tripwire",
    "aliasing_problem",
    "input_mutation_problem",
    "output_type_problem",
    "rule_message",
    "settled_problem",
    "stream_join_problem",
    "thread_problem",
]

# name -> what the rule demands (the README's rule table is generated from the same words).
RULES: dict[str, str] = {
    "fresh-inputs": "every timed repeat runs on fresh input content, made outside the timed region "
    "from seeds drawn at that moment; its outputs must pass the check",
    "device-drain": "the timed region ends only when the whole device is idle",
    "stream-join": "no work may still run on another stream once the kernel's own stream is done",
    "exact-tensor": "H and tau must be exactly torch.Tensor (no subclass or wrapper)",
    "no-alias": "H and tau must not alias or view the input",
    "input-unchanged": "the kernel must leave its input unchanged",
    "settled": "outputs must not change after the kernel has returned and the device is idle",
    "no-threads": "no thread started by the kernel may still run after it returns",
    "tamper": "the kernel must not replace timers, events, synchronize or the checker",
    "result-channel": "only the evaluator writes to the result channel (authenticated messages)",
    "physical-floor": "a case's mean time must not be below what the device's measured bandwidth "
    "and arithmetic rate allow",
}


def rule_message(rule: str, detail: str) -> str:
    """A failure message that names the rule it enforces."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}")
    return f"[rule {rule}] {detail}"


@dataclass(frozen=True)
class Hardening:
    """Which rules are on. The default is all of them; :meth:`compat` is the contest's protocol."""

    fresh_inputs: bool = True
    device_drain: bool = True
    output_rules: bool = True  # exact-tensor, no-alias, input-unchanged, settled
    no_threads: bool = True
    tamper: bool = True
    physical_floor: bool = True

    @classmethod
    def compat(cls) -> Hardening:
        return cls(False, False, False, False, False, False)

    @property
    def is_compat(self) -> bool:
        return self == Hardening.compat()


def output_type_problem(output: object) -> str | None:
    """exact-tensor: ``isinstance`` admits subclasses and lazy wrappers; demand the real type."""
    if not isinstance(output, tuple) or len(output) != 2:
        return None  # the checker gives the contest's message for these
    for name, value in zip(("H", "tau"), output, strict=True):
        if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
            return rule_message("exact-tensor", f"{name} is a {type(value).__module__}.{type(value).__qualname__}")
    return None


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def aliasing_problem(inputs: torch.Tensor, output: object) -> str | None:
    """no-alias: an output that shares memory with the input changes when the input does."""
    if not isinstance(output, tuple):
        return None
    lo, hi = _storage_span(inputs)
    for name, value in zip(("H", "tau"), output, strict=False):
        if type(value) is torch.Tensor and value.device == inputs.device and value.numel():
            start, stop = _storage_span(value)
            if start < hi and lo < stop:
                return rule_message("no-alias", f"{name} shares memory with the input")
    return None


def input_mutation_problem(inputs: torch.Tensor, pristine: torch.Tensor) -> str | None:
    """input-unchanged: the contest times repeats on the same input tensors."""
    if not torch.equal(inputs, pristine):
        return rule_message("input-unchanged", "the kernel modified its input")
    return None


def settled_problem(before: Sequence[torch.Tensor], after: Sequence[torch.Tensor]) -> str | None:
    """settled: outputs still being written after return mean work was deferred past the timer."""
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if not torch.equal(b, a):
            return rule_message("settled", f"output {i} changed after the kernel returned and the device was idle")
    return None


def stream_join_problem(tail_gaps_ns: Sequence[float], means_ns: Sequence[float]) -> str | None:
    """stream-join: the device was busy long after the kernel's own stream had finished.

    ``tail_gaps_ns[i]`` is how long after the current stream's last work the device became idle
    in repeat i. An honest kernel shows only the host's synchronize latency (microseconds).
    """
    if not tail_gaps_ns:
        return None
    gap = sorted(tail_gaps_ns)[len(tail_gaps_ns) // 2]
    mean = sorted(means_ns)[len(means_ns) // 2]
    if gap > max(100e3, 0.1 * mean):
        return rule_message(
            "stream-join",
            f"the device kept working {gap / 1e3:.0f} us (median) after the kernel's stream was done; "
            "join side streams before returning",
        )
    return None


def thread_problem(before: set[threading.Thread]) -> str | None:
    """no-threads: a thread still running after return can finish the work off the clock."""
    new = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    if new:
        names = ", ".join(t.name for t in new)
        return rule_message("no-threads", f"thread(s) started by the kernel still running after it returned: {names}")
    return None


class Tripwire:
    """Remembers the functions timing and checking rely on, to notice a kernel replacing them.

    The timers and the checker call their own saved references, so replacing these names
    changes no figure; the tripwire turns the attempt into a named failure.
    """

    def __init__(self) -> None:
        self._watched = {
            "time.perf_counter": (time, "perf_counter", time.perf_counter),
            "time.perf_counter_ns": (time, "perf_counter_ns", time.perf_counter_ns),
            "time.time": (time, "time", time.time),
            "torch.cuda.synchronize": (torch.cuda, "synchronize", torch.cuda.synchronize),
            "torch.cuda.Event": (torch.cuda, "Event", torch.cuda.Event),
            "torch.cuda.Event.record": (torch.cuda.Event, "record", torch.cuda.Event.record),
            "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time),
            "reference.check": (reference, "check", reference.check),
            "reference.verdict": (reference, "verdict", reference.verdict),
            "reference.checker.verdict": (reference.checker, "verdict", reference.checker.verdict),
            "reference.checker._gated": (reference.checker, "_gated", reference.checker._gated),
        }

    def problem(self) -> str | None:
        changed = [name for name, (owner, attr, original) in self._watched.items()
                   if getattr(owner, attr, None) is not original]
        if changed:
            return rule_message("tamper", f"the kernel replaced {', '.join(changed)}")
        return None


@dataclass(frozen=True)
class PhysicalFloor:
    """The least time a case can take on this device, from measured ceilings.

    ``bytes_per_s`` is a measured device-to-device copy rate and ``flops_per_s`` a measured
    dense matrix-product rate in the fastest precision the contract allows internally; the
    floor is the larger of (least bytes / bandwidth) and (QR flops / rate), divided by
    ``slack`` so that no honest kernel comes near it.
    """

    bytes_per_s: float
    flops_per_s: float
    slack: float = 2.0

    def floor_ns(self, flops: float, min_bytes: float) -> float:
        return max(min_bytes / self.bytes_per_s, flops / self.flops_per_s) * 1e9 / self.slack

    def problem(self, mean_ns: float, flops: float, min_bytes: float) -> str | None:
        floor = self.floor_ns(flops, min_bytes)
        if mean_ns < floor:
            return rule_message(
                "physical-floor",
                f"mean {mean_ns / 1e3:.1f} us is below the physical floor of {floor / 1e3:.1f} us "
                f"for this case on this device (implausible)",
            )
        return None

    @classmethod
    def measure(cls, device: torch.device) -> PhysicalFloor:
        """Measure copy bandwidth and bf16 product rate on ``device`` (about 0.2 s).

        Low-precision work is allowed inside a kernel, so the rate is the bf16 one doubled
        (an fp8 product), the fastest a kernel could legitimately go.
        """
        src = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)

        def best_s(fn: object, reps: int = 5) -> float:
            times = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()  # type: ignore[operator]
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            return min(times)

        dst.copy_(src)
        a @ b
        copy_s = best_s(lambda: dst.copy_(src))
        gemm_s = best_s(lambda: a @ b)
        return cls(bytes_per_s=2 * src.numel() / copy_s, flops_per_s=2 * 2 * 4096**3 / gemm_s)
