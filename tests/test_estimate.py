"""``--estimate``: the repeat prediction is the contest's rule itself, played over runs drawn from the
pilot's samples; a pilot predicts every stage."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path

import pytest

import evaluator.estimate as estimate
import evaluator.runner as runner
from evaluator.contestant import resolve_contestant
from evaluator.estimate import (
    CasePilot,
    Estimate,
    StageEstimate,
    _parent_setup_s,
    _timed_pass,
    estimate_run,
    fixed_costs,
    more_repeats,
    predict_repeats,
    render_estimate,
    settled_spread,
)
from evaluator.measure.stats import Stats
from evaluator.measure.stopping import ContestRule
from evaluator.protocol import WALL_CAP_S, BenchSettings, Harness
from evaluator.results import CaseResult
from evaluator.runner import RunOptions
from evaluator.shapes import Case, Timing, resolve_shapes
from evaluator.workers import IMPORT_WAIT_S

TINY_SHAPES = Path(__file__).parent / "shapes_tiny.yaml"


# A test that runs a real pilot times its cases and starts spare workers beside it, so it needs the
# machine to itself under pytest-xdist (tests/machine_share.py).
real_pilot = pytest.mark.alone
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


@real_pilot
def test_a_failing_pilot_says_why() -> None:
    """A kernel that fails its first case leaves the estimate nothing to time: the note names the
    case and the checker's message, so an empty table is never the whole answer."""
    wrong = Path(__file__).parent / "contestants" / "zeros.py"
    est = estimate_run(resolve_contestant(str(wrong)), "benchmark", resolve_shapes(TINY_SHAPES),
                       RunOptions(device="cpu"), repeats=3)
    assert est.cases == ()
    assert len(est.notes) == 1
    assert est.notes[0].startswith("the pilot's stage ended fail: ")
    assert "R - Q.T @ A is too large" in est.notes[0]


def test_the_prediction_is_the_same_for_the_same_pilot() -> None:
    spread = (1.02, 0.99, 1.0, 0.98, 1.01, 1.0, 1.0, 0.995, 1.005)
    first = predict_repeats(ContestRule(budget_s=30.0), 1000, 1e6, spread, 0.001)
    assert predict_repeats(ContestRule(budget_s=30.0), 1000, 1e6, spread, 0.001) == first


@real_pilot
def test_estimate_predicts_every_stage_of_a_leaderboard_run() -> None:
    shapes = resolve_shapes(TINY_SHAPES)
    est = estimate_run(resolve_contestant("geqrf"), "leaderboard", shapes, RunOptions(device="cpu"), repeats=3)
    assert [s.name for s in est.stages] == ["test", "benchmark", "ranked", "ranked-secret"]
    assert not est.notes, est.notes
    assert [p.case for p in est.cases] == list(shapes.benchmarks)
    assert all(p.call_s > 0 and p.repeat_s > 0 and p.published_check_s > 0 for p in est.cases)
    assert all(s.wall_s > 0 and s.repeats >= 0 for s in est.stages)
    assert est.stages[2].repeats >= 3 * len(shapes.benchmarks)  # every timed case runs at least 3 repeats
    assert len(est.stages[2].case_repeats) == len(est.stages[2].contest_case_repeats) == len(shapes.benchmarks)
    text = render_estimate(est)
    assert "ranked-secret" in text
    assert "contest wall s" in text


def test_stages_after_the_first_start_no_worker_where_spares_serve_them() -> None:
    """A ranked submission's later stages take spares (evaluator.workers): qrbench's prediction
    leaves their worker start out; the contest's service starts every worker fresh."""
    breakdown = {"worker_start": 3.0, "calibration": 0.25, "load": 0.5, "kernel": 9.0}
    assert fixed_costs(breakdown, 4, spares=True, outside_s=3.75) == [(3.75, 3.5), (0.75, 3.5), (0.75, 3.5),
                                                                      (0.75, 3.5)]
    assert fixed_costs(breakdown, 2, spares=False, outside_s=3.75) == [(3.75, 3.5), (3.75, 3.5)]


def test_every_stage_pays_a_fresh_workers_first_calls() -> None:
    """Each stage's worker is new (spare or not) and loads the kernels again: both protocols pay."""
    breakdown = {"worker_start": 3.0, "calibration": 0.25, "load": 0.5}
    assert fixed_costs(breakdown, 2, spares=True, outside_s=3.75, reload_s=1.5) == [(5.25, 5.0), (2.25, 5.0)]


def test_every_stage_pays_the_pilot_stages_plumbing() -> None:
    """What the pilot's stage spent outside its cases beyond its worker's start, calibration and
    load (containment, fingerprint, stopping the worker) goes to every stage of both protocols;
    the parent's one-off loads for its checks to qrbench's first stage alone."""
    breakdown = {"worker_start": 3.0, "calibration": 0.25, "load": 0.5, "other": 0.9}
    costs = fixed_costs(breakdown, 3, spares=True, outside_s=4.25, parent_s=2.0)
    assert costs == [(6.25, 4.0), (1.25, 4.0), (1.25, 4.0)]
    # a stage that spent nothing beyond its named costs outside its cases (or less: clock noise)
    assert fixed_costs(breakdown, 1, spares=False, outside_s=3.7) == [(3.75, 3.5)]


@real_pilot
def test_a_slow_stage_outside_its_cases_slows_every_predicted_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage's plumbing made a second slower (its environment's fingerprint): every predicted
    stage, the later ones whose workers are spares included, pays that second, in both protocols."""
    real = runner.fingerprint

    def slow_fingerprint(device: object) -> dict[str, object]:
        time.sleep(1.0)
        return real(device)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "fingerprint", slow_fingerprint)
    est = estimate_run(resolve_contestant("geqrf"), "leaderboard", resolve_shapes(TINY_SHAPES),
                       RunOptions(device="cpu"), repeats=3, max_repeats=3)
    assert all(s.wall_s >= 1.0 and s.contest_wall_s >= 1.0 for s in est.stages)


def test_the_parents_one_off_loads_are_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimate, "prepare_checks", lambda device, sizes: time.sleep(0.2))
    assert _parent_setup_s(RunOptions(device="cpu"), resolve_shapes(TINY_SHAPES)) >= 0.2


@real_pilot
@pytest.mark.parametrize(("mode", "spares"), [("leaderboard", 3), ("benchmark", 0)])
def test_the_pilot_starts_the_spares_the_run_starts(monkeypatch: pytest.MonkeyPatch, mode: str,
                                                    spares: int) -> None:
    """A ranked submission starts its later stages' workers beside its test stage's, which slows
    that one's start: the pilot's worker starts beside as many, so its start is the first stage's."""
    counts: list[int] = []
    real = estimate.SpareWorkers

    def spy(options: RunOptions, scratch: object, count: int) -> object:
        counts.append(count)
        return real(options, scratch, count)  # type: ignore[arg-type]

    monkeypatch.setattr(estimate, "SpareWorkers", spy)
    estimate_run(resolve_contestant("geqrf"), mode, resolve_shapes(TINY_SHAPES), RunOptions(device="cpu"),
                 repeats=3, max_repeats=3)
    assert counts == [spares]


@real_pilot
def test_the_pilot_times_no_case_before_the_spares_have_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's second stage times its first case once the spares' imports are done: so does
    the pilot, its test cases first, then the wait, then its timed passes."""
    events: list[tuple[str, int]] = []
    real_spares, real_sampled = estimate.SpareWorkers, estimate._sampled

    class Spy(real_spares):  # type: ignore[misc, valid-type]
        def settle(self, wait_s: float = IMPORT_WAIT_S) -> None:
            super().settle(wait_s)
            events.append(("settled", len(self._ready)))

    def sampled(*args: object, **kwargs: object) -> object:
        events.append(("timed", 0))
        return real_sampled(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(estimate, "SpareWorkers", Spy)
    monkeypatch.setattr(estimate, "_sampled", sampled)
    estimate_run(resolve_contestant("geqrf"), "leaderboard", resolve_shapes(TINY_SHAPES), RunOptions(device="cpu"),
                 repeats=3, max_repeats=3)
    assert events[0] == ("settled", 3)
    assert len(events) > 1
    assert {name for name, _ in events[1:]} == {"timed"}


def _slow_first_calls(monkeypatch: pytest.MonkeyPatch, delay_s: float) -> None:
    """Every test case's first call in the pilot takes ``delay_s`` longer (a kernel load)."""
    real, seen = estimate.test_case, set()

    def test_case(h: Harness, index: int, case: Case) -> CaseResult:
        if index not in seen:
            seen.add(index)
            time.sleep(delay_s)
        return real(h, index, case)

    monkeypatch.setattr(estimate, "test_case", test_case)


@real_pilot
def test_the_pilots_first_calls_over_its_second_go_to_every_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_first_calls(monkeypatch, 0.3)
    shapes = resolve_shapes(TINY_SHAPES)
    est = estimate_run(resolve_contestant("geqrf"), "leaderboard", shapes, RunOptions(device="cpu"), repeats=3)
    assert est.reload_s > 0.2 * len(shapes.tests)  # 0.3 s each, less what a second call may take longer
    assert not est.notes
    assert f"pays {est.reload_s:.1f} s" in render_estimate(est)


@real_pilot
def test_a_pilot_that_compiled_predicts_no_loading_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_first_calls(monkeypatch, 0.1)
    states = iter([frozenset(), frozenset({("kernel.cubin", 1, 1)})])
    monkeypatch.setattr(estimate.Scratch, "compile_cache_state", lambda self: next(states))
    est = estimate_run(resolve_contestant("geqrf"), "leaderboard", resolve_shapes(TINY_SHAPES),
                       RunOptions(device="cpu"), repeats=3)
    assert est.reload_s is None
    assert any("compiled" in note for note in est.notes)
    assert "first calls, which every stage pays again, not measured" in render_estimate(est)


@real_pilot
def test_contest_noise_comes_from_a_same_inputs_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each benchmark case is piloted twice: hardened with fresh inputs and rechecks (qrbench's
    repeats), then the contest's way, the same inputs in every repeat, each repeat checked before
    the next as the contest's are (the contest's noise); the run's own rules are back in force
    afterwards."""
    passes: list[tuple[str, bool, bool]] = []
    real = estimate.benchmark_case

    def spy(h: Harness, index: int, case: Case, settings: BenchSettings, timing: Timing) -> CaseResult:
        passes.append((case.label, h.hardening.fresh_inputs, settings.recheck))
        return real(h, index, case, settings, timing)

    monkeypatch.setattr(estimate, "benchmark_case", spy)
    shapes = resolve_shapes(TINY_SHAPES)
    est = estimate_run(resolve_contestant("geqrf"), "benchmark", shapes, RunOptions(device="cpu"), repeats=3,
                       max_repeats=3)
    labels = [c.label for c in shapes.benchmarks]
    assert passes == [p for label in labels for p in ((label, True, True), (label, False, True))]
    assert all(p.contest_cv >= 0 for p in est.cases)
    assert "cv % (same inputs)" in render_estimate(est)


def test_contest_repeats_follow_the_contest_noise() -> None:
    """A case whose fresh inputs make its times vary, but whose same inputs do not: qrbench's
    prediction runs it to the repeat cap, the contest's stops it at the rule's first chance."""
    pilot = CasePilot(case=Case(batch=2, n=64, cond=1, seed=1), inputs=1, call_s=1e-3, repeat_s=0.05,
                      check_s=0.01, first_pass_s=0.1, published_check_s=0.02, spread=NOISY, contest_spread=QUIET)
    settings = BenchSettings(True, 200, 10.0)
    assert _timed_pass([pilot], settings, contest=False)[0] == [200]
    assert _timed_pass([pilot], settings, contest=True)[0] == [5]  # the first repeat past the rule's 0.1 s


def test_settled_spread_leaves_out_the_first_repeat_only() -> None:
    steady = [100.0, 100.1, 99.9, 100.0, 100.2, 99.8, 100.1, 99.9, 100.0]
    spread = settled_spread([104.0, *steady])
    assert spread == pytest.approx([x / statistics.fmean(steady) for x in steady])
    assert statistics.stdev(settled_spread([100.0, 90.0, 110.0] * 3)) > 0.05  # later slow and fast ones all count
    assert settled_spread([5.0, 6.0]) == (1.0,)


def test_settled_spread_joins_passes_each_less_its_first_repeat() -> None:
    spread = settled_spread([130.0, 100.0, 102.0], [140.0, 98.0, 100.0])
    assert spread == pytest.approx([x / 100.0 for x in (100.0, 102.0, 98.0, 100.0)])


NOISY_NS = [100.0 * (1.0 + 0.2 * (-1) ** i) for i in range(10)]  # a 20% spread (20x32's)
STEADY_NS = [104.0, *([100.0] * 9)]  # a slow first repeat, then none


def _elapsed(repeat_s: float, repeats: int = 10) -> list[float]:
    return [repeat_s * (k + 1) for k in range(repeats)]


@pytest.mark.parametrize(("samples", "elapsed", "expected"), [
    (NOISY_NS, _elapsed(0.013), 76),         # noisy and cheap: as many more as a second takes at 13 ms
    (NOISY_NS, _elapsed(0.001), 190),        # noisier than the rule at 1 ms a repeat: up to 200 in all
    (STEADY_NS, _elapsed(0.013), 0),         # its settled repeats meet the rule: nothing more to learn
    (NOISY_NS, _elapsed(0.2), 0),            # noisy but expensive: not 10 more in a second
    (NOISY_NS[:4], _elapsed(0.013, 4), 0),   # the rule stopped the pass early (or a failure did)
])
def test_a_noisy_cheap_case_is_sampled_further(samples: list[float], elapsed: list[float], expected: int) -> None:
    assert more_repeats(samples, elapsed, 10) == expected


def test_a_case_too_short_for_the_rules_wall_time_is_sampled_further() -> None:
    """The rule judges nothing before 0.1 s of wall time: ten steady 1 ms repeats are unsettled,
    and cheap to add to."""
    assert more_repeats(STEADY_NS, _elapsed(0.001), 10) == 190


@real_pilot
def test_the_pilot_samples_noisy_cheap_cases_further_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """Made-up repeats: case 0 noisy at 40 ms a repeat, case 1 steady, case 2 noisy at 0.5 s a
    repeat. Only case 0 gets a second pass, fresh inputs and same inputs alike, and its spreads
    hold both passes' settled samples."""
    kinds = {0: (0.04, NOISY_NS), 1: (0.04, STEADY_NS), 2: (0.5, NOISY_NS)}
    calls: list[tuple[int, bool, int]] = []

    def made_up(h: Harness, index: int, case: Case, settings: BenchSettings, timing: Timing) -> CaseResult:
        calls.append((index, h.hardening.fresh_inputs, settings.max_repeats))
        repeat_s, pattern = kinds[index]
        samples = tuple(pattern[k % len(pattern)] for k in range(settings.max_repeats))
        for k in range(settings.max_repeats):
            h.progress({"event": "repeat", "index": index, "repeat": k + 1, "elapsed_s": repeat_s * (k + 1)})
        return CaseResult(index, case, "pass", stats=Stats.from_samples(samples), samples_ns=samples)

    monkeypatch.setattr(estimate, "benchmark_case", made_up)
    shapes = resolve_shapes(TINY_SHAPES)
    shapes = replace(shapes, benchmarks=(*shapes.benchmarks, Case(batch=2, n=8, cond=1, seed=5)))
    est = estimate_run(resolve_contestant("geqrf"), "benchmark", shapes, RunOptions(device="cpu"), repeats=4,
                       max_repeats=20)
    # 4 repeats of 40 ms unsettled: 16 more (a second holds 25; 20 samples in all)
    assert calls == [(0, True, 4), (0, True, 16), (0, False, 4), (0, False, 16),
                     (1, True, 4), (1, False, 4), (2, True, 4), (2, False, 4)]
    assert [(len(p.spread), len(p.contest_spread)) for p in est.cases] == [(18, 18), (3, 3), (3, 3)]


def _made_up_estimate(stage_names: tuple[str, ...]) -> Estimate:
    pilot = CasePilot(case=Case(batch=20, n=32, cond=1, seed=1), inputs=50, call_s=3e-5, repeat_s=0.013,
                      check_s=0.008, first_pass_s=0.2, published_check_s=0.0025, spread=NOISY, contest_spread=NOISY)
    timed = {"benchmark": ((200,), (198,)), "ranked": ((1000,), (674,)), "ranked-secret": ((999,), (572,))}
    stages = tuple(StageEstimate(name, 0, 1.0, 0, 1.0, 900.0, *timed.get(name, ((), ()))) for name in stage_names)
    return Estimate("made-up", "leaderboard", stages, (pilot,), 12.0, 2.0, 1.5)


@pytest.mark.parametrize(("stages", "columns", "row_tail"), [
    (("test", "benchmark", "ranked", "ranked-secret"), ["ranked repeats", "contest ranked repeats"], ["1000", "674"]),
    (("benchmark",), ["benchmark repeats", "contest benchmark repeats"], ["200", "198"]),
    (("test",), [], ["2.5"]),  # no timed pass: the table ends at the published check
])
def test_the_case_table_shows_the_repeats_that_drive_the_wall(stages: tuple[str, ...], columns: list[str],
                                                              row_tail: list[str]) -> None:
    """Per case, the repeats of the ranked pass (the benchmark's where there is none), for qrbench
    and for the contest: 20x32 at its caps is where a run's minutes go."""
    header, _, row = render_estimate(_made_up_estimate(stages)).splitlines()[1:4]
    cells = [c.strip() for c in header.split("|")[1:-1]]
    assert cells[7:] == columns
    assert [c.strip() for c in row.split("|")[1:-1]][-len(row_tail):] == row_tail
