"""GPU clocks, power and throttle reasons around every timed repeat, read through NVML.

A time means little without the clock it ran at: a GPU at its power cap or thermal limit runs
slower, and a kernel's figure moves with it. Whoever runs the protocol (the parent in a hardened
run, the worker under ``--compat``) reads a :class:`ClockSampler` just before and just after each
timed repeat; the readings (:class:`RepeatClocks`) are kept with the case's samples, and with
``--discard-on-throttle`` a repeat taken while the GPU throttled is left out of the stopping
rule and the statistics (but kept in the results, marked).

NVML is injectable (``nvml=``: any object with the few ``pynvml`` functions used here), so the
tests run on a fake. On the CPU, or where NVML cannot be read, the sampler is a
:class:`NullSampler` that says why (the run records it in its environment as ``clock_sampler``).

A reading is what NVML reports at that instant: a throttle that starts and ends inside a repeat,
between the two readings, is not seen.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

__all__ = [
    "THROTTLING",
    "ClockSample",
    "ClockSampler",
    "ClockSummary",
    "NullSampler",
    "NvmlSampler",
    "RepeatClocks",
    "RepeatLog",
    "open_sampler",
    "reason_names",
    "sampler_for",
]

# NVML's clocks-event (formerly "throttle") reason bits, nvmlClocksEventReason* in nvml.h.
_REASONS = {
    0x1: "GPU idle",
    0x2: "application clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clock setting",
}
#: The reasons that count as throttling: the GPU is held below the clock it would run at by power
#: (SW power cap, HW power brake) or heat (SW and HW thermal slowdown), or by the hardware's
#: slowdown signal (HW slowdown, raised with the thermal and power-brake ones). An idle GPU, clocks
#: set by the application or the administrator, sync boost and the display clock are settings or
#: rest, not a limit a measurement ran into: they are recorded but do not count.
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def reason_names(mask: int) -> list[str]:
    """The reasons set in an NVML bitmask, by name (unknown bits as hex)."""
    names = [name for bit, name in _REASONS.items() if mask & bit]
    unknown = mask & ~sum(_REASONS)
    return [*names, f"0x{unknown:x}"] if unknown else names


@dataclass(frozen=True)
class ClockSample:
    """One NVML reading: SM and memory clocks, board power, and the clocks-event reason bitmask."""

    sm_clock_mhz: int
    mem_clock_mhz: int
    power_w: float
    throttle_reasons: int

    @property
    def throttled(self) -> bool:
        """Whether a reason that counts as throttling (:data:`THROTTLING`) is set."""
        return bool(self.throttle_reasons & THROTTLING)

    def to_dict(self) -> dict[str, Any]:
        return {"sm_clock_mhz": self.sm_clock_mhz, "mem_clock_mhz": self.mem_clock_mhz, "power_w": self.power_w,
                "throttle_reasons": self.throttle_reasons, "throttled": self.throttled}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClockSample:
        return cls(int(data["sm_clock_mhz"]), int(data["mem_clock_mhz"]), float(data["power_w"]),
                   int(data["throttle_reasons"]))


class ClockSampler(Protocol):
    #: "nvml", or "none: <why>" for a sampler that reads nothing.
    description: str

    def read(self) -> ClockSample | None:
        """The device's clocks now; None when nothing could be read."""
        ...


class NullSampler:
    """Reads nothing: the CPU, or a GPU whose NVML cannot be read (``why`` says which)."""

    def __init__(self, why: str) -> None:
        self.description = f"none: {why}"

    def read(self) -> ClockSample | None:
        return None


class NvmlSampler:
    """Reads one device through NVML, given its NVML index (not CUDA's: see :func:`sampler_for`)."""

    description = "nvml"

    def __init__(self, nvml: Any, index: int) -> None:
        self._nvml = nvml
        self._handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def read(self) -> ClockSample | None:
        """The clocks now, or None if NVML fails mid-run (a failed reading must not fail a kernel)."""
        try:
            return self.read_or_raise()
        except self._nvml.NVMLError:
            return None

    def read_or_raise(self) -> ClockSample:
        """The clocks now; NVML's error when it fails (opening a sampler proves a device with it)."""
        nvml, handle = self._nvml, self._handle
        return ClockSample(
            sm_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            mem_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
            power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,  # NVML reports milliwatts
            throttle_reasons=int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        )


def _plain_uuid(uuid: str | bytes) -> str:
    """``GPU-6f6c3f8a-...`` (NVML) and ``6f6c3f8a-...`` (torch) as one comparable form."""
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    return text.removeprefix("GPU-").replace("-", "").lower()


def open_sampler(uuid: str, nvml: Any = None) -> ClockSampler:
    """A sampler of the GPU with this UUID (NVML and CUDA number devices differently, and
    ``CUDA_VISIBLE_DEVICES`` renumbers them; the UUID is the same for both), proven by one reading;
    a :class:`NullSampler` saying why when pynvml is missing or NVML fails. ``nvml``: the
    ``pynvml`` module, or a stand-in for tests."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:
            return NullSampler(f"pynvml is not installed ({exc})")
    try:
        nvml.nvmlInit()
        wanted = _plain_uuid(uuid)
        for index in range(nvml.nvmlDeviceGetCount()):
            if _plain_uuid(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index))) == wanted:
                sampler = NvmlSampler(nvml, index)
                sampler.read_or_raise()
                return sampler
    except nvml.NVMLError as exc:
        return NullSampler(f"NVML: {exc}")
    return NullSampler(f"NVML lists no GPU with UUID {uuid}")


def sampler_for(device: torch.device, nvml: Any = None) -> ClockSampler:
    """The sampler for a torch device: NVML's for a CUDA device, a :class:`NullSampler` on the CPU."""
    if device.type != "cuda":
        return NullSampler(f"{device.type} device")
    if not torch.cuda.is_available():
        return NullSampler("no CUDA device")
    index = device.index if device.index is not None else torch.cuda.current_device()
    return open_sampler(str(torch.cuda.get_device_properties(index).uuid), nvml)


@dataclass(frozen=True)
class RepeatClocks:
    """The readings around one timed repeat: ``repeat`` is its number in the case (from 0),
    ``sample_ns`` its time per call, ``discarded`` whether the stopping rule and the statistics
    left it out (``--discard-on-throttle``). Either reading may be missing (NVML failed)."""

    repeat: int
    sample_ns: float
    before: ClockSample | None
    after: ClockSample | None
    discarded: bool = False

    @property
    def readings(self) -> tuple[ClockSample, ...]:
        return tuple(s for s in (self.before, self.after) if s is not None)

    @property
    def throttled(self) -> bool:
        """Whether the GPU throttled at either reading."""
        return any(s.throttled for s in self.readings)

    def to_dict(self) -> dict[str, Any]:
        return {"repeat": self.repeat, "sample_ns": self.sample_ns,
                "before": self.before.to_dict() if self.before else None,
                "after": self.after.to_dict() if self.after else None, "discarded": self.discarded}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RepeatClocks:
        def sample(key: str) -> ClockSample | None:
            return ClockSample.from_dict(data[key]) if data.get(key) else None

        return cls(int(data["repeat"]), float(data["sample_ns"]), sample("before"), sample("after"),
                   bool(data.get("discarded", False)))


class RepeatLog:
    """One timed case's repeats as the clocks saw them, and which of its samples count.

    The protocol reads :meth:`read` before a repeat and hands the reading to :meth:`add` after
    it; with ``discard_throttled`` a repeat throttled at either reading is discarded.
    A sampler that reads nothing leaves no records and discards nothing.
    """

    def __init__(self, sampler: ClockSampler, discard_throttled: bool = False) -> None:
        self.sampler = sampler
        self.discard_throttled = discard_throttled
        self.records: list[RepeatClocks] = []
        self._repeats = 0

    def read(self) -> ClockSample | None:
        return self.sampler.read()

    def add(self, before: ClockSample | None, sample_ns: float) -> None:
        """Record the repeat just timed: ``before`` as read before it, a reading now after it."""
        after = self.sampler.read()
        if before is not None or after is not None:
            record = RepeatClocks(self._repeats, sample_ns, before, after)
            self.records.append(replace(record, discarded=self.discard_throttled and record.throttled))
        self._repeats += 1

    def kept(self, samples_ns: Iterable[float]) -> list[float]:
        """The samples (one per repeat, in order) that were not discarded."""
        discarded = {r.repeat for r in self.records if r.discarded}
        return [s for i, s in enumerate(samples_ns) if i not in discarded]

    def all_discarded(self) -> str | None:
        """Why a case has no sample left, when every repeat was discarded; else None."""
        if self._repeats and len(self.records) == self._repeats and all(r.discarded for r in self.records):
            return (f"every one of its {self._repeats} timed repeats was taken while the GPU throttled and was "
                    "discarded (--discard-on-throttle): no time to report")
        return None


@dataclass(frozen=True)
class ClockSummary:
    """Clock readings in a few figures: how many repeats were read, the SM clock's minimum,
    median and maximum and the memory clock's median over every reading, the highest power, how
    many repeats throttled and were discarded, and the throttling reasons seen (a bitmask)."""

    repeats: int
    sm_min_mhz: int
    sm_median_mhz: float
    sm_max_mhz: int
    mem_median_mhz: float
    power_max_w: float
    throttled: int
    discarded: int
    reasons: int

    @classmethod
    def of(cls, records: Sequence[RepeatClocks]) -> ClockSummary | None:
        """None when there is no reading to summarise."""
        readings = [s for r in records for s in r.readings]
        if not readings:
            return None
        sm = [s.sm_clock_mhz for s in readings]
        reasons = 0
        for s in readings:
            reasons |= s.throttle_reasons & THROTTLING
        return cls(len(records), min(sm), statistics.median(sm), max(sm),
                   statistics.median(s.mem_clock_mhz for s in readings),
                   max(s.power_w for s in readings), sum(r.throttled for r in records),
                   sum(r.discarded for r in records), reasons)

    @property
    def throttled_share(self) -> float:
        return self.throttled / self.repeats
