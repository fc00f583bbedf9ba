"""``--estimate``: the repeat prediction is the contest's rule itself, played over runs drawn from the
pilot's samples; a pilot predicts every stage."""

from __future__ import annotations

import statistics
import time
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
    settled_spread,
)
from evaluator.measure.stopping import ContestRule
from evaluator.protocol import WALL_CAP_S, BenchSettings, Harness
from evaluator.results import CaseResult
from evaluator.runner import RunOptions
from evaluator.shapes import Case, Timing, resolve_shapes

TINY_SHAPES = Path(__file__).parent / "shapes_tiny.yaml"


QUIET = (1.0,)
NOISY = tuple(1.0 + 0.05 * (-1) ** i for i in range(10))  # a 5% spread


@pytest.mark.parametrize(("spread", "repeat_wall_s", "expected"), [
    (QUIET, 0.01, 11),     # no noise: the first repeat past 0.1 s of wall time
    (QUIET, 61.0, 3),      # slow repeats: the rule's three samples
    (NOISY, 0.001, 1000),  # noisy and fast: the repeat cap
    (NOISY, 61.0, 3),      # noisy and slow: the 120 s wall cap from the third repeat
])
def test_predicted_repeats_follow_the_contest_rule(spread: tuple[float, ...], repeat_wall_s: float,
                                                   expected: int) -> None:
    assert predict_repeats(ContestRule(budget_s=30.0), 1000, 1e6, spread, repeat_wall_s) == expected


def test_repeats_grow_with_the_square_of_the_spread() -> None:
    """err < 0.1% needs about (cv / 0.001)^2 repeats: 100 at a 1% spread, 400 at 2%."""
    one = predict_repeats(ContestRule(budget_s=30.0), 1000, 1e6, (0.99, 1.01), 0.001)
    two = predict_repeats(ContestRule(budget_s=30.0), 1000, 1e6, (0.98, 1.02), 0.001)
    assert 85 <= one <= 120
    assert 340 <= two <= 480


def test_one_slow_pilot_repeat_does_not_set_the_typical_run() -> None:
    """One repeat 15% slow among nine quiet ones: a plain spread of 5% would run the case to
    its cap; most runs drawn from the pilot stop at the rule's first chance."""
    spread = (1.15, *([1.0] * 8))
    assert predict_repeats(ContestRule(budget_s=30.0), 1000, 7e6, spread, 0.37) == 3


def test_a_frequent_slow_tail_runs_to_the_cap() -> None:
    """20x32's slow repeats are a third of its samples: every drawn run meets them."""
    spread = (1.0, 1.0, 1.3, 1.0, 1.0, 1.5, 1.0, 1.0, 1.2)
    assert predict_repeats(ContestRule(budget_s=30.0), 1000, 3e4, spread, 0.002) == 1000


def test_budget_reads_the_per_call_mean() -> None:
    # 10 ms calls against a 0.05 s budget: the budget is spent after 6 repeats, which take
    # more than the rule's 0.1 s minimum of wall time only from the 10th.
    assert predict_repeats(ContestRule(budget_s=0.05), 1000, 10e6, NOISY, 0.011) == 10
    # half a second a repeat (50 calls each): the per-call budget is spent after 5 or 6 repeats;
    # a repeat's kernel time (0.5 s) would have spent it at the first, stopping at the rule's third
    assert 5 <= predict_repeats(ContestRule(budget_s=0.05), 1000, 10e6, NOISY, 0.5) <= 6
    assert WALL_CAP_S == 120.0


def test_a_large_repeat_cap_is_played_a_block_at_a_time() -> None:
    """--repeats may allow a million repeats: the made-up runs are played in blocks, until the
    wall cap (120 s of 1 ms repeats) stops a case too noisy for the rule (250,000 repeats at 50%)."""
    n = predict_repeats(ContestRule(budget_s=1e9), 10**6, 1e6, (0.5, 1.5), 0.001)
    assert n in (120_000, 120_001)


def test_the_prediction_is_the_same_for_the_same_pilot() -> None:
    spread = (1.02, 0.99, 1.0, 0.98, 1.01, 1.0, 1.0, 0.995, 1.005)
    first = predict_repeats(ContestRule(budget_s=30.0), 1000, 1e6, spread, 0.001)
    assert predict_repeats(ContestRule(budget_s=30.0), 1000, 1e6, spread, 0.001) == first


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


def test_every_stage_pays_a_fresh_workers_first_calls() -> None:
    """Each stage's worker is new (spare or not) and loads the kernels again: both protocols pay."""
    breakdown = {"worker_start": 3.0, "calibration": 0.25, "load": 0.5}
    assert fixed_costs(breakdown, 2, spares=True, reload_s=1.5) == [(5.25, 5.0), (2.25, 5.0)]


def _slow_first_calls(monkeypatch: pytest.MonkeyPatch, delay_s: float) -> None:
    """Every test case's first call in the pilot takes ``delay_s`` longer (a kernel load)."""
    real, seen = estimate.test_case, set()

    def test_case(h: Harness, index: int, case: Case) -> CaseResult:
        if index not in seen:
            seen.add(index)
            time.sleep(delay_s)
        return real(h, index, case)

    monkeypatch.setattr(estimate, "test_case", test_case)


def test_the_pilots_first_calls_over_its_second_go_to_every_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_first_calls(monkeypatch, 0.3)
    shapes = resolve_shapes(TINY_SHAPES)
    est = estimate_run(resolve_contestant("geqrf"), "leaderboard", shapes, RunOptions(device="cpu"), repeats=3)
    assert est.reload_s > 0.2 * len(shapes.tests)  # 0.3 s each, less what a second call may take longer
    assert not est.notes
    assert f"pays {est.reload_s:.1f} s" in render_estimate(est)


def test_a_pilot_that_compiled_predicts_no_loading_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_first_calls(monkeypatch, 0.1)
    states = iter([frozenset(), frozenset({("kernel.cubin", 1, 1)})])
    monkeypatch.setattr(estimate.Scratch, "compile_cache_state", lambda self: next(states))
    est = estimate_run(resolve_contestant("geqrf"), "leaderboard", resolve_shapes(TINY_SHAPES),
                       RunOptions(device="cpu"), repeats=3)
    assert est.reload_s is None
    assert any("compiled" in note for note in est.notes)
    assert "first calls, which every stage pays again, not measured" in render_estimate(est)


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
    pilot = CasePilot(case=Case(batch=2, n=64, cond=1, seed=1), inputs=1, call_s=1e-3, repeat_s=0.05,
                      check_s=0.01, first_pass_s=0.1, published_check_s=0.02, spread=NOISY, contest_spread=QUIET)
    settings = BenchSettings(True, 200, 10.0)
    assert _timed_pass([pilot], settings, contest=False)[0] == 200
    assert _timed_pass([pilot], settings, contest=True)[0] == 5  # the first repeat past the rule's 0.1 s


def test_settled_spread_leaves_out_the_first_repeat_only() -> None:
    steady = [100.0, 100.1, 99.9, 100.0, 100.2, 99.8, 100.1, 99.9, 100.0]
    spread = settled_spread([104.0, *steady])
    assert spread == pytest.approx([x / statistics.fmean(steady) for x in steady])
    assert statistics.stdev(settled_spread([100.0, 90.0, 110.0] * 3)) > 0.05  # later slow and fast ones all count
    assert settled_spread([5.0, 6.0]) == (1.0,)
