"""Numerical margin: worst residual against the checker's gates, per case, stage and run; the
warning under --margin-warn (the option, the results, the printed run) and the report's section,
column and history plot."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from evaluator.cli import main
from evaluator.contestant import resolve_contestant
from evaluator.margin import DEFAULT_MARGIN_WARN, Margin, case_margins, gate_fractions, margin_warning, tightest
from evaluator.protocol import BenchSettings, benchmark_case
from evaluator.report.compare import build_report
from evaluator.report.markdown import render_markdown, write_report
from evaluator.report.tables import render_run
from evaluator.results import CaseResult, RunResult, StageResult, write_results
from evaluator.runner import RunOptions, new_run
from evaluator.shapes import Case, Timing, resolve_shapes
from reference.checker import verdict
from reference.inputs import generate_input
from tests.test_protocol import _harness
from tests.test_report import PNG, _run

CASE = Case(2, 16, 1, 5)


def _diagnostics(factor: float, orthogonality: float) -> dict[str, float | int]:
    return {"scaled_factor_residual": factor, "scaled_orthogonality_residual": orthogonality}


# Margins from the checker's residuals --------------------------------------------------------------

def test_a_pass_sits_under_each_gate_and_a_failure_over() -> None:
    a = generate_input(**CASE.generator_args())
    h, tau = torch.geqrf(a)
    passed = verdict(a, (h, tau), "published")
    assert passed.passed
    fractions = gate_fractions(passed.diagnostics)
    assert set(fractions) == {"factor", "orthogonality"}
    assert all(0 < f < 1 for f in fractions.values())
    factor = case_margins(passed.diagnostics)[0]
    assert factor.factor == pytest.approx(20 / passed.diagnostics["scaled_factor_residual"])
    failed = verdict(a, (h * 1.001, tau), "published")  # R off by 0.1%: far over 20 n·eps
    assert not failed.passed
    assert gate_fractions(failed.diagnostics)["factor"] > 1


def test_the_tightest_margin_per_gate_and_where() -> None:
    margins = tightest([*case_margins(_diagnostics(1.0, 40.0), "test · a"),
                        *case_margins(_diagnostics(3.0, 10.0), "test · b"),
                        *case_margins(_diagnostics(3.0, 5.0), "test · c")])
    assert (margins["factor"].residual, margins["factor"].where) == (3.0, "test · b")  # the first of a tie
    assert (margins["orthogonality"].factor, margins["orthogonality"].where) == (2.5, "test · a")
    assert tightest([]) == {}


@pytest.mark.parametrize(("factor_residual", "warn_below", "warns"), [
    (6.0, 4.0, True),    # 20 / 6 = 3.3x of room: under 4x
    (5.0, 4.0, False),   # exactly 4x: not under
    (6.0, 3.0, False),
    (19.9, 1.0, False),  # a pass never warns at 1x
])
def test_the_warning_under_a_factor(factor_residual: float, warn_below: float, warns: bool) -> None:
    margins = tightest(case_margins(_diagnostics(factor_residual, 1.0), "ranked · 4x64"))
    warning = margin_warning(margins, warn_below)
    assert (warning is not None) is warns
    if warns:
        assert warning == (f"numerical margin under {warn_below:g}×: factor residual {factor_residual:g} n·eps "
                           f"(ranked · 4x64) is only {20 / factor_residual:#.3g}× under its gate of 20")


def test_a_zero_residual_has_infinite_room() -> None:
    m = Margin("factor", 0.0, 20.0)
    assert math.isinf(m.factor)
    assert m.fraction == 0.0
    assert margin_warning({"factor": m}, 4.0) is None


# The run: passing cases only, its recorded factor, its JSON, its printout --------------------------

def _margin_run(factor_residual: float, margin_warn: float = DEFAULT_MARGIN_WARN, started_at: str = "") -> RunResult:
    """A passing test stage whose tightest case has this factor residual, beside a failed case."""
    cases = (CaseResult(0, Case(2, 8, 1, 1), "pass", diagnostics=_diagnostics(factor_residual, 3.0)),
             CaseResult(1, Case(2, 12, 1, 2), "pass", diagnostics=_diagnostics(0.5, 2.0)),
             CaseResult(2, Case(2, 16, 1, 3), "fail", "R - Q.T @ A is too large",
                        diagnostics=_diagnostics(1e6, 1e6)))
    run = _run("kernel", [[1e5, 1.1e5, 0.9e5]], started_at=started_at or "2026-12-01T10:00:00+00:00")
    return replace(run, stages=(StageResult("test", "test", "fail", cases), *run.stages), margin_warn=margin_warn)


def test_a_run_is_judged_on_its_passing_cases_at_its_own_factor() -> None:
    run = _margin_run(8.0)
    assert run.margins["factor"].residual == 8.0  # the failed case's 1e6 does not count
    assert run.margins["factor"].where == "test · 2x8"
    assert run.stages[0].margins["orthogonality"].residual == 3.0
    assert "factor residual 8 n·eps (test · 2x8) is only 2.50× under its gate of 20" in run.margin_warning
    assert replace(run, margin_warn=2.0).margin_warning is None
    data = run.to_dict()
    assert data["margin_warn"] == DEFAULT_MARGIN_WARN
    assert data["margin_warning"] == run.margin_warning
    assert data["stages"][0]["cases"][0]["margin"] == {"factor": 0.4, "orthogonality": 0.03}
    assert RunResult.from_dict(data).to_dict() == data


def test_the_printed_run_ends_with_the_warning() -> None:
    text = render_run(_margin_run(8.0))
    assert text.splitlines()[-1] == f"WARNING: {_margin_run(8.0).margin_warning}"
    assert "\033[33mWARNING: numerical margin" in render_run(_margin_run(8.0), color=True)
    assert "WARNING" not in render_run(_margin_run(1.0))


def test_a_timed_case_records_its_worst_residuals_over_every_check() -> None:
    result = benchmark_case(_harness(torch.geqrf), 0, CASE, BenchSettings(True, 3, 10.0), Timing(max_inputs=2))
    assert result.passed, result.message
    margin = result.to_dict()["margin"]
    assert set(margin) == {"factor", "orthogonality"}
    assert margin["factor"] == pytest.approx(result.diagnostics["scaled_factor_residual"] / 20)


# The option ---------------------------------------------------------------------------------------

def test_the_option_reaches_the_run_and_bad_factors_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    options = RunOptions(device="cpu", margin_warn=8.0)
    assert new_run(resolve_contestant("geqrf"), "test", resolve_shapes("smoke"), options).margin_warn == 8.0
    with pytest.raises(ValueError, match="margin_warn must be at least 1"):
        RunOptions(device="cpu", margin_warn=0.5)
    assert main(["test", "geqrf", "--device", "cpu", "--margin-warn", "0.5"]) == 2
    assert "--margin-warn must be at least 1 (1 never warns), got 0.5" in capsys.readouterr().err


def test_the_options_default_is_the_library_default() -> None:
    from evaluator.cli import _parser

    args = _parser(["benchmark"]).parse_args(["benchmark", "geqrf"])
    assert args.margin_warn == DEFAULT_MARGIN_WARN
    assert args.discard_on_throttle is False


# The report ---------------------------------------------------------------------------------------

def test_the_report_shows_margins_warns_and_plots_their_history(tmp_path: Path) -> None:
    old, new = _margin_run(0.5, started_at="2026-11-30T10:00:00+00:00"), _margin_run(8.0)
    report = build_report([old, new])
    text = render_markdown(report)
    summary = text.split("## Summary")[1].split("##")[0]
    assert "2.50× (factor) ⚠" in summary
    assert f"⚠ kernel (benchmark): {new.margin_warning}." in summary
    section = text.split("## Numerical margin")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if re.match(r"\| kernel +\| test ", line))
    assert re.search(r"\| 8 \(2\.50×\) +\| test · 2x8 +\| 3 \(33\.3×\) +\| test · 2x8", row)
    history = text.split("## History")[1]
    assert "33.3× (orthogonality)" in history  # the older run: orthogonality 3 of 100 is its least room
    path = write_report(report, tmp_path)
    assert (tmp_path / "margin-history.png").read_bytes().startswith(PNG)
    assert "margin-history.png" in path.read_text()


def test_the_report_command_prints_margin_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_results(tmp_path / "r.json", [_margin_run(8.0)])
    assert main(["report", str(tmp_path / "r.json"), "--out", str(tmp_path / "report")]) == 0
    assert f"qrbench: WARNING: kernel (benchmark): {_margin_run(8.0).margin_warning}" in capsys.readouterr().err
