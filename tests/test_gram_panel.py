"""blocked_wy's Gram-route panel: LAPACK's reflectors from float64 Gram products, the
fallback it takes on ill-conditioned panels, whole factorisations built on it, and its lookahead
(the next panel's column steps in the update's launch, gram_lookahead.py).

Without CUDA the kernels run under the Triton interpreter (set before triton is imported, as in
test_blocked_wy); with CUDA the same tests run compiled.
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest

from benchmarks.gram_panel import fallback_flags
from evaluator.shapes import Case
from reference import CASES, generate_input, verdict
from reference_kernels.blocked_wy import Plan, default_plan, products, qr
from reference_kernels.blocked_wy.gram_lookahead import gram_lookahead_step
from reference_kernels.blocked_wy.gram_panel import gram_panel
from tests.conftest import every_case, more_inputs, qr_v2_benchmarks

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
RESIDUAL_LIMIT = 4.0  # five times under the contest's gate of 20, as in test_blocked_wy
EPS32 = torch.finfo(torch.float32).eps


Factored = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _factor(p: torch.Tensor, **options: float | bool) -> Factored:
    """(H panel, tau, V, T, fallback flags) of a copy of the panel batch ``p``."""
    batch, m, w = p.shape
    panel = p.clone()
    tau = p.new_empty(batch, w)
    v = p.new_empty(batch, m, w)
    t = p.new_empty(batch, w, w)
    flags = gram_panel(panel, tau, (v, t), **options)
    return panel, tau, v, t, flags


def _q_of(panel: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """The panel's reflectors as one m x m orthogonal matrix per matrix, in float64 on the CPU."""
    batch, m, w = panel.shape
    h = torch.zeros(batch, m, m, dtype=torch.float64)
    h[:, :, :w] = panel.double().cpu()
    full_tau = torch.zeros(batch, m, dtype=torch.float64)
    full_tau[:, :w] = tau.double().cpu()
    return torch.linalg.householder_product(h, full_tau)


def _assert_wy_matches(panel: torch.Tensor, tau: torch.Tensor, v: torch.Tensor, t: torch.Tensor) -> None:
    """V is the reflectors with their unit diagonal and zeros above it, and the first w columns of
    ``I - V T V^T`` are the reflectors' product (T as larft builds it)."""
    w = panel.shape[-1]
    basis = torch.tril(panel, -1)
    basis[:, :w].diagonal(dim1=-2, dim2=-1).fill_(1.0)
    torch.testing.assert_close(v, basis, rtol=0, atol=0)
    vd, td = v.double().cpu(), t.double().cpu()
    q = _q_of(panel, tau)[:, :, :w]
    wy = torch.eye(panel.shape[1], dtype=torch.float64)[:, :w] - vd @ (td @ vd.transpose(1, 2)[:, :, :w])
    torch.testing.assert_close(wy, q, rtol=0, atol=1e-6)


def _scaled_residuals(p: torch.Tensor, panel: torch.Tensor, tau: torch.Tensor) -> tuple[float, float]:
    """Worst ``||QR - P||_1 / (n eps ||P||_1)`` and ``||Q^T Q - I||_1 / (n eps)`` of the batch."""
    m, w = p.shape[1:]
    q = _q_of(panel, tau)
    pd = p.double().cpu()
    r = torch.triu(panel.double().cpu()[:, :w])
    factor = (q[:, :, :w] @ r - pd).abs().sum(-2).amax(-1) / pd.abs().sum(-2).amax(-1).clamp_min(1e-30)
    orthogonality = (q.transpose(1, 2) @ q - torch.eye(m, dtype=torch.float64)).abs().sum(-2).amax(-1)
    return factor.max().item() / (m * EPS32), orthogonality.max().item() / (m * EPS32)


def _assert_factors(a: torch.Tensor, plan: Plan) -> None:
    """qr with ``plan`` passes the contest's checker on ``a`` with the reference kernels' margin."""
    v = verdict(a, qr(a, plan=plan))
    assert v.passed, v.message
    assert v.diagnostics["scaled_factor_residual"] <= RESIDUAL_LIMIT, v.message


# (batch, rows, columns): several Gram parts, no rows below the top block, ragged widths, the widest
# leaf (its Gram summed in two halves) and a ragged one past 32 columns.
PANELS = [(2, 150, 32), (3, 300, 32), (1, 32, 32), (2, 70, 16), (1, 100, 21), (2, 140, 64), (1, 90, 45)]


@pytest.mark.parametrize(("batch", "m", "w"), more_inputs(PANELS, (2, 150, 32), (1, 90, 45)),
                         ids=[f"{b}x{m}x{w}" for b, m, w in PANELS])
@pytest.mark.parametrize("route", ["gram", "gram-pairs", "fallback"])
def test_a_panel_gets_lapacks_reflectors(batch: int, m: int, w: int, route: str) -> None:
    """Every route gives geqrf's H and tau (same signs and scalars) on well-conditioned panels,
    columns one at a time or in pairs (odd widths end on a single one); the Gram route is the one
    taken unless the limit sends every panel down the fallback."""
    p = torch.randn(batch, m, w, generator=torch.Generator().manual_seed(m + w)).to(DEVICE)
    options = {"error_limit": 0.0} if route == "fallback" else {"pairs": route == "gram-pairs"}
    panel, tau, v, t, flags = _factor(p, **options)
    expected = int(route == "fallback" and m > w)  # nothing below the top: no Gram error to fear
    assert flags.tolist() == [expected] * batch
    h_ref, tau_ref = torch.geqrf(p.cpu())
    torch.testing.assert_close(panel.cpu(), h_ref, rtol=0, atol=2e-5)
    torch.testing.assert_close(tau.cpu(), tau_ref, rtol=0, atol=2e-5)
    _assert_wy_matches(panel, tau, v, t)


@pytest.mark.parametrize("pairs", [False, True], ids=["single", "pairs"])
def test_an_ill_conditioned_panel_falls_back_alone(pairs: bool) -> None:
    """A panel with two nearly collinear columns and a zero one (the Gram products' rounding far past the limit) is
    factored by the fallback, its neighbour in the batch by the Gram route, both valid."""
    gen = torch.Generator().manual_seed(5)
    p = torch.randn(2, 200, 32, generator=gen)
    p[0, :, 5] = p[0, :, 4] + 1e-6 * torch.randn(200, generator=gen)
    p[0, :, 9] = 0.0
    p = p.to(DEVICE)
    panel, tau, v, t, flags = _factor(p, pairs=pairs)
    assert flags.tolist() == [1, 0]
    factor, orthogonality = _scaled_residuals(p, panel, tau)
    assert factor <= RESIDUAL_LIMIT
    assert orthogonality <= RESIDUAL_LIMIT
    _assert_wy_matches(panel, tau, v, t)


def test_scaled_columns_stay_on_the_gram_route() -> None:
    """Columns scaled from 1 down to 1e-6 (R's condition number near 1e6) are no reason to
    fall back: the Gram route's rounding scales with its columns, and its result is geqrf's."""
    gen = torch.Generator().manual_seed(7)
    p = (torch.randn(2, 160, 32, generator=gen) * torch.logspace(0, -6, 32)).to(DEVICE)
    panel, tau, _, _, flags = _factor(p)
    assert flags.tolist() == [0, 0]
    h_ref, tau_ref = torch.geqrf(p.cpu())
    torch.testing.assert_close(panel.cpu(), h_ref, rtol=0, atol=2e-5)
    torch.testing.assert_close(tau.cpu(), tau_ref, rtol=0, atol=2e-5)
    factor, orthogonality = _scaled_residuals(p, panel, tau)
    assert factor <= RESIDUAL_LIMIT
    assert orthogonality <= RESIDUAL_LIMIT


@pytest.mark.parametrize("pairs", [False, True], ids=["single", "pairs"])
def test_a_singular_top_with_nothing_below_stays_on_the_gram_route(pairs: bool) -> None:
    """Rows below the top block that are exactly zero (an upper-triangular or rank-deficient
    trailing block) make the Gram products exact: no fallback however singular the top is, and
    geqrf's tau = 0 wherever a column has nothing left below its diagonal."""
    p = torch.zeros(1, 96, 32)
    p[0, :32] = torch.triu(torch.randn(32, 32, generator=torch.Generator().manual_seed(6)))
    p[0, :32, 7] = 0.0
    p = p.to(DEVICE)
    panel, tau, _, _, flags = _factor(p, pairs=pairs)
    assert flags.tolist() == [0]
    h_ref, tau_ref = torch.geqrf(p.cpu())
    torch.testing.assert_close(panel.cpu(), h_ref, rtol=0, atol=2e-5)
    torch.testing.assert_close(tau.cpu(), tau_ref, rtol=0, atol=2e-5)


def test_the_benchmarks_model_of_the_fallback_decides_as_the_kernel() -> None:
    """benchmarks/gram_panel.py counts fallbacks with a float64 torch model of the column-step
    program's decision: on panels clearly on either side of the limit it flags what the kernel flags."""
    gen = torch.Generator().manual_seed(8)
    p = torch.randn(6, 120, 32, generator=gen)
    p[1] = p[1, :, :1] + 1e-4 * torch.randn(120, 32, generator=gen)  # nearly collinear (as nearcollinear)
    p[2] *= torch.logspace(0, -6, 32)  # scaled columns
    p[3, 32:] = 0.0  # nothing below the top
    p[4, :, 7] = p[4, :, 3]  # two equal columns
    p[5, :, 20:] = 0.0  # zero columns
    p = p.to(DEVICE)
    model = fallback_flags(p).tolist()
    for pairs in (False, True):
        flags = _factor(p, pairs=pairs)[4]
        assert flags.tolist() == [0, 1, 0, 0, 1, 0]
        assert model == [bool(f) for f in flags.tolist()]


GRAM_PLANS = {
    "one-leaf": Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", inner="triton", panel="gram"),
    "pairs": Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", inner="triton", panel="gram", two_columns=True),
    "leaf-steps": Plan(nb=64, leaf=32, whole_max=0, update="cublas-tf32x3", inner="triton", panel="gram"),
    "lookahead": Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", inner="triton", panel="gram", lookahead=True),
    "lookahead-pairs": Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", inner="triton", panel="gram",
                            lookahead=True, two_columns=True),
}


@pytest.mark.parametrize("plan", GRAM_PLANS.values(), ids=GRAM_PLANS.keys())
@pytest.mark.parametrize("case", every_case(sorted(CASES)))
def test_gram_panels_factor_every_case(case: str, plan: Plan) -> None:
    """Whole factorisations on gram panels, every case type (n = 80: a ragged last panel of 16),
    pass the contest's checker with the reference kernels' margin."""
    a = generate_input(2, 80, 2, 4400, case).to(DEVICE)
    _assert_factors(a, plan)


@pytest.mark.parametrize("lookahead", [False, True], ids=["in-turn", "lookahead"])
@pytest.mark.parametrize("case", every_case(["dense", "mixed"]))
def test_gram_panels_with_a_narrow_last_leaf_and_unaligned_rows(case: str, lookahead: bool) -> None:
    """n = 37 in panels of 16: rows 37 floats apart (no 16-byte alignment) and a last panel of 5
    columns in 16-wide tiles."""
    a = generate_input(2, 37, 2, 4600, case).to(DEVICE)
    _assert_factors(a, Plan(nb=16, leaf=16, whole_max=0, update="tf32x3", inner="triton", panel="gram",
                            lookahead=lookahead))


def _first_panel(a: torch.Tensor, nb: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``a`` with its first nb columns factored on the Gram route, and their V and T."""
    batch, m, _ = a.shape
    h = a.clone()
    v, t = h.new_empty(batch, m, nb), h.new_empty(batch, nb, nb)
    gram_panel(h[:, :, :nb], h.new_empty(batch, nb), (v, t))
    return h, v, t


@pytest.mark.parametrize("ncols", [64, 96, 32], ids=["part-of-a-strip-beyond", "a-strip-beyond", "last-panel"])
def test_a_lookahead_step_is_the_update_then_the_next_panel(ncols: int) -> None:
    """One gram lookahead step gives what the two-launch update followed by gram_panel on the next
    panel gives: the updated block around the panel, the panel's fallback flags and, on the Gram
    route, its H, tau, V and T. The second matrix's next panel has two nearly collinear columns, so
    its column-step program falls back inside the shared launch: there the reflectors after the pair
    turn on the last bits of the updated columns (on a GPU the two launches' tile shapes round the
    split-TF32 products differently), so its factors are checked, not compared."""
    gen = torch.Generator().manual_seed(9)
    a = torch.randn(2, 200, 32 + ncols, generator=gen)
    a[1, :, 32 + 5] = a[1, :, 32 + 4] + 1e-6 * torch.randn(200, generator=gen)
    h, v, t = _first_panel(a.to(DEVICE), 32)
    pw = min(32, ncols)
    expected = h[:, :, 32:].clone()
    products.wy_update(expected, v, t)
    panel_input = expected[:, 32:, :pw].clone()
    e_tau, e_v, e_t = h.new_empty(2, pw), h.new_empty(2, 168, pw), h.new_empty(2, pw, pw)
    e_flags = gram_panel(expected[:, 32:, :pw], e_tau, (e_v, e_t))
    got = h[:, :, 32:].clone()
    tau, nv, nt = torch.zeros_like(e_tau), torch.zeros_like(e_v), torch.zeros_like(e_t)
    flags = gram_lookahead_step(got, v, t, tau, (nv, nt), None, products.DEFAULT_TILES)
    assert flags.tolist() == e_flags.tolist() == [0, 1]
    compared = (("the columns beyond", got[:, :, pw:], expected[:, :, pw:]),
                ("the rows above", got[:, :32, :pw], expected[:, :32, :pw]),
                ("the Gram route's H", got[0, 32:, :pw], expected[0, 32:, :pw]),
                ("tau", tau[0], e_tau[0]), ("V", nv[0], e_v[0]), ("T", nt[0], e_t[0]))
    for name, x, y in compared:
        torch.testing.assert_close(x, y, rtol=0, atol=2e-5, msg=lambda m, name=name: f"{name}: {m}")
    fell_back = got[1:, 32:, :pw]
    factor, orthogonality = _scaled_residuals(panel_input[1:], fell_back, tau[1:])
    assert factor <= RESIDUAL_LIMIT
    assert orthogonality <= RESIDUAL_LIMIT
    _assert_wy_matches(fell_back, tau[1:], nv[1:], nt[1:])


def test_a_register_cap_on_the_shared_launch_leaves_the_factors_alone() -> None:
    """``lookahead_registers`` changes how the shared launch is compiled, not what it computes."""
    a = generate_input(2, 96, 2, 4700, "mixed").to(DEVICE)
    plan = GRAM_PLANS["lookahead"]
    capped = qr(a, plan=replace(plan, lookahead_registers=128))
    for x, y in zip(qr(a, plan=plan), capped, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    _assert_factors(a, replace(plan, lookahead_registers=128))


def test_a_lookahead_step_reads_its_source() -> None:
    """With ``src``, the step reads the trailing block from it and leaves it as it was."""
    gen = torch.Generator().manual_seed(10)
    h, v, t = _first_panel(torch.randn(1, 120, 96, generator=gen).to(DEVICE), 32)
    src = h[:, :, 32:].clone()
    in_place, from_src = src.clone(), torch.full_like(src, float("nan"))
    outputs = []
    for c, source in ((in_place, None), (from_src, src)):
        tau, nv, nt = h.new_empty(1, 32), h.new_empty(1, 88, 32), h.new_empty(1, 32, 32)
        gram_lookahead_step(c, v, t, tau, (nv, nt), source, products.DEFAULT_TILES)
        outputs.append((c, tau, nv, nt))
    torch.testing.assert_close(src, h[:, :, 32:], rtol=0, atol=0)
    for x, y in zip(*outputs, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_gram_leaves_with_library_leaf_products() -> None:
    """Leaves of 16 whose reflectors reach the rest of the panel through cuBLAS-style products."""
    a = generate_input(2, 64, 2, 4500, "mixed").to(DEVICE)
    _assert_factors(a, Plan(nb=32, leaf=16, whole_max=0, update="torch", panel="gram"))


def test_a_gram_plan_refuses_what_its_kernels_cannot_take() -> None:
    with pytest.raises(ValueError, match=r"leaves of 16 .* to 64 columns, got 8"):
        Plan(nb=32, leaf=8, panel="gram")
    with pytest.raises(ValueError, match=r"leaves of 16 .* to 64 columns, got 128"):
        Plan(nb=128, leaf=128, panel="gram")
    with pytest.raises(ValueError, match="at most 64 columns"):
        gram_panel(torch.zeros(1, 100, 65), torch.zeros(1, 65), (torch.zeros(1, 100, 65), torch.zeros(1, 65, 65)))
    with pytest.raises(ValueError, match="does not trim"):
        Plan(nb=32, leaf=32, panel="gram", trim=True)
    with pytest.raises(ValueError, match="panel must be one of"):
        Plan(nb=32, leaf=32, panel="cholesky")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bad panel shapes"):
        gram_panel(torch.zeros(1, 40, 32), torch.zeros(1, 16), (torch.zeros(1, 40, 32), torch.zeros(1, 32, 32)))
    lookahead = Plan(nb=32, leaf=32, update="tf32x3", panel="gram", lookahead=True)
    for bad in ({"nb": 64, "leaf": 64}, {"tiles": products.UpdateTiles(fused=True)}, {"update": "cublas-tf32x3"},
                {"leaf": 16}):
        with pytest.raises(ValueError, match="lookahead needs"):
            replace(lookahead, **bad)
    for registers in (16, 256):
        with pytest.raises(ValueError, match=r"lookahead_registers \(32 to 255\)"):
            replace(lookahead, lookahead_registers=registers)
    with pytest.raises(ValueError, match="with lookahead off"):
        replace(lookahead, lookahead=False, lookahead_registers=168)
    with pytest.raises(ValueError, match="bad gram lookahead shapes"):
        gram_lookahead_step(torch.zeros(1, 100, 64), torch.zeros(1, 100, 16), torch.zeros(1, 16, 16),
                            torch.zeros(1, 32), (torch.zeros(1, 84, 32), torch.zeros(1, 32, 32)), None,
                            products.DEFAULT_TILES)


# ---- GPU only: the contest's large shapes on gram panels -----------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c in qr_v2_benchmarks() if c.values[0].n >= 1024])
def test_qr_v2_large_shapes_on_gram_panels(case: Case) -> None:
    """Every qr_v2 benchmark case of n >= 1024 on gram panels of 32 over its size's plan, compiled
    (the GPU runs the paired tl.reduce sums the interpreter replaces), within the kernels' margin."""
    a = generate_input(**case.generator_args())
    _assert_factors(a, replace(default_plan(case.n), panel="gram", leaf=32))
