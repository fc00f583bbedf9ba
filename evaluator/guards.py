"""The hardening rules: each closes one hole of the contest's evaluator (SPEC §5).

Every rule has a short name that appears in the message of the failure it causes, so a
rejected kernel learns which rule it broke. A check returns that message, or None.
``--compat`` turns every rule off and runs the contest's exact protocol. The rules that need
state of their own live beside this module: ``tamper`` in :mod:`evaluator.tripwire`,
``idle-threads`` in :mod:`evaluator.threadwatch`; ``result-channel`` is enforced by the
runner reading :mod:`evaluator.channel`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import torch

__all__ = [
    "RULES",
    "Hardening",
    "PhysicalFloor",
    "aliasing_problem",
    "input_mutation_problem",
    "kernel_view",
    "output_type_problem",
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
    "settled": "outputs must not change after the kernel has returned and the device is idle",
    "idle-threads": "threads the kernel leaves behind must stay idle between its calls",
    "tamper": "the kernel must not replace what timing, checking and reporting use, nor install hooks "
    "that run its code outside its calls",
    "result-channel": "only the evaluator writes to the result channel (authenticated, in-order messages)",
    "physical-floor": "a case's mean time must not be below what the device's measured bandwidth "
    "and arithmetic rate allow",
}

# Bound at import, before any kernel: the rules below call these, not names a kernel can rebind.
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
    look at one call's input and output; ``tamper`` also hands the kernel its own view of each
    input (see :func:`kernel_view`).
    """

    fresh_inputs: bool = True
    device_drain: bool = True
    output_rules: bool = True
    idle_threads: bool = True
    tamper: bool = True
    physical_floor: bool = True

    @classmethod
    def compat(cls) -> Hardening:
        return cls(**{f.name: False for f in fields(cls)})

    @property
    def is_compat(self) -> bool:
        return self == Hardening.compat()


def kernel_view(t: torch.Tensor) -> torch.Tensor:
    """A new tensor object over ``t``'s memory, to hand to the kernel instead of ``t``.

    The kernel sees the same pointer, shape and content, but attributes it sets on its object
    (say, an instance ``copy_`` or ``untyped_storage`` shadowing the method) never reach the
    evaluator, which keeps using ``t``.
    """
    return _detach(t)


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
            return rule_message("settled", f"output {i} changed after the kernel returned and the device was idle")
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
                f"mean {mean_ns / 1e3:.1f} us is below the physical floor of {floor / 1e3:.1f} us "
                f"for this case on this device (implausible)",
            )
        return None

    @classmethod
    def measure(cls, device: torch.device) -> PhysicalFloor:
        """Measure copy bandwidth and bf16 product rate on ``device`` (about 0.2 s).

        Run before any kernel is imported. Lower precision is allowed inside a kernel, so the
        arithmetic ceiling is four times the bf16 rate (FP4 products where a device has them).
        """
        src = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)

        def best_s(fn: Callable[[], object], reps: int = 5) -> float:
            times = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            return min(times)

        dst.copy_(src)
        a @ b
        copy_s = best_s(lambda: dst.copy_(src))
        gemm_s = best_s(lambda: a @ b)
        return cls(bytes_per_s=2 * src.numel() / copy_s, flops_per_s=4 * 2 * 4096**3 / gemm_s)
