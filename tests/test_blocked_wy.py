"""blocked_wy: every input distribution through every code path, its output contract, and a compile
of its Triton kernels for sm_90 by the real compiler.

Without CUDA the kernels run under the Triton interpreter on the CPU (the same kernels, numpy
underneath), so the variable must be set before anything imports triton; with CUDA the same
tests run compiled on the GPU, plus the qr_v2 benchmark shapes.
"""

from __future__ import annotations

import os

import torch

# Set by the compile test for the fresh process it starts: triton cannot compile once the
# interpreter has been active in a process, so that one process runs without it.
COMPILE_ONLY = "BLOCKED_WY_COMPILE_ONLY"
if not torch.cuda.is_available() and COMPILE_ONLY not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"

from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import triton  # noqa: E402

import reference_kernels.blocked_wy.kernels as kernels  # noqa: E402
import reference_kernels.blocked_wy.launch as launching  # noqa: E402
import reference_kernels.blocked_wy.products as products  # noqa: E402
import reference_kernels.blocked_wy.split_tf32 as split_tf32  # noqa: E402
import reference_kernels.blocked_wy.tail as tail  # noqa: E402
from evaluator.shapes import Case  # noqa: E402
from reference import CASES, generate_input, verdict  # noqa: E402
from reference_kernels.blocked_wy import Plan, default_plan, qr  # noqa: E402
from reference_kernels.blocked_wy.qr import (  # noqa: E402
    _factor_in_place,
    graph_operands,
    ieee_fp32,
    writes_outputs_at_address,
)
from reference_kernels.blocked_wy.source import StorageAt  # noqa: E402
from tests.compile_only import rerun_compiled  # noqa: E402
from tests.conftest import every_case, more_inputs, qr_v2_benchmarks  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
RESIDUAL_LIMIT = 4.0  # five times under the contest's gate of 20
ALL_CASES = sorted(CASES)  # every generator case, mixed included


def _check(a: torch.Tensor, out: tuple[torch.Tensor, torch.Tensor]) -> None:
    v = verdict(a, out)
    assert v.passed, v.message
    assert v.diagnostics["scaled_factor_residual"] <= RESIDUAL_LIMIT, v.message
    assert torch.all(out[1][:, -1] == 0), "the last reflector of a square matrix is the identity"


def _factor_and_check(a: torch.Tensor, **plan: object) -> tuple[torch.Tensor, torch.Tensor]:
    pristine = a.clone()
    out = qr(a, **plan)
    assert torch.equal(a, pristine), "qr modified its input"
    _check(a, out)
    return out


@pytest.mark.parametrize("case", every_case(ALL_CASES))
@pytest.mark.parametrize("n", [1, 2, 7, 16, 33, 64])
def test_whole_matrix_path(case: str, n: int) -> None:
    _factor_and_check(generate_input(2, n, 2, 1000 + n, case).to(DEVICE))


@pytest.mark.parametrize("case", every_case(ALL_CASES))
@pytest.mark.parametrize("n", [17, 20, 32, 33, 64])
def test_whole_matrix_in_halves(case: str, n: int) -> None:
    """The whole-matrix program in two halves of columns, the left half's block reflector applied
    to the right half between them: halves of 16 with one to sixteen columns on the right, and
    halves of 32 (n = 33: one column on the right)."""
    _factor_and_check(generate_input(2, n, 2, 1000 + n, case).to(DEVICE), halves=True)


# Panels in halves: of one leaf under the fused update (their T merged from the halves'), with the
# top tile asked for (halves override it), leaves of 32 in 64-column panels (leaf steps), ragged
# right halves (n = 45, 100).
HALVES_PLANS = [
    (100, Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(fused=True), two_columns=True,
               halves=True)),
    (80, Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", halves=True)),
    (96, Plan(nb=64, leaf=32, whole_max=0, inner="triton", update="tf32x3", halves=True, top_tile=False)),
    (45, Plan(nb=32, leaf=32, whole_max=0, halves=True, one_reduction=False)),
]


@pytest.mark.parametrize("case", every_case(ALL_CASES))
@pytest.mark.parametrize(("n", "plan"), HALVES_PLANS, ids=["fused", "top-tile-asked", "leaf-steps", "cublas"])
def test_panels_in_halves(case: str, n: int, plan: Plan) -> None:
    _factor_and_check(generate_input(2, n, 2, 1100 + n, case).to(DEVICE), plan=plan)


# A lookahead of one panel: panels of 16 and 32 (the strips beyond the next panel of 32 and 64 columns),
# a ragged last panel (45, 100), the next panel in halves, the top tile asked for.
LOOKAHEAD_PLANS = [
    (48, Plan(nb=16, leaf=16, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(fused=True), lookahead=True)),
    (45, Plan(nb=16, leaf=16, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(block_n=32, fused=True),
              lookahead=True, two_columns=True)),
    (100, Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(subtract_bm=32, fused=True),
               lookahead=True, two_columns=True, top_tile=False)),
    (80, Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(fused=True), lookahead=True,
              halves=True)),
    (72, Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(fused=True), lookahead=True)),
]


@pytest.mark.parametrize("case", every_case(ALL_CASES))
@pytest.mark.parametrize(("n", "plan"), LOOKAHEAD_PLANS, ids=["16", "ragged-pairs", "ragged-32", "halves", "top-tile"])
def test_lookahead(case: str, n: int, plan: Plan) -> None:
    _factor_and_check(generate_input(2, n, 2, 1200 + n, case).to(DEVICE), plan=plan)


def test_lookahead_needs_one_fused_householder_leaf_per_panel() -> None:
    fused = products.UpdateTiles(fused=True)
    for bad in ({"update": "torch", "tiles": products.UpdateTiles()}, {"tiles": products.UpdateTiles()}, {"leaf": 16},
                {"panel": "gram"}, {"trim": True}):
        with pytest.raises(ValueError, match="lookahead needs"):
            replace(Plan(nb=32, leaf=32, update="tf32x3", tiles=fused, lookahead=True), **bad)


def test_halves_need_sixteen_columns_each() -> None:
    """tl.dot takes 16 columns at least: up to n = 16 the whole-matrix program stays in one tile."""
    assert [n for n in range(1, 130) if kernels.halves_apply(n)] == list(range(17, 130))
    a = generate_input(2, 16, 2, 16, "dense").to(DEVICE)
    for unsplit, split in zip(qr(a, halves=False), qr(a, halves=True), strict=True):
        assert torch.equal(unsplit, split)


# Blocked paths on the CPU: three panels of one leaf (cuBLAS-style products); panels of several
# leaves with a ragged last panel and a row stride that is no multiple of four (the kernels'
# unaligned variant), through the Triton products; panels whose rank-nb product is split TF32.
BLOCKED_PLANS = [
    (48, {"nb": 16}),
    (37, {"nb": 16, "leaf": 4, "inner": "triton", "update": "tf32x3"}),
    (45, {"nb": 16, "leaf": 8, "update": "cublas-tf32x3"}),
    (45, {"nb": 16, "leaf": 8, "update": "mixed"}),
]


@pytest.mark.parametrize("case", every_case(ALL_CASES))
@pytest.mark.parametrize(("n", "plan"), BLOCKED_PLANS, ids=["panels", "leaves", "cublas-tf32x3", "mixed"])
def test_blocked_path(case: str, n: int, plan: dict[str, object]) -> None:
    _factor_and_check(generate_input(2, n, 2, 2000 + n, case).to(DEVICE), whole_max=0, **plan)


@pytest.mark.parametrize("case", every_case(["band", "rowscale", "mixed"]))
def test_triton_products_merge_leaves(case: str) -> None:
    """Two leaves per panel through leaf_step (T merge included) and the split-TF32 trailing update
    (the interpreter multiplies in FP32 whatever the precision; the GPU tests cover tf32x3 itself)."""
    plan = {"nb": 16, "leaf": 8, "inner": "triton", "update": "tf32x3"}
    _factor_and_check(generate_input(2, 48, 2, 3000, case).to(DEVICE), whole_max=0, **plan)


@pytest.mark.parametrize("case", every_case(["dense", "rowscale", "mixed"]))
def test_projection_split_over_rows(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small batches split the trailing update's projection over row parts (partial sums, T applied
    by the subtract kernel); parts of 8 rows make it happen at n = 48."""
    monkeypatch.setattr(products, "MIN_PART_ROWS", 8)
    assert products.project_parts(40, 2, 4) == 4
    plan = {"nb": 16, "leaf": 16, "update": "tf32x3"}
    _factor_and_check(generate_input(1, 48, 2, 3100, case).to(DEVICE), whole_max=0, **plan)


@pytest.mark.parametrize(
    "tiles",
    [
        products.UpdateTiles(subtract_bm=32),
        products.UpdateTiles(project_bm=16, block_n=32),
        products.UpdateTiles(block_n=128, subtract_bm=128, stages=2, warps=2),
    ],
    ids=["rows-32", "narrow", "wide"],
)
def test_update_tiles(tiles: products.UpdateTiles) -> None:
    """The split-TF32 update in other tile shapes: strips and row tiles that do not divide the
    ragged trailing blocks (n = 45), and wider than them (on a GPU this checks their accuracy on
    rowscale inputs too)."""
    plan = Plan(nb=16, leaf=16, whole_max=0, update="tf32x3", tiles=tiles)
    _factor_and_check(generate_input(2, 45, 2, 3200, "rowscale").to(DEVICE), plan=plan)


@pytest.mark.parametrize("case", every_case(ALL_CASES))
def test_fused_update(case: str) -> None:
    """The one-launch split-TF32 update on every case type: ragged row blocks in both of its loops
    (n = 45 in blocks of 32), the first update reading the input, the rest in place."""
    tiles = products.UpdateTiles(subtract_bm=32, block_n=32, fused=True)
    plan = Plan(nb=16, leaf=16, whole_max=0, update="tf32x3", tiles=tiles)
    _factor_and_check(generate_input(2, 45, 2, 3300, case).to(DEVICE), plan=plan)


AT_ADDRESS_PLANS = [
    (48, Plan(nb=16, leaf=16, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(block_n=32, fused=True))),
    (37, Plan(nb=16, leaf=4, whole_max=0, inner="triton", update="tf32x3")),
    (48, Plan(nb=16, leaf=16, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(fused=True), trim=True)),
    (80, Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(fused=True), trim=True,
              halves=True, two_columns=True)),
    (45, Plan(nb=16, leaf=16, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(block_n=32, fused=True),
              lookahead=True, two_columns=True)),
]


@pytest.mark.parametrize(("n", "plan"), AT_ADDRESS_PLANS,
                         ids=["fused-aligned", "two-launches-unaligned", "trimmed", "trimmed-halves", "lookahead"])
def test_operands_at_their_addresses_factor_bit_for_bit_as_the_tensors(n: int, plan: Plan) -> None:
    """What a graph replay runs (``qr._GraphedQR``): the kernels read the input's address and, where
    the plan writes its outputs in place (every plan here), H's and tau's from device memory when
    they run. Otherwise the same launches, so the same bits as the tensors themselves."""
    a = generate_input(2, n, 2, 3500, "mixed").to(DEVICE)
    outs = []
    for where in ("tensors", "input", "all"):
        h, tau = torch.empty_like(a), a.new_empty(2, n)
        addresses = torch.tensor([a.data_ptr(), h.data_ptr(), tau.data_ptr()], dtype=torch.int64, device=DEVICE)
        h_at, tau_at, src_at = graph_operands(a, plan, addresses)
        assert h_at is not None
        assert tau_at is not None
        operands = {"tensors": (h, tau, a), "input": (h, tau, src_at), "all": (h_at, tau_at, src_at)}[where]
        with ieee_fp32():
            _factor_in_place(*operands[:2], plan, operands[2])
        outs.append((h, tau))
    for h, tau in outs[1:]:
        assert torch.equal(outs[0][0], h)
        assert torch.equal(outs[0][1], tau)
    _check(a, outs[0])


def test_views_at_an_address_slice_as_tensors_do() -> None:
    """A StorageAt's slices have the shape and storage offset of the same tensor's slices."""
    h = torch.empty(3, 10, 10)
    at = StorageAt.of(torch.zeros(1, dtype=torch.int64), h)
    for index in ((slice(None), slice(4, None), slice(4, 8)), (slice(None), slice(None), slice(None, 6)),
                  (slice(None), slice(2, 12))):
        view, want = at[index], h[index]
        assert (view.shape, view.stride(), view.storage_offset()) == (tuple(want.shape), want.stride(),
                                                                      want.storage_offset())
    with pytest.raises(ValueError, match="unit-step"):
        at[:, ::2]


def test_which_plans_write_their_outputs_at_an_address() -> None:
    """Those whose every launch on H and tau is a Triton kernel that takes an address: qr_v2's plans
    from 176 to 1024; not the cuBLAS update (2048), Gram panels (4096) or cuBLAS leaf products."""
    for n in (176, 352, 512, 1024):
        assert writes_outputs_at_address(default_plan(n), n), n
    for n in (2048, 4096):
        assert not writes_outputs_at_address(default_plan(n), n), n
    assert not writes_outputs_at_address(Plan(nb=32, leaf=16, update="tf32x3"), 512)  # cuBLAS leaf products
    assert writes_outputs_at_address(Plan(nb=32, leaf=16, update="tf32x3", inner="triton"), 512)


# ---- trimmed tails: trailing columns too small for the factor gate (tail.py) ----------------------

# Plans that trim: the fused tf32x3 update, one leaf per panel; panels of 16 (a kept width of 48
# ends on a panel) and of 32 (its panel 32-63 straddles it).
TRIM_PLANS = [
    Plan(nb=16, leaf=16, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(fused=True), trim=True),
    Plan(nb=32, leaf=32, whole_max=0, update="tf32x3", tiles=products.UpdateTiles(fused=True), trim=True),
]


def _widths(a: torch.Tensor) -> list[int]:
    return tail.kept_widths(a).tolist()


def _with_tail(n: int, kept: int, size: float, seed: int) -> torch.Tensor:
    """Two dense n x n matrices whose columns from ``kept`` on are made to reach the residual bound
    of tail.py: each is ``size * ratio * ||A||_1`` long (column 0, ten times the others, sets
    ||A||_1, and the scan reads it first) and lies along ``Q u``, u flat, Q the first ``kept``
    columns' reflectors: ``Q^T a_j`` then spreads evenly over every row, so its 1-norm is the
    whole ``sqrt(n) ||a_j||_2`` the bound allows for."""
    a = generate_input(2, n, 0, seed, "dense", device="cpu").to(torch.float64)
    a[:, :, 0] *= 10.0
    h, tau = torch.geqrf(a)
    q = torch.linalg.householder_product(h, torch.cat([tau[:, :kept], tau.new_zeros(2, n - kept)], dim=1))
    coin = torch.rand(2, n, n - kept, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    flat = q @ ((2.0 * (coin < 0.5).double() - 1.0) / n**0.5)  # unit columns
    norm = torch.linalg.matrix_norm(a[:, :, :kept], ord=1)
    a[:, :, kept:] = flat * (size * tail.negligible_ratio(n) * norm)[:, None, None]
    return a.to(torch.float32).to(DEVICE)


@pytest.mark.parametrize(
    ("case", "kept"),
    [("dense", 64), ("rankdef", 48), ("clustered", 48), ("nearrank", 64), ("upper", 64)],
)
def test_the_scan_keeps_every_column_that_counts(case: str, kept: int) -> None:
    """n = 64, blocks of 16 columns, per matrix: rankdef's last quarter is zero; clustered's columns
    from 34 on are at 4 eps (30 to 33 at sqrt(eps) count: the block of 32-47 stays); nearrank's
    last columns are copies of its first, upper's last column is its largest."""
    assert _widths(generate_input(3, 64, 0, 4000, case).to(DEVICE)) == [kept] * 3


def test_the_scan_gives_each_matrix_of_a_batch_its_own_width() -> None:
    """A batch of a rankdef, a dense and a clustered matrix, and a mixed batch: each matrix's
    width is the one it has alone."""
    parts = [generate_input(1, 64, 0, 4000 + k, case) for k, case in enumerate(("rankdef", "dense", "clustered"))]
    assert _widths(torch.cat(parts).to(DEVICE)) == [48, 64, 48]
    mixed = generate_input(12, 64, 0, 4010, "mixed").to(DEVICE)
    widths = _widths(mixed)
    assert widths == [_widths(mixed[i : i + 1])[0] for i in range(12)]
    assert min(widths) < 64 == max(widths)  # this seed draws matrices of both kinds


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's inf - inf
def test_the_scan_counts_zero_and_non_finite_matrices() -> None:
    """n = 40: a width of 48 (three whole blocks) keeps every column."""
    assert _widths(torch.zeros(2, 40, 40, device=DEVICE)) == [0, 0]
    for bad in (float("nan"), float("inf")):
        a = torch.zeros(2, 40, 40, device=DEVICE)
        a[1, 5, 0] = bad  # a first column that is not finite: every column counts
        assert _widths(a) == [0, 48]
        a[1, 5, 0] = 1.0
        a[0, 7, 39] = bad  # a last column that is not finite counts
        assert _widths(a) == [48, 16]


@pytest.mark.parametrize("size", [0.9, 1.1])
def test_a_column_is_left_out_only_within_the_bound(size: float) -> None:
    """Columns at 0.9 of the bound are left out, and the factor gate's residual they leave is
    nearly the whole SHARE it allows (the bound is tight); at 1.1 they are factored."""
    a = _with_tail(64, 48, size, 4100)
    assert _widths(a) == ([48, 48] if size < 1 else [64, 64])
    h, tau = _factor_and_check(a, plan=TRIM_PLANS[0])
    residual = verdict(a, (h, tau)).diagnostics["scaled_factor_residual"]
    if size < 1:
        assert 0.5 * tail.SHARE < residual <= tail.SHARE
        assert torch.all(h[:, :, 48:] == 0)
        assert torch.all(tau[:, 48:] == 0)
    else:
        assert residual < 0.1


@pytest.mark.parametrize("plan", TRIM_PLANS, ids=["nb16", "nb32"])
@pytest.mark.parametrize("case", more_inputs(["rankdef", "clustered", "dense", "mixed"], "rankdef"))
def test_a_trimmed_factorisation(case: str, plan: Plan) -> None:
    """Each matrix's kept columns come out bit for bit as the whole factorisation gives them (a
    column's factorisation reads no column after it), the rest zero with tau = 0; rankdef's
    left-out columns are zero, so its whole output is the untrimmed one's."""
    a = generate_input(4, 64, 0, 4200, case).to(DEVICE)
    h, tau = _factor_and_check(a, plan=plan)
    whole_h, whole_tau = qr(a, plan=replace(plan, trim=False))
    for i, kept in enumerate(_widths(a)):
        assert torch.equal(h[i, :, :kept], whole_h[i, :, :kept])
        assert torch.equal(tau[i, :kept], whole_tau[i, :kept])
        assert torch.all(h[i, :, kept:] == 0)
        assert torch.all(tau[i, kept:] == 0)
    if case == "rankdef":
        assert torch.equal(h, whole_h)
        assert torch.equal(tau, whole_tau)


@pytest.mark.parametrize("plan", TRIM_PLANS, ids=["nb16", "nb32"])
def test_a_trimmed_factorisation_writes_every_output(plan: Plan) -> None:
    """Buffers that held a dense factorisation (as a graph's do from its last replay) then take a
    rankdef one: what the skipped panels and strips would have written is zero all the same."""
    dense, rankdef = generate_input(2, 64, 0, 4300, "dense").to(DEVICE), generate_input(2, 64, 0, 4301, "rankdef")
    h, tau = torch.empty_like(dense), dense.new_empty(2, 64)
    with ieee_fp32():
        _factor_in_place(h, tau, plan, dense)
        _factor_in_place(h, tau, plan, rankdef.to(DEVICE))
    want_h, want_tau = qr(rankdef.to(DEVICE), plan=plan)
    assert torch.equal(h, want_h)
    assert torch.equal(tau, want_tau)


def test_trimming_needs_the_kernels_that_read_the_widths() -> None:
    fused = products.UpdateTiles(fused=True)
    for plan in ({"update": "torch"}, {"update": "tf32x3"}, {"update": "tf32x3", "tiles": fused, "leaf": 8}):
        with pytest.raises(ValueError, match="trim needs the fused tf32x3 update and one leaf per panel"):
            Plan(nb=16, **{"leaf": 16, **plan}, trim=True)
    tall = torch.randn(1, 1040, 1040, generator=torch.Generator().manual_seed(0)).to(DEVICE)  # leaves of 16
    with pytest.raises(ValueError, match="a trimmed panel must be one leaf: 1040 x 32 takes leaves of 16"):
        qr(tall, plan=TRIM_PLANS[1])


def test_fused_tiles_need_the_triton_update() -> None:
    for update in ("torch", "mixed", "cublas-tf32x3"):
        with pytest.raises(ValueError, match="fused"):
            Plan(nb=16, leaf=16, update=update, tiles=products.UpdateTiles(fused=True))


def test_projection_parts() -> None:
    """Row parts: a power of two, enough for ~4 programs per multiprocessor, each >= MIN_PART_ROWS rows."""
    assert products.project_parts(4096, 126, 132) == 4  # 2 x 4096: 63 strips per matrix
    assert products.project_parts(4096, 16, 132) == 16
    assert products.project_parts(512, 5120, 132) == 1  # 640 x 512: programs enough
    assert products.project_parts(300, 2, 132) == 1  # too few rows to split


def _round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """What a TF32 tensor core reads of an FP32 operand, at worst: 10 mantissa bits (truncated)."""
    return (x.view(torch.int32) & -0x2000).view(torch.float32)


@pytest.mark.parametrize("dim", [1, 2])
def test_split_tf32_parts(dim: int) -> None:
    """hi has no bits below TF32's mantissa, hi + lo is x exactly, and lo is at most half of hi's
    last unit (round to nearest); the slabs sit where the product expects them."""
    x = torch.randn(3, 5, 7, device=DEVICE) * torch.logspace(-20, 20, 7, device=DEVICE)
    lo_slab = dim  # the update's layouts: [Vh Vh Vl] along columns, [Wh; Wl; Wh] along rows
    parts = split_tf32.split_tf32(x, dim=dim, lo_slab=lo_slab).split(x.shape[dim], dim=dim)
    hi, lo = parts[0], parts[lo_slab]
    assert all(torch.equal(p, hi) for i, p in enumerate(parts) if i != lo_slab)
    assert torch.equal(hi.view(torch.int32) & 0x1FFF, torch.zeros_like(hi, dtype=torch.int32))
    assert torch.equal(hi + lo, x)
    assert torch.all(lo.abs() <= hi.abs() * 2.0**-11)


def test_split_tf32_product_is_fp32_accurate() -> None:
    """[Vh Vh Vl] [Wh; Wl; Wh] with every operand read at TF32 (as tensor cores do) is V W to about
    2^-21, where one TF32 product is off by about 2^-11: the scheme, checked without a tensor core."""
    gen = torch.Generator().manual_seed(5)
    v, w = torch.randn(4, 96, 32, generator=gen).to(DEVICE), torch.randn(4, 32, 80, generator=gen).to(DEVICE)
    exact = v.double() @ w.double()
    scale = v.double().abs() @ w.double().abs()
    pair = split_tf32.split_tf32(v, dim=2, lo_slab=2), split_tf32.split_tf32(w, dim=1, lo_slab=1)
    split = _round_to_tf32(pair[0]).double() @ _round_to_tf32(pair[1]).double()
    single = _round_to_tf32(v).double() @ _round_to_tf32(w).double()
    assert ((split - exact).abs() / scale).max() < 2.0**-20
    assert ((single - exact).abs() / scale).max() > 2.0**-14  # the test can tell the two apart


def test_panel_warps() -> None:
    """``panel_warps`` asks for warps as far as the tile has a float per thread for each; the
    default rule gives 32 floats per thread up to 16 warps; a plan refuses a count CUDA cannot run."""
    assert kernels._warps((512, 16)) == 8
    assert kernels._warps((4096, 8)) == 16
    assert kernels._warps((512, 16), 2) == 2
    assert kernels._warps((16, 4), 8) == 2
    with pytest.raises(ValueError, match="panel_warps"):
        qr(torch.zeros(1, 4, 4), panel_warps=3)


@pytest.mark.skipif(not kernels.INTERPRETED, reason="on a GPU every test runs the GPU form")
def test_gpu_form_of_the_column_reduction(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU's single tuple reductions (slow under the interpreter, so on small matrices only)
    give what the interpreter's separate sums give: two operands per column or top-tile pair, four
    per pair without the top tile."""
    a = generate_input(2, 8, 2, 11, "mixed")
    blocked = {"nb": 4, "whole_max": 0}  # the first panel's leaf is tall enough for the top tile
    plans = [{}, blocked, {"two_columns": True}, {**blocked, "two_columns": True}]
    expected = [qr(a, **plan) for plan in plans]
    monkeypatch.setattr(kernels, "INTERPRETED", False)
    for plan, reference in zip(plans, expected, strict=True):
        torch.testing.assert_close(_factor_and_check(a, **plan), reference, rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", every_case(["dense", "rankdef", "mixed"]))
@pytest.mark.parametrize("one_reduction", [False, True], ids=["three-reductions", "one-reduction"])
def test_earlier_column_steps(case: str, one_reduction: bool) -> None:
    """The panel kernel's earlier column steps on tall panels (top_tile=False), kept for the GPU
    comparison: three reductions, or one over the whole tile."""
    a = generate_input(2, 37, 2, 4000, case).to(DEVICE)
    _factor_and_check(a, one_reduction=one_reduction, top_tile=False)
    _factor_and_check(a, nb=16, leaf=4, whole_max=0, one_reduction=one_reduction, top_tile=False)


@pytest.mark.parametrize("case", every_case(ALL_CASES))
@pytest.mark.parametrize("n", [2, 7, 33])
def test_two_column_step(case: str, n: int) -> None:
    """Columns in pairs (one reduction per pair, odd n ending on a single column) on whole
    matrices, and on panels of leaves with the top tile (tall leaves) and without."""
    a = generate_input(2, n, 2, 4500 + n, case).to(DEVICE)
    _factor_and_check(a, two_columns=True)
    for top_tile in (True, False):
        _factor_and_check(a, nb=16, leaf=8, whole_max=0, top_tile=top_tile, two_columns=True)


def test_two_column_step_takes_collinear_pairs_one_by_one() -> None:
    """Where column k + 1 is column k to a few ulps (every pair here), the pair's norm would come
    from a difference that cancels: the columns are done one by one, bit for bit as the one-column
    step does them. A dense matrix takes the paired formulas, which round differently."""
    base = generate_input(2, 16, 1, 4600, "dense").to(DEVICE)
    collinear = base.clone()
    collinear[:, :, 1::2] = base[:, :, 0::2] * (1 + 2 * torch.finfo(torch.float32).eps)
    for plan in ({}, {"nb": 8, "leaf": 4, "whole_max": 0}):  # the whole matrix; tall leaves (top tile)
        paired = _factor_and_check(collinear, two_columns=True, **plan)
        single = qr(collinear, two_columns=False, **plan)
        assert torch.equal(paired[0], single[0])
        assert torch.equal(paired[1], single[1])
        paired_dense = _factor_and_check(base, two_columns=True, **plan)[0]
        assert not torch.equal(paired_dense, qr(base, two_columns=False, **plan)[0])


@pytest.mark.parametrize("plan", [{}, {"nb": 8, "whole_max": 0}], ids=["whole", "blocked"])
def test_zero_matrix_gives_zero_tau(plan: dict[str, int]) -> None:
    a = torch.zeros(2, 24, 24, device=DEVICE)
    h, tau = qr(a, **plan)
    assert torch.equal(h, a)
    assert torch.equal(tau, torch.zeros(2, 24, device=DEVICE))


@pytest.mark.parametrize("plan", [{}, {"nb": 16, "whole_max": 0}], ids=["whole", "blocked"])
def test_lapack_convention(plan: dict[str, int]) -> None:
    """Same reflectors as geqrf (beta = -sign(alpha) * norm, v[0] = 1), not merely some valid QR."""
    a = generate_input(2, 40, 1, 7).to(DEVICE)
    h, tau = qr(a, **plan)
    h_ref, tau_ref = torch.geqrf(a.cpu())
    torch.testing.assert_close(h.cpu(), h_ref, rtol=0, atol=2e-5)
    torch.testing.assert_close(tau.cpu(), tau_ref, rtol=0, atol=2e-5)


@pytest.mark.parametrize("plan", [{}, {"nb": 16, "whole_max": 0}], ids=["whole", "blocked"])
def test_outputs_are_fresh_tensors(plan: dict[str, int]) -> None:
    a = generate_input(2, 32, 1, 8).to(DEVICE)
    first, second = qr(a, **plan), qr(a, **plan)
    storages = {t.untyped_storage().data_ptr() for t in (a, *first, *second)}
    assert len(storages) == 5, "outputs alias the input or each other"
    for t in (*first, *second):
        assert type(t) is torch.Tensor
        assert t.is_contiguous()
        assert t.device == a.device
    assert torch.equal(first[0], second[0])
    assert torch.equal(first[1], second[1])


@pytest.mark.parametrize("plan", [{}, {"nb": 8, "whole_max": 0}], ids=["whole", "blocked"])
def test_sub_batch_gathered_by_index(plan: dict[str, int]) -> None:
    """The cholesky_orhr fallback factors rows picked out of a batch; each matrix stands alone."""
    a = generate_input(3, 24, 2, 9, "mixed").to(DEVICE)
    rows = torch.tensor([2, 0], device=DEVICE)
    h, tau = qr(a, **plan)
    h_sub, tau_sub = qr(a[rows], **plan)
    torch.testing.assert_close(h_sub, h[rows], rtol=0, atol=1e-5)  # cuBLAS may pick other kernels per batch
    torch.testing.assert_close(tau_sub, tau[rows], rtol=0, atol=1e-5)


def test_rejects_what_it_cannot_factor() -> None:
    with pytest.raises(ValueError, match="float32"):
        qr(torch.zeros(2, 4, 4, dtype=torch.float64, device=DEVICE))
    with pytest.raises(ValueError, match="batch x n x n"):
        qr(torch.zeros(4, 5, device=DEVICE))


def test_library_updates_take_no_separate_source() -> None:
    """Only the updates whose last launch is Triton's read a source apart from c (qr copies the
    input whole first for the library updates): a source handed to a library update is refused,
    not ignored."""
    from reference_kernels.blocked_wy.qr import _apply_qt

    c, v, t = torch.zeros(1, 8, 4), torch.zeros(1, 8, 4), torch.zeros(1, 4, 4)
    for update in ("torch", "cublas-tf32x3"):
        with pytest.raises(ValueError, match="in place"):
            _apply_qt(c, v, t, update, src=torch.ones(1, 8, 4))


def test_triton_updates_refuse_operands_they_cannot_take() -> None:
    """Both Triton updates check their operands before launching: a source of another layout than
    c, a rank below 16, a W that is not contiguous."""
    c, v = torch.zeros(2, 24, 40), torch.zeros(2, 24, 16)
    t, w = torch.zeros(2, 16, 16), torch.zeros(2, 16, 40)
    other_layout = torch.zeros(2, 40, 24).transpose(1, 2)
    with pytest.raises(ValueError, match="one layout"):
        products.wy_update(c, v, t, other_layout)
    with pytest.raises(ValueError, match="one layout"):
        products.wy_subtract(c, v, w, other_layout)
    with pytest.raises(ValueError, match=r"bad WY shapes: .* t "):
        products.wy_update(c, v[..., :8], t[..., :8, :8])
    with pytest.raises(ValueError, match=r"bad WY shapes: .* w "):
        products.wy_subtract(c, v, w[..., :32])
    with pytest.raises(ValueError, match="contiguous"):
        products.wy_subtract(c, v, torch.zeros(2, 16, 48)[..., :40])  # rows of W 48 apart


# ---- the real compiler, without a GPU -------------------------------------------------------------

NVIDIA_BACKEND = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


@pytest.mark.skipif(not NVIDIA_BACKEND.exists(), reason="triton's NVIDIA backend (ptxas) is not installed")
@pytest.mark.parametrize("arch", [90, 100], ids=["sm90", "sm100"])
def test_every_launch_compiles_for_hopper_and_blackwell(arch: int) -> None:
    """Record the launches qr makes on qr_v2 sizes (meta tensors: shapes only) and compile each
    distinct one to a cubin for sm_90 (H200) and sm_100 (B200, the contest's GPU) under the
    installed Triton: the interpreter checks the arithmetic, this the rest."""
    if rerun_compiled(__file__, f"test_every_launch_compiles_for_hopper_and_blackwell[sm{arch}]", COMPILE_ONLY):
        return
    from reference_kernels.blocked_wy import Plan, default_plan
    from reference_kernels.blocked_wy.offline import compile_launch, record_launches

    calls = [
        *(((1, n), default_plan(n)) for n in (32, 176, 352, 512, 1024, 2048, 4096)),  # every plan qr_v2 runs
        ((1, 1024), Plan(nb=128, leaf=32, one_reduction=False, top_tile=False)),  # widest panels; earlier step
        ((1, 1024), Plan(nb=64, leaf=64, top_tile=False)),  # the one-reduction step on tall panels
        ((1, 1024), Plan(nb=64, leaf=16, top_tile=False, two_columns=True)),  # columns in pairs
        ((1, 33), Plan(nb=32, leaf=32, two_columns=True)),  # pairs on a whole matrix, odd n
        ((1, 352), replace(default_plan(352), top_tile=True)),  # pairs with the top tile, leaves of 32
        ((1, 4096), replace(default_plan(4096), panel="gram", leaf=32)),  # gram panels, one leaf each
        ((2, 4096), replace(default_plan(4096), lookahead_registers=168)),  # gram lookahead, registers capped
        ((1, 2048), replace(default_plan(2048), panel="gram", leaf=32)),  # gram leaves, leaf steps between
        ((1, 1024), replace(default_plan(1024), panel="gram", nb=64, leaf=64, two_columns=False)),  # widest gram leaf
        *(((1, n), replace(default_plan(n), whole_max=0, **plan)) for n, plan in BLOCKED_PLANS),  # unaligned, m = 1
    ]
    launches = record_launches(calls)
    assert len(launches) >= 10
    for name, launch in launches.items():
        assert compile_launch(launch, arch).asm["cubin"], name


# ---- GPU only: the contest's shapes -------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("case", qr_v2_benchmarks())
def test_qr_v2_benchmark_shapes(case: Case) -> None:
    _factor_and_check(generate_input(**case.generator_args()))


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["band", "rowscale", "nearcollinear", "upper"])
def test_hard_cases_at_512(case: str) -> None:
    _factor_and_check(generate_input(16, 512, 0, 32527, case))


@pytest.mark.gpu
def test_graph_replay_gives_fresh_results_per_input() -> None:
    inputs = [generate_input(4, 256, 1, seed) for seed in (1, 2)]
    outs = [qr(a) for a in inputs]
    torch.cuda.synchronize()
    for a, out in zip(inputs, outs, strict=True):
        _check(a, out)
    assert not torch.equal(outs[0][0], outs[1][0])
    assert outs[0][0].data_ptr() != outs[1][0].data_ptr()


@pytest.mark.gpu
def test_a_graph_reading_its_input_in_place_takes_every_input() -> None:
    """At 256 the graph reads each input where it lies (the tf32x3 update): inputs at new
    addresses, one of them not on 16 bytes (copied to an aligned buffer first), give the same
    bits as the same matrices through a fresh aligned tensor, and the input stays unchanged."""
    inputs = [generate_input(4, 256, 1, seed) for seed in (3, 4)]
    flat = torch.empty(inputs[1].numel() + 1, device="cuda")
    shifted = flat[1:].view_as(inputs[1])
    shifted.copy_(inputs[1])
    assert shifted.data_ptr() % 16
    expected = [qr(a.clone()) for a in inputs]
    for a, want in zip((inputs[0], shifted), expected, strict=True):
        got = qr(a)
        torch.cuda.synchronize()
        assert torch.equal(got[0], want[0])
        assert torch.equal(got[1], want[1])
    assert torch.equal(shifted, inputs[1])


@pytest.mark.gpu
@pytest.mark.parametrize("n", [176, 512, 1024])
def test_a_graph_writing_its_outputs_in_place_leaves_earlier_outputs_alone(n: int) -> None:
    """From 176 to 1024 the graph writes each call's H and tau straight into that call's fresh
    tensors: outputs kept across later calls (and freed ones, whose memory later calls reuse) are
    bit for bit the eager launches' outputs of their own inputs."""
    assert writes_outputs_at_address(default_plan(n), n)
    inputs = [generate_input(3, n, 1, seed, case) for seed, case in ((1, "dense"), (2, "rankdef"), (3, "mixed"))]
    kept = [qr(a) for a in inputs]
    for _ in range(3):  # calls whose outputs are freed at once
        qr(inputs[0])
    kept.append(qr(inputs[1]))
    torch.cuda.synchronize()
    for a, (h, tau) in zip([*inputs, inputs[1]], kept, strict=True):
        eager_h, eager_tau = qr(a, graph=False)
        assert torch.equal(h, eager_h)
        assert torch.equal(tau, eager_tau)
    assert len({h.data_ptr() for h, _ in kept}) == len(kept)


@pytest.mark.gpu
def test_graphed_call_matches_eager() -> None:
    """The replayed graph computes what the eager launches do."""
    a = generate_input(8, 512, 2, 5, "mixed")
    for graphed, eager in zip(qr(a), qr(a, graph=False), strict=True):
        torch.testing.assert_close(graphed, eager, rtol=0, atol=1e-5)


@pytest.mark.gpu
def test_a_trimming_graph_takes_inputs_of_every_width() -> None:
    """At 512 the plan trims inside its graph: one graph replayed on rankdef, dense, clustered and
    mixed inputs in turn (its buffers hold the last input's factorisation each time) gives what
    the eager launches give, and each matrix's columns past its width are zero with tau = 0."""
    for case in ("rankdef", "dense", "clustered", "mixed", "rankdef"):
        a = generate_input(8, 512, 0, 5, case)
        (h, tau), (eager_h, eager_tau) = qr(a), qr(a, graph=False)
        torch.testing.assert_close(h, eager_h, rtol=0, atol=1e-5)
        torch.testing.assert_close(tau, eager_tau, rtol=0, atol=1e-5)
        for i, kept in enumerate(tail.kept_widths(a).tolist()):
            assert torch.all(h[i, :, kept:] == 0)
            assert torch.all(tau[i, kept:] == 0)
        _check(a, (h, tau))


@pytest.mark.gpu
def test_direct_launch_matches_the_jit() -> None:
    """After a shape's first call the whole-matrix kernel is launched without the JIT: on new
    inputs, a second shape, an aligned view with a storage offset (its address, offset included)
    and an input it cannot take (an odd offset: the JIT's way again) it computes bit for bit what
    the JIT's launch does."""
    launching._COMPILED.clear()
    for b, n in ((20, 32), (3, 64), (20, 32)):
        for seed in (1, 2):
            a = generate_input(b, n, 2, seed, "dense")
            shifted = torch.empty(a.numel() + 1, device=a.device)[1:].view_as(a).copy_(a)  # 4 bytes off 16
            view = torch.empty(a.numel() + 4, device=a.device)[4:].view_as(a).copy_(a)  # aligned, offset 4
            for given in (a, shifted, view):
                h, tau = kernels.factor_matrices(given)
                h_jit, tau_jit = torch.empty_like(a), a.new_empty(b, n)
                kernels.factor_panel(given, h_jit, tau_jit)
                assert torch.equal(h, h_jit)
                assert torch.equal(tau, tau_jit)
                _check(a, (h, tau))
                h, tau = kernels.factor_matrices(given, halves=True)
                h_jit, tau_jit = torch.empty_like(a), a.new_empty(b, n)
                kernels.factor_panel(given, h_jit, tau_jit, halves=True)
                assert torch.equal(h, h_jit)
                assert torch.equal(tau, tau_jit)
                _check(a, (h, tau))
    assert len(launching._COMPILED) == 4
