"""``qrbench compare``: paired, interleaved measurement of contestants (issue #21).

By layer: the statistics and the block rule on made-up samples; the paired protocol in-process
with fake timers (an injected slow drift between two identical kernels is read as "same" by a
comparison and as a difference by two separate runs; a fixed 3% slowdown is read as slower);
the comparison file, its Markdown and its pytest-benchmark export; and one small run of the real
command on the CPU.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch

from evaluator import protocol
from evaluator.execution import LocalExecutor, WorkerGone
from evaluator.paired import PairedCase, PairedSettings, compare_shapes
from evaluator.paired_stats import FASTER, SAME, SLOWER, RatioRule
from evaluator.protocol import Harness
from evaluator.report.compare import NoiseRule
from evaluator.shapes import Case, ShapeSet, Timing
from evaluator.stopping import BlockRule
from evaluator.timing import Measurement

T = TypeVar("T")
RULE = RatioRule()


# ---- statistics, on made-up samples -------------------------------------------------------------

def _noisy(n: int, mean: float, rel: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [mean * (1 + rel * rng.gauss(0, 1)) for _ in range(n)]


def test_identical_kernels_read_same_with_an_interval_around_one() -> None:
    """The same times in the opposite order: the pairs are the same set either way round, so the
    bootstrap is symmetric about a ratio of exactly 1."""
    base = _noisy(50, 1e6, 0.01, 1)
    estimate = RULE.case_ratio(base, base[::-1])
    assert estimate.time_ratio == pytest.approx(1.0)
    assert estimate.verdict == SAME
    assert estimate.low < 1 < estimate.high
    assert estimate.blocks == 50


@pytest.mark.parametrize(("factor", "verdict"), [(1.03, SLOWER), (1 / 1.03, FASTER), (1.005, SAME)])
def test_a_verdict_needs_significance_and_the_minimum_change(factor: float, verdict: str) -> None:
    base = _noisy(200, 1e6, 0.002, 1)
    estimate = RULE.case_ratio(base, [t * factor for t in _noisy(200, 1e6, 0.002, 2)])
    assert estimate.time_ratio == pytest.approx(factor, rel=1e-3)
    assert estimate.low > 1 or estimate.high < 1  # 0.5% is significant here, but under the 1% minimum
    assert estimate.verdict == verdict


def test_pairing_cancels_drift_that_separate_samples_keep() -> None:
    """Both sides ride the same slow drift (20% over the blocks): paired, the ratio's interval is
    narrow; the same samples taken as unpaired leave the drift in the noise."""
    drift = [1 + 0.2 * b / 100 for b in range(100)]
    base = [d * t for d, t in zip(drift, _noisy(100, 1e6, 0.002, 1), strict=True)]
    cand = [d * t for d, t in zip(drift, _noisy(100, 1e6, 0.002, 2), strict=True)]
    paired, unpaired = RULE.case_ratio(base, cand), RULE.case_ratio(base, cand, paired=False)
    assert paired.time_ratio == unpaired.time_ratio
    assert (paired.high - paired.low) * 10 < unpaired.high - unpaired.low


def test_the_geomean_ratio_is_the_ratio_of_geomean_scores() -> None:
    cases = [([1.0, 1.1, 0.9], [2.2, 2.0, 1.8]), ([10.0, 10.5, 9.5], [4.0, 5.5, 5.5])]
    expected = math.sqrt((6.0 / 3.0) / (30.0 / 15.0))  # each case's ratio of means, geometric mean
    estimate = RULE.geomean_ratio(cases)
    assert estimate.time_ratio == pytest.approx(expected)
    assert estimate.blocks == 3
    assert RULE.geomean_ratio(cases) == estimate  # a seeded bootstrap: the same interval every time


def test_too_few_blocks_never_make_a_difference() -> None:
    estimate = RULE.case_ratio([1.0], [2.0])
    assert (estimate.time_ratio, estimate.low, estimate.high, estimate.verdict) == (2.0, None, None, SAME)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: RULE.geomean_ratio([]), "at least one case"),
    (lambda: RULE.case_ratio([1.0, 2.0], [1.0]), "block for block"),
    (lambda: RULE.case_ratio([], [1.0], paired=False), "both sides"),
    (lambda: RULE.case_ratio([1.0, 0.0], [1.0, 1.0]), "positive"),
    (lambda: RatioRule(min_change=-0.1), "min_change"),
    (lambda: RatioRule(confidence=1.0), "confidence"),
    (lambda: RatioRule(resamples=10), "resamples"),
    (lambda: BlockRule(err_rel=0), "err_rel"),
    (lambda: BlockRule(min_blocks=1), "min_blocks"),
    (lambda: PairedSettings(max_blocks=0, budget_s=1), "max_blocks"),
    (lambda: PairedSettings(max_blocks=1, budget_s=0), "budget_s"),
])
def test_bad_arguments_are_errors(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_the_block_rule_waits_for_every_candidate() -> None:
    rule = BlockRule(err_rel=1e-3, min_blocks=10)
    quiet = [0.0001 * (-1) ** b for b in range(10)]
    noisy = [0.01 * (-1) ** b for b in range(10)]
    assert rule.should_stop([quiet])
    assert not rule.should_stop([quiet[:9]])  # too few blocks, however quiet
    assert not rule.should_stop([quiet, noisy])
    assert rule.should_stop([quiet, quiet])


# ---- the paired protocol, in-process with fake timers --------------------------------------------

class Drift:
    """A slow drift shared by every timer made from it: each timed repeat, whoever's, makes the
    next one ``rate`` slower; each time also carries ``noise`` (relative, seeded)."""

    def __init__(self, rate: float, noise: float = 0.005, seed: int = 0) -> None:
        self.rate = rate
        self.noise = noise
        self.repeats = 0
        self._rng = random.Random(seed)

    def timer(self, factor: float = 1.0) -> Any:
        drift = self

        class Timer:
            kind = "cpu-clock"

            def time(self, run: Callable[[], T]) -> tuple[Measurement, T]:
                result = run()
                drift.repeats += 1
                jitter = 1 + drift.noise * drift._rng.gauss(0, 1)
                return Measurement(1e6 * factor * (1 + drift.rate * drift.repeats) * jitter), result

        return Timer()


SHAPES = ShapeSet("fake", Path("fake.yaml"), (Case(2, 8, 1, 1),),
                  (Case(2, 8, 1, 11), Case(2, 12, 0, 12, "rankdef"), Case(3, 8, 2, 13, "mixed")), {},
                  Timing(max_inputs=1, benchmark_warmup_repeats=1, benchmark_repeats=40, benchmark_budget_s=1e3))
SETTINGS = PairedSettings(max_blocks=40, budget_s=1e3)
SEPARATE_CLOCK_STEP_S = 0.01  # every clock reading of a separate run is 10 ms later


def _harness(kernel: Callable[[torch.Tensor], object], timer: Any, **harness: Any) -> Harness:
    return Harness(LocalExecutor(kernel, timer, rules=True), **harness)


def _compare(kernels: list[Callable[[torch.Tensor], object]], timers: list[Any],
             settings: PairedSettings = SETTINGS, seed: int = 0) -> list[PairedCase]:
    harnesses = [_harness(k, t) for k, t in zip(kernels, timers, strict=True)]
    return list(compare_shapes(harnesses, SHAPES, settings, random.Random(seed)))


def _paired(cases: list[PairedCase], candidate: int = 1) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
    return [(c.results[0].samples_ns, c.results[candidate].samples_ns) for c in cases]


def _fake_clock() -> Callable[[], int]:
    ticks = iter(range(0, 10**15, int(SEPARATE_CLOCK_STEP_S * 1e9)))
    return lambda: next(ticks)


def _separate_run(timer: Any) -> list[Any]:
    return list(protocol.run_benchmark(_harness(torch.geqrf, timer, clock=_fake_clock()), SHAPES))


def test_drift_between_identical_kernels_is_same_paired_and_a_difference_in_separate_runs() -> None:
    """The issue's case: a lab that drifts about 4% over a run's length. Interleaved, the two
    identical kernels share it block by block; run one after the other, the second reads slower."""
    drift = Drift(rate=3e-4)
    cases = _compare([torch.geqrf, torch.geqrf], [drift.timer(), drift.timer()])
    assert all(r.passed for c in cases for r in c.results)
    paired = RULE.geomean_ratio(_paired(cases))
    assert paired.verdict == SAME
    assert paired.low < 1 < paired.high
    assert abs(paired.time_ratio - 1) < 0.002

    drift = Drift(rate=3e-4)
    first, second = _separate_run(drift.timer()), _separate_run(drift.timer())
    assert all(c.passed for c in first + second)
    separate = RULE.geomean_ratio([(a.samples_ns, b.samples_ns) for a, b in zip(first, second, strict=True)],
                                  paired=False)
    assert separate.verdict == SLOWER
    assert separate.time_ratio > 1.02
    # The separate-runs report reads it as slower too, case by case, at a 1% minimum change.
    assert {NoiseRule(min_change=0.01).compare(a.samples_ns, b.samples_ns).verdict
            for a, b in zip(first, second, strict=True)} == {"slower"}


@pytest.mark.parametrize(("factor", "verdict"), [(1.03, SLOWER), (1 / 1.03, FASTER), (1.0, SAME)])
def test_a_fixed_change_is_read_through_the_drift(factor: float, verdict: str) -> None:
    drift = Drift(rate=3e-4)
    cases = _compare([torch.geqrf, torch.geqrf], [drift.timer(), drift.timer(factor)])
    estimate = RULE.geomean_ratio(_paired(cases))
    assert estimate.verdict == verdict
    assert estimate.time_ratio == pytest.approx(factor, rel=0.003)
    assert {RULE.case_ratio(*pair).verdict for pair in _paired(cases)} == {verdict}


class Recorder:
    """An honest kernel that keeps the content of every call."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def __call__(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.seen.append(a.clone())
        return torch.geqrf(a)


def test_every_block_hands_the_same_fresh_content_to_all_in_a_random_order() -> None:
    kernels = [Recorder(), Recorder(), Recorder()]
    drift = Drift(rate=0.0)
    settings = PairedSettings(max_blocks=12, budget_s=1e3, warmup_blocks=1)
    cases = _compare(kernels, [drift.timer() for _ in kernels], settings)
    calls_per_case = 1 + settings.warmup_blocks + settings.max_blocks  # correctness pass, warm-up, blocks
    assert [len(k.seen) for k in kernels] == [calls_per_case * len(SHAPES.benchmarks)] * 3
    for call in range(len(kernels[0].seen)):
        assert torch.equal(kernels[0].seen[call], kernels[1].seen[call])
        assert torch.equal(kernels[0].seen[call], kernels[2].seen[call])
        if call % calls_per_case:  # no two blocks (nor a block and the correctness pass) share content
            assert not torch.equal(kernels[0].seen[call], kernels[0].seen[call - 1])
    for case in cases:
        assert len(case.orders) == settings.max_blocks
        assert all(sorted(order) == [0, 1, 2] for order in case.orders)
        assert all(len(r.samples_ns) == settings.max_blocks for r in case.results)
    assert len({order for case in cases for order in case.orders}) > 3  # drawn per block


def test_the_block_rule_ends_a_quiet_case_and_the_budget_a_noisy_one() -> None:
    quiet = Drift(rate=0.0, noise=1e-4)
    cases = _compare([torch.geqrf, torch.geqrf], [quiet.timer(), quiet.timer()],
                     PairedSettings(max_blocks=500, budget_s=1e3, rule=BlockRule(min_blocks=10)))
    assert {len(c.orders) for c in cases} == {10}
    noisy = Drift(rate=0.0, noise=0.05)
    harnesses = [_harness(torch.geqrf, noisy.timer(), clock=_fake_clock()) for _ in range(2)]
    settings = PairedSettings(max_blocks=500, budget_s=0.25)  # the clock reads 10 ms later after each block
    cases = list(compare_shapes(harnesses, SHAPES, settings, random.Random(0)))
    assert {len(c.orders) for c in cases} == {26}  # the first block past 0.25 s


def _wrong_after(calls: int) -> Callable[[torch.Tensor], object]:
    count = [0]

    def kernel(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        count[0] += 1
        h, tau = torch.geqrf(a)
        return (h, tau) if count[0] <= calls else (h * 0, tau)

    return kernel


def test_a_failing_candidate_leaves_its_case_and_the_others_go_on() -> None:
    drift = Drift(rate=0.0)
    cases = _compare([torch.geqrf, _wrong_after(4), torch.geqrf], [drift.timer() for _ in range(3)],
                     PairedSettings(max_blocks=8, budget_s=1e3))
    first = cases[0]
    assert first.results[1].status == "fail"
    assert first.results[1].message.startswith("[rule fresh-inputs]")
    assert first.results[0].passed
    assert first.results[2].passed
    assert len(first.results[0].samples_ns) == len(first.results[2].samples_ns) == 8
    assert len(first.orders) == 8
    assert any(1 not in order for order in first.orders)
    assert all(c.results[1].status == "fail" for c in cases)  # wrong from then on, in every case


def test_a_failing_baseline_leaves_nothing_to_pair() -> None:
    drift = Drift(rate=0.0)
    cases = _compare([lambda a: (a, a[..., 0]), torch.geqrf], [drift.timer(), drift.timer()])
    for case in cases:
        assert case.results[0].status == "fail"
        assert case.results[1].status == "skipped"
        assert case.orders == ()


class Gone:
    """A timer whose worker goes away at its ``after``-th repeat."""

    def __init__(self, after: int) -> None:
        self.kind = "cpu-clock"
        self.after = after

    def time(self, run: Callable[[], T]) -> tuple[Measurement, T]:
        self.after -= 1
        if self.after < 0:
            raise WorkerGone("crash", "the worker was killed by SIGKILL before finishing")
        return Measurement(1e6), run()


@pytest.mark.parametrize("who", [0, 1])
def test_a_worker_that_goes_away_leaves_the_comparison(who: int) -> None:
    timers: list[Any] = [Drift(rate=0.0).timer(), Drift(rate=0.0).timer(), Drift(rate=0.0).timer()]
    timers[who] = Gone(after=3)
    cases = _compare([torch.geqrf] * 3, timers, PairedSettings(max_blocks=5, budget_s=1e3))
    assert cases[0].results[who].status == "crash"
    assert set(cases[0].gone) == {who}
    later = [c.results for c in cases[1:]]
    assert all(r[who].status == "skipped" and "its worker stopped in case 1" in r[who].message for r in later)
    if who == 0:  # no baseline: nothing is compared any more
        assert all(r[j].status == "skipped" and "the baseline left" in r[j].message for r in later for j in (1, 2))
    else:
        assert all(r[0].passed and r[2].passed for r in later)


def test_a_comparison_needs_two_contestants_and_every_repeat() -> None:
    drift = Drift(rate=0.0)
    with pytest.raises(ValueError, match="at least two"):
        list(compare_shapes([_harness(torch.geqrf, drift.timer())], SHAPES, SETTINGS, random.Random(0)))
    harnesses = [_harness(torch.geqrf, drift.timer(), discard_throttled=True) for _ in range(2)]
    with pytest.raises(ValueError, match="keeps every repeat"):
        list(compare_shapes(harnesses, SHAPES, SETTINGS, random.Random(0)))
