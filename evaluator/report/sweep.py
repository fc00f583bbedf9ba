"""A sweep's table: its variants by case, the fastest of each case marked (``qrbench sweep``)."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from evaluator.axes import setting_text
from evaluator.report.tables import timing_label
from evaluator.report.units import format_ns, format_ratio, format_s
from evaluator.results import CaseResult, RunResult

__all__ = ["BEST_MARK", "render_sweep"]

BEST_MARK = "*"


def _mean_ns(case: CaseResult | None) -> float | None:
    return case.stats.mean_ns if case is not None and case.passed and case.stats is not None else None


def _best(values: Sequence[float | None]) -> int | None:
    """The position of the smallest value, None when there is none."""
    present = [(v, i) for i, v in enumerate(values) if v is not None]
    return min(present)[1] if present else None


def render_sweep(runs: Sequence[RunResult]) -> str:
    """One row per variant (the kernel's own plan first): the mean time per call of every case,
    the geometric mean and its speedup over the first row; the fastest passing variant of each
    column is marked ``*``. A case that did not pass shows its status."""
    stages = [run.scored_stage for run in runs]
    columns = next((s.cases for s in stages if s is not None and s.cases), ())
    cells: list[list[CaseResult | None]] = [
        [s.cases[i] if s is not None and i < len(s.cases) else None for i in range(len(columns))] for s in stages
    ]
    means = [[_mean_ns(c) for c in row] for row in cells]
    scores = [run.score_s for run in runs]
    best_case = [_best([row[i] for row in means]) for i in range(len(columns))]
    best_score = _best(scores)
    rows = []
    for k, run in enumerate(runs):
        row = [setting_text(run.params)]
        for i, case in enumerate(cells[k]):
            if means[k][i] is None:
                row.append(case.status if case is not None else "-")
            else:
                row.append(format_ns(means[k][i]) + (f" {BEST_MARK}" if best_case[i] == k else ""))
        score = scores[k]
        row.append("-" if score is None else format_s(score) + (f" {BEST_MARK}" if best_score == k else ""))
        row.append(format_ratio(scores[0] / score) if score is not None and scores[0] is not None else "-")
        rows.append(row)
    headers = ["variant", *(c.case.label for c in columns), "geomean", "vs default"]
    title = f"{runs[0].contestant['name']} sweep on {runs[0].shapes.get('name')}: {timing_label(runs[0])}"
    note = f"mean time per call; {BEST_MARK} the fastest passing variant of each case and of the geometric mean"
    return f"{title}\n{tabulate(rows, headers=headers, tablefmt='github', disable_numparse=True)}\n{note}"
