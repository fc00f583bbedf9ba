"""Shared test configuration: GPU tests skip without CUDA; golden data lives in tests/golden."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evaluator.shapes import resolve_shapes
from tests import machine_share

GOLDEN = Path(__file__).parent / "golden"
REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    machine_share.configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    machine_share.unconfigure(config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Each test's whole protocol with the machine held as its marks ask (tests/machine_share.py)."""
    with machine_share.holding_the_machine(item, nextitem):
        yield


@pytest.hookimpl(tryfirst=True)  # before xdist's worker names the groups it finds
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    machine_share.group_the_alone(config, items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def qr_v2_benchmarks() -> list[object]:
    """The contest's benchmark cases as pytest parameters, named by their labels."""
    return [pytest.param(case, id=case.label.replace(" ", "-")) for case in resolve_shapes("qr_v2").benchmarks]
