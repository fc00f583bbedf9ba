"""The blocks' T by larft's column recurrence in one Triton launch, against the torch recursive
doubling it replaces on CUDA (under ``TRITON_INTERPRET=1`` on the CPU, compiled on a GPU)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# The compile test reruns this file in a fresh process without the interpreter (tests/compile_only.py).
COMPILE_ONLY = "LARFT_KERNEL_COMPILE_ONLY"
if not torch.cuda.is_available() and COMPILE_ONLY not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"  # before the kernel's module is first imported

import triton  # noqa: E402

from reference import householder, larft_kernel  # noqa: E402
from reference.householder import householder_q, triangles, triangles_from_gram  # noqa: E402
from reference.larft_kernel import larft_triangles  # noqa: E402
from tests.compile_only import rerun_compiled  # noqa: E402

NVIDIA_BACKEND = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"

# (batch, n, block): every block width default_block picks, with and without a padded last block.
SHAPES = [(3, 1, 1), (2, 5, 2), (2, 12, 4), (2, 40, 8), (1, 45, 16), (2, 70, 32), (1, 64, 64), (1, 130, 64)]
DTYPES = [torch.float32, torch.float64]


def _factors(batch: int, n: int, dtype: torch.dtype, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """geqrf's factors of a random matrix, with the middle reflector an identity (tau = 0)."""
    torch.manual_seed(n)
    h, tau = torch.geqrf(torch.randn(batch, n, n, dtype=dtype, device=device))
    tau[:, n // 2] = 0
    return h, tau


def _grams(h: torch.Tensor, tau: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each block's ``V^T V`` and taus (batch x blocks x ...), padded with identity reflectors (v = 0,
    tau = 0) to whole blocks, as householder_q hands them to :func:`triangles`."""
    batch, n, _ = h.shape
    width = -(-n // block) * block
    v = h.new_zeros(batch, n, width)
    v[:, :, :n] = torch.tril(h, -1) + torch.eye(n, dtype=h.dtype, device=h.device)
    v = v.view(batch, n, width // block, block).movedim(2, 1)
    padded = tau.new_zeros(batch, width)
    padded[:, :n] = tau
    return v.transpose(-1, -2) @ v, padded.view(batch, width // block, block)


def _assert_triangles_match(h: torch.Tensor, tau: torch.Tensor, block: int) -> None:
    """The kernel's T is larft's exactly in structure (diagonal tau, zero below it, zero row and
    column for tau = 0) and the torch path's up to rounding, which grows like sqrt(block)."""
    gram, taus = _grams(h, tau, block)
    got = larft_triangles(gram, taus)
    want = triangles_from_gram(gram, taus)
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    assert torch.equal(got.diagonal(dim1=-2, dim2=-1), taus)
    assert torch.equal(torch.tril(got, -1), torch.zeros_like(got))
    identity = taus == 0
    assert not got.transpose(-1, -2)[identity].any()
    assert not got[identity].any()
    atol = 4 * block**0.5 * torch.finfo(gram.dtype).eps * want.abs().max().item()
    torch.testing.assert_close(got, want, rtol=0, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("batch", "n", "block"), SHAPES)
def test_triangles_match_recursive_doubling(batch: int, n: int, block: int, dtype: torch.dtype) -> None:
    h, tau = _factors(batch, n, dtype)
    _assert_triangles_match(h, tau, block)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("batch", "n", "block"), [(3, 1, 1), (2, 12, 4), (2, 45, 16), (1, 130, 64)])
def test_q_with_the_kernel_matches_householder_product(batch: int, n: int, block: int, dtype: torch.dtype) -> None:
    """The tolerances of tests/test_checker.py's torch-path tests."""
    h, tau = _factors(batch, n, dtype)
    expected = torch.linalg.householder_product(h, tau)
    atol = 2e-6 * n**0.5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(householder_q(h, tau, block, use_kernel=True), expected, rtol=0, atol=atol)


def test_an_empty_batch_launches_nothing() -> None:
    assert larft_triangles(torch.zeros(0, 3, 4, 4), torch.zeros(0, 3, 4)).shape == (0, 3, 4, 4)


@pytest.mark.parametrize(
    ("gram", "tau", "match"),
    [
        (torch.zeros(2, 3, 3), torch.zeros(2, 3), "power of two"),
        (torch.zeros(1, 128, 128), torch.zeros(1, 128), "power of two"),
        (torch.zeros(2, 4, 4), torch.zeros(2, 2), "tau"),
        (torch.zeros(2, 4, 4), torch.zeros(2, 4, dtype=torch.float64), "float32"),
        (torch.zeros(2, 4, 4, dtype=torch.float16), torch.zeros(2, 4, dtype=torch.float16), "float32"),
    ],
)
def test_bad_operands_are_refused(gram: torch.Tensor, tau: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        larft_triangles(gram, tau)


@pytest.mark.parametrize(
    ("device", "capability", "block", "expected"),
    [
        ("cuda", (9, 0), 64, True),
        ("cuda", (8, 0), 1, True),
        ("cuda", (7, 5), 64, False),
        ("cuda", (9, 0), 128, False),
        ("cpu", None, 64, False),
    ],
)
def test_the_kernel_runs_on_ampere_or_later_up_to_its_widest_block(
    monkeypatch, device: str, capability, block: int, expected: bool
) -> None:
    """As the checker's residual kernels (tests/test_checker.py); wider blocks take torch."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert householder._larft_kernel_runs_on(torch.device(device), block) is expected


def test_the_cpu_takes_the_torch_path(monkeypatch) -> None:
    def refuse(gram: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the kernel ran")

    monkeypatch.setattr(larft_kernel, "larft_triangles", refuse)
    gram, taus = _grams(*_factors(1, 8, torch.float32), 4)
    assert torch.equal(triangles(gram, taus), triangles_from_gram(gram, taus))


@pytest.mark.skipif(not NVIDIA_BACKEND.exists(), reason="triton's NVIDIA backend (ptxas) is not installed")
def test_kernel_compiles_for_sm90() -> None:
    """Every block width default_block picks, in both precisions, compiles to a cubin for sm_90
    (the interpreter checks the arithmetic, this the rest)."""
    if rerun_compiled(__file__, "test_kernel_compiles_for_sm90", COMPILE_ONLY):
        return
    from reference_kernels.blocked_wy.offline import compile_launch, record_calls

    def run() -> None:
        for dtype in DTYPES:
            for k in (1, 2, 4, 8, 16, 32, 64):
                larft_triangles(torch.empty(640, 8, k, k, dtype=dtype, device="meta"),
                                torch.empty(640, 8, k, dtype=dtype, device="meta"))  # fmt: skip

    launches = record_calls(run, [(larft_kernel, "_larft_kernel")])
    assert len(launches) == 14
    for name, launch in launches.items():
        assert compile_launch(launch), name


@pytest.mark.gpu
@pytest.mark.parametrize(("batch", "n"), [(40, 176), (640, 512), (2, 1024)])
def test_compiled_kernel_matches_on_the_gpu(batch: int, n: int) -> None:
    """On CUDA householder_q takes the kernel by default."""
    h, tau = _factors(batch, n, torch.float32, "cuda")
    block = householder.default_block(n)
    assert householder._larft_kernel_runs_on(h.device, block)
    _assert_triangles_match(h, tau, block)
    expected = torch.linalg.householder_product(h, tau)
    torch.testing.assert_close(householder_q(h, tau), expected, rtol=0, atol=2e-6 * n**0.5)
