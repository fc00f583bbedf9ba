"""Every contestant on every benchmark case, timed by the evaluator and recorded by
pytest-benchmark (the options, the parametrisation and the ``qrbench`` fixture: conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_contestant(benchmark, qrbench, tmp_path: Path, contestant: str, case: str) -> None:
    result = qrbench.time(contestant, case, tmp_path)
    if not result.passed:
        pytest.fail(f"{contestant} on {case}: {result.status}: {result.message}", pytrace=False)
    qrbench.record(benchmark, result)
