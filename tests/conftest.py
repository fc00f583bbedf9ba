"""Shared test configuration: GPU tests skip without CUDA; golden data lives in tests/golden."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evaluator.shapes import resolve_shapes

GOLDEN = Path(__file__).parent / "golden"
REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def qr_v2_benchmarks() -> list[object]:
    """The contest's benchmark cases as pytest parameters, named by their labels."""
    return [pytest.param(case, id=case.label.replace(" ", "-")) for case in resolve_shapes("qr_v2").benchmarks]
