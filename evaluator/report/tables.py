"""Terminal and Markdown tables of runs and leaderboards (tabulate)."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from evaluator.environment import gpu_key
from evaluator.measure.clocks import ClockSummary, reason_names
from evaluator.report.units import format_ns, format_s
from evaluator.results import INTERRUPTED, CaseResult, RunResult, StageResult
from evaluator.score import Standing

__all__ = ["clock_text", "render_leaderboard", "render_run", "throttle_text", "timing_label"]

_GREEN, _RED, _YELLOW, _RESET = "\033[32m", "\033[31m", "\033[33m", "\033[0m"


def timing_label(run: RunResult) -> str:
    """Where and how the figures were measured, e.g. ``NVIDIA H200 (sm 9.0), CUDA events``."""
    clock = "CUDA events" if run.timer == "cuda-events" else "CPU timings (host clock)"
    protocol = "contest protocol (--compat)" if run.compat else "hardened protocol"
    if run.mirror_check:
        protocol += " with mirror checks"
    return f"{gpu_key(run.environment)}, {clock}, {protocol}"


def _run_clocks(run: RunResult) -> ClockSummary | None:
    """Every clock reading of a run's timed cases in one summary; None when none was read."""
    return ClockSummary.of([r for stage in run.stages for case in stage.cases for r in case.clocks])


def clock_text(summary: ClockSummary) -> str:
    """``SM 1755-1980 MHz (median 1980), memory 3201 MHz, up to 690 W``."""
    return (f"SM {summary.sm_min_mhz}-{summary.sm_max_mhz} MHz (median {summary.sm_median_mhz:g}), "
            f"memory {summary.mem_median_mhz:g} MHz, up to {summary.power_max_w:.0f} W")


def throttle_text(summary: ClockSummary) -> str:
    """``12 of 340 repeats (3.5%) throttled (SW power cap), 12 discarded`` or ``none of 340 repeats throttled``."""
    if not summary.throttled:
        return f"none of {summary.repeats} repeats throttled"
    text = (f"{summary.throttled} of {summary.repeats} repeats ({summary.throttled_share:.1%}) throttled "
            f"({', '.join(reason_names(summary.reasons))})")
    return text + (f", {summary.discarded} discarded" if summary.discarded else "")


def _clocks_line(run: RunResult) -> str:
    summary = _run_clocks(run)
    if summary is None:  # on a GPU, say why; a CPU has no clocks to read
        why = run.environment.get("clock_sampler")
        return f"\nclocks: not read ({why})" if run.device == "cuda" and why else ""
    return f"\nclocks: {clock_text(summary)}; {throttle_text(summary)}"


def first_line(text: str) -> str:
    """The first line, whole ('' for blank text): a table cell or a log line holds one line, the
    details follow it."""
    return text.strip().splitlines()[0] if text.strip() else ""


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


def _details(run: RunResult) -> str:
    """What a failure needs to be debugged: each failing case's whole message (a traceback, say),
    and the worker's output (what the kernel printed) of each stage that did not pass."""
    blocks = []
    for stage in run.stages:
        for case in stage.cases:
            if not case.passed and case.status != "skipped" and case.message.strip() != first_line(case.message):
                blocks.append(f"{stage.name} · {case.case.label} ({case.status}):\n{_indented(case.message)}")
        if not stage.passed and stage.output.strip():
            blocks.append(f"{stage.name}: the worker's output (stdout and stderr, its end):\n{_indented(stage.output)}")
    return "".join(f"\n\n{b}" for b in blocks)


def _run_verdict(run: RunResult, color: bool) -> str:
    if run.passed:
        text, paint = "passed", _GREEN
    elif run.status == INTERRUPTED:
        text, paint = f"INTERRUPTED: {first_line(run.reason)}", _YELLOW
    else:
        text, paint = f"FAILED: {first_line(run.reason)}", _RED
    return _paint(text, paint, color)


def _paint(text: str, paint: str, color: bool) -> str:
    return f"{paint}{text}{_RESET}" if color else text


def _verdict_text(case: CaseResult) -> str:
    """A failure's message, or a pass's worst residuals in units of n·eps (gates: 20 and 100)."""
    d = case.diagnostics
    if case.passed and "scaled_factor_residual" in d:
        return f"factor {d['scaled_factor_residual']:.3g}, orthogonality {d['scaled_orthogonality_residual']:.3g}"
    return first_line(case.message)


def _stage_rows(stage: StageResult) -> list[list[str]]:
    rows = []
    for case in stage.cases:
        stats = case.stats
        timing = f"{format_ns(stats.mean_ns)} ± {format_ns(stats.err_ns)} ({stats.runs})" if stats else ""
        rows.append([stage.name, case.case.label, case.status, timing, _verdict_text(case)])
    return rows


def render_run(run: RunResult, fmt: str = "simple", color: bool = False) -> str:
    """One contestant's run: a line per case, the verdict and score, any profiler table, the GPU's
    clocks and any margin warning, then the details of its failures (whole messages, the worker's
    output). ``color``: for a terminal."""
    rows = [row for stage in run.stages for row in _stage_rows(stage)]
    headers = ["stage", "case", "status", "mean ± err (runs)", "residuals (n·eps) / message"]
    table = tabulate(rows, headers=headers, tablefmt=fmt)
    score = f", score {format_s(run.score_s)} (geometric mean)" if run.score_s is not None else ""
    verdict = _run_verdict(run, color)
    profiles = "".join(f"\n\n{s.name}: torch profiler, per kernel\n{s.profile_table}" for s in run.stages
                       if s.profile_table)
    warning = f"\n{_paint(f'WARNING: {run.margin_warning}', _YELLOW, color)}" if run.margin_warning else ""
    return f"{run.contestant['name']} — {run.mode} on {run.shapes['name']}: {verdict}{score}\n" \
           f"[{timing_label(run)}]\n{table}{profiles}{_clocks_line(run)}{warning}{_details(run)}"


def render_leaderboard(standings: Sequence[Standing], fmt: str = "simple") -> str:
    """Ranked contestants by geometric mean, then the unranked ones with their reason."""
    rows = []
    for s in standings:
        secret = s.run.stage("ranked-secret")
        rows.append([
            s.place if s.place is not None else "—",
            s.name,
            format_s(s.score_s),
            format_s(secret.geomean_s()) if secret else "-",
            "ranked" if s.place is not None else f"unranked: {first_line(s.run.reason)}",
        ])
    return tabulate(rows, headers=["#", "contestant", "score (geomean)", "secret-seed geomean", "status"],
                    tablefmt=fmt)
