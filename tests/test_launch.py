"""reference_kernels.blocked_wy.launch: cheap host helpers and the direct launch of compiled kernels.

The direct launch runs on CUDA only; here a stand-in for a JIT kernel records what it is handed
(test_blocked_wy and test_cholesky_orhr compare the real thing with the JIT's results on a GPU).
"""

from __future__ import annotations

import pytest
import torch
import triton

import reference_kernels.blocked_wy.launch as launch


def test_pow2_at_least_and_ceil_div_match_triton() -> None:
    assert all(launch.pow2_at_least(x) == triton.next_power_of_2(x) for x in range(1, 5000))
    assert launch.pow2_at_least(0) == 1
    assert all(launch.ceil_div(a, b) == triton.cdiv(a, b) for a in range(300) for b in range(1, 40))


class _Kernel:
    """A JIT kernel's launch convention: ``kernel[grid](*args, **options)`` returns the compiled
    kernel, whose ``[grid]`` launcher takes every parameter of the signature in order."""

    arg_names = ("x", "n", "BLOCK", "FLAG")

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...], tuple[object, ...]]] = []

    def __getitem__(self, grid: tuple[int, ...]):
        def jit(*args: object, **options: object) -> object:
            self.calls.append(("jit", grid, (*args, options)))
            return self._compiled()

        return jit

    def _compiled(self) -> object:
        kernel = self

        class Compiled:
            def __getitem__(self, grid: tuple[int, ...]):
                return lambda *args: kernel.calls.append(("direct", grid, args))

        return Compiled()


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tensor counts as launchable directly; a fresh cache of compiled kernels."""
    monkeypatch.setattr(launch, "launchable_directly", lambda *tensors: True)
    monkeypatch.setattr(launch, "_COMPILED", {})


@pytest.mark.usefixtures("direct")
def test_later_calls_with_a_key_launch_the_compiled_kernel() -> None:
    kernel, x = _Kernel(), torch.zeros(4)
    options = {"BLOCK": 16, "FLAG": True, "num_warps": 2}
    for n in (5, 6, 7):
        launch.launch(kernel, (3,), (x, n), options, key="shape", tensors=(x,))
    assert kernel.calls[0] == ("jit", (3,), (x, 5, options))
    assert kernel.calls[1:] == [("direct", (3, 1, 1), (x, 6, 16, True)), ("direct", (3, 1, 1), (x, 7, 16, True))]


@pytest.mark.usefixtures("direct")
def test_each_key_compiles_through_the_jit_once() -> None:
    kernel, x = _Kernel(), torch.zeros(4)
    for key in ("a", "b", "a", "b"):
        launch.launch(kernel, (2, 5), (x, 1), {"BLOCK": 8, "FLAG": False}, key=key, tensors=(x,))
    assert [c[0] for c in kernel.calls] == ["jit", "jit", "direct", "direct"]
    assert kernel.calls[2][1] == (2, 5, 1)


def test_the_jit_takes_calls_without_a_key_and_tensors_it_cannot_take() -> None:
    kernel, x = _Kernel(), torch.zeros(4)  # a CPU tensor: never launched directly
    for key in (None, "shape", "shape"):
        launch.launch(kernel, (1,), (x, 3), {"BLOCK": 8, "FLAG": False}, key=key, tensors=(x,))
    assert [c[0] for c in kernel.calls] == ["jit", "jit", "jit"]
    assert not launch.launchable_directly(x)
    assert not launch.launchable_directly()
