"""Every contestant on every benchmark case, timed by the evaluator and recorded by
pytest-benchmark (the options, the parametrisation and the ``qrbench`` fixture: conftest.py)."""

from __future__ import annotations

import pytest


def test_contestant(benchmark, qrbench, contestant: str, case: str) -> None:
    result = qrbench.result(contestant, case)
    if not result.passed:
        pytest.fail(f"{contestant} on {case}: {result.status}: {result.message}", pytrace=False)
    qrbench.record(benchmark, result)
