"""A paired comparison (:mod:`evaluator.paired_results`) as Markdown, and as a pytest-benchmark
file.

:func:`render_comparison` is what ``qrbench compare`` prints and saves: the geometric-mean time
ratio of each candidate to the baseline with its interval and verdict, then every case.
:func:`pytest_benchmark_document` writes the same samples in pytest-benchmark's JSON, so its own
tools read them (``pytest-benchmark compare FILE``, grouped by case, contestants side by side).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tabulate import tabulate

from evaluator.environment import gpu_key
from evaluator.measure.clocks import ClockSummary
from evaluator.paired_results import CandidateSummary, Comparison
from evaluator.paired_stats import FASTER, SAME, SLOWER, RatioEstimate, RatioRule
from evaluator.report.tables import clock_text, throttle_text, timing_label
from evaluator.report.units import format_ns, format_s
from evaluator.results import INCOMPLETE, CaseResult, RunResult

__all__ = ["PYTEST_BENCHMARK_TIMER", "case_ids", "pytest_benchmark_document", "ratio_text", "render_comparison"]

#: How the exported benchmarks name their timer (pytest-benchmark shows it in its tables' options).
PYTEST_BENCHMARK_TIMER = "qrbench paired samples"


def ratio_text(estimate: RatioEstimate | None) -> str:
    """``1.031 [1.024, 1.038] slower``: the time ratio (above 1 is slower), its interval, the verdict."""
    if estimate is None:
        return "-"
    if estimate.low is None or estimate.high is None:
        return f"{estimate.time_ratio:.4f} (too few blocks to judge)"
    return f"{estimate.time_ratio:.4f} [{estimate.low:.4f}, {estimate.high:.4f}] {estimate.verdict}"


def _table(rows: Sequence[Sequence[object]], headers: Sequence[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def _time(case: CaseResult) -> str:
    if not case.passed or case.stats is None:
        return f"**{case.status}**"
    return f"{format_ns(case.stats.mean_ns)} ± {format_ns(case.stats.err_ns)}"


def _summary_table(comparison: Comparison, summaries: Sequence[CandidateSummary], rule: RatioRule) -> str:
    base = comparison.runs[0]
    rows = [[base.contestant["name"] + " (baseline)", base.status, format_s(base.score_s), "1", "-"]]
    for run, s in zip(comparison.runs[1:], summaries, strict=True):
        counts = " / ".join(str(s.count(v)) for v in (FASTER, SLOWER, SAME))
        rows.append([s.label, run.status, format_s(run.score_s), ratio_text(s.geomean), counts])
    ratio = f"time ratio to the baseline [{rule.confidence:.0%} CI] verdict"
    return _table(rows, ["contestant", "status", "score (geomean)", ratio, "cases faster / slower / same"])


def _case_table(comparison: Comparison, summaries: Sequence[CandidateSummary], rule: RatioRule) -> str:
    stages = [run.stage("benchmark") for run in comparison.runs]
    base_stage = stages[0]
    if base_stage is None:
        return "No case was run."
    rows = []
    for i, base in enumerate(base_stage.cases):
        blocks = len(comparison.orders[i]) if i < len(comparison.orders) else 0
        row = [base.case.label, str(blocks), _time(base)]
        for stage, s in zip(stages[1:], summaries, strict=True):
            case = stage.cases[i] if stage is not None else None
            row += [_time(case) if case is not None else "-", ratio_text(s.cases[i])]
        rows.append(row)
    headers = ["case", "blocks", comparison.labels[0]]
    for label in comparison.labels[1:]:
        headers += [label, f"{label} / {comparison.labels[0]}"]
    return _table(rows, headers)


def _failures(comparison: Comparison) -> str:
    """Every contestant that ran and did not pass, with its whole reason (one never started because
    the comparison could not run is left out: the comparison's own reason says why)."""
    lines = []
    for run in comparison.runs:
        if not run.passed and run.status != INCOMPLETE:
            lines.append(f"- **{run.contestant['name']}** ({run.status}): {run.reason.strip()}")
    if comparison.reason:
        lines.append(f"- the comparison as a whole: {comparison.reason}")
    return "\n".join(lines)


def _clocks(run: RunResult) -> str:
    summary = ClockSummary.of([r for stage in run.stages for case in stage.cases for r in case.clocks])
    if summary is None:
        return "not read" + (f" ({run.environment['clock_sampler']})" if "clock_sampler" in run.environment else "")
    return f"{clock_text(summary)}; {throttle_text(summary)}"


def _method(comparison: Comparison, rule: RatioRule) -> str:
    settings = comparison.settings
    block_rule = settings.get("rule", {})
    return (
        "Each contestant ran in a hardened worker of its own, all on this device, driven by one parent in blocks: "
        "per block one timed repeat of each, on the same fresh content, in a random order, with the L2 flush, "
        "hand-over and output checks of a benchmark repeat. Per case: the correctness pass, "
        f"{settings.get('warmup_blocks', 0)} discarded warm-up block(s), then up to {settings.get('max_blocks')} "
        f"blocks within {settings.get('budget_s')} s of wall time, stopping early once every time ratio's "
        f"standard error is under {block_rule.get('err_rel', 0):.2%} (after {block_rule.get('min_blocks')} blocks).\n\n"
        "A case's time ratio is the candidate's mean time over the baseline's (above 1: slower); the geometric mean "
        "of the per-case ratios is the ratio of the contest's scores. Intervals: percentile bootstrap, "
        f"{rule.resamples} resamples of whole blocks within each case (seed {rule.seed}), so drift shared by a "
        f"block cancels. *Faster* or *slower* only when the {rule.confidence:.0%} interval excludes 1 **and** the "
        f"ratio differs from 1 by at least {rule.min_change:.1%}; *same* means that no difference was shown, "
        "not that there is none."
    )


def render_comparison(comparison: Comparison, rule: RatioRule) -> str:
    """The comparison as Markdown: summary, every case, failures, how it was measured."""
    summaries = comparison.summary(rule)
    base = comparison.runs[0]
    where = f"; {timing_label(base)}" if base.environment else ""
    parts = [
        f"# Paired comparison on {base.shapes.get('name', '?')}: {', '.join(comparison.labels)}",
        f"Baseline **{comparison.labels[0]}**{where}; {comparison.wall_s:.1f} s of wall time.",
        _summary_table(comparison, summaries, rule),
        "## Cases",
        _case_table(comparison, summaries, rule),
    ]
    failures = _failures(comparison)
    if failures:
        parts += ["## Failures", failures]
    parts += ["## Method", _method(comparison, rule)]
    clocks = [f"{run.contestant['name']}: {_clocks(run)}" for run in comparison.runs if run.stages]
    if clocks:
        parts.append("Clocks: " + "; ".join(clocks))
    return "\n\n".join(parts) + "\n"


def case_ids(cases: Sequence[CaseResult]) -> list[str]:
    """Test ids for pytest-benchmark: the case's position and label (``case3-640x512-mixed``)."""
    return [f"case{c.index + 1}-{c.case.label.replace(' ', '-')}" for c in cases]


def _benchmark(run: RunResult, case: CaseResult, case_id: str, extra: dict[str, Any]) -> dict[str, Any]:
    from pytest_benchmark.stats import Stats  # an optional dependency (the [test] extra)

    stats = Stats()
    for ns in case.samples_ns:
        stats.update(ns / 1e9)  # pytest-benchmark keeps seconds
    label = run.contestant["name"]
    return {
        "group": f"{run.shapes.get('name')} {case_id}",
        "name": f"compare[{label}-{case_id}]",
        "fullname": f"qrbench compare::{label}-{case_id}",
        "params": {"contestant": label, "case": case_id},
        "param": f"{label}-{case_id}",
        "extra_info": {"spec": case.case.fields(), "flops": case.case.flops, "min_bytes": case.case.min_bytes,
                       "timer": run.timer, "protocol": "hardened, paired blocks", **extra},
        "options": {"timer": PYTEST_BENCHMARK_TIMER, "disable_gc": False, "min_rounds": len(case.samples_ns),
                    "max_time": 0, "min_time": 0, "warmup": False},
        "stats": {**stats.as_dict(), "data": list(stats.data), "iterations": 1},
    }


def pytest_benchmark_document(comparison: Comparison, rule: RatioRule) -> dict[str, Any]:
    """pytest-benchmark's JSON for the comparison's passing cases: one benchmark per contestant and
    case, its rounds the paired samples in block order. pytest-benchmark's own statistics treat the
    rounds as independent; each candidate's paired ratio, interval and verdict against the baseline
    are in its ``extra_info``."""
    import pytest_benchmark

    summaries = {s.label: s for s in comparison.summary(rule)}
    base = comparison.runs[0]
    benchmarks = []
    for run in comparison.runs:
        stage = run.stage("benchmark")
        if stage is None:
            continue
        summary = summaries.get(run.contestant["name"])
        for i, (case, case_id) in enumerate(zip(stage.cases, case_ids(stage.cases), strict=True)):
            if not case.passed or not case.samples_ns:
                continue
            extra: dict[str, Any] = {"baseline": comparison.labels[0], "blocks": len(comparison.orders[i])}
            estimate = summary.cases[i] if summary is not None else None
            if estimate is not None:
                extra.update(estimate.to_dict(), confidence=rule.confidence, min_change=rule.min_change)
            benchmarks.append(_benchmark(run, case, case_id, extra))
    environment = base.environment
    return {
        "machine_info": {"node": platform.node(), "machine": platform.machine(), "system": platform.system(),
                         "python_version": platform.python_version(),
                         "qrbench": {"gpu_key": gpu_key(environment), **environment}},
        "commit_info": {"id": environment.get("git_commit"), "dirty": environment.get("git_dirty")},
        "benchmarks": benchmarks,
        "datetime": datetime.now(UTC).isoformat(),
        "version": pytest_benchmark.__version__,
    }
