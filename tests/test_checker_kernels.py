"""The fast checker's Triton residual kernels against the float64 torch products they replace
(under ``TRITON_INTERPRET=1`` on the CPU, compiled on a GPU)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# The compile test reruns this file in a fresh process without the interpreter (tests/compile_only.py).
COMPILE_ONLY = "CHECKER_KERNELS_COMPILE_ONLY"
if not torch.cuda.is_available() and COMPILE_ONLY not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"  # before the kernels' module is first imported

import triton  # noqa: E402

from reference import checker, checker_kernels, generate_input  # noqa: E402
from reference.checker_kernels import largest_tile, residual_norms, tile_size  # noqa: E402
from reference.householder import householder_q  # noqa: E402
from tests.compile_only import rerun_compiled  # noqa: E402

NVIDIA_BACKEND = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
# Interpreted on the CPU; on a machine with a GPU the same tests run the compiled kernels there.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

NAMES = ("a_norm", "factor", "triangular", "orthogonality", "reconstruction")


def _factors(batch: int, n: int, device: str, spoil: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = generate_input(batch, n, 2, 17 + n).to(device)
    h, tau = torch.geqrf(a)
    q = householder_q(h, tau)
    if spoil:  # every entry of every residual counts, not just rounding
        q = q + spoil * torch.randn(q.shape, generator=torch.Generator().manual_seed(n)).to(device)
        h = h + spoil * torch.randn(h.shape, generator=torch.Generator().manual_seed(n + 1)).to(device)
    return a, h, q


def _assert_match(a: torch.Tensor, h: torch.Tensor, q: torch.Tensor, rtol: float) -> None:
    got = residual_norms(a, h, q)
    want = checker._torch_residuals(a, h, q, reconstruction=True)
    for name, x, y in zip(NAMES, got, want, strict=True):
        assert x.dtype == torch.float64, name
        assert x.shape == (a.shape[0],), name
        torch.testing.assert_close(x, y, rtol=rtol, atol=0, msg=name)


@pytest.mark.parametrize(("batch", "n"), [(2, 1), (3, 12), (2, 33), (2, 64), (2, 70), (1, 130)])
@pytest.mark.parametrize("spoil", [0.0, 1e-3])
def test_norms_match_float64_torch_products(batch: int, n: int, spoil: float) -> None:
    """Honest factors leave residuals of rounding size, where float64 summation order shows at
    about 1e-10 relative; spoiled ones test every tile's and slot's share exactly."""
    a, h, q = _factors(batch, n, DEVICE, spoil)
    _assert_match(a, h, q, rtol=1e-8 if spoil == 0 else 1e-12)


@pytest.mark.parametrize("n", [70, 130])
def test_the_narrower_tile_of_blackwell_gives_the_same_norms(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the 64-row tile does not compile (``largest_tile``), 32-row tiles cover the matrix:
    ragged last tiles and more slots per column, the same sums."""
    monkeypatch.setattr(checker_kernels, "largest_tile", lambda capability: 32)
    a, h, q = _factors(2, n, DEVICE, 1e-3)
    _assert_match(a, h, q, rtol=1e-12)


def test_the_largest_tile_is_narrower_only_where_64_rows_do_not_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checker_kernels, "_TRITON", (3, 6))
    assert [largest_tile(c) for c in (None, (8, 0), (9, 0), (10, 0), (10, 3), (12, 0))] == [64, 64, 64, 32, 32, 64]
    monkeypatch.setattr(checker_kernels, "_TRITON", (3, 8))
    assert largest_tile((10, 0)) == 64


def test_without_reconstruction_the_other_norms_are_unchanged() -> None:
    a, h, q = _factors(2, 40, DEVICE, 1e-3)
    full = residual_norms(a, h, q)
    gates = residual_norms(a, h, q, reconstruction=False)
    assert gates[4] is None
    for name, x, y in zip(NAMES[:4], gates[:4], full[:4], strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=0, msg=name)


def test_bad_operands_are_refused() -> None:
    a = torch.zeros(2, 8, 8)
    with pytest.raises(ValueError, match="q must be"):
        residual_norms(a, a, a.double())
    with pytest.raises(ValueError, match="h must be"):
        residual_norms(a, a[:1], a)


def test_tile_size() -> None:
    assert [tile_size(n) for n in (1, 16, 17, 32, 33, 64, 512, 4096)] == [16, 16, 32, 32, 64, 64, 64, 64]
    assert [tile_size(n, 32) for n in (1, 17, 33, 4096)] == [16, 32, 32, 32]


@pytest.mark.skipif(not NVIDIA_BACKEND.exists(), reason="triton's NVIDIA backend (ptxas) is not installed")
@pytest.mark.parametrize("capability", [(9, 0), (10, 0)], ids=["sm90", "sm100"])
def test_kernels_compile_for_hopper_and_blackwell(capability: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every launch of the three kernels at qr_v2's sizes, with the tiles chosen for an H200
    (sm_90) or a B200 (sm_100, the contest's GPU), compiles to a cubin for it under the installed
    Triton (the interpreter checks the arithmetic, this the rest)."""
    test = f"test_kernels_compile_for_hopper_and_blackwell[sm{capability[0]}{capability[1]}]"
    if rerun_compiled(__file__, test, COMPILE_ONLY):
        return
    from reference_kernels.blocked_wy.offline import compile_launch, record_calls

    monkeypatch.setattr(checker_kernels, "_capability", lambda device: capability)

    def run() -> None:
        for n in (16, 32, 176, 352, 512, 1024, 4096):  # every tile: 16, 32 and (where it compiles) 64
            meta = torch.empty(1, n, n, device="meta")
            residual_norms(meta, meta, meta)

    names = ("_factor_kernel", "_orthogonality_kernel", "_reconstruction_kernel")
    kernels = [(checker_kernels, name) for name in names]
    launches = record_calls(run, kernels)
    assert len(launches) >= 6
    for name, launch in launches.items():
        assert compile_launch(launch, 10 * capability[0] + capability[1]).asm["cubin"], name


@pytest.mark.gpu
@pytest.mark.parametrize(("batch", "n"), [(40, 176), (16, 512), (2, 1024)])
@pytest.mark.parametrize("spoil", [0.0, 1e-3])
def test_compiled_kernels_match_on_the_gpu(batch: int, n: int, spoil: float) -> None:
    a, h, q = _factors(batch, n, "cuda", spoil)
    _assert_match(a, h, q, rtol=1e-8 if spoil == 0 else 1e-12)


@pytest.mark.gpu
def test_prepared_sizes_are_checked_without_compiling_or_reading_a_cache(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """After ``checker.prepare`` a fast check of those sizes loads no code: with Triton's cache moved
    to an empty directory, checks of any batch (either parity) leave it empty."""
    monkeypatch.setattr(triton.knobs.cache, "dir", triton.knobs.cache.dir)  # restored afterwards
    checker.prepare("cuda", [33, 512], cache_dir=tmp_path / "prepared")  # 33: odd, so the batch's parity counts
    after = tmp_path / "after"
    after.mkdir()
    monkeypatch.setattr(triton.knobs.cache, "dir", str(after))
    for batch, n in ((3, 33), (4, 33), (5, 512), (9, 512)):  # 9: the Triton Q (reference.q_kernels.fast_q)
        a = generate_input(batch, n, 2, 7).to("cuda")
        h, tau = torch.geqrf(a)
        assert checker.verdict(a, (h.contiguous(), tau), "fast").passed
        assert checker.verdict(a, (h.contiguous(), tau), "fast", reconstruction=False).passed
    assert list(after.iterdir()) == []
