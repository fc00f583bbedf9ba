"""``python -m benchmarks.time_to_verdict``: both protocols' full ranked submission, in CI's time."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import time_to_verdict
from evaluator.results import load_results


def test_time_to_verdict_runs_both_protocols_on_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ttv.json"
    assert time_to_verdict.main(["geqrf", "--device", "cpu", "--json", str(out)]) == 0
    runs = load_results(out)
    assert [run.compat for run in runs] == [False, True]
    for run in runs:
        assert [s.name for s in run.stages] == ["test", "benchmark", "ranked", "ranked-secret"]
        assert run.passed
    assert all(s.breakdown_s for s in runs[0].stages)  # hardened stages say where their time went
    timed = [c for s in runs[0].stages if s.name != "test" for c in s.cases]
    for case in timed:  # each hardened repeat's claim beside the parent's witness, which contains it
        witnessed = case.parent_clock
        assert witnessed is not None
        assert len(witnessed.claimed_ns) == len(case.samples_ns)
        assert max(witnessed.over_witness()) <= 1
    assert all(c.parent_clock is None for s in runs[1].stages for c in s.cases)  # --compat: no witness
    printed = capsys.readouterr().out
    assert "ratio" in printed
    assert "ranked: geomean hardened/compat" in printed
    assert "cases within 3%" in printed  # and which are not, by name
