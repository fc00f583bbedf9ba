"""Statistics and the stopping rule, on made-up samples (no device needed)."""

from __future__ import annotations

import math

import pytest
import torch

from evaluator.measure.stats import Stats, geomean
from evaluator.measure.stopping import ContestRule


def test_stats_follow_the_contest_formulas() -> None:
    s = Stats.from_samples([1.0, 2.0, 3.0, 6.0])
    assert s.runs == 4
    assert s.mean_ns == 3.0
    assert s.std_ns == pytest.approx(math.sqrt(14 / 3))  # n-1 denominator
    assert s.err_ns == pytest.approx(math.sqrt(14 / 3) / 2)
    assert (s.best_ns, s.worst_ns) == (1.0, 6.0)


def test_single_sample_has_no_spread() -> None:
    s = Stats.from_samples([5.0])
    assert (s.std_ns, s.err_ns) == (0.0, 0.0)


def test_no_samples_is_an_error() -> None:
    with pytest.raises(ValueError, match="zero samples"):
        Stats.from_samples([])


def test_stats_round_trip() -> None:
    s = Stats.from_samples([1.0, 4.0])
    assert Stats.from_dict(s.to_dict()) == s


def test_geomean() -> None:
    assert geomean([1e-3, 1e-1]) == pytest.approx(1e-2)
    with pytest.raises(ValueError, match="positive"):
        geomean([1.0, 0.0])


RULE = ContestRule(budget_s=10.0)


def test_needs_three_samples_and_a_tenth_of_a_second() -> None:
    steady = [1e6] * 2
    assert not RULE.should_stop(steady, elapsed_s=5.0)
    assert not RULE.should_stop([1e6] * 3, elapsed_s=0.05)
    assert RULE.should_stop([1e6] * 3, elapsed_s=0.2)


def test_stops_once_relative_error_is_small() -> None:
    noisy = [1e6, 2e6, 1e6, 2e6]
    assert not RULE.should_stop(noisy, elapsed_s=1.0)
    quiet = [1e6, 1.0001e6, 0.9999e6, 1e6]
    assert RULE.should_stop(quiet, elapsed_s=1.0)


def test_stops_when_the_budget_is_spent() -> None:
    noisy = [3e9, 6e9, 3e9]  # 12 s of kernel time against a 10 s budget
    assert RULE.should_stop(noisy, elapsed_s=12.0)
    assert not ContestRule(budget_s=20.0).should_stop(noisy, elapsed_s=12.0)


@pytest.mark.parametrize("spread", [0.0, 1e-4, 1e-3, 0.02, 0.3])
def test_the_rule_over_many_runs_at_once_is_the_rule(spread: float) -> None:
    """``stops`` (the estimate's made-up runs) says what ``should_stop`` says after every repeat
    of every run, whole or a block of repeats at a time: quiet and noisy runs, around 7 ms per
    call, against a budget some of them spend."""
    generator = torch.Generator().manual_seed(1)
    samples = 7e6 * (1 + spread * torch.randn(40, 60, generator=generator, dtype=torch.float64))
    elapsed_s = torch.linspace(0.02, 1.2, 60, dtype=torch.float64)
    rule = ContestRule(budget_s=0.3)
    expected = [[rule.should_stop(row[:n + 1].tolist(), float(elapsed_s[n])) for n in range(60)] for row in samples]
    whole, _ = rule.stops(samples, elapsed_s)
    first, sums = rule.stops(samples[:, :17], elapsed_s[:17])
    rest, _ = rule.stops(samples[:, 17:], elapsed_s[17:], sums)
    assert whole.tolist() == expected
    assert torch.cat([first, rest], dim=1).tolist() == expected
    assert any(map(any, expected))  # both answers are exercised
    assert not all(map(all, expected))
