"""Comparisons between runs: which run is whose baseline, the noise verdict of every case
against it (faster, slower or same), and whether the runs may be compared at all.

A verdict needs two things, as asv's comparisons do: significance, from a bootstrap confidence
interval of the ratio of mean times drawn from both runs' raw repeat samples, and a minimum
effect, so that a significant 0.3% shift still reads "same". "same" means that no difference was
shown, not that there is none: the interval holds only the repeat-to-repeat noise inside each
run; drift between runs (clocks, temperature, other load on the machine) is not in it, and the
minimum effect is there to absorb it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from evaluator.environment import gpu_key
from evaluator.measure.stats import BootstrapRule
from evaluator.modes import Mode
from evaluator.results import CaseResult, RunResult
from evaluator.shapes import Timing

__all__ = [
    "FASTER",
    "SAME",
    "SLOWER",
    "CaseComparison",
    "Comparison",
    "Entry",
    "NoiseRule",
    "Report",
    "build_report",
    "device_mismatch",
    "run_label",
    "shortened",
]

FASTER, SLOWER, SAME = "faster", "slower", "same"


def run_label(run: RunResult) -> str:
    """A contestant's name, marked when it ran the contest's exact protocol (``--compat``)."""
    return run.contestant["name"] + (" (compat)" if run.compat else "")


# The settings that bound how long a timed pass samples; a run below the contest's is shortened.
_TIMED_PASS = ("benchmark_repeats", "benchmark_budget_s", "leaderboard_repeats", "leaderboard_budget_s")


def shortened(run: RunResult) -> bool:
    """Whether the run's timed passes sampled less than the contest's do (``--budget``,
    ``--repeats`` or a shape file's ``timing``, as recorded in the results): its times are then
    not contest figures. Test runs time nothing and are never shortened."""
    timing = run.shapes.get("timing") or {}
    contest = Timing()
    return run.mode != Mode.TEST and any(timing.get(key, getattr(contest, key)) < getattr(contest, key)
                                      for key in _TIMED_PASS)


@dataclass(frozen=True)
class Comparison:
    """One case against its baseline. ``speedup`` is the baseline's mean time over this run's
    (above 1 is faster); ``low`` and ``high`` bound it at the rule's confidence, and are None
    when either side has fewer than two samples (no noise estimate, so never a difference)."""

    speedup: float
    low: float | None
    high: float | None
    verdict: str


@dataclass(frozen=True)
class NoiseRule(BootstrapRule):
    """Faster or slower only when the ``confidence`` bootstrap interval of the speedup excludes
    1 and the speedup is at least ``1 + min_change`` (or at most its inverse); else same.

    ``resamples`` bootstrap draws from a generator seeded with ``seed``, so a report is
    reproducible. The percentile interval is narrow for very few samples (the contest stops at
    three when they agree closely); the minimum effect guards that case too.
    """

    min_change: float = 0.05

    def compare(self, baseline_ns: Sequence[float], candidate_ns: Sequence[float]) -> Comparison:
        """The verdict of ``candidate_ns`` against ``baseline_ns`` (raw per-repeat times)."""
        base = np.asarray(baseline_ns, dtype=float)
        cand = np.asarray(candidate_ns, dtype=float)
        if base.size == 0 or cand.size == 0:
            raise ValueError("a comparison needs samples on both sides")
        speedup = float(base.mean() / cand.mean())
        if base.size < 2 or cand.size < 2:
            return Comparison(speedup, None, None, SAME)
        rng = np.random.default_rng(self.seed)
        base_means = base[rng.integers(0, base.size, (self.resamples, base.size))].mean(axis=1)
        cand_means = cand[rng.integers(0, cand.size, (self.resamples, cand.size))].mean(axis=1)
        tail = (1 - self.confidence) / 2
        low, high = (float(q) for q in np.quantile(base_means / cand_means, [tail, 1 - tail]))
        verdict = SAME
        if low > 1 and speedup >= 1 + self.min_change:
            verdict = FASTER
        elif high < 1 and speedup <= 1 / (1 + self.min_change):
            verdict = SLOWER
        return Comparison(speedup, low, high, verdict)


@dataclass(frozen=True)
class CaseComparison:
    """A timed case of a run beside the same case of its baseline, when there is one."""

    case: CaseResult
    baseline: CaseResult | None
    comparison: Comparison | None


def _timed_cases(run: RunResult) -> tuple[CaseResult, ...]:
    stage = run.scored_stage
    return stage.cases if stage is not None else ()


def _compare_cases(run: RunResult, base: RunResult | None, rule: NoiseRule) -> tuple[CaseComparison, ...]:
    """Cases match by position and label in the scored stages (the same shape set)."""
    by_key = {(c.index, c.case.label): c for c in _timed_cases(base)} if base is not None else {}
    out = []
    for case in _timed_cases(run):
        other = by_key.get((case.index, case.case.label))
        comparison = None
        if other is not None and case.passed and other.passed and case.samples_ns and other.samples_ns:
            comparison = rule.compare(other.samples_ns, case.samples_ns)
        out.append(CaseComparison(case, other, comparison))
    return tuple(out)


@dataclass(frozen=True)
class Entry:
    """One contestant's latest run in a report, its baseline run and its cases against it."""

    run: RunResult
    baseline: RunResult | None
    cases: tuple[CaseComparison, ...]

    @property
    def label(self) -> str:
        return run_label(self.run)

    @property
    def shapes(self) -> str:
        return str(self.run.shapes.get("name", "?"))

    @property
    def compared(self) -> bool:
        """Whether any case was compared with the baseline."""
        return any(c.comparison is not None for c in self.cases)

    @property
    def speedup(self) -> float | None:
        """Baseline score over this run's score (geometric means), when both were scored."""
        if self.baseline is None or self.baseline.score_s is None or self.run.score_s is None:
            return None
        return self.baseline.score_s / self.run.score_s

    def count(self, verdict: str) -> int:
        return sum(1 for c in self.cases if c.comparison is not None and c.comparison.verdict == verdict)


def device_mismatch(runs: Iterable[RunResult]) -> str | None:
    """A warning when the runs were measured on different GPUs (or CPUs); None when they agree.

    Runs that died before reporting their environment are left out.
    """
    labels_by_key: dict[str, list[str]] = {}
    for run in runs:
        if run.environment:
            labels = labels_by_key.setdefault(gpu_key(run.environment), [])
            if run_label(run) not in labels:
                labels.append(run_label(run))
    if len(labels_by_key) <= 1:
        return None
    detail = "; ".join(f"{key}: {', '.join(labels)}" for key, labels in labels_by_key.items())
    return (f"these results come from different devices ({detail}); times and ratios between them "
            "measure the devices as much as the kernels")


@dataclass(frozen=True)
class Report:
    """What a report shows: the latest run of each contestant with its baseline, every run given
    in the order given (the history), how the baseline was chosen, the device warning, and notes
    on runs that a baseline was asked for but could not be compared with one."""

    entries: tuple[Entry, ...]
    history: tuple[RunResult, ...]
    baseline_text: str
    rule: NoiseRule
    sources: tuple[str, ...]
    warning: str | None
    notes: tuple[str, ...] = ()

    @property
    def nothing_compared(self) -> str | None:
        """Why a requested baseline compared no case at all; None when something was compared
        or no baseline was asked for."""
        if not self.baseline_text or any(e.compared for e in self.entries):
            return None
        if all(e.run.mode == Mode.TEST for e in self.entries):
            return "every run is a test run, which times nothing: report benchmark or leaderboard runs"
        return "no run has a baseline run of its own mode and shape set with timed cases that passed"


def _key(run: RunResult) -> tuple[str, str]:
    """Runs compare only within a shape set and a mode: a test run times nothing, and benchmark
    and leaderboard passes sample differently."""
    return str(run.shapes.get("name")), run.mode


def _latest(history: Sequence[RunResult]) -> list[RunResult]:
    """The last run of each contestant, shape set and mode, in the order each first appears."""
    latest: dict[tuple[str, tuple[str, str]], RunResult] = {}
    for run in history:
        latest[(run_label(run), _key(run))] = run  # a dict keeps first-insertion order
    return list(latest.values())


def build_report(
    history: Sequence[RunResult],
    baseline: str | Sequence[RunResult] | None = None,
    rule: NoiseRule | None = None,
    sources: Sequence[str] = (),
) -> Report:
    """Pair each contestant's latest run with its baseline and compare them case by case.

    ``history`` is every run to report, in any order: runs are ordered by their start time (a
    stable sort, so runs without one keep their place). ``baseline`` is a contestant's name (its latest run
    here is everyone's baseline on the same shape set), runs from an earlier results file (each
    contestant against its own run there: the same protocol if it holds one, else any), or None.
    """
    rule = rule or NoiseRule()
    if not history:
        raise ValueError(f"no runs to report: {', '.join(sources) or 'the input'} holds none")
    history = sorted(history, key=lambda r: r.started_at)
    runs = _latest(history)
    if isinstance(baseline, str):
        reference = {_key(r): r for r in runs if run_label(r) == baseline}
        if not reference:
            names = ", ".join(dict.fromkeys(run_label(r) for r in runs))
            raise ValueError(f"baseline {baseline!r} is not among the reported contestants ({names})")
        pairs = [(r, reference.get(_key(r))) for r in runs]
        text = f"contestant {baseline}"
    else:
        by_label = {(run_label(r), _key(r)): r for r in baseline or ()}
        by_name = {(r.contestant["name"], _key(r)): r for r in baseline or ()}
        pairs = [(r, by_label.get((run_label(r), _key(r))) or by_name.get((r.contestant["name"], _key(r))))
                 for r in runs]
        text = "each contestant's run in the baseline file" if baseline else ""
    notes = tuple(f"{run_label(r)} ({r.mode} on {r.shapes.get('name')}): no baseline run of the same mode and "
                  "shape set, not compared" for r, b in pairs if text and b is None and run_label(r) != baseline)
    pairs = [(r, None if b == r else b) for r, b in pairs]  # a run is not its own baseline
    entries = tuple(Entry(r, b, _compare_cases(r, b, rule)) for r, b in pairs)
    mismatch = device_mismatch([*history, *(b for _, b in pairs if b is not None)])
    return Report(entries, tuple(history), text, rule, tuple(sources), mismatch, notes)

