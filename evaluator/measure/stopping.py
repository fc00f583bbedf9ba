"""When to stop repeating a timed case: small rule objects over the samples so far.

The loop that calls a rule owns the hard caps (repeat count and wall clock); a rule only says
when the samples are good enough or the case's time budget is spent. Rules are pure
functions of their inputs, so they are tested on made-up sample lists.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from evaluator.measure.stats import Stats

__all__ = ["BlockRule", "ContestRule", "RunningSums", "StoppingRule"]


class StoppingRule(Protocol):
    def should_stop(self, samples_ns: Sequence[float], elapsed_s: float) -> bool:
        """True once no further repeat is wanted."""
        ...


@dataclass(frozen=True)
class ContestRule:
    """The contest's rule (docs/problem.md §4): once there are at least ``min_samples`` samples and more
    than ``min_elapsed_s`` of wall time has passed, stop when the relative standard error is
    under ``err_rel`` or when the summed kernel time exceeds ``budget_s``."""

    budget_s: float
    err_rel: float = 1e-3
    min_samples: int = 3
    min_elapsed_s: float = 0.1

    def should_stop(self, samples_ns: Sequence[float], elapsed_s: float) -> bool:
        if len(samples_ns) < self.min_samples or elapsed_s <= self.min_elapsed_s:
            return False
        stats = Stats.from_samples(samples_ns)
        return stats.rel_err < self.err_rel or stats.mean_ns * stats.runs > self.budget_s * 1e9

    def stops(self, samples_ns: torch.Tensor, elapsed_s: torch.Tensor,
              before: RunningSums | None = None) -> tuple[torch.Tensor, RunningSums]:
        """:meth:`should_stop` after every repeat of many runs at once, for predictions that play
        the rule over hundreds of made-up runs (:mod:`evaluator.estimate`).

        ``samples_ns`` is ``runs x repeats`` (float64): the next repeats of every run, following
        those ``before`` summed (none: these are the first); ``elapsed_s`` the wall time after
        each of them. Returns whether the rule stops after each (bool, ``runs x repeats``) and
        the sums to continue from, so long runs can be played a block of repeats at a time.
        Sums are taken about each run's first sample, so samples far from zero lose no digits."""
        origin = samples_ns[..., :1] if before is None else before.origin
        done = 0 if before is None else before.count
        count = torch.arange(done + 1, done + samples_ns.shape[-1] + 1, dtype=samples_ns.dtype,
                             device=samples_ns.device)
        shifted = samples_ns - origin
        s1, s2 = shifted.cumsum(-1), (shifted * shifted).cumsum(-1)
        if before is not None:
            s1, s2 = s1 + before.s1, s2 + before.s2
        mean = origin + s1 / count
        variance = ((s2 - s1 * s1 / count) / (count - 1).clamp(min=1)).clamp(min=0)
        rel_err = torch.where(mean > 0, (variance / count).sqrt() / mean, math.inf)
        judged = (count >= self.min_samples) & (elapsed_s > self.min_elapsed_s)
        stop = judged & ((rel_err < self.err_rel) | (mean * count > self.budget_s * 1e9))
        return stop, RunningSums(done + samples_ns.shape[-1], origin, s1[..., -1:], s2[..., -1:])


@dataclass(frozen=True)
class RunningSums:
    """Where :meth:`ContestRule.stops` left a batch of runs: the repeats so far, each run's first
    sample (the origin of its sums), and the sums of its samples and of their squares about it."""

    count: int
    origin: torch.Tensor
    s1: torch.Tensor
    s2: torch.Tensor


@dataclass(frozen=True)
class BlockRule:
    """When a paired comparison (:mod:`evaluator.paired`) has timed a case in enough blocks: once
    every candidate has at least ``min_blocks`` blocks and the standard error of its mean log time
    ratio to the baseline (about the relative error of the ratio) is under ``err_rel``.

    The contest's rule judges one kernel's samples; this one judges what a comparison reports, the
    per-block ratios, in which drift shared by a block has cancelled. The loop owns the caps (a
    block count and a wall-clock budget per case)."""

    err_rel: float = 1e-3
    min_blocks: int = 10

    def __post_init__(self) -> None:
        if not self.err_rel > 0:
            raise ValueError(f"err_rel must be positive, got {self.err_rel}")
        if self.min_blocks < 2:
            raise ValueError(f"min_blocks must be at least 2, got {self.min_blocks}")

    def should_stop(self, log_ratios: Sequence[Sequence[float]]) -> bool:
        """``log_ratios``: per candidate, log(candidate time / baseline time) of each block so far."""
        return all(len(r) >= self.min_blocks and statistics.stdev(r) / math.sqrt(len(r)) < self.err_rel
                   for r in log_ratios)
