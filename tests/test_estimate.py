"""``--estimate``: the repeat prediction is the contest's rule itself; a pilot predicts every stage."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

import evaluator.estimate as estimate
from evaluator.contestant import resolve_contestant
from evaluator.estimate import (
    CasePilot,
    _timed_pass,
    estimate_run,
    fixed_costs,
    predict_repeats,
    render_estimate,
    settled_cv,
)
from evaluator.measure.stopping import ContestRule
from evaluator.protocol import WALL_CAP_S, BenchSettings, Harness
from evaluator.results import CaseResult
from evaluator.runner import RunOptions
from evaluator.shapes import Case, Timing, resolve_shapes

TINY_SHAPES = Path(__file__).parent / "shapes_tiny.yaml"


@pytest.mark.parametrize(("cv", "repeat_wall_s", "expected"), [
    (0.0, 0.01, 11),       # no noise: the first repeat past 0.1 s of wall time
    (0.001, 0.001, 101),   # quiet: the rule's 0.1 s minimum decides
    (0.01, 0.001, 102),    # err < 0.1% needs about (cv / 0.001)^2 = 100 repeats
    (0.05, 0.001, 1000),   # noisy and fast: the repeat cap
    (0.05, 61.0, 3),       # slow repeats: the 120 s wall cap from the third repeat
])
def test_predicted_repeats_follow_the_contest_rule(cv: float, repeat_wall_s: float, expected: int) -> None:
    assert predict_repeats(ContestRule(budget_s=30.0), 1000, 1e6, cv, repeat_wall_s) == expected


def test_budget_ends_a_slow_quiet_case() -> None:
    # 10 ms repeats against a 0.05 s budget of kernel time: the budget is spent after 6 repeats,
    # which take more than the rule's 0.1 s minimum of wall time only from the 10th.
    assert predict_repeats(ContestRule(budget_s=0.05), 1000, 10e6, 0.05, 0.011) == 10
    assert WALL_CAP_S == 120.0


def test_estimate_predicts_every_stage_of_a_leaderboard_run() -> None:
    shapes = resolve_shapes(TINY_SHAPES)
    est = estimate_run(resolve_contestant("geqrf"), "leaderboard", shapes, RunOptions(device="cpu"), repeats=3)
    assert [s.name for s in est.stages] == ["test", "benchmark", "ranked", "ranked-secret"]
    assert [p.case for p in est.cases] == list(shapes.benchmarks)
    assert all(p.call_s > 0 and p.repeat_s > 0 and p.published_check_s > 0 for p in est.cases)
    assert all(s.wall_s > 0 and s.repeats >= 0 for s in est.stages)
    assert est.stages[2].repeats >= 3 * len(shapes.benchmarks)  # every timed case runs at least 3 repeats
    text = render_estimate(est)
    assert "ranked-secret" in text
    assert "contest wall s" in text


def test_stages_after_the_first_start_no_worker_where_spares_serve_them() -> None:
    """A ranked submission's later stages take spares (evaluator.workers): qrbench's prediction
    leaves their worker start out; the contest's service starts every worker fresh."""
    breakdown = {"worker_start": 3.0, "calibration": 0.25, "load": 0.5, "kernel": 9.0}
    assert fixed_costs(breakdown, 4, spares=True) == [(3.75, 3.5), (0.75, 3.5), (0.75, 3.5), (0.75, 3.5)]
    assert fixed_costs(breakdown, 2, spares=False) == [(3.75, 3.5), (3.75, 3.5)]


def test_contest_noise_comes_from_a_same_inputs_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each benchmark case is piloted twice: hardened with fresh inputs and rechecks (qrbench's
    repeats), then the contest's way, the same inputs in every repeat and no recheck (the
    contest's noise); the run's own rules are back in force afterwards."""
    passes: list[tuple[str, bool, bool]] = []
    real = estimate.benchmark_case

    def spy(h: Harness, index: int, case: Case, settings: BenchSettings, timing: Timing) -> CaseResult:
        passes.append((case.label, h.hardening.fresh_inputs, settings.recheck))
        return real(h, index, case, settings, timing)

    monkeypatch.setattr(estimate, "benchmark_case", spy)
    shapes = resolve_shapes(TINY_SHAPES)
    est = estimate_run(resolve_contestant("geqrf"), "benchmark", shapes, RunOptions(device="cpu"), repeats=3)
    labels = [c.label for c in shapes.benchmarks]
    assert passes == [p for label in labels for p in ((label, True, True), (label, False, False))]
    assert all(p.contest_cv >= 0 for p in est.cases)
    assert "cv % (same inputs)" in render_estimate(est)


def test_contest_repeats_follow_the_contest_noise() -> None:
    """A case whose fresh inputs make its times vary, but whose same inputs do not: qrbench's
    prediction runs it to the repeat cap, the contest's stops it at the rule's first chance."""
    pilot = CasePilot(case=Case(batch=2, n=64, cond=1, seed=1), inputs=1, call_s=1e-3, cv=0.05, repeat_s=0.05,
                      check_s=0.01, first_pass_s=0.1, published_check_s=0.02, contest_cv=0.0)
    settings = BenchSettings(True, 200, 10.0)
    assert _timed_pass([pilot], settings, contest=False)[0] == 200
    assert _timed_pass([pilot], settings, contest=True)[0] == 5  # the first repeat past the rule's 0.1 s


def test_settled_cv_leaves_out_the_first_repeat_only() -> None:
    steady = [100.0, 100.1, 99.9, 100.0, 100.2, 99.8, 100.1, 99.9, 100.0]
    assert settled_cv([104.0, *steady]) == pytest.approx(statistics.stdev(steady) / 100.0)
    assert settled_cv([100.0, 90.0, 110.0] * 3) > 0.05  # slow and fast repeats later on all count
    assert settled_cv([5.0, 6.0]) == 0.0
