"""The fast checker's split-TF32 Q against float64 ``householder_product`` (under ``TRITON_INTERPRET=1``
on the CPU, compiled on a GPU), and the fast path that uses it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# The compile test reruns this file in a fresh process without the interpreter (tests/compile_only.py).
COMPILE_ONLY = "Q_KERNELS_COMPILE_ONLY"
if not torch.cuda.is_available() and COMPILE_ONLY not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"  # before the kernels' module is first imported

import triton  # noqa: E402

from reference import checker, generate_input, q_kernels  # noqa: E402
from reference.householder import householder_q  # noqa: E402
from reference.q_kernels import (  # noqa: E402
    DEFAULT_Q_TILES,
    MIN_TRITON_BATCH,
    MIN_TRITON_N,
    QTiles,
    fast_q,
    split_tf32_q,
)
from tests.compile_only import rerun_compiled  # noqa: E402

NVIDIA_BACKEND = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _geqrf(batch: int, n: int, case: str, device: str = DEVICE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    cond = 2 if case in ("dense", "mixed") else 0
    a = generate_input(batch, n, cond, 31 + n, case=case).to(device)
    h, tau = torch.geqrf(a)
    return a, h.contiguous(), tau


def _exact_q(h: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    return torch.linalg.householder_product(h.double().cpu(), tau.double().cpu())


# 128: the smallest Triton size (blocks of 16); 200: a ragged last block and strip; 352: blocks of
# 32 over eleven blocks; 520: blocks of 64 (the cap) with a partial last one.
# Other tiles: rows per step wider than a block (16) and than the rows below a triangle, wider strips.
OTHER_TILES = QTiles(block=32, rows=64, cols=128, warps=8, stages=2)


@pytest.mark.parametrize(("batch", "n"), [(2, 128), (2, 200), (1, 352), (1, 520)])
@pytest.mark.parametrize("case", ["dense", "rankdef", "clustered"])
@pytest.mark.parametrize("tiles", [DEFAULT_Q_TILES, OTHER_TILES], ids=["default", "other"])
def test_q_matches_the_exact_product_to_float32_rounding(batch: int, n: int, case: str, tiles: QTiles) -> None:
    """Every entry within a few float32 ulps of Q computed in float64 (LAPACK): a wrong block, a
    wrong T, a skipped strip or row, or a V read from the wrong part of H is off by O(1)."""
    _, h, tau = _geqrf(batch, n, case)
    q = split_tf32_q(h, tau, tiles)
    assert q.dtype == torch.float32
    assert q.shape == h.shape
    exact = _exact_q(h, tau)
    error = (q.double().cpu() - exact).abs().max().item()
    float32_error = (householder_q(h, tau).double().cpu() - exact).abs().max().item()
    assert error < 4 * max(float32_error, 1e-7), (error, float32_error)


def test_zero_reflectors_leave_the_identity() -> None:
    """tau = 0 everywhere (every reflector the identity) gives Q = I exactly, whatever H holds."""
    h = torch.randn(2, 160, 160, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    q = split_tf32_q(h, torch.zeros(2, 160, device=DEVICE))
    assert torch.equal(q, torch.eye(160, device=DEVICE).expand(2, 160, 160))


@pytest.mark.parametrize(("batch", "n", "triton"), [(MIN_TRITON_BATCH, MIN_TRITON_N - 1, False),
                                                   (MIN_TRITON_BATCH - 1, MIN_TRITON_N, False),
                                                   (MIN_TRITON_BATCH, MIN_TRITON_N, True)])
def test_fast_q_takes_the_triton_product_only_where_it_was_faster(batch: int, n: int, triton: bool) -> None:
    """Small matrices (blocks under 16) and small batches (most of the GPU idle) keep the cuBLAS product."""
    _, h, tau = _geqrf(batch, n, "dense")
    want = split_tf32_q(h, tau) if triton else householder_q(h, tau)
    assert torch.equal(fast_q(h, tau), want)


def test_block_widths() -> None:
    assert [DEFAULT_Q_TILES.block_for(n) for n in (128, 176, 352, 512, 1024, 4096)] == [16, 16, 32, 64, 64, 64]
    assert [OTHER_TILES.block_for(n) for n in (128, 512, 4096)] == [16, 32, 32]


def test_bad_operands_are_refused() -> None:
    h = torch.zeros(2, 130, 130)
    with pytest.raises(ValueError, match="contiguous"):
        split_tf32_q(h.transpose(1, 2), torch.zeros(2, 130))
    with pytest.raises(ValueError, match="float32"):
        split_tf32_q(h.double(), torch.zeros(2, 130))
    with pytest.raises(ValueError, match="tau must be"):
        split_tf32_q(h, torch.zeros(2, 129))
    with pytest.raises(ValueError, match="n >= 128"):
        split_tf32_q(torch.zeros(2, 127, 127), torch.zeros(2, 127))


def test_the_fast_path_uses_it_where_its_kernels_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the fused path on (as on CUDA), a pass's figures come from this Q and the residual
    kernels, agree with the published path's to well under the trust margin, and a column-major
    H (geqrf's own layout) is read as its values."""
    from reference import checker_kernels  # noqa: F401 (imported under the interpreter set above)

    monkeypatch.setattr(checker, "_fused_kernels_run_on", lambda device: True)
    used = []
    monkeypatch.setattr(q_kernels, "fast_q", lambda h, tau: used.append(h.shape) or fast_q(h, tau))
    a, h, tau = _geqrf(MIN_TRITON_BATCH, 160, "dense")
    column_major = h.transpose(1, 2).contiguous().transpose(1, 2)
    fast = checker.verdict(a, (column_major, tau), "fast")
    published = checker.verdict(a, (h, tau), "published")
    assert used == [h.shape]
    assert fast.passed
    assert published.passed
    for key in ("scaled_factor_residual", "scaled_orthogonality_residual"):
        assert abs(fast.diagnostics[key] - published.diagnostics[key]) < 0.5, key


@pytest.mark.skipif(not NVIDIA_BACKEND.exists(), reason="triton's NVIDIA backend (ptxas) is not installed")
@pytest.mark.parametrize("arch", [90, 100], ids=["sm90", "sm100"])
def test_kernels_compile_for_hopper_and_blackwell(arch: int) -> None:
    """Every launch at qr_v2's sizes (blocks of 16, 32 and 64) compiles to a cubin for an H200
    (sm_90) and a B200 (sm_100, the contest's GPU) under the installed Triton."""
    if rerun_compiled(__file__, f"test_kernels_compile_for_hopper_and_blackwell[sm{arch}]", COMPILE_ONLY):
        return
    from reference_kernels.blocked_wy.offline import compile_launch, record_calls

    def run() -> None:
        for n in (176, 352, 512, 4096):
            meta = torch.empty(1, n, n, device="meta")
            split_tf32_q(meta, torch.empty(1, n, device="meta"))

    launches = record_calls(run, [(q_kernels, "_gram_kernel"), (q_kernels, "_apply_kernel")])
    assert len(launches) >= 6
    for name, launch in launches.items():
        assert compile_launch(launch, arch).asm["cubin"], name


@pytest.mark.gpu
@pytest.mark.parametrize(("batch", "n"), [(40, 176), (16, 512), (2, 1024)])
def test_compiled_q_matches_on_the_gpu(batch: int, n: int) -> None:
    _, h, tau = _geqrf(batch, n, "dense", "cuda")
    error = (split_tf32_q(h, tau).double().cpu() - _exact_q(h, tau)).abs().max().item()
    assert error < 4e-6, error
