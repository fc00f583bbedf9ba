"""PNG plots of a report (matplotlib, drawn on bare ``Figure`` objects: no pyplot state, no GUI).

Each plot is a function ``render_x(...) -> Path`` that writes one file and carries, in small
print at its foot, where the figures were measured (GPU or CPU, clock, protocol).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from evaluator.margin import least
from evaluator.report.compare import SAME, Entry, run_label
from evaluator.report.tables import timing_label
from evaluator.report.units import ns_unit
from evaluator.results import RunResult

__all__ = ["render_case_times", "render_history", "render_margin_history", "render_speedups"]

_DPI = 120


def _figure(columns: int) -> Figure:
    return Figure(figsize=(max(6.0, 0.8 * columns + 2.5), 4.8), layout="constrained")


def _save(fig: Figure, runs: Sequence[RunResult], path: Path) -> Path:
    fig.text(0.01, 0.005, "; ".join(dict.fromkeys(timing_label(r) for r in runs)), fontsize=7, color="0.35")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI)
    return path


def _log_y(ax: Axes) -> None:
    """Log scale with plain-number labels; minor ticks are labelled only when the axis spans
    less than a decade (else there would be eight labels a decade). Call after plotting."""
    ax.set_yscale("log")
    low, high = ax.get_ylim()
    plain = FuncFormatter(lambda value, _: f"{value:.4g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain if high < 10 * low else NullFormatter())
    ax.grid(axis="y", which="both", alpha=0.3)


def _offsets(count: int, width: float = 0.7) -> list[float]:
    """Where each of ``count`` series sits around a case's tick."""
    step = width / count
    return [-width / 2 + step * (i + 0.5) for i in range(count)]


def render_case_times(entries: Sequence[Entry], path: Path) -> Path:
    """Mean time per case, one marker (± standard error) per contestant, on a log axis."""
    labels = list(dict.fromkeys(c.case.case.label for e in entries for c in e.cases))
    means = [c.case.stats.mean_ns for e in entries for c in e.cases if c.case.stats is not None]
    unit, scale = ns_unit(sorted(means)[len(means) // 2] if means else 1e6)
    fig = _figure(len(labels))
    ax = fig.add_subplot()
    for i, (entry, offset) in enumerate(zip(entries, _offsets(len(entries)), strict=True)):
        points = [(labels.index(c.case.case.label) + offset, c.case.stats)
                  for c in entry.cases if c.case.passed and c.case.stats is not None]
        if points:
            ax.errorbar([x for x, _ in points], [s.mean_ns / scale for _, s in points],
                        yerr=[s.err_ns / scale for _, s in points], fmt="o", capsize=3, color=f"C{i}",
                        label=entry.label)
    _log_y(ax)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel(f"mean time per call ({unit}, log)")
    ax.set_title(f"Per-case time by contestant: {entries[0].shapes}, {entries[0].run.mode} mode")
    ax.legend(fontsize=8)
    return _save(fig, [e.run for e in entries], path)


def render_speedups(entries: Sequence[Entry], baseline_text: str, path: Path) -> Path:
    """Speedup over the baseline per case and contestant (log axis, bars to 1, the bootstrap
    interval as error bars); bars whose verdict is "same" are pale."""
    compared = [e for e in entries if e.baseline is not None]
    labels = list(dict.fromkeys(c.case.case.label for e in compared for c in e.cases))
    fig = _figure(len(labels))
    ax = fig.add_subplot()
    offsets = dict(zip(map(id, compared), _offsets(len(compared)), strict=True))
    for i, entry in enumerate(entries):  # colours by position in ``entries``, as in the times plot
        offset = offsets.get(id(entry))
        if offset is None:
            continue
        shown = [(labels.index(c.case.case.label) + offset, c.comparison) for c in entry.cases if c.comparison]
        if not shown:
            continue
        xs = [x for x, _ in shown]
        ax.bar(xs, [cmp.speedup - 1 for _, cmp in shown], bottom=1, width=0.7 / len(compared), label=entry.label,
               color=[to_rgba(f"C{i}", 0.35 if cmp.verdict == SAME else 1.0) for _, cmp in shown])
        bounded = [(x, c.speedup, c.speedup - c.low, c.high - c.speedup)
                   for x, c in shown if c.low is not None and c.high is not None]
        if bounded:
            x, mid, below, above = zip(*bounded, strict=True)
            ax.errorbar(x, mid, yerr=[below, above], fmt="none", ecolor="black", capsize=2, linewidth=0.8)
    ax.axhline(1.0, color="black", linewidth=0.8)
    _log_y(ax)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel("speedup over the baseline (×, log; pale: same)")
    ax.set_title(f"Speedup over {baseline_text}")
    ax.legend(fontsize=8)
    return _save(fig, [*(e.run for e in compared), *(e.baseline for e in compared if e.baseline)], path)


def render_history(history: Sequence[RunResult], path: Path) -> Path:
    """Score (geometric mean) of each contestant and shape set over the runs, in time order.
    Runs that failed have no score and leave a gap."""
    series: dict[str, list[tuple[datetime, float]]] = {}
    for run in history:
        points = series.setdefault(f"{run_label(run)} · {run.shapes.get('name')}", [])
        if run.score_s is not None and run.started_at:
            points.append((datetime.fromisoformat(run.started_at), run.score_s * 1e9))
    scores = sorted(ns for points in series.values() for _, ns in points)
    unit, scale = ns_unit(scores[len(scores) // 2] if scores else 1e6)
    fig = _figure(len(history))
    ax = fig.add_subplot()
    for name, points in series.items():
        if points:
            ax.plot([t for t, _ in points], [ns / scale for _, ns in points], "o-", label=name)
    _log_y(ax)
    ax.set_ylabel(f"score: geometric mean ({unit}, log)")
    ax.set_title("History of scores")
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    return _save(fig, history, path)


def render_margin_history(history: Sequence[RunResult], path: Path) -> Path:
    """Each run's tightest numerical margin (gate / worst residual, :mod:`evaluator.margin`) over
    time, per contestant and shape set, with the runs' warning factors as dashed lines."""
    series: dict[str, list[tuple[datetime, float]]] = {}
    for run in history:
        points = series.setdefault(f"{run_label(run)} · {run.shapes.get('name')}", [])
        m = least(run.margins)
        if m is not None and math.isfinite(m.factor) and run.started_at:
            points.append((datetime.fromisoformat(run.started_at), m.factor))
    fig = _figure(len(history))
    ax = fig.add_subplot()
    for name, points in series.items():
        if points:
            ax.plot([t for t, _ in points], [f for _, f in points], "o-", label=name)
    for warn in sorted({run.margin_warn for run in history if run.margins}):
        ax.axhline(warn, color="0.4", linestyle="--", linewidth=0.8)
        ax.annotate(f"warn below {warn:g}×", (0.01, warn), xycoords=("axes fraction", "data"), fontsize=7,
                    color="0.35", va="bottom")
    _log_y(ax)
    ax.set_ylabel("tightest margin: gate / worst residual (×, log)")
    ax.set_title("History of the numerical margin")
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    return _save(fig, history, path)
