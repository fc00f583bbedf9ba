"""Summary statistics of repeat timings, computed as the contest computes them (docs/problem.md §4)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

__all__ = ["BootstrapRule", "Stats", "geomean"]


@dataclass(frozen=True)
class BootstrapRule:
    """What a faster / slower / same verdict from a bootstrap interval needs: the smallest change
    worth naming (``min_change``), the interval's ``confidence``, and ``resamples`` draws from a
    generator seeded with ``seed`` (so a verdict is reproducible). The report's verdict between
    separate runs and a paired comparison's each derive from it with their own defaults."""

    min_change: float = 0.05
    confidence: float = 0.99
    resamples: int = 2000
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.min_change >= 0:
            raise ValueError(f"min_change must be non-negative, got {self.min_change}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be between 0 and 1, got {self.confidence}")
        if self.resamples < 100:
            raise ValueError(f"resamples must be at least 100, got {self.resamples}")


@dataclass(frozen=True)
class Stats:
    """Per-call times of one benchmark case, in nanoseconds.

    ``std_ns`` uses the n-1 denominator and ``err_ns`` is the standard error of the mean,
    ``std / sqrt(runs)``; one sample gives zero for both.
    """

    runs: int
    mean_ns: float
    std_ns: float
    err_ns: float
    best_ns: float
    worst_ns: float

    @classmethod
    def from_samples(cls, samples_ns: Sequence[float]) -> Stats:
        if not samples_ns:
            raise ValueError("cannot summarise zero samples")
        runs = len(samples_ns)
        mean = sum(samples_ns) / runs
        std = math.sqrt(sum((x - mean) ** 2 for x in samples_ns) / (runs - 1)) if runs > 1 else 0.0
        return cls(runs, mean, std, std / math.sqrt(runs), float(min(samples_ns)), float(max(samples_ns)))

    @property
    def rel_err(self) -> float:
        """Standard error over mean; the contest stops repeating once this is under 0.001."""
        return self.err_ns / self.mean_ns if self.mean_ns > 0 else math.inf

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, float | int]) -> Stats:
        return cls(
            int(data["runs"]), float(data["mean_ns"]), float(data["std_ns"]),
            float(data["err_ns"]), float(data["best_ns"]), float(data["worst_ns"]),
        )


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive values (the contest's ranking statistic)."""
    values = list(values)
    if not values or any(v <= 0 for v in values):
        raise ValueError("geometric mean needs positive values")
    return math.exp(sum(math.log(v) for v in values) / len(values))
