"""A paired comparison's record (``qrbench compare``) and its file.

The file is an ordinary results file (:mod:`evaluator.results`: one benchmark-mode run per
contestant, its schema, migrations and loader, so ``qrbench report`` reads it as it reads any
run) with one more section, ``comparison``, versioned on its own (``schema_version``): which run
is the baseline, the order in which each block ran the contestants, the settings, and where the
wall time went. Each run's samples of a case are in block order, so the k-th sample of every
contestant in a block's order belongs to that block. The ratios and verdicts are derived from the
raw samples (:mod:`evaluator.paired_stats`) whenever the file is read; the ``summary`` written
beside them is for other readers and is never read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluator.documents import read_json
from evaluator.paired_stats import RatioEstimate, RatioRule
from evaluator.results import CaseResult, ResultsError, RunResult, results_from, write_results

__all__ = ["SCHEMA_VERSION", "CandidateSummary", "Comparison", "load_comparison", "write_comparison"]

SCHEMA_VERSION = 1
SECTION = "comparison"

#: Per case, per kept block, the contestants (indices into ``runs``) in the order the block ran them.
Orders = tuple[tuple[tuple[int, ...], ...], ...]


@dataclass(frozen=True)
class CandidateSummary:
    """One candidate against the baseline: per case its ratio (None where either did not pass),
    and the geometric mean over the cases (None unless every case was compared)."""

    label: str
    cases: tuple[RatioEstimate | None, ...]
    geomean: RatioEstimate | None

    def count(self, verdict: str) -> int:
        return sum(1 for c in self.cases if c is not None and c.verdict == verdict)


@dataclass(frozen=True)
class Comparison:
    """What one ``qrbench compare`` measured. ``runs[0]`` is the baseline; every run has one
    ``benchmark`` stage over the same cases. ``settings`` holds how blocks were run (block cap,
    budget, warm-up blocks, the block rule), ``breakdown_s`` where ``wall_s`` went by activity
    (:mod:`evaluator.measure.ledger`, all workers together), ``reason`` a problem of the comparison as a
    whole (what the containment found: with several workers at once it cannot say whose)."""

    runs: tuple[RunResult, ...]
    orders: Orders
    settings: dict[str, Any]
    wall_s: float = 0.0
    breakdown_s: dict[str, float] = field(default_factory=dict)
    reason: str = ""

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(r.contestant["name"] for r in self.runs)

    @property
    def passed(self) -> bool:
        return not self.reason and all(r.passed for r in self.runs)

    def summary(self, rule: RatioRule) -> tuple[CandidateSummary, ...]:
        """Every candidate against the baseline, case by case and over all cases, paired by block."""
        base = _cases(self.runs[0])
        out = []
        for run in self.runs[1:]:
            cases = _cases(run) or tuple(None for _ in base)  # a refused contestant ran nothing
            estimates: list[RatioEstimate | None] = []
            for b, c in zip(base, cases, strict=True):
                both = c is not None and b.passed and c.passed and b.samples_ns and c.samples_ns
                estimates.append(rule.case_ratio(b.samples_ns, c.samples_ns) if both else None)
            geomean = None
            if estimates and all(e is not None for e in estimates):
                geomean = rule.geomean_ratio([(b.samples_ns, c.samples_ns) for b, c in zip(base, cases, strict=True)])
            out.append(CandidateSummary(run.contestant["name"], tuple(estimates), geomean))
        return tuple(out)

    def section(self, rule: RatioRule) -> dict[str, Any]:
        """The file's ``comparison`` section (with the summary under ``rule``, for other readers)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "baseline": self.labels[0],
            "labels": list(self.labels),
            "orders": [[list(order) for order in case] for case in self.orders],
            "settings": self.settings,
            "wall_s": self.wall_s,
            "breakdown_s": self.breakdown_s,
            "reason": self.reason,
            "summary": {
                "rule": {"min_change": rule.min_change, "confidence": rule.confidence,
                         "resamples": rule.resamples, "seed": rule.seed},
                "candidates": {s.label: {"geomean": s.geomean.to_dict() if s.geomean else None,
                                         "cases": [c.to_dict() if c else None for c in s.cases]}
                               for s in self.summary(rule)},
            },
        }


def _cases(run: RunResult) -> tuple[CaseResult, ...]:
    stage = run.stage("benchmark")
    return stage.cases if stage is not None else ()


def write_comparison(path: Path, comparison: Comparison, rule: RatioRule) -> None:
    """Write the comparison atomically, as a results file with its ``comparison`` section."""
    write_results(path, list(comparison.runs), extra={SECTION: comparison.section(rule)})


def _check_orders(path: Path, runs: Sequence[RunResult], orders: Orders) -> None:
    """Every run's sample count of a case is the number of kept blocks it ran in."""
    for index, case_orders in enumerate(orders):
        for j, run in enumerate(runs):
            cases = _cases(run)
            samples = len(cases[index].samples_ns) if index < len(cases) else 0
            blocks = sum(j in order for order in case_orders)
            if samples != blocks:
                raise ResultsError(f"{path}: case {index + 1}: {run.contestant['name']} has {samples} samples "
                                   f"but ran in {blocks} blocks")


def load_comparison(path: Path) -> Comparison:
    """Read a comparison file: its runs through :func:`~evaluator.results.results_from` (migrated
    as any results file), then its ``comparison`` section, checked against them."""
    doc = read_json(path, ResultsError)
    runs = tuple(results_from(doc, path))
    section = doc.get(SECTION)
    if not isinstance(section, dict):
        raise ResultsError(f"{path}: a results file without a comparison (written by qrbench compare)")
    version = section.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultsError(f"{path}: comparison schema_version {version!r}, this qrbench reads {SCHEMA_VERSION}")
    try:
        orders = tuple(tuple(tuple(int(j) for j in order) for order in case) for case in section["orders"])
        comparison = Comparison(runs, orders, dict(section["settings"]), float(section.get("wall_s", 0.0)),
                                {k: float(v) for k, v in section.get("breakdown_s", {}).items()},
                                str(section.get("reason", "")))
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsError(f"{path}: malformed comparison section: {exc!r}") from exc
    if len(runs) < 2 or list(comparison.labels) != section.get("labels"):
        raise ResultsError(f"{path}: the comparison's contestants do not match its runs")
    _check_orders(path, runs, orders)
    return comparison
