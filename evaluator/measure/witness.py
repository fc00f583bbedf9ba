"""What the parent's own clock saw of each timed repeat, beside what the worker claimed.

Rule ``parent-clock`` (:func:`evaluator.hardening.guards.parent_clock_problem`) accepts a claim
down to a share of the parent's witness less the calibrated hand-over allowance. How tight that
share can be is a question about honest kernels: how close their claims come to the witness,
case by case, on a given machine. Each timed case keeps its repeats' three figures
(:class:`ParentClock`) in the results file, so that any hardened run on a GPU answers it
(``python -m benchmarks.parent_clock_margin FILE``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evaluator.measure.timing import Measurement

__all__ = ["ParentClock", "ShareSummary"]


@dataclass(frozen=True)
class ShareSummary:
    """A case's claims over the parent's witness less the allowance (the rule's quantity):
    how many repeats had a positive remainder to compare with, and their median, 5th percentile
    and least share."""

    repeats: int
    median: float
    p05: float
    least: float


@dataclass(frozen=True)
class ParentClock:
    """Per timed repeat of one case: the worker's claim, the parent's witness and the
    hand-over allowance, in ns (all the repeat's calls together); on a CPU also the run time of
    the worker's main thread as the parent read it, its bookkeeping's allowance, and the host's
    stall inside the wall witness (:func:`evaluator.measure.cpu_witness.host_stall_ns`; all
    three empty elsewhere)."""

    claimed_ns: tuple[float, ...]
    witness_ns: tuple[float, ...]
    allowance_ns: tuple[float, ...]
    cpu_witness_ns: tuple[float, ...] = ()
    cpu_allowance_ns: tuple[float, ...] = ()
    stall_ns: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not len(self.claimed_ns) == len(self.witness_ns) == len(self.allowance_ns):
            raise ValueError("claims, witnesses and allowances must be given per repeat")
        if self.cpu_witness_ns and not len(self.cpu_witness_ns) == len(self.cpu_allowance_ns) == len(self.claimed_ns):
            raise ValueError("CPU witnesses and allowances must be given per repeat")
        if self.stall_ns and len(self.stall_ns) != len(self.claimed_ns):
            raise ValueError("stalls must be given per repeat")

    @classmethod
    def of(cls, measurements: Sequence[Measurement]) -> ParentClock | None:
        """The witnessed repeats of ``measurements``; None when the kernel ran in the
        evaluator's own process (``--compat``), where nothing witnesses it."""
        witnessed = [m for m in measurements if m.witness_ns is not None]
        if not witnessed:
            return None
        cpu = all(m.cpu_witness_ns is not None for m in witnessed)
        stalled = any(m.stall_ns for m in witnessed)
        return cls(tuple(m.elapsed_ns for m in witnessed), tuple(m.witness_ns for m in witnessed),
                   tuple(m.allowance_ns for m in witnessed),
                   tuple(m.cpu_witness_ns for m in witnessed) if cpu else (),
                   tuple(m.cpu_allowance_ns for m in witnessed) if cpu else (),
                   tuple(m.stall_ns for m in witnessed) if stalled else ())

    def _stalls(self) -> tuple[float, ...]:
        return self.stall_ns or (0.0,) * len(self.claimed_ns)

    def measurements(self) -> list[Measurement]:
        """The witnessed repeats as the rule reads them (the inverse of :meth:`of`, less what a
        results file does not keep: the tail and the drain's allowance, both zero here)."""
        n = len(self.claimed_ns)
        repeats = zip(self.claimed_ns, self.witness_ns, self.allowance_ns, self.cpu_witness_ns or (None,) * n,
                      self.cpu_allowance_ns or (0.0,) * n, self._stalls(), strict=True)
        return [Measurement(c, 0.0, w, a, 0.0, cw, ca, s) for c, w, a, cw, ca, s in repeats]

    def shares(self) -> list[float]:
        """Each repeat's claim over its witness less its allowance and the host's stall (the
        rule's quantity), where that is positive."""
        repeats = zip(self.claimed_ns, self.witness_ns, self.allowance_ns, self._stalls(), strict=True)
        return [c / (w - a - s) for c, w, a, s in repeats if w - a - s > 0]

    def cpu_shares(self) -> list[float]:
        """Each repeat's claim over its main-thread CPU time less its allowance, where that is positive."""
        cpu = zip(self.claimed_ns, self.cpu_witness_ns, self.cpu_allowance_ns, strict=False)  # empty off the CPU
        return [c / (w - a) for c, w, a in cpu if w > a]

    def cpu_unclaimed_over_allowance(self) -> list[float]:
        """Each repeat's CPU time less its claim over its CPU allowance: for an honest kernel, how
        much of that allowance the worker's own bookkeeping really took (at most 1)."""
        cpu = zip(self.claimed_ns, self.cpu_witness_ns, self.cpu_allowance_ns, strict=False)
        return [(w - c) / a for c, w, a in cpu if a > 0]

    def over_witness(self) -> list[float]:
        """Each repeat's claim over its bare witness: at most 1 for a claim the witness contains."""
        return [c / w for c, w in zip(self.claimed_ns, self.witness_ns, strict=True)]

    def unclaimed_over_allowance(self) -> list[float]:
        """Each repeat's witness less its claim and the host's stall, over its allowance: for an honest kernel, how
        much of the allowance the hand-over really took (under 1 where the allowance covered it)."""
        repeats = zip(self.claimed_ns, self.witness_ns, self.allowance_ns, self._stalls(), strict=True)
        return [(w - c - s) / a for c, w, a, s in repeats if a > 0]

    def stall_over_allowance(self) -> list[float]:
        """Each repeat's host stall over its allowance (empty where none was recorded): how far a
        loaded host stretched the witness, in allowances."""
        stalls = zip(self.stall_ns, self.allowance_ns, strict=False)  # empty without stalls
        return [s / a for s, a in stalls if a > 0]

    def summary(self) -> ShareSummary | None:
        """The shares' summary; None when no repeat's witness exceeded its allowance."""
        shares = sorted(self.shares())
        if not shares:
            return None
        return ShareSummary(len(shares), statistics.median(shares), shares[int(0.05 * (len(shares) - 1))], shares[0])

    def to_dict(self) -> dict[str, Any]:
        data = {"claimed_ns": list(self.claimed_ns), "witness_ns": list(self.witness_ns),
                "allowance_ns": list(self.allowance_ns)}
        if self.cpu_witness_ns:
            data |= {"cpu_witness_ns": list(self.cpu_witness_ns), "cpu_allowance_ns": list(self.cpu_allowance_ns)}
        if self.stall_ns:
            data["stall_ns"] = list(self.stall_ns)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParentClock:
        return cls(tuple(map(float, data["claimed_ns"])), tuple(map(float, data["witness_ns"])),
                   tuple(map(float, data["allowance_ns"])), tuple(map(float, data.get("cpu_witness_ns", ()))),
                   tuple(map(float, data.get("cpu_allowance_ns", ()))), tuple(map(float, data.get("stall_ns", ()))))
