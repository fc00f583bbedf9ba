"""benchmarks/kernel_table.py: the committed kernel table is what the script renders from the
committed results of its run, and its figures follow from the samples in them."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.kernel_table import main, render_table
from evaluator.results import load_results

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "reports" / "h200" / "2026-11-30-kernel_table-qr_v2.json.gz"
TABLE = REPO / "reports" / "kernels-h200.md"


def test_committed_table_is_rendered_from_the_committed_run() -> None:
    assert render_table(load_results(RESULTS)) in TABLE.read_text()


def test_geometric_means_and_speedups_follow_from_the_samples() -> None:
    runs = load_results(RESULTS)
    assert [r.contestant["name"] for r in runs] == ["geqrf", "blocked_wy", "cholesky_orhr"]
    means = []
    for run in runs:
        cases = run.stage("benchmark").cases
        assert len(cases) == 12
        assert all(c.passed for c in cases)
        per_case = [sum(c.samples_ns) / len(c.samples_ns) for c in cases]
        means.append(math.exp(sum(map(math.log, per_case)) / len(per_case)) / 1e6)
    table = render_table(runs)
    for ms in means[1:]:
        assert f"({means[0] / ms:.1f}x)" in table  # the geomean speedup over geqrf


def test_from_renders_without_running(tmp_path: Path) -> None:
    out = tmp_path / "table.md"
    assert main(["--from", str(RESULTS), "--out", str(out)]) == 0
    assert "geometric mean" in out.read_text()
