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

    __name__ = "stand_in"
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


def _make(grid: tuple[int, ...], args: tuple[object, ...], options: dict[str, object], made: list[int]):
    """``launch``'s ``make``, counting its calls."""

    def make() -> tuple[tuple[int, ...], tuple[object, ...], dict[str, object]]:
        made.append(1)
        return grid, args, options

    return make


@pytest.mark.usefixtures("direct")
def test_later_calls_with_a_key_launch_the_compiled_kernel_with_their_tensors() -> None:
    kernel, made = _Kernel(), []
    options = {"BLOCK": 16, "FLAG": True, "num_warps": 2}
    xs = [torch.zeros(4) for _ in range(3)]
    for x in xs:
        launch.launch(kernel, _make((3,), (x, 5), options, made), key="shape", tensors=(x,))
    assert kernel.calls[0] == ("jit", (3,), (xs[0], 5, options))
    assert kernel.calls[1:] == [("direct", (3, 1, 1), (x, 5, 16, True)) for x in xs[1:]]
    assert len(made) == 1  # later calls skip building the arguments
    kept = next(iter(launch._COMPILED.values()))
    assert not any(isinstance(arg, torch.Tensor) for arg in kept.args)  # no call's tensor is held


@pytest.mark.usefixtures("direct")
def test_a_tensor_in_several_places_is_replaced_in_each() -> None:
    kernel = _Kernel()
    kernel.arg_names = ("x", "y", "z", "n", "BLOCK", "FLAG")
    options = {"BLOCK": 8, "FLAG": False}
    for x, y in ((torch.zeros(2), torch.ones(2)), (torch.zeros(3), torch.ones(3))):
        launch.launch(kernel, _make((1,), (x, y, x, 7), options, []), key="k", tensors=(x, y))
    assert kernel.calls[1] == ("direct", (1, 1, 1), (x, y, x, 7, 8, False))


@pytest.mark.usefixtures("direct")
def test_a_tensor_argument_left_out_of_tensors_is_refused() -> None:
    x, hidden = torch.zeros(4), torch.zeros(4)
    with pytest.raises(ValueError, match="every tensor argument"):
        launch.launch(_Kernel(), _make((1,), (x, hidden), {"BLOCK": 8, "FLAG": False}, []), key="k", tensors=(x,))


@pytest.mark.usefixtures("direct")
def test_each_key_compiles_through_the_jit_once() -> None:
    kernel, x = _Kernel(), torch.zeros(4)
    for key in ("a", "b", "a", "b"):
        launch.launch(kernel, _make((2, 5), (x, 1), {"BLOCK": 8, "FLAG": False}, []), key=key, tensors=(x,))
    assert [c[0] for c in kernel.calls] == ["jit", "jit", "direct", "direct"]
    assert kernel.calls[2][1] == (2, 5, 1)


def test_the_jit_takes_calls_without_a_key_and_tensors_it_cannot_take() -> None:
    kernel, x, made = _Kernel(), torch.zeros(4), []  # a CPU tensor: never launched directly
    for key in (None, "shape", "shape"):
        launch.launch(kernel, _make((1,), (x, 3), {"BLOCK": 8, "FLAG": False}, made), key=key, tensors=(x,))
    assert [c[0] for c in kernel.calls] == ["jit", "jit", "jit"]
    assert len(made) == 3
    assert not launch.launchable_directly(x)
    assert not launch.launchable_directly()
