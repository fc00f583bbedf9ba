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


def more_inputs(values: list[object], *keep: object) -> list[object]:
    """``values`` as pytest parameters (a tuple is one parameter per name), each not in ``keep``
    marked ``more_inputs``: the same code path on a further input. The main suite runs them all;
    .ci/run's second pass, under the newest Triton release, leaves them out (it looks for a release
    that breaks a kernel, which one input per path shows, in a fraction of the time)."""
    return [value if value in keep else pytest.param(*value if isinstance(value, tuple) else (value,),
                                                     marks=pytest.mark.more_inputs) for value in values]


def every_case(cases: list[str]) -> list[object]:
    """Input cases as parameters (:func:`more_inputs`), ``mixed`` kept: a batch drawn from the others."""
    return more_inputs(cases, "mixed")


def qr_v2_benchmarks() -> list[object]:
    """The contest's benchmark cases as pytest parameters, named by their labels."""
    return [pytest.param(case, id=case.label.replace(" ", "-")) for case in resolve_shapes("qr_v2").benchmarks]
