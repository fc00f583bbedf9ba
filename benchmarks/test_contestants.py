"""Every contestant on every benchmark case, timed by the evaluator and recorded by
pytest-benchmark: ``pytest --benchmark-only`` (options, parametrisation and the ``qrbench``
fixture: :mod:`evaluator.pytest_plugin`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evaluator.pytest_cases import CaseTimer


def test_contestant(benchmark: Any, qrbench: CaseTimer, contestant: str, case: str) -> None:
    qrbench.benchmark(benchmark, contestant, case)
