"""Statistics of a paired comparison (``qrbench compare``): time ratios with confidence intervals
and a faster / slower / same verdict, computed from raw per-repeat samples.

A paired comparison times its contestants in blocks: in each block every contestant runs one
timed repeat on the same fresh content, in a random order (:mod:`evaluator.paired`). Whatever
drifts slowly (clocks, temperature, other load) moves both repeats of a block alike, so a ratio
taken over blocks cancels it. The statistics here keep that pairing:

- a case's ``time_ratio`` is the candidate's mean time over the baseline's (above 1: slower);
- the geometric mean of the per-case ratios is the ratio of the contest's scores (geometric
  means of per-case means), so ``geomean`` answers "how much slower would it rank";
- intervals are percentile bootstrap intervals that resample whole blocks (both contestants'
  repeats of a block together) independently within each case, with a generator seeded by the
  rule's ``seed``, so the same samples always give the same interval.

Given unpaired samples (two separate runs, ``paired=False``), the same bootstrap resamples each
side on its own: the interval then holds the noise between repeats inside each run and nothing
of the drift between the runs, which is why separate runs can read a drift as a difference.

A verdict needs both significance and size, as asv's comparisons do: faster or slower only when
the interval excludes 1 **and** the ratio is at least ``1 + min_change`` away from 1. "same"
means no difference was shown, not that there is none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evaluator.measure.stats import BootstrapRule

__all__ = ["FASTER", "SAME", "SLOWER", "RatioEstimate", "RatioRule"]

FASTER, SLOWER, SAME = "faster", "slower", "same"

#: A case's samples: (baseline per-call times in ns, candidate per-call times in ns).
Pair = tuple[Sequence[float], Sequence[float]]


@dataclass(frozen=True)
class RatioEstimate:
    """A candidate's time over its baseline's: ``time_ratio`` above 1 is slower. ``low`` and
    ``high`` bound it at the rule's confidence and are None when a case has fewer than two
    samples on a side (no noise estimate, so never a difference); ``blocks`` is the fewest
    samples (blocks, when paired) behind any one case."""

    time_ratio: float
    low: float | None
    high: float | None
    verdict: str
    blocks: int

    def to_dict(self) -> dict[str, float | int | str | None]:
        return {"time_ratio": self.time_ratio, "low": self.low, "high": self.high, "verdict": self.verdict,
                "blocks": self.blocks}


@dataclass(frozen=True)
class RatioRule(BootstrapRule):
    """Faster or slower only when the ``confidence`` bootstrap interval of the time ratio excludes
    1 and the ratio differs from 1 by at least ``min_change`` (1% by default: a paired comparison
    has no drift between runs to absorb, so the threshold is the smallest change worth naming);
    else same. ``resamples`` bootstrap draws from a generator seeded with ``seed``."""

    min_change: float = 0.01

    def verdict(self, time_ratio: float, low: float | None, high: float | None) -> str:
        """Slower, faster or same for a ratio and its interval (see the class docstring)."""
        if low is None or high is None:
            return SAME
        if low > 1 and time_ratio >= 1 + self.min_change:
            return SLOWER
        if high < 1 and time_ratio <= 1 / (1 + self.min_change):
            return FASTER
        return SAME

    def case_ratio(self, baseline_ns: Sequence[float], candidate_ns: Sequence[float],
                   paired: bool = True) -> RatioEstimate:
        """One case: the ratio of mean times and its interval."""
        return self.geomean_ratio([(baseline_ns, candidate_ns)], paired)

    def geomean_ratio(self, cases: Sequence[Pair], paired: bool = True) -> RatioEstimate:
        """The geometric mean over ``cases`` of each case's ratio of mean times, with an interval
        from resampling every case at once (blocks when ``paired``, each side alone when not)."""
        if not cases:
            raise ValueError("a ratio needs at least one case")
        sides = [(np.asarray(b, dtype=float), np.asarray(c, dtype=float)) for b, c in cases]
        for base, cand in sides:
            if base.size == 0 or cand.size == 0:
                raise ValueError("a ratio needs samples on both sides of every case")
            if paired and base.size != cand.size:
                raise ValueError(f"paired samples must match block for block, got {base.size} and {cand.size}")
            if np.any(base <= 0) or np.any(cand <= 0):
                raise ValueError("a ratio needs positive times")
        log_ratio = float(np.mean([np.log(cand.mean() / base.mean()) for base, cand in sides]))
        ratio = float(np.exp(log_ratio))
        fewest = min(min(base.size, cand.size) for base, cand in sides)
        if fewest < 2:
            return RatioEstimate(ratio, None, None, SAME, fewest)
        rng = np.random.default_rng(self.seed)
        draws = np.mean([self._log_ratio_draws(base, cand, paired, rng) for base, cand in sides], axis=0)
        tail = (1 - self.confidence) / 2
        low, high = (float(np.exp(q)) for q in np.quantile(draws, [tail, 1 - tail]))
        return RatioEstimate(ratio, low, high, self.verdict(ratio, low, high), fewest)

    def _log_ratio_draws(self, base: np.ndarray, cand: np.ndarray, paired: bool,
                         rng: np.random.Generator) -> np.ndarray:
        """``resamples`` bootstrap draws of log(mean candidate / mean baseline) for one case."""
        base_idx = rng.integers(0, base.size, (self.resamples, base.size))
        cand_idx = base_idx if paired else rng.integers(0, cand.size, (self.resamples, cand.size))
        return np.log(cand[cand_idx].mean(axis=1)) - np.log(base[base_idx].mean(axis=1))
