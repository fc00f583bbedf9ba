"""cholesky_orhr: every input distribution, the per-matrix routing, the ORHR reconstruction and the
Cholesky recursion on their own, the output contract, and an sm_90 compile of every Triton kernel.

Without CUDA the kernels run under the Triton interpreter on the CPU (the same kernels, numpy
underneath), so the variable is set before anything imports triton; with CUDA the same tests run
compiled, plus the qr_v2 benchmark shapes. ``PLAN16`` makes small matrices take the recursive paths
that large ones take with the default plan; by default n <= 32 first tries the one-kernel path.
"""

from __future__ import annotations

import importlib
import math
import os

import torch

# The compile test reruns this file in a fresh process without the interpreter: triton cannot
# compile for a GPU target in a process where the interpreter has been active.
COMPILE_ONLY = "CHOLESKY_ORHR_COMPILE_ONLY"
if not torch.cuda.is_available() and COMPILE_ONLY not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"

from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import triton  # noqa: E402

import reference_kernels.cholesky_orhr.kernels as kernels  # noqa: E402
from evaluator.shapes import Case  # noqa: E402
from reference import CASES, generate_input, verdict  # noqa: E402
from reference_kernels.cholesky_orhr import Plan, Route, qr, qr_routed  # noqa: E402
from reference_kernels.cholesky_orhr.cholqr import (  # noqa: E402
    cholesky_inverse,
    orthogonality_loss,
    probe_matrix,
    tight_loss,
)
from reference_kernels.cholesky_orhr.orhr import orhr  # noqa: E402
from reference_kernels.cholesky_orhr.pipeline import SecondPass  # noqa: E402
from reference_kernels.cholesky_orhr.products import gram_upper, left_triangular, right_triangular  # noqa: E402
from tests.compile_only import rerun_compiled  # noqa: E402
from tests.conftest import every_case, qr_v2_benchmarks  # noqa: E402

# The submodule, for monkeypatching: the package attribute ``qr`` is the function.
qr_module = importlib.import_module("reference_kernels.cholesky_orhr.qr")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
RESIDUAL_LIMIT = 4.0  # five times under the contest's gate of 20
EPS32 = torch.finfo(torch.float32).eps
PLAN16 = Plan(leaf=16, whole_max=0)  # the recursive paths, also at n <= 32


def _check(a: torch.Tensor, out: tuple[torch.Tensor, torch.Tensor]) -> None:
    """The contest's verdict with the factor residual 5x under its gate, and geqrf's last tau."""
    h, tau = out
    assert torch.isfinite(h).all()
    assert torch.isfinite(tau).all()
    v = verdict(a, out)
    assert v.passed, v.message
    assert v.diagnostics["scaled_factor_residual"] <= RESIDUAL_LIMIT, v.message
    assert torch.all(tau[:, -1] == 0.0)


# ---- every case type, through the recursive paths ------------------------------------------------


@pytest.mark.parametrize("case", every_case(sorted(CASES)))
def test_every_case_passes(case: str) -> None:
    a = generate_input(2, 33, 2, 4100 + sorted(CASES).index(case), case)
    _check(a, qr(a, PLAN16))


@pytest.mark.parametrize(("n", "case"), [(1, "dense"), (2, "dense"), (2, "nearcollinear"), (16, "mixed")])
def test_tiny_sizes(n: int, case: str) -> None:
    a = generate_input(3, n, 1, 4200 + n, case)
    _check(a, qr(a))


@pytest.mark.parametrize("case", every_case(["dense", "mixed", "nearcollinear", "rowscale"]))
def test_whole_matrix_path(case: str) -> None:
    """n <= 32 tries the one-kernel path first (what it declines takes the usual routes)."""
    a = generate_input(3, 32, 2, 4250, case)
    _check(a, qr(a))


def test_whole_matrix_kernel_declines_what_one_pass_cannot_do() -> None:
    n = 24
    a = generate_input(4, n, 1, 4260, "dense")
    a[1, :, 18:] = 0.0  # zero columns
    a[2] = torch.triu(a[2])  # nothing below the diagonal
    a[3, :, 9] = a[3, :, 4]  # exactly dependent columns
    h = torch.full_like(a, 7.0)
    tau = torch.full((4, n), 7.0, device=a.device)
    done = kernels.whole_qr(a, h, tau, tight_loss(n))
    assert done.tolist() == [True, False, False, False]
    assert torch.all(h[1:] == 7.0)
    assert torch.all(tau[1:] == 7.0)
    _check(a[:1], (h[:1], tau[:1]))


def test_mixed_at_default_plan() -> None:
    a = generate_input(4, 64, 2, 4300, "mixed")
    _check(a, qr(a))


# ---- routing ------------------------------------------------------------------------------------


def test_routing_is_per_matrix() -> None:
    """Structure and breakdown decide each matrix's route; the rest of the batch is unaffected."""
    n = 24
    a = generate_input(6, n, 1, 4400, "dense")
    a[1, :, 18:] = 0.0  # trailing zero columns: CholeskyQR of the leading 18, then identity reflectors
    a[2, :, 5] = 0.0  # a zero column with non-zero ones after it: no Gram route
    a[3, :, 9] = a[3, :, 4]  # exactly dependent columns: the Cholesky pivot vanishes
    a[4] = torch.triu(a[4])  # already triangular: H = A, tau = 0
    a[5] = 0.0
    h, tau, routes = qr_routed(a, PLAN16)
    assert routes.tolist() == [
        Route.CHOLESKY, Route.CHOLESKY, Route.FALLBACK, Route.FALLBACK, Route.TRIANGULAR, Route.TRIANGULAR
    ]
    _check(a, (h, tau))
    assert torch.equal(h[4], a[4])
    assert torch.all(tau[4] == 0.0)
    assert torch.all(tau[1, 18:] == 0.0)
    assert torch.all(h[1, :, 18:] == 0.0)


def test_a_whole_batch_can_fall_back() -> None:
    """Regression (H200, nearrank 60x1024): every matrix passes Cholesky but fails the accuracy test,
    or breaks down, so nothing takes the Gram route; the whole batch goes to blocked_wy."""
    a = generate_input(3, 40, 0, 4450, "nearrank")
    a[:, :, 9] = a[:, :, 4]  # exactly dependent columns: breakdown or a loss far above LOOSE
    a[0, :, 9] += 1e-6 * a[0, :, 0]  # nearly dependent: Cholesky succeeds, the test fails
    h, tau, routes = qr_routed(a, PLAN16)
    assert routes.tolist() == [Route.FALLBACK] * 3
    _check(a, (h, tau))


def _with_condition(batch: int, n: int, kappa: float, seed: int) -> torch.Tensor:
    """U diag(s) W^T with s log-spaced from 1 to 1/kappa, made on the CPU (the same matrices on
    every device: the generator's CUDA draws differ, and with them which route a nearcollinear
    input takes)."""
    gen = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(batch, n, n, dtype=torch.float64, generator=gen))
    w, _ = torch.linalg.qr(torch.randn(batch, n, n, dtype=torch.float64, generator=gen))
    s = torch.logspace(0, -math.log10(kappa), n, dtype=torch.float64)
    return ((u * s) @ w.transpose(1, 2)).to(torch.float32)


def test_rankdef_batch_runs_over_its_nonzero_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose Gram-route matrices are all zero past column 36 (rankdef at n = 48) runs its
    passes over 48 -> 40 columns (the leaf, 8, rounds 36 up); a triangular matrix and one with a
    zero column inside (fallback) do not widen it. Columns past each width come out zero."""
    a = generate_input(4, 48, 1, 4700, "rankdef")
    a[2] = torch.triu(generate_input(1, 48, 1, 4701)[0])  # triangular: H = A, whatever its width
    a[3, :, 5] = 0.0  # a zero column before non-zero ones: the fallback
    a = a.to(DEVICE)
    widths: list[int] = []
    real = qr_module.first_pass

    def spy(*args: object) -> object:
        widths.append(args[3])
        return real(*args)

    monkeypatch.setattr(qr_module, "first_pass", spy)
    qr_module.clear_graphs()
    try:
        h, tau, routes = qr_routed(a, Plan(leaf=8, whole_max=0))
    finally:
        qr_module.clear_graphs()
    assert set(widths) == {40}
    assert routes.tolist() == [Route.CHOLESKY, Route.CHOLESKY, Route.TRIANGULAR, Route.FALLBACK]
    _check(a, (h, tau))
    assert torch.all(h[:2, :, 36:] == 0.0)
    assert torch.all(tau[:2, 36:] == 0.0)
    assert torch.equal(h[2], a[2])


def test_pass_width() -> None:
    assert [qr_module.pass_width(w, 512, 32) for w in (0, 1, 384, 385, 500, 512)] == [32, 32, 384, 416, 512, 512]
    assert qr_module.pass_width(20, 24, 32) == 24


def test_few_second_passes_join_the_fallback() -> None:
    """Below ``second_pass_min`` matrices, those needing a second pass go to blocked_wy instead."""
    a = torch.cat([_with_condition(2, 48, 10.0, 4500), _with_condition(2, 48, 1e6, 4501)]).to(DEVICE)
    plan = replace(PLAN16, second_pass_min=3)
    h, tau, routes = qr_routed(a, plan)
    assert routes.tolist() == [Route.CHOLESKY, Route.CHOLESKY, Route.FALLBACK, Route.FALLBACK]
    _check(a, (h, tau))
    assert qr_routed(a, replace(PLAN16, second_pass_min=2))[2].tolist()[2:] == [Route.CHOLESKY2] * 2
    with pytest.raises(ValueError, match="second_pass_min"):
        Plan(second_pass_min=0)


def test_second_pass_failure_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Matrices whose second pass fails its test (forced here) go to blocked_wy, the others keep
    their routes."""
    real = qr_module.second_pass

    def failing(*args: object, **kwargs: object) -> SecondPass:
        out = real(*args, **kwargs)
        return SecondPass(out.h, out.tau, torch.zeros_like(out.ok))

    monkeypatch.setattr(qr_module, "second_pass", failing)
    # Graphs hold what they captured: none made with the real pass may serve this test, and none
    # made with the failing one may outlive it.
    qr_module.clear_graphs()
    try:
        a = torch.cat([_with_condition(2, 48, 10.0, 4470), _with_condition(2, 48, 1e6, 4471)]).to(DEVICE)
        h, tau, routes = qr_routed(a, PLAN16)
    finally:
        qr_module.clear_graphs()
    assert routes.tolist() == [Route.CHOLESKY, Route.CHOLESKY, Route.FALLBACK, Route.FALLBACK]
    _check(a, (h, tau))


def test_padded_sub_batches_come_in_few_sizes() -> None:
    """Graphed sub-batches are padded (repeating their first row) to powers of two, capped at the
    batch."""
    sizes = {len(qr_module._padded(list(range(k)), 640, DEVICE, True)) for k in range(1, 641)}
    assert sizes == {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 640}
    assert len(qr_module._padded([4, 1, 2], 3, DEVICE, True)) == 3  # never above the batch
    index = qr_module._padded([7, 3, 9, 4, 5, 6, 11, 12, 13], 640, DEVICE, True)
    assert index.tolist() == [7, 3, 9, 4, 5, 6, 11, 12, 13] + [7] * 7
    assert len(qr_module._padded([1, 2, 3], 640, DEVICE, False)) == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="graphs are captured on CUDA only")
def test_small_sub_batch_graphs_are_captured_with_the_first_pass() -> None:
    """A dense batch's few pass-2 or fallback matrices never meet an uncaptured size inside a call."""
    qr_module.clear_graphs()
    a = torch.cat([_with_condition(2, 48, 10.0, 4500), _with_condition(2, 48, 1e6, 4501)]).to(DEVICE)
    qr_routed(a, PLAN16)
    (runner,) = qr_module._RUNNERS.values()
    (passes,) = runner._passes.values()
    assert sorted(passes._second) == [1, 2, 4]


def test_whole_matrix_path_declines_into_the_general_path() -> None:
    """n <= 32 with one matrix the one-kernel path declines: the batch takes the general path."""
    a = generate_input(3, 20, 1, 4480, "dense")
    a[1, :, 15:] = 0.0
    h, tau, routes = qr_routed(a)
    assert routes.tolist() == [Route.CHOLESKY] * 3
    _check(a, (h, tau))
    assert torch.all(h[1, :, 15:] == 0.0)
    assert torch.all(tau[1, 15:] == 0.0)


def test_second_pass_only_where_needed() -> None:
    """kappa ~ 1e6 loses ~eps64 kappa^2 ~ 1e-4 of orthogonality in pass 1 (over the tight bound,
    under the loose one): those need the second pass; the well-conditioned ones beside them do not."""
    a = torch.cat([_with_condition(2, 48, 10.0, 4500), _with_condition(2, 48, 1e6, 4501)]).to(DEVICE)
    h, tau, routes = qr_routed(a, PLAN16)
    assert routes.tolist() == [Route.CHOLESKY, Route.CHOLESKY, Route.CHOLESKY2, Route.CHOLESKY2]
    _check(a, (h, tau))


# ---- the pieces on their own --------------------------------------------------------------------


@pytest.mark.parametrize(("m", "k"), [(40, 40), (40, 24)])
def test_orhr_reconstructs_q(m: int, k: int) -> None:
    """From an orthonormal Q (FP64 QR rounded to FP32), (V, tau) reproduce Q S to FP32 accuracy."""
    gen = torch.Generator().manual_seed(4600 + k)
    q64, _ = torch.linalg.qr(torch.randn(3, m, k, dtype=torch.float64, generator=gen))
    q = q64.to(torch.float32).to(DEVICE)
    w, tau, sign = orhr(q.clone(), PLAN16)
    assert torch.all(sign.abs() == 1.0)
    reflectors = torch.zeros(3, m, m, device=DEVICE)
    reflectors[:, :, :k] = w
    tau_full = torch.zeros(3, m, device=DEVICE)
    tau_full[:, :k] = tau
    rebuilt = torch.linalg.householder_product(reflectors.cpu(), tau_full.cpu())[:, :, :k]
    error = (rebuilt - (q * sign[:, None, :]).cpu()).abs().amax()
    assert error <= 8 * m * EPS32, error
    taus = tau[:, :-1] if m == k else tau
    assert torch.all((taus >= 1.0) & (taus <= 2.0))
    if m == k:
        assert torch.all(tau[:, -1] == 0.0)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_cholesky_inverse_and_breakdown_flag() -> None:
    """R and R^-1 of the positive definite matrices; the broken-down one is only flagged (the
    interpreter warns as its meaningless factors overflow)."""
    gen = torch.Generator().manual_seed(4700)
    a = torch.randn(3, 50, 40, dtype=torch.float64, generator=gen)
    g = a.mT @ a
    g[2, 7, 7] = -1.0  # not positive definite
    r, x, failed = cholesky_inverse(g.clone().to(DEVICE), PLAN16)
    assert failed.tolist() == [False, False, True]
    r, x = r[:2].cpu(), x[:2].cpu()
    assert torch.equal(r, torch.triu(r))
    assert torch.equal(x, torch.triu(x))
    assert torch.allclose(r.mT @ r, g[:2], rtol=0, atol=1e-12 * g[:2].abs().max())
    assert torch.allclose(r @ x, torch.eye(40, dtype=torch.float64).expand(2, 40, 40), rtol=0, atol=1e-12)
    assert torch.isfinite(r).all()
    assert torch.isfinite(x).all()


def test_orthogonality_loss_tracks_the_frobenius_norm() -> None:
    """The 16-probe estimate of ||Q^T Q - I||_F is within a factor of two for losses of any size and
    rank, and reads non-finite Q as infinitely far from orthonormal."""
    gen = torch.Generator().manual_seed(4750)
    q, _ = torch.linalg.qr(torch.randn(6, 80, 60, dtype=torch.float64, generator=gen))
    low_rank = torch.randn(6, 60, 2, dtype=torch.float64, generator=gen)
    scales = torch.tensor([1e-9, 1e-6, 1e-3, 1e-1, 1e-6, 1e-3], dtype=torch.float64)
    bent = q @ (torch.eye(60, dtype=torch.float64) + scales[:, None, None] * low_rank @ low_rank.mT)
    bent[4:] = q[4:] + scales[4:, None, None] * torch.randn(2, 80, 60, dtype=torch.float64, generator=gen)
    exact = torch.linalg.matrix_norm(bent.mT @ bent - torch.eye(60, dtype=torch.float64))
    probes = probe_matrix(60, DEVICE)
    ratio = orthogonality_loss(bent.to(DEVICE), probes).cpu() / exact
    assert torch.all((ratio > 0.5) & (ratio < 2.0)), ratio
    bent[0, 3, 3] = float("nan")
    assert orthogonality_loss(bent.to(DEVICE), probes)[0] == float("inf")
    live = torch.ones(6, 60, dtype=torch.bool, device=DEVICE)
    live[1:, 50:] = False  # the loss over the first 50 columns, the others zeroed
    trimmed = bent.to(DEVICE) * live[:, None, :]
    partial = torch.linalg.matrix_norm(bent[1:, :, :50].mT @ bent[1:, :, :50] - torch.eye(50, dtype=torch.float64))
    ratio = orthogonality_loss(trimmed, probes, live)[1:].cpu() / partial
    assert torch.all((ratio > 0.5) & (ratio < 2.0)), ratio


def test_block_skipping_products() -> None:
    """The products skip the known-zero halves (NaN there must not leak) and match full products."""
    gen = torch.Generator().manual_seed(4800)
    k, block = 11, 4  # splits 11 -> [0, 8) + [8, 11), 8 -> [0, 4) + [4, 8)
    a = torch.randn(2, 7, k, dtype=torch.float64, generator=gen)
    upper = torch.triu(torch.randn(2, k, k, dtype=torch.float64, generator=gen))
    poisoned = upper.clone()
    poisoned[:, 8:, :8] = float("nan")
    out = torch.empty(2, 7, k, dtype=torch.float64)
    right_triangular(a, poisoned, out, upper=True, block=block)
    assert torch.allclose(out, a @ upper)
    lower = upper.mT.contiguous()
    out = torch.empty(2, k, 7, dtype=torch.float64)
    left_triangular(lower, a.mT, out, upper=False, block=block)
    assert torch.allclose(out, lower @ a.mT)
    gram = torch.full((2, k, k), float("nan"), dtype=torch.float64)
    gram_upper(a, gram, block=block)
    assert torch.allclose(torch.triu(gram), torch.triu(a.mT @ a))


# ---- the output contract ------------------------------------------------------------------------


def test_outputs_are_fresh_and_input_untouched() -> None:
    a = generate_input(3, 16, 1, 4900, "mixed")
    a[1, :, 12:] = 0.0
    pristine = a.clone()
    first = qr(a)
    second = qr(a)
    assert torch.equal(a, pristine)
    storages = {t.untyped_storage().data_ptr() for t in (*first, *second)}
    assert len(storages) == 4
    assert a.untyped_storage().data_ptr() not in storages
    for t in (*first, *second):
        assert type(t) is torch.Tensor
    assert torch.equal(first[0], second[0])
    assert torch.equal(first[1], second[1])


@pytest.mark.parametrize("n", [24, 40])
def test_a_view_into_a_larger_batch(n: int) -> None:
    """A contiguous slice (non-zero storage offset) of a batch, on both the one-kernel and the routed path."""
    big = generate_input(5, n, 1, 4950, "mixed")
    pristine = big.clone()
    _check(big[2:4], qr(big[2:4]))
    assert torch.equal(big, pristine)


def test_rejects_what_it_cannot_factor() -> None:
    with pytest.raises(ValueError, match="float32"):
        qr(torch.zeros(2, 4, 4, dtype=torch.float64, device=DEVICE))
    with pytest.raises(ValueError, match="batch x n x n"):
        qr(torch.zeros(4, 5, device=DEVICE))


# ---- the real compiler, without a GPU -----------------------------------------------------------

PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def _leaf_signature(dtype: str, names: tuple[str, ...], pointers: int) -> dict[str, str]:
    return {name: (f"*{dtype}" if i < pointers else "i32") for i, name in enumerate(names)}


# (kernel, signature, constexprs, num_warps): every kernel at every tile the launchers use.
_LAUNCHES = [
    *(
        (
            kernels._cholesky_kernel,
            {**_leaf_signature("fp64", ("g", "x"), 2), "info": "*i32", "off": "i32", "mat_stride": "i32",
             "row_stride": "i32", "kb": "i32"},
            {"BLOCK": tile},
            kernels._warps(tile),
        )
        for tile in (16, 32, 64)
    ),
    *(
        (
            kernels._lu_kernel,
            _leaf_signature(
                "fp32",
                ("w", "linv", "uinv", "tau", "sign", "off", "mat_stride", "linv_mat_stride", "row_stride",
                 "vec_off", "vec_stride", "kb", "zero_last"),
                5,
            ),
            {"BLOCK": tile},
            kernels._warps(tile),
        )
        for tile in (16, 32, 64)
    ),
    *(
        (kernels._whole_kernel,
         {"a": "*fp32", "h": "*fp32", "tau": "*fp32", "done": "*i8", "n": "i32", "tight": "fp32"},
         {"BLOCK": tile}, kernels._warps(tile))
        for tile in (16, 32)
    ),
    # Integer arguments equal to 1 are specialised as constants by the launcher: n = 1, k = 1.
    (kernels._whole_kernel, {"a": "*fp32", "h": "*fp32", "tau": "*fp32", "done": "*i8", "tight": "fp32"},
     {"n": 1, "BLOCK": 16}, 1),
    (kernels._classify_kernel, {"a": "*fp32", "nonzero": "*i8", "below": "*i8", "n": "i32"},
     {"BLOCK_R": 64, "BLOCK_C": 32}, 4),
    (kernels._assemble_kernel,
     {"w": "*fp32", "r": "*fp64", "sign": "*fp32", "tau": "*fp32", "index": "*i32", "width": "*i32", "a": "*fp32",
      "h": "*fp32", "tau_out": "*fp32", "n": "i32", "kw": "i32"},
     {"BLOCK": 32}, 4),
    # n = k = 1 are specialised as constants by the launcher.
    (kernels._assemble_kernel,
     {"w": "*fp32", "r": "*fp64", "sign": "*fp32", "tau": "*fp32", "index": "*i32", "width": "*i32", "a": "*fp32",
      "h": "*fp32", "tau_out": "*fp32"},
     {"n": 1, "kw": 1, "BLOCK": 32}, 4),
]  # fmt: skip


@pytest.mark.skipif(not PTXAS.exists(), reason="triton's NVIDIA backend (ptxas) is not installed")
@pytest.mark.parametrize("arch", [90, 100], ids=["sm90", "sm100"])
def test_every_kernel_compiles_for_hopper_and_blackwell(arch: int) -> None:
    """The interpreter checks the arithmetic; this checks shapes, layouts and types compile to
    sm_90 (H200) and sm_100 (B200, the contest's GPU)."""
    if rerun_compiled(__file__, f"test_every_kernel_compiles_for_hopper_and_blackwell[sm{arch}]", COMPILE_ONLY):
        return
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for fn, signature, constants, warps in _LAUNCHES:
        signature = {**signature, **dict.fromkeys(constants, "constexpr")}
        compiled = triton.compile(
            ASTSource(fn, signature, constants), target=GPUTarget("cuda", arch, 32), options={"num_warps": warps}
        )
        assert compiled.asm["cubin"], f"{fn.__name__} {constants}"


# ---- GPU only: the contest's shapes -------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("case", qr_v2_benchmarks())
def test_qr_v2_benchmark_shapes(case: Case) -> None:
    a = generate_input(**case.with_seed(case.seed + 42).generator_args())
    _check(a, qr(a))
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_graphs_replay_other_data_and_subsets() -> None:
    """The captured passes give each call's own answer: new data at one shape, second-pass
    sub-batches of different sizes (padded graphs), fresh outputs every call."""
    dense = generate_input(8, 96, 1, 5100, "dense")
    collinear = generate_input(8, 96, 0, 5101, "nearcollinear")
    outputs = []
    for count in (1, 3, 8, 2):
        a = torch.cat([collinear[:count], dense[count:]])
        h, tau, routes = qr_routed(a)
        _check(a, (h, tau))
        assert all(r == Route.CHOLESKY for r in routes[count:].tolist())
        outputs.append(h)
    assert len({h.data_ptr() for h in outputs}) == len(outputs)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["upper", "band", "rowscale", "nearcollinear", "nearrank", "rankdef", "mixed"])
def test_hard_cases_at_512(case: str) -> None:
    a = generate_input(16, 512, 0 if case != "mixed" else 2, 32520, case)
    _check(a, qr(a))


@pytest.mark.gpu
def test_whole_kernel_direct_launch_matches_the_jit() -> None:
    """After a shape's first call the one-kernel path launches its compiled kernel directly: the
    same H, tau and flags as the JIT's launch (the first call after clearing the cache), declined
    matrices included."""
    import reference_kernels.blocked_wy.launch as launch

    n = 32
    declining = generate_input(4, n, 1, 4260, "dense")
    declining[1, :, 18:] = 0.0
    for a in (generate_input(20, n, 2, 7, "dense"), generate_input(20, n, 2, 8, "dense"), declining):
        results = []
        for clear in (True, False):
            if clear:
                launch._COMPILED.clear()
            h, tau = torch.full_like(a, 7.0), torch.full(a.shape[:2], 7.0, device=a.device)
            results.append((kernels.whole_qr(a, h, tau, tight_loss(n)), h, tau))
        assert launch._COMPILED
        for jit, direct in zip(*results, strict=True):
            assert torch.equal(jit, direct)
