"""Checker behaviour beyond the corpus: gate order, messages, the auto path's fallback."""

from __future__ import annotations

import math

import pytest
import torch
from torch.overrides import TorchFunctionMode

from reference import check, checker, generate_input, verdict
from reference.householder import default_block, householder_q, wy_triangles


@pytest.fixture
def factored() -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """geqrf's factors on the CPU, whatever the machine: these tests pin the checker's paths as the
    CPU takes them (the GPU's verdicts: tests/test_checker_corpus.py)."""
    a = generate_input(3, 12, 1, 5, device="cpu")
    return a, torch.geqrf(a)


def test_geqrf_passes(factored) -> None:
    a, out = factored
    passed, message = check(a, out)
    assert passed, message
    assert message.startswith("factor_rtol=")
    assert message.endswith("batch=3; n=12")


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda h, t: [h, t], "output must be a tuple `(H, tau)`"),
        (lambda h, t: (h.numpy(), t), "H must be a torch.Tensor"),
        (lambda h, t: (h[:, :-1], t), "H shape must be (3, 12, 12), got (3, 11, 12)"),
        (lambda h, t: (h, t.double()), "tau dtype must be torch.float32, got torch.float64"),
        (lambda h, t: (h.clone().fill_(float("nan")), t), "H contains NaN or Inf"),
        (lambda h, t: (h, t.clone().fill_(float("inf"))), "tau contains NaN or Inf"),
        (lambda h, t: (h, t * 1e30), "Q materialized from `(H, tau)` contains NaN or Inf"),
        # The contest asks H's finiteness before tau's form.
        (lambda h, t: (h.clone().fill_(float("nan")), t.double()), "H contains NaN or Inf"),
    ],
)
@pytest.mark.parametrize("method", ["published", "fast"])
def test_structural_failures_give_the_contest_message(factored, mutate, expected: str, method: str) -> None:
    a, (h, t) = factored
    passed, message = check(a, mutate(h, t), q_method=method)
    assert not passed
    assert message == expected


def _with_entry(value: float, where: str) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    a = generate_input(2, 8, 1, 3)
    h, tau = (t.clone() for t in torch.geqrf(a))
    if where == "H":
        h[1, 5, 2] = value
        h[0, 3, 3] = value if math.isnan(value) else abs(value)  # a second, so an overflowing sum is possible
    else:
        tau[1, 4] = value
    return a, (h, tau)


@pytest.mark.parametrize("method", ["published", "fast"])
@pytest.mark.parametrize("where", ["H", "tau"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_entry_is_found_by_either_path(value: float, where: str, method: str) -> None:
    a, out = _with_entry(value, where)
    assert check(a, out, q_method=method) == (False, f"{where} contains NaN or Inf")


def test_the_fast_path_takes_finite_entries_whose_sum_overflows_for_finite() -> None:
    """The fast path sums first; a float32 sum past its range from finite terms is no NaN."""
    a, out = _with_entry(3e38, "H")
    assert not torch.isfinite(out[0].sum())
    passed, message = check(a, out, q_method="fast")
    assert not passed
    assert message != "H contains NaN or Inf"


def test_the_published_path_looks_at_h_with_isfinite_first(factored) -> None:
    """--compat checks in the kernel's process, where a kernel can hook the checker's calls
    (tests/exploits/function_mode_in_check.py): the published path must make the contest's."""
    a, (h, tau) = factored
    seen: list[object] = []

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if args and args[0] is h and getattr(func, "__name__", "") != "__get__":  # not attribute reads
                seen.append(func)
            return func(*args, **(kwargs or {}))

    with Spy():
        assert check(a, (h, tau), q_method="published")[0]
    assert seen[0] is torch.isfinite


def test_factor_gate_names_the_worst_matrix(factored) -> None:
    a, (h, t) = factored
    h = h.clone()
    h[1] += 1e-3 * torch.triu(torch.ones_like(h[1]))  # spoil R of matrix 1 only
    passed, message = check(a, (h, t))
    assert not passed
    assert message.startswith("R - Q.T @ A is too large: matrix=1, ")


@pytest.mark.parametrize("method", ["published", "blocked", "fast", "auto"])
def test_orthogonality_gate(method: str) -> None:
    """For n = 1, Q = 1 - tau: tau = 2 - 1e-3 makes Q = -0.999, not orthogonal, while an R of
    exactly Q * A passes the factor gate, so the orthogonality gate is the one that fires."""
    a = generate_input(3, 1, 0, 4, device="cpu")
    tau = torch.full((3, 1), 2.0 - 1e-3)
    h = (1.0 - tau).unsqueeze(-1) * a
    v = verdict(a, (h, tau), q_method=method)
    assert not v.passed
    assert v.message.startswith("Q is not orthogonal enough: residual=0.002, allowed=1.19e-05, scaled=")


def _spy_on_gated(monkeypatch) -> list[str]:
    """Record which full gate paths (published / blocked) the checker runs."""
    calls: list[str] = []
    real = checker._gated

    def spy(a, h, tau, method):
        calls.append(method)
        return real(a, h, tau, method)

    monkeypatch.setattr(checker, "_gated", spy)
    return calls


def test_fast_path_decides_a_clear_pass_alone(monkeypatch, factored) -> None:
    a, out = factored
    calls = _spy_on_gated(monkeypatch)
    v = verdict(a, out, q_method="fast")
    assert v.passed
    assert calls == []
    published = verdict(a, out, q_method="published")
    for key, value in published.diagnostics.items():
        assert v.diagnostics[key] == pytest.approx(value, rel=0.25, abs=0.05), key


def test_fast_path_redecides_a_pass_near_the_gate(monkeypatch, factored) -> None:
    a, out = factored
    calls = _spy_on_gated(monkeypatch)
    monkeypatch.setattr(checker, "_AUTO_TRUST", 0.0)  # every pass now counts as near a gate
    v = verdict(a, out, q_method="fast")
    assert calls == ["published"]
    assert v.as_tuple() == check(a, out, q_method="published")


def test_fast_path_redecides_every_failure(monkeypatch, factored) -> None:
    a, (h, t) = factored
    calls = _spy_on_gated(monkeypatch)
    v = verdict(a, (torch.zeros_like(h), t), q_method="fast")
    assert calls == ["published"]
    assert v.as_tuple() == check(a, (torch.zeros_like(h), t), q_method="published")


def test_auto_is_published_on_the_cpu(monkeypatch, factored) -> None:
    a, out = factored
    calls = _spy_on_gated(monkeypatch)
    verdict(a, out)
    assert calls == ["published"]


def test_unknown_q_method_is_refused(factored) -> None:
    a, out = factored
    with pytest.raises(ValueError, match="q_method"):
        verdict(a, out, q_method="quick")  # type: ignore[arg-type]


@pytest.mark.parametrize(("batch", "n"), [(3, 1), (2, 2), (4, 17), (2, 64), (2, 130), (1, 300)])
@pytest.mark.parametrize("zero_last_tau", [False, True])
def test_blocked_q_matches_householder_product(batch: int, n: int, zero_last_tau: bool) -> None:
    torch.manual_seed(n)
    h, tau = torch.geqrf(torch.randn(batch, n, n))
    if zero_last_tau:
        tau[:, -1] = 0
    expected = torch.linalg.householder_product(h, tau)
    assert torch.allclose(householder_q(h, tau), expected, atol=2e-6 * max(1, n) ** 0.5)


@pytest.mark.parametrize("block", [1, 2, 8, 32])
def test_blocked_q_is_independent_of_block_size(block: int) -> None:
    torch.manual_seed(0)
    h, tau = torch.geqrf(torch.randn(2, 45, 45))
    reference_q = torch.linalg.householder_product(h.double(), tau.double())
    assert torch.allclose(householder_q(h.double(), tau.double(), block=block), reference_q, atol=1e-12)


def test_wy_triangle_reproduces_product_of_reflectors() -> None:
    torch.manual_seed(1)
    m, k = 20, 8
    v = torch.tril(torch.randn(m, k, dtype=torch.float64), -1) + torch.eye(m, k, dtype=torch.float64)
    tau = torch.rand(k, dtype=torch.float64) + 1.0
    tau[3] = 0.0  # an identity reflector
    product = torch.eye(m, dtype=torch.float64)
    for j in range(k):
        product = product @ (torch.eye(m, dtype=torch.float64) - tau[j] * torch.outer(v[:, j], v[:, j]))
    t = wy_triangles(v, tau)
    assert torch.allclose(torch.eye(m, dtype=torch.float64) - v @ t @ v.T, product, atol=1e-12)


def test_block_size_choice() -> None:
    assert [default_block(n) for n in (1, 8, 16, 96, 512, 1024, 4096)] == [1, 1, 2, 8, 64, 128, 128]
    with pytest.raises(ValueError, match="power of two"):
        householder_q(torch.zeros(1, 4, 4), torch.zeros(1, 4), block=3)


def test_gates_only_check_gives_the_same_verdict_without_reconstruction(factored) -> None:
    a, out = factored
    full = verdict(a, out, q_method="fast")
    gates = verdict(a, out, q_method="fast", reconstruction=False)
    assert gates.passed
    assert full.passed
    assert "scaled_reconstruction_residual" in full.diagnostics
    assert "scaled_reconstruction_residual" not in gates.diagnostics
    assert {k: v for k, v in full.diagnostics.items() if k != "scaled_reconstruction_residual"} == gates.diagnostics
    h, t = out
    spoiled = verdict(a, (torch.zeros_like(h), t), q_method="fast", reconstruction=False)
    assert spoiled.as_tuple() == check(a, (torch.zeros_like(h), t), q_method="published")


@pytest.mark.parametrize(
    ("device", "capability", "expected"),
    [("cuda", (9, 0), True), ("cuda", (8, 0), True), ("cuda", (7, 5), False), ("cpu", None, False)],
)
def test_fused_residual_kernels_need_ampere_or_later(monkeypatch, device: str, capability, expected: bool) -> None:
    """The kernels are verified where float64 tensor-core products exist (compute capability 8.0
    on); older GPUs check with torch."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert checker._fused_kernels_run_on(torch.device(device)) is expected
