"""``python -m benchmarks.process_speed``: one case timed in several fresh processes, with where each ran."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks import process_speed

pytestmark = pytest.mark.alone  # times fresh processes and where each ran (tests/machine_share.py)


def test_each_process_reports_its_speed_and_placement(tmp_path: Path) -> None:
    out = tmp_path / "speed.md"
    argv = ["geqrf", "--case", "4x16", "--device", "cpu", "--processes", "2", "--pin", "--out", str(out)]
    assert process_speed.main(argv) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("|") and "---" not in line][1:]
    assert len(rows) == 2
    allowed = sorted(os.sched_getaffinity(0))
    for i, row in enumerate(rows):
        cells = [c.strip() for c in row.strip("|").split("|")]
        pinned = allowed[i % len(allowed)]
        assert cells[1] == str(pinned)
        assert cells[2] == f"{pinned} -> {pinned}"  # a pinned process stays where it was put
        assert float(cells[4]) > 0


def test_current_cpu_is_one_this_process_may_use() -> None:
    assert process_speed.current_cpu() in os.sched_getaffinity(0)
