"""Terminal and Markdown tables of runs and leaderboards (tabulate)."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from evaluator.environment import gpu_key
from evaluator.report.units import format_ns, format_s
from evaluator.results import CaseResult, RunResult, StageResult
from evaluator.score import Standing

__all__ = ["render_leaderboard", "render_run", "timing_label"]

_MESSAGE_WIDTH = 90


def timing_label(run: RunResult) -> str:
    """Where and how the figures were measured, e.g. ``NVIDIA H200 (sm 9.0), CUDA events``."""
    clock = "CUDA events" if run.timer == "cuda-events" else "CPU timings (host clock)"
    protocol = "contest protocol (--compat)" if run.compat else "hardened protocol"
    return f"{gpu_key(run.environment)}, {clock}, {protocol}"


def _short(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= _MESSAGE_WIDTH else first[: _MESSAGE_WIDTH - 1] + "…"


def _verdict_text(case: CaseResult) -> str:
    """A failure's message, or a pass's worst residuals in units of n·eps (gates: 20 and 100)."""
    d = case.diagnostics
    if case.passed and "scaled_factor_residual" in d:
        return f"factor {d['scaled_factor_residual']:.3g}, orthogonality {d['scaled_orthogonality_residual']:.3g}"
    return _short(case.message)


def _stage_rows(stage: StageResult) -> list[list[str]]:
    rows = []
    for case in stage.cases:
        stats = case.stats
        timing = f"{format_ns(stats.mean_ns)} ± {format_ns(stats.err_ns)} ({stats.runs})" if stats else ""
        rows.append([stage.name, case.case.label, case.status, timing, _verdict_text(case)])
    return rows


def render_run(run: RunResult, fmt: str = "simple") -> str:
    """One contestant's run: a line per case, the verdict and score, and any profiler table."""
    rows = [row for stage in run.stages for row in _stage_rows(stage)]
    headers = ["stage", "case", "status", "mean ± err (runs)", "residuals (n·eps) / message"]
    table = tabulate(rows, headers=headers, tablefmt=fmt)
    score = f", score {format_s(run.score_s)} (geometric mean)" if run.score_s is not None else ""
    verdict = "passed" if run.passed else f"FAILED: {_short(run.reason)}"
    profiles = "".join(f"\n\n{s.name}: torch profiler, per kernel\n{s.profile_table}" for s in run.stages
                       if s.profile_table)
    return f"{run.contestant['name']} — {run.mode} on {run.shapes['name']}: {verdict}{score}\n" \
           f"[{timing_label(run)}]\n{table}{profiles}"


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
            "ranked" if s.place is not None else f"unranked: {_short(s.run.reason)}",
        ])
    return tabulate(rows, headers=["#", "contestant", "score (geomean)", "secret-seed geomean", "status"],
                    tablefmt=fmt)
