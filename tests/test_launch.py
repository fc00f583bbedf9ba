"""reference_kernels.blocked_wy.launch: cheap host helpers and the direct launch of compiled kernels.

The direct launch runs on CUDA only; here a stand-in for a JIT kernel records what it is handed
(test_blocked_wy and test_cholesky_orhr compare the real thing with the JIT's results on a GPU).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (see test_blocked_wy)

from types import SimpleNamespace

import pytest
import triton
from triton import knobs
from triton.compiler.compiler import CompiledKernel

import reference_kernels.blocked_wy.launch as launch


def test_pow2_at_least_and_ceil_div_match_triton() -> None:
    assert all(launch.pow2_at_least(x) == triton.next_power_of_2(x) for x in range(1, 5000))
    assert launch.pow2_at_least(0) == 1
    assert all(launch.ceil_div(a, b) == triton.cdiv(a, b) for a in range(300) for b in range(1, 40))


class _Kernel:
    """A JIT kernel's launch convention: ``kernel[grid](*args, **options)`` returns the compiled
    kernel, whose ``[grid]`` runner takes every parameter of the signature in order."""

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
            run = object()  # not triton 3.6's CUDA launcher: the runner launches

            def __getitem__(self, grid: tuple[int, ...]):
                return lambda *args: kernel.calls.append(("direct", grid, args))

        return Compiled()


class _Tensor:
    """What the check before a direct launch reads of a CUDA tensor."""

    is_cuda = True

    def __init__(self, address: int, device: int = 0, contiguous: bool = True) -> None:
        self.address, self.device, self.contiguous = address, device, contiguous

    def data_ptr(self) -> int:
        return self.address

    def get_device(self) -> int:
        return self.device

    def is_contiguous(self) -> bool:
        return self.contiguous


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU torch as a CUDA build sees it, device 0 current; a fresh cache of compiled kernels."""
    monkeypatch.setattr(launch, "INTERPRETED", False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(launch, "_COMPILED", {})


@pytest.fixture
def direct(cuda: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also every tensor counts as launchable directly on device 0."""
    monkeypatch.setattr(launch, "_addresses", lambda tensors, checked: (0, [x.data_ptr() for x in tensors]))


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
    assert kernel.calls[1:] == [("direct", (3, 1, 1), (x.data_ptr(), 5, 16, True)) for x in xs[1:]]
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
    assert kernel.calls[1] == ("direct", (1, 1, 1), (x.data_ptr(), y.data_ptr(), x.data_ptr(), 7, 8, False))


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


@pytest.mark.usefixtures("direct")
def test_a_first_call_with_a_storage_offset_is_not_kept() -> None:
    """Its arguments may hold views of the storages in the tensors' places (the panel kernel's do)."""
    kernel, x = _Kernel(), torch.zeros(8)
    for given in (x[4:], x[4:], x[:4], x[4:]):
        launch.launch(kernel, _make((1,), (given, 1), {"BLOCK": 8, "FLAG": False}, []), key="k", tensors=(given,))
    assert [c[0] for c in kernel.calls] == ["jit", "jit", "jit", "direct"]
    assert kernel.calls[3][2][0] == x[4:].data_ptr()  # later: the address, offset included


def test_the_jit_takes_calls_without_a_key_and_tensors_it_cannot_take() -> None:
    kernel, x, made = _Kernel(), torch.zeros(4), []  # a CPU tensor: never launched directly
    for key in (None, "shape", "shape"):
        launch.launch(kernel, _make((1,), (x, 3), {"BLOCK": 8, "FLAG": False}, made), key=key, tensors=(x,))
    assert [c[0] for c in kernel.calls] == ["jit", "jit", "jit"]
    assert len(made) == 3
    assert launch._addresses((x,), 1) is None
    assert launch._addresses((), 0) is None


@pytest.mark.usefixtures("cuda")
def test_only_tensors_on_the_current_device_contiguous_and_aligned_are_taken() -> None:
    fresh = _Tensor(8)  # the caller's own allocation: not checked
    assert launch._addresses((_Tensor(32), _Tensor(64), fresh), 2) == (0, [32, 64, 8])
    for bad in (_Tensor(40), _Tensor(32, device=1), _Tensor(32, contiguous=False)):
        assert launch._addresses((_Tensor(32), bad, fresh), 2) is None


STREAM, DEVICE = 12345, 0  # the stand-in current stream and device


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> CompiledKernel:
    """A CompiledKernel as triton 3.6 makes one for CUDA, loaded; its launcher object's C launcher
    records its calls (in ``compiled.calls``); triton's driver finds device 0 and STREAM current."""
    from triton.backends.nvidia.driver import CudaLauncher
    from triton.runtime.driver import driver

    monkeypatch.setattr(driver, "_active", SimpleNamespace(
        get_current_device=lambda: DEVICE, get_current_stream=lambda device: STREAM
    ))
    launcher = object.__new__(CudaLauncher)  # the attributes its __call__ reads
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid, launcher.launch_pdl = False, True
    kernel = object.__new__(CompiledKernel)
    kernel.calls = []
    launcher.launch = lambda *args: kernel.calls.append(args)
    kernel.module, kernel._run, kernel.function, kernel.packed_metadata = object(), launcher, 777, (2, 1, 1024)
    kernel.name, kernel.src = "stand_in", None
    return kernel


@pytest.mark.skipif(not launch.QUICK_RUN, reason="the quick run follows triton 3.6")
def test_the_quick_run_calls_the_c_launcher_as_triton_does_without_hooks(compiled: CompiledKernel) -> None:
    """Triton's runner and launcher object, and the runner with a _QuickRun standing in, make the
    same call of the C launcher but for the launch metadata and the (empty) hook chains."""
    compiled[(20, 1, 1)](7, None, 32, True)
    launch._runner(compiled, (20, 1, 1))(7, None, 32, True)
    theirs, ours = compiled.calls
    assert theirs[:4] == (20, 1, 1, STREAM)
    assert ours[10:13] == (None, None, None)
    assert ours[:10] + ours[13:] == theirs[:10] + theirs[13:]


@pytest.mark.skipif(not launch.QUICK_RUN, reason="the quick run follows triton 3.6")
def test_with_a_hook_registered_the_quick_run_is_triton_s_launch(compiled: CompiledKernel) -> None:
    hook = lambda metadata: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        compiled[(2, 1, 1)](1, 2)
        launch._runner(compiled, (2, 1, 1))(1, 2)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    theirs, ours = compiled.calls
    assert ours[11:] == theirs[11:] == (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, 1, 2)
    assert ours[10].get() == theirs[10].get()  # the launch metadata
    assert ours[:10] == theirs[:10]


def test_scratch_buffers_and_other_launchers_take_the_kernel_s_own_runner(compiled: CompiledKernel) -> None:
    assert launch._QuickRun.fits(compiled) == launch.QUICK_RUN
    compiled.run.global_scratch_size = 64
    assert not launch._QuickRun.fits(compiled)
    runner = launch._runner(compiled, (1, 1, 1))
    assert [cell.cell_contents for cell in runner.__closure__] == [(1, 1, 1), compiled]  # grid, self
    compiled.run.global_scratch_size, compiled._run = 0, object()
    assert not launch._QuickRun.fits(compiled)
