"""Where a stage's wall time goes (evaluator/measure/ledger.py): each activity is timed where it
happens, and ``other`` is only what no activity claimed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from evaluator.contestant import resolve_contestant
from evaluator.hardening.guards import Hardening
from evaluator.measure.clocks import ClockSample
from evaluator.measure.ledger import ACTIVITIES, Ledger
from evaluator.protocol import BenchSettings, benchmark_case
from evaluator.runner import RunOptions, run_contestant
from evaluator.shapes import Case, Timing, load_shapes
from tests.test_protocol import FakeTimer, _harness, fake_clock

TESTS = Path(__file__).parent
PAUSE_S = 0.01


def test_other_is_the_wall_time_no_activity_claimed() -> None:
    ticks = iter([0.0, 2.0, 2.0, 2.5])
    ledger = Ledger(clock=lambda: next(ticks))
    with ledger.timing("kernel"):
        pass
    with ledger.timing("clocks"):
        pass
    breakdown = ledger.breakdown(wall_s=4.0)
    assert set(breakdown) == set(ACTIVITIES)
    assert (breakdown["kernel"], breakdown["clocks"], breakdown["other"]) == (2.0, 0.5, 1.5)
    with pytest.raises(ValueError, match="unknown activity"):
        ledger.add("idle", 1.0)


class SlowSampler:
    """An NVML stand-in that takes ``PAUSE_S`` per reading."""

    description = "nvml"

    def read(self) -> ClockSample:
        time.sleep(PAUSE_S)
        return ClockSample(1980, 3201, 300.0, 0)


def test_clock_readings_are_their_own_share_of_a_stage() -> None:
    h = _harness(torch.geqrf, FakeTimer(), Hardening(), clock=fake_clock(0.04), sampler=SlowSampler())
    result = benchmark_case(h, 0, Case(2, 8, 1, 3), BenchSettings(True, 5, 10.0), Timing(max_inputs=1))
    assert result.passed, result.message
    assert h.ledger.seconds["clocks"] >= 2 * PAUSE_S * len(result.samples_ns)  # a reading before and after each


@pytest.mark.slow
def test_progress_and_handing_on_cases_are_the_stages_reporting() -> None:
    events: list[dict] = []

    def slow_progress(_stage: str, event: dict) -> None:
        events.append(event)
        time.sleep(PAUSE_S)

    run = run_contestant(resolve_contestant("geqrf"), "benchmark", load_shapes(TESTS / "shapes_tiny.yaml"),
                         RunOptions(device="cpu", precheck=False), on_progress=slow_progress)
    assert run.passed
    protocol_events = [e for e in events if e["event"] != "wait"]  # "wait": the worker is silent (starting)
    # breakdown_s is rounded to the millisecond
    assert run.stages[0].breakdown_s["reporting"] >= PAUSE_S * len(protocol_events) - 0.0005
